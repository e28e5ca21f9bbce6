"""What a node did or was refused, as typed events: for its log, ``simulate``'s output and tests.

Every event has a :class:`EventKind`; a verdict and an opened verdict also carry the verdict's
``outcome``, and a transaction the contract refused is its kind with ``refused`` set. Readers
filter on those fields, never on the words of a log line; :attr:`NodeEvent.action` renders the
words (``verdict fail``, ``committed refused``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum


class EventKind(StrEnum):
    """Kinds of node events; the value is how a log line names it."""

    ADVANCED = "advanced"
    JOINED = "joined"
    REVEALED = "revealed"
    COMMITTED = "committed"
    TRAPS_OPENED = "opened traps"
    PROPOSED = "proposed"
    PROPOSED_START = "proposed start"
    """Pipelined runs: the optimistic start of the next epoch, from every committed Δ in bounds."""
    VERDICT = "verdict"
    """A verdict reached (``outcome``), kept on disk before its commitment is posted."""
    VERDICT_COMMITTED = "committed verdict"
    VERDICT_OPENED = "opened verdict"
    DELAYED_SEED = "posted the delayed seed"
    """Phase ``delay``: the VDF output over the epoch seed, with its proof (``node.delayed_seed``)."""
    READY = "ready"
    """A validator's ``ready`` in ``objection``: done with its round-0 seats, naming its objections."""
    WAITING_FOR_THETA = "waiting for θ"
    WAITING_TO_AGGREGATE = "waiting to aggregate"
    HOST_RETRIED = "host did not deliver; retrying"
    READ_FROM_HOLDER = "read from a holder"
    """The host refused a challenge's artifacts; another validator that holds them served them."""
    SAT_OUT = "sat out"
    """The host would finish no segment by the commit deadline: it sat the epoch out (``sit_out``)."""
    PROPOSAL_WITHHELD = "proposal withheld"
    DELTA_EXCLUDED = "Δ excluded"
    """An accepted Δ no holder served by the exclusion height: left out and named in the proposal."""
    DELTA_LEFT_OUT = "Δ left out"
    """An accepted Δ beyond what H AdamW steps can move, or beyond its peers' norms: left out of the aggregate."""
    DELTA_CLIPPED = "Δ clipped"
    """Small tensors of a kept Δ beyond the peer factor × their median norm: scaled down to it."""
    CANNOT_OPEN = "cannot open verdict"
    REPLAY_FAULT = "replay broke here; retrying"
    """The validator's own check failed (``verifier.replay.ReplayFault``): no verdict, tried again."""
    # What the adversaries of node.adversaries do, so a simulation shows them.
    WITHHOLDING_REVEAL = "withholding reveal"
    COPIED_VERDICT_COMMITTED = "committed a copied verdict"
    COPIED_VERDICT_OPENED = "opened a copied verdict"


ROUTINE = frozenset({EventKind.ADVANCED, EventKind.JOINED, EventKind.REVEALED, EventKind.VERDICT_COMMITTED,
                     EventKind.VERDICT_OPENED, EventKind.READY, EventKind.HOST_RETRIED})
"""Kinds that happen every epoch in a healthy run, for every member: counted, not shown, by ``simulate``."""


@dataclass(frozen=True)
class NodeEvent:
    """Something a participant did or was refused.

    Attributes:
        epoch: the epoch it happened in.
        who: the participant's name.
        kind: what happened.
        detail: the particulars, in words.
        outcome: a verdict's outcome (``pass``, ``fail``, ``unavailable``) for the verdict kinds.
        refused: the contract refused the transaction of ``kind``.
    """

    epoch: int
    who: str
    kind: EventKind
    detail: str = ""
    outcome: str | None = None
    refused: bool = False
    at: float = field(default_factory=time.monotonic, compare=False)
    """When it happened, by the participant's clock (``time.monotonic``)."""

    @property
    def action(self) -> str:
        """The event in words, as log lines print it: ``verdict fail``, ``committed refused``."""
        words = self.kind.value + (f" {self.outcome}" if self.outcome else "")
        return f"{words} refused" if self.refused else words

    @property
    def notable(self) -> bool:
        """Worth a line of its own: a refusal, a wait, a verdict other than pass, an exclusion, a
        withheld or failed duty, what an adversary does — anything but the routine of a healthy epoch."""
        if self.refused:
            return True
        if self.kind is EventKind.VERDICT:
            return self.outcome != "pass"
        if self.kind is EventKind.TRAPS_OPENED:
            return self.detail != "no traps"
        return self.kind not in ROUTINE


EventSink = Callable[[NodeEvent], None]
