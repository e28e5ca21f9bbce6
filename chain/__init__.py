"""Settlement: the Ledger interface and its backends (embedded wasmtime host, real Cosmos node)."""
