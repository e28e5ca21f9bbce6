"""The rules the Rust contract mirrors, byte for byte.

Everything in this package is computed twice — here and in ``contracts/veriloco`` — and the two
must agree exactly: canonical JSON and decimals (:mod:`.encoding`), domain-separated hashes
(:mod:`.hashing`), the Merkle tree (:mod:`.merkle`), the beacon (:mod:`.beacon`), sampling of
batches, challenges and validators (:mod:`.sampling`), the loss digest (:mod:`.losses`), the run
spec and its id (:mod:`.spec`) and the limits both sides enforce (:mod:`.limits`).
``docs/protocol.md`` specifies them, and the JSON vectors under ``tests/vectors/`` (written by
``tests/vectors/make_vectors.py``) are read by the Python and the Rust test suites alike. Nothing
here imports torch or does I/O.
"""
