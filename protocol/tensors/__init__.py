"""The torch-based rules of the protocol: what is computed over tensors, not mirrored on chain.

:mod:`.digest` hashes a named set of tensors (checkpoints, models, pseudo-gradients) and
:mod:`.aggregation` holds the robust aggregation rules. Both are pure (no I/O) and bitwise
deterministic, because honest parties must agree on their results; the contract only ever sees
their 32-byte outputs.
"""
