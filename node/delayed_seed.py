"""Phase ``delay``: evaluate the VDF over an epoch's seed and post its output (docs/contract.md,
"The delayed seed").

The delay is the point: ``T`` squarings one after the other, which no participant can shorten, so
nobody knows the challenges until the reveal window is long closed. A validator evaluates them on
a thread of its own (``protocol.rules.vdf`` runs them in chunks and releases the GIL between
them), so its tick, and with it the other epoch in flight, never waits for the delay. Anyone may
post the output; the first valid one is the only one there is, and a later poster's transaction is
refused, which costs it nothing but the fee.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future

from node.events import EventKind
from node.participant import Participant
from protocol.messages import DelayedSeedOutput
from protocol.rules import vdf
from protocol.rules.hashing import digest_from_hex
from protocol.views import ParticipantStatus


class _Either:
    """Set when either event is: a job's own stop, or its node's."""

    def __init__(self, *events: threading.Event) -> None:
        self.events = events

    def is_set(self) -> bool:
        return any(e.is_set() for e in self.events)


def delayed_seed_output(epoch: int, seed: bytes, squarings: int,
                        stop: vdf.StopFlag | None = None) -> DelayedSeedOutput:
    """The VDF output over ``seed`` and its proof: ``T`` squarings, then about ``T / 12`` products
    from the powers kept on the way (``InterruptedError`` on ``stop``)."""
    x = vdf.input_element(seed)
    y, checkpoints = vdf.evaluate_with_checkpoints(x, squarings, stop)
    proof = vdf.prove(x, y, squarings, stop, checkpoints)
    return DelayedSeedOutput(epoch=epoch, output=vdf.encode(y), proof=vdf.encode(proof))


class DelayedSeedPoster:
    """One participant's evaluation and posting of the delayed seed, one epoch at a time."""

    def __init__(self, participant: Participant) -> None:
        self.node = participant
        self.squarings = participant.spec.verification.delay_squarings
        self._jobs: dict[int, tuple[Future[DelayedSeedOutput], threading.Event]] = {}

    @property
    def running(self) -> list[Future[DelayedSeedOutput]]:
        """The evaluations under way (what a caller that drives the chain may wait for)."""
        return [job for job, _ in self._jobs.values() if not job.done()]

    def tick(self, status: ParticipantStatus) -> bool:
        """Start the evaluation of ``status``'s epoch once it is in ``delay`` without an output, and
        post the output once evaluated; whether a transaction was sent. An evaluation whose epoch
        no longer waits (another node posted first) is stopped at its next chunk."""
        if self.squarings == 0:
            return False
        epoch = status.epoch
        info = self.node.ledger.epoch(epoch, lists=False) if status.phase == "delay" else None
        if info is None or info.delayed_seed is not None or info.seed is None:
            self._drop(keep=None)  # the epoch no longer waits: stop whatever still evaluates
            return False
        self._drop(keep=epoch)
        entry = self._jobs.get(epoch)
        if entry is None:
            self._jobs[epoch] = self._start(epoch, digest_from_hex(info.seed))
            return False
        job, _ = entry
        if not job.done():
            return False
        del self._jobs[epoch]  # whatever happens now, a later tick starts afresh if still needed
        try:
            output = job.result()
        except InterruptedError:
            return False  # stopped: the next tick (after a restart) begins again
        except Exception as exc:  # noqa: BLE001 - a fault of this node's evaluation, never a verdict
            self.node.event(epoch, EventKind.DELAYED_SEED, f"evaluation failed ({exc}); starting again",
                            refused=True)
            return False
        return self.node.attempt(epoch, EventKind.DELAYED_SEED,
                                 lambda: self.node.ledger.delayed_seed(self.node.key, output),
                                 f"VDF output after {self.squarings:,} squarings")

    def _drop(self, keep: int | None) -> None:
        """Stop and forget every evaluation but ``keep``'s (its epoch still waits for it)."""
        for epoch in [e for e in self._jobs if e != keep]:
            _, stop = self._jobs.pop(epoch)
            stop.set()

    def _start(self, epoch: int, seed: bytes) -> tuple[Future[DelayedSeedOutput], threading.Event]:
        # A daemon thread with a stop of its own, also set when the node stops (Ctrl-C): either
        # ends the evaluation at its next chunk; nothing of it is kept (a restart evaluates again).
        job: Future[DelayedSeedOutput] = Future()
        stop = threading.Event()
        either = _Either(stop, self.node.stopping)

        def run() -> None:
            try:
                job.set_result(delayed_seed_output(epoch, seed, self.squarings, either))
            except BaseException as exc:  # noqa: BLE001 - handed to the tick, which reads it from the future
                job.set_exception(exc)

        threading.Thread(target=run, name=f"vdf-{epoch}", daemon=True).start()
        return job, stop
