"""A validator's replay thread never waits on a host's bytes (issue 30, review): when a replay does not
reproduce a committed end leaf bit for bit, the chunks that differ are fetched on a fetch thread
(``node.prefetch.fetch_end_chunks``) and the verdict is reached on a later tick from the same replay.

One epoch on the embedded chain, one patient validator with fetch threads, three hosts: an honest one,
a cheater that serves its differing end-leaf chunks only once the validator has posted every verdict
on the honest host, and a cheater that never serves them. The order of what happens is asserted, never
a duration."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from node.events import EventKind, NodeEvent
from node.validator import Patience, ValidatorNode
from protocol.rules.merkle import MerkleProof
from trainer.artifacts import ArtifactSource, ArtifactUnavailable, UntrustedJson
from trainer.leaf_digests import LeafDigests
from trainer.presets import tiny
from verifier.replay import check_challenge
from veriloco.behaviours import host_behaviour, validator_behaviour
from veriloco.commands.simulate import simulation_spec
from veriloco.network import LocalNetwork, Roster

pytestmark = pytest.mark.slow

HONEST, SLOW, NEVER = "http://host-0.sim", "http://host-1.sim", "http://host-2.sim"
GATE_S = 120.0  # a gate never waits longer (a broken build fails instead of hanging)


class Watched(ArtifactSource):
    """A host's artifacts as the validator reads them: what it reads is written to ``log`` (shared by
    every view of that host), and ``before_leaf`` / ``before_chunk`` run before a leaf or chunk is served."""

    def __init__(self, inner: ArtifactSource, name: str, log: list[str], lock: threading.Lock,
                 before_leaf: Callable[[], None], before_chunk: Callable[[], None]) -> None:
        self.inner, self.name, self.log, self.lock = inner, name, log, lock
        self.before_leaf, self.before_chunk = before_leaf, before_chunk

    def _note(self, what: str) -> None:
        with self.lock:
            self.log.append(f"{self.name} {what}")

    def checkpoint(self, epoch: int, leaf: int) -> bytes:
        return b"".join(p for p in self.checkpoint_chunks(epoch, leaf) if isinstance(p, bytes))

    def checkpoint_chunks(self, epoch: int, leaf: int) -> Iterable[bytes | object]:
        self._note(f"leaf {leaf}")
        self.before_leaf()
        return self.inner.checkpoint_chunks(epoch, leaf)

    def leaf_digests(self, epoch: int, leaf: int) -> LeafDigests | UntrustedJson:
        return self.inner.leaf_digests(epoch, leaf)

    def leaf_chunk(self, epoch: int, leaf: int, tensor: int, chunk: int) -> bytes:
        self._note("chunk")
        self.before_chunk()
        return self.inner.leaf_chunk(epoch, leaf, tensor, chunk)

    def proof(self, epoch: int, leaf: int) -> MerkleProof | UntrustedJson:
        return self.inner.proof(epoch, leaf)

    def losses(self, epoch: int) -> list[int] | UntrustedJson:
        return self.inner.losses(epoch)

    def delta(self, epoch: int) -> bytes:
        return self.inner.delta(epoch)

    def delta_chunks(self, epoch: int) -> Iterable[bytes | object]:
        return self.inner.delta_chunks(epoch)

    def global_state(self, model_hash: str) -> bytes:
        return self.inner.global_state(model_hash)


def _wait(event: threading.Event) -> None:
    if not event.wait(GATE_S):
        raise ArtifactUnavailable("the test's gate was never opened")


def test_differing_end_chunks_are_fetched_off_the_replay_thread(tmp_path, load_dataset) -> None:
    spec = simulation_spec(tiny().with_changes(train={"inner_steps": 8, "segment_steps": 2, "batch_size": 4}),
                           validators=1, hosts=3).with_changes(phases={"verify_blocks": 4000})
    log: list[str] = []
    lock = threading.Lock()
    slow_asked, honest_done, finished = threading.Event(), threading.Event(), threading.Event()
    gates: dict[str, tuple[Callable[[], None], Callable[[], None]]] = {
        # The honest host's leaves wait until the slow cheater's chunks are asked for, so its verdicts
        # can only be posted while that fetch is under way.
        HONEST: (lambda: _wait(slow_asked), lambda: None),
        SLOW: (lambda: None, lambda: _ask_then_wait(slow_asked, honest_done, log, lock)),
        NEVER: (lambda: None, lambda: _refuse_after(finished)),
    }

    def factory(ledger: Any, key: Any, spec: Any, dataset: Any, root: Any, peers: Any, **kw: Any) -> ValidatorNode:
        def watched(endpoint: str) -> ArtifactSource:
            before_leaf, before_chunk = gates.get(endpoint, (lambda: None, lambda: None))
            return Watched(peers(endpoint), endpoint[7:13], log, lock, before_leaf, before_chunk)

        return ValidatorNode(ledger, key, spec, dataset, root, watched, patience=Patience(), fetch_threads=4,
                             tick_wait_s=0.05, **kw)

    events: list[NodeEvent] = []
    net = LocalNetwork(spec, tmp_path / "net", Roster(
        hosts=[host_behaviour(None), host_behaviour("wrong_lr:2,1"), host_behaviour("wrong_lr:2,1")],
        validators=[validator_behaviour("honest")]), load_dataset(spec.data), on_event=events.append,
        validator_factory=factory)
    validator = net.validators[0]
    assert isinstance(validator, ValidatorNode)
    host_of = {h.address: endpoint for h, endpoint in zip(net.hosts, (HONEST, SLOW, NEVER), strict=True)}
    try:
        for _ in range(2000):  # to the verify phase
            info = net.ledger.epoch()
            if info.phase == "verify":
                break
            acted = [node.tick() for node in net.nodes]
            net.ledger.end_block()
            if not any(acted) and net.ledger.height() < info.phase_deadline:
                net.ledger.wait_for_height(info.phase_deadline)
        mine = net.ledger.challenges(0, validator.address)
        by_host = {e: [c for c in mine if host_of[c.host] == e] for e in (HONEST, SLOW, NEVER)}
        assert all(by_host.values())

        def committed(endpoint: str) -> bool:
            return all(c.committed for c in net.ledger.challenges(0, validator.address) if host_of[c.host] == endpoint)

        for _ in range(4000):  # verify: ticks, never a jump, while the slow host's chunks come
            validator.tick()
            net.ledger.end_block()
            if committed(HONEST) and not honest_done.is_set():
                with lock:
                    log.append("honest verdicts posted")
                honest_done.set()
            if committed(HONEST) and committed(SLOW):
                break
        assert committed(HONEST) and committed(SLOW) and not committed(NEVER)
        # Every honest verdict was posted while the slow host's first chunk request was open (a
        # validator reading it on its verdict thread posts nothing meanwhile, and the gate never opens).
        assert log.index("host-1 chunk") < log.index("honest verdicts posted") < log.index("host-1 chunk served")
        # The honest host's bitwise replays read no chunk and no end leaf: its start leaves only.
        assert sorted(x for x in log if x.startswith("host-0")) == sorted(f"host-0 leaf {c.segment}"
                                                                          for c in by_host[HONEST])
        # The slow host's verdicts are the ones a replay reading its chunks inline reaches.
        status = validator.status()
        theta, seed = validator.globals.get(status.model_hash, 0), bytes.fromhex(status.prev_seed)
        for c in by_host[SLOW]:
            inline = check_challenge(spec, validator.dataset, c, net.resolve(SLOW, validator.address), theta, seed)
            kept = validator.opening(0, c.host, c.segment)
            assert kept is not None and inline.outcome == "fail"
            assert (kept.outcome, kept.distance, kept.evidence) == (
                inline.verdict.outcome, inline.verdict.distance, inline.verdict.evidence)
        for c in by_host[HONEST]:
            assert (kept := validator.opening(0, c.host, c.segment)) is not None and kept.outcome == "pass"
        # The host that never serves them: pending until the give-up height, then unavailable (the
        # outcome of a leaf not served), never a fail; its chunk fetch is still under way then.
        status = validator.status()
        margin = validator.patience.margin(spec.phases.verify_blocks, status.to_commit)  # type: ignore[union-attr]
        net.ledger.wait_for_height(status.phase_deadline - margin)
        for _ in range(50):
            validator.tick()
            net.ledger.end_block()
            if committed(NEVER):
                break
        assert committed(NEVER) and not finished.is_set()
        for c in by_host[NEVER]:
            kept = validator.opening(0, c.host, c.segment)
            assert kept is not None and kept.outcome == "unavailable"
        assert log.count("host-2 chunk") == 1  # one request under way; nothing read after it
        assert not [e for e in events if e.kind is EventKind.REPLAY_FAULT]
    finally:
        finished.set()
        honest_done.set()
        slow_asked.set()
        validator.close()


def _ask_then_wait(asked: threading.Event, go: threading.Event, log: list[str], lock: threading.Lock) -> None:
    asked.set()
    _wait(go)  # raises if never opened: a validator that read these chunks on its verdict thread
    with lock:
        log.append("host-1 chunk served")


def _refuse_after(end: threading.Event) -> None:
    end.wait(GATE_S)
    raise ArtifactUnavailable("withheld")
