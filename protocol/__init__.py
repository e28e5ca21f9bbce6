"""The pure core of veriloco: schemas, canonical encoding, hashes, Merkle trees, keys, sampling.

Nothing in this package does I/O. Everything the chain contract must compute identically
(hashes, sampling) is specified byte for byte in ``docs/protocol.md`` and pinned by the JSON
vectors under ``tests/vectors/``.
"""
