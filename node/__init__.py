"""The node layer: the parts of a participant that talk to the chain and to the network.

A node drives the compute packages (``trainer``, ``verifier``) from chain state: it reads the
current epoch through a :class:`~chain.ledger.Ledger`, does what the phase asks, and reaches other
participants' artifacts over HTTP. Modules:

* :mod:`.participant` — identity, beacon secrets, join and reveal (what hosts and validators share);
* :mod:`.host` and :mod:`.validator` — one role's duties per phase;
* :mod:`.global_store` — global states by hash, fetched from peers when missing;
* :mod:`.server` — a host's artifact server (FastAPI) and the HTTP client peers read it with;
* :mod:`.daemon` — the long-lived loop behind ``veriloco host run`` / ``veriloco validator run``.

``trainer`` and ``verifier`` never import this package, nor ``chain``, nor any HTTP library
(``tests/test_layering.py``).
"""
