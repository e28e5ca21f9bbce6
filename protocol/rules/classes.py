"""Compute-profile classes: who picks and who decides a host's challenges in a run of mixed hardware.

Honest replays are bitwise equal only within one compute profile (the torch build, the CPU kernels,
MKL's mode, the device: ``docs/verification.md``), so every member declares a class when it joins —
the 64 hex characters of its compute fingerprint (``trainer.fingerprint.compute_fingerprint``), or
"" (the class of every member that declares none). A host's pickers are drawn (by stake,
:func:`protocol.rules.sampling.pickers`) among the joined validators of its own class, and a dispute
of its challenges is decided by the stake of the epoch's validators V of its class, its
*electorate* (:func:`electorate`). A class is *served* in an epoch when at least
``max(1, min_validators)`` of its validators joined (:func:`served`: the bar the run sets for any
epoch, applied per class); a host of a class that is not served gets no seat and no electorate, so
it ends ``excluded``: not checked, not slashed, not paid, its Δ not aggregated.

The contract applies the same rules (``contracts/veriloco/src/classes.rs``);
``tests/vectors/classes.json`` pins both sides.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

CLASS_LEN = 64
"""Length of a declared class: a compute fingerprint, in lowercase hex."""

CLASS_PATTERN = rf"^([0-9a-f]{{{CLASS_LEN}}})?$"
"""What a declared class matches ("" or a fingerprint); the boundary models use it."""

_CLASS = re.compile(CLASS_PATTERN)


def valid_class(value: str) -> bool:
    """Whether ``value`` is a class the contract accepts: "" or 64 lowercase hex characters."""
    return bool(_CLASS.fullmatch(value))


def of_class(validators: Sequence[tuple[str, int]], classes: Sequence[str], cls: str) -> list[tuple[str, int]]:
    """The (address, stake) of ``validators`` whose class (``classes``, same order; a missing one is
    "") is ``cls``, in their order: who may pick a host of class ``cls``."""
    return [v for i, v in enumerate(validators) if (classes[i] if i < len(classes) else "") == cls]


def served(joined: int, min_validators: int) -> bool:
    """Whether a class with ``joined`` validators that joined the epoch is served: at least
    ``max(1, min_validators)``."""
    return joined >= max(1, min_validators)


def electorate(v_classes: Sequence[str], cls: str) -> list[int] | None:
    """The final-round voters of a host of class ``cls``: the indices into V (whose classes are
    ``v_classes``, in V's order) of V's members of ``cls``; None when every member of V is of it
    (all of V votes, as in a run of one class)."""
    if all(c == cls for c in v_classes):
        return None
    return [i for i, c in enumerate(v_classes) if c == cls]
