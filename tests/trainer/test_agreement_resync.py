"""A host whose proposal lost the vote learns so from the chain and resynchronizes from the canonical model.

On the embedded chain (``LocalNetwork``), four hosts; host 0 is misconfigured: it aggregates with
another rule than the run's, so its θ_{e+1} hash differs from everyone else's (it proposes first,
before the others' agreement closes the phase). The chain agrees on the others' hash (3 of 4 equal
stakes > 2/3). In the next epoch host 0 sees that the canonical hash
(``EpochInfo.model_hash``, which is the closed epoch's ``next_model_hash``) is not the one it
proposed, does not have that state, and fetches it from a peer through ``GlobalStore``, checking
the hash: two peers serve a wrong state (the initial model, which decodes fine but hashes
differently) and are skipped; the third serves the right one. Host 0 then trains from the
canonical θ, which its leaf 0 shows.
"""

from __future__ import annotations

import pytest

from node.global_store import GlobalStateUnavailable
from node.host import HostNode
from protocol.rules.spec import RunSpec
from trainer.artifacts import ArtifactSource
from trainer.behaviour import HostBehaviour
from trainer.epoch_store import EpochStore
from trainer.inner import start_checkpoint
from trainer.outer import GlobalState, load_global
from trainer.presets import tiny
from veriloco.network import LocalNetwork, Roster

pytestmark = pytest.mark.slow


def run_spec() -> RunSpec:
    return tiny("agreement").with_changes(
        train={"inner_steps": 8, "segment_steps": 4, "batch_size": 8},
        verification={"enabled": False},
        phases={"min_hosts": 2, "min_validators": 0},
    )


class _GlobalsServer(ArtifactSource):
    """Serves a host's artifacts; requests for global states are logged, and a liar answers them
    with the initial model (valid bytes, wrong hash)."""

    def __init__(self, inner: ArtifactSource, who: str, lie: bytes | None, log: list) -> None:
        self.inner, self.who, self.lie, self.log = inner, who, lie, log

    def checkpoint(self, epoch, leaf):
        return self.inner.checkpoint(epoch, leaf)

    def proof(self, epoch, leaf):
        return self.inner.proof(epoch, leaf)

    def delta(self, epoch):
        return self.inner.delta(epoch)

    def losses(self, epoch):
        return self.inner.losses(epoch)

    def global_state(self, model_hash):
        self.log.append((self.who, model_hash))
        return self.lie if self.lie is not None else self.inner.global_state(model_hash)


class Serving(HostBehaviour):
    """Trains honestly; serves global states honestly or (``lie``) the wrong one."""

    def __init__(self, who: str, log: list, lie: bytes | None = None) -> None:
        self.who, self.log, self.lie = who, log, lie
        self.name = "lying_globals" if lie is not None else "honest"

    def serve(self, source):
        return _GlobalsServer(source, self.who, self.lie, self.log)


class Dissenter(HostNode):
    """A misconfigured host: it aggregates with another rule than the run's, so its proposals lose the vote."""

    def _maybe_propose(self, info) -> bool:
        real = self.spec
        self.spec = real.with_changes(aggregation={"rule": "median" if real.aggregation.rule != "median" else "mean"})
        try:
            return super()._maybe_propose(info)
        finally:
            self.spec = real


def test_a_host_that_lost_the_vote_resyncs_from_a_peer_by_hash(tmp_path, dataset) -> None:
    spec = run_spec()
    net = LocalNetwork(spec, tmp_path, Roster(hosts=[HostBehaviour() for _ in range(4)]), dataset)
    old = net.hosts[0]  # ticks first, so its proposal lands before the others close the phase
    dissenter = Dissenter(net.ledger, old.key, spec, dataset, old.root, net.resolve, name="host-0 (dissenter)")
    net.hosts[0] = dissenter
    # The peers in the order a global store asks them: all but the last lie about global states.
    log: list[tuple[str, str]] = []
    order = [m.address for m in net.ledger.members(role="host") if m.address != dissenter.address]
    wrong = GlobalState.initial(spec).encode()
    for node in net.hosts[1:]:
        last = node.address == order[-1]
        node.behaviour = Serving(node.address, log, None if last else wrong)

    first = net.run_epoch()
    assert first.agreed and first.next_model_hash
    proposals = {h.address: h.proposal.model_hash for h in first.hosts if h.proposal is not None}
    mine = proposals[dissenter.address]
    assert mine != first.next_model_hash
    assert all(p == first.next_model_hash for a, p in proposals.items() if a != dissenter.address)

    # What the dissenter reads from the chain: the closed epoch's agreed hash is not its proposal,
    # and the open epoch starts from that hash, which it does not hold.
    closed, current = net.ledger.epoch(0), net.ledger.epoch()
    assert closed.agreed and closed.next_model_hash == first.next_model_hash != mine
    assert current.epoch == 1 and current.model_hash == first.next_model_hash
    assert dissenter.globals.has(mine) and not dissenter.globals.has(current.model_hash)
    assert log == []  # nobody needed a global state from a peer so far

    second = net.run_epoch()
    assert second.agreed and second.model_hash == first.next_model_hash
    # It asked the peers in turn: the two liars' states hashed wrong and were refused, the last
    # peer's was kept (and nobody else asked for anything).
    assert log == [(a, current.model_hash) for a in order]
    stored = load_global(dissenter.globals.path(current.model_hash), spec)
    assert stored.hash().hex() == current.model_hash
    # ... and trained epoch 1 from it: its leaf 0 is the canonical θ_1 with a fresh optimizer.
    leaf0 = EpochStore(dissenter.root, spec.run_id(), dissenter.address).read_leaf(spec, 1, 0)
    assert leaf0.leaf_hash() == start_checkpoint(spec, stored.params, 1).leaf_hash()
    report = next(h for h in second.hosts if h.address == dissenter.address)
    assert report.outcome == "accepted" and report.commitment is not None
    assert net.total_funds() == net.initial_funds


def test_no_peer_with_the_right_state_means_waiting_not_a_wrong_model(tmp_path, dataset) -> None:
    spec = run_spec()
    net = LocalNetwork(spec, tmp_path, Roster(hosts=[HostBehaviour(), HostBehaviour()]), dataset)
    net.run_epoch()
    info = net.ledger.epoch()
    log: list[tuple[str, str]] = []
    net.hosts[0].behaviour = Serving(net.hosts[0].address, log, GlobalState.initial(spec).encode())
    fresh = HostNode(net.ledger, net.hosts[1].key, spec, dataset, tmp_path / "fresh-disk", net.resolve)
    with pytest.raises(GlobalStateUnavailable, match="another hash"):
        fresh.globals.get(info.model_hash)
    assert not fresh.globals.has(info.model_hash) and log == [(net.hosts[0].address, info.model_hash)]
