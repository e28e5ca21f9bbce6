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


def delayed_seed_output(epoch: int, seed: bytes, squarings: int,
                        stop: threading.Event | None = None) -> DelayedSeedOutput:
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
        self._jobs: dict[int, Future[DelayedSeedOutput]] = {}

    @property
    def running(self) -> list[Future[DelayedSeedOutput]]:
        """The evaluations under way (what a caller that drives the chain may wait for)."""
        return [job for job in self._jobs.values() if not job.done()]

    def tick(self, status: ParticipantStatus) -> bool:
        """Start the evaluation of ``status``'s epoch once it is in ``delay`` without an output, and
        post the output once evaluated; whether a transaction was sent."""
        if self.squarings == 0 or status.phase != "delay":
            return False
        epoch = status.epoch
        info = self.node.ledger.epoch(epoch, lists=False)
        if info.phase != "delay" or info.delayed_seed is not None or info.seed is None:
            self._jobs.pop(epoch, None)
            return False
        job = self._jobs.get(epoch)
        if job is None:
            self._jobs[epoch] = self._start(epoch, digest_from_hex(info.seed))
            return False
        if not job.done():
            return False
        try:
            output = job.result()
        except InterruptedError:
            self._jobs.pop(epoch, None)  # stopped: the next tick (after a restart) begins again
            return False
        sent = self.node.attempt(epoch, EventKind.DELAYED_SEED,
                                 lambda: self.node.ledger.delayed_seed(self.node.key, output),
                                 f"VDF output after {self.squarings:,} squarings")
        if sent:
            self._jobs = {e: j for e, j in self._jobs.items() if e > epoch}
        return sent

    def _start(self, epoch: int, seed: bytes) -> Future[DelayedSeedOutput]:
        # A daemon thread: a node that stops (Ctrl-C) sets `stopping`, which ends the evaluation
        # at its next chunk; nothing of it is kept (a restart evaluates again).
        job: Future[DelayedSeedOutput] = Future()

        def run() -> None:
            try:
                job.set_result(delayed_seed_output(epoch, seed, self.squarings, self.node.stopping))
            except BaseException as exc:  # noqa: BLE001 - handed to the tick, which reads it from the future
                job.set_exception(exc)

        threading.Thread(target=run, name=f"vdf-{epoch}", daemon=True).start()
        return job
