"""Limits that the contract enforces and every Python boundary model checks the same way.

One definition each; ``tests/vectors/limits.json`` carries them to the Rust test suite, which
checks the contract's constants against it.
"""

from __future__ import annotations

MAX_SEGMENTS = 1024
"""Most segments one epoch of a host may have (so at most ``MAX_SEGMENTS + 1`` checkpoint leaves)."""

MAX_PARTICIPANTS = 1024
"""Most hosts, and most validators, a run's phases may require or admit (``min_hosts`` ... ``max_validators``)."""

BPS_DENOMINATOR = 10_000
"""Basis points: a fraction ``x`` of this denominator."""

MAX_BLOCKS = 10_000_000
"""Longest phase window, in blocks."""

EPOCHS_PAGE = 30
"""Largest page of the contract's ``epochs`` query."""

MEMBERS_PAGE = 100
"""Largest page of the contract's ``members`` query."""
