"""A pipelined run (``phases.pipelined``; docs/training.md, "Pipelined epochs", scheme 3) with the
real nodes on the embedded chain: each epoch's committed hosts agree on the optimistic start of the
next, which trains while the epoch is verified and settled; a cheater caught after the next epoch
started is slashed, the honest hosts are paid, and every epoch agrees on its settled model.

The cheater commits its Δ sign-flipped (``sign_flip``): within the hosts' bounds, so it enters each
optimistic start, and the settled model must correct for it (docs/training.md, scheme 3)."""

import pytest

from node.events import EventKind, NodeEvent
from node.validator import ValidatorNode
from protocol.tensors.aggregation import aggregate
from trainer.outer import outer_step
from trainer.presets import tiny
from verifier.measure import within_peer_bound
from veriloco.behaviours import host_behaviour, validator_behaviour
from veriloco.commands.simulate import simulation_spec
from veriloco.network import LocalNetwork, Roster

pytestmark = pytest.mark.slow


def test_a_pipelined_run_trains_e_plus_1_while_e_settles_and_slashes_a_cheater_caught_in_e(
        tmp_path, load_dataset) -> None:
    spec = simulation_spec(tiny().with_changes(train={"inner_steps": 8, "segment_steps": 2, "batch_size": 4}),
                           validators=2, hosts=4).with_changes(phases={"pipelined": True})
    dataset = load_dataset(spec.data)
    roster = Roster(hosts=[host_behaviour(None) for _ in range(3)]
                    + [host_behaviour("sign_flip")],
                    validators=[validator_behaviour("honest"), validator_behaviour("honest")])
    events: list[NodeEvent] = []
    net = LocalNetwork(spec, tmp_path / "net", roster, dataset, on_event=events.append,
                       validator_factory=ValidatorNode)
    honest, cheater = [h.address for h in net.hosts[:3]], net.hosts[3].address
    reports = [net.run_epoch(max_rounds=300) for _ in range(3)]

    for report in reports:
        outcomes = {h.address: h for h in report.hosts}
        if cheater in outcomes:  # it drops out once slashed below the minimum stake
            assert outcomes[cheater].outcome == "invalid" and int(outcomes[cheater].slashed) > 0
        for address in honest:
            assert outcomes[address].outcome == "accepted" and int(outcomes[address].reward) > 0
        assert report.agreed, f"epoch {report.epoch}: θ not agreed"
    assert reports[0].hosts and cheater in {h.address for h in reports[0].hosts}
    assert net.total_funds() == net.initial_funds

    for e in range(3):
        info, after = net.ledger.epoch(e), net.ledger.epoch(e + 1)
        # e + 1 opened from the optimistic start e's committed hosts agreed on, before e settled ...
        assert info.start_model_hash is not None and after.model_hash == info.start_model_hash
        assert net.overlaps[e][0] == e + 1
        # ... and records e's settled model (the accepted Δs alone) for its own outer step.
        assert after.settled_start == info.next_model_hash
        # The sign-flipped Δ passes the hosts' bounds, so it steers the optimistic start ...
        assert info.start_model_hash != info.next_model_hash

    # ... and every settled model is synchronous DiLoCo's: the outer step from the settled start
    # over the accepted Δs alone (θ and momentum corrected), not from the optimistic start.
    host = net.hosts[0]
    for e in (1, 2):
        info = net.ledger.epoch(e)
        optimistic = host.globals.get(info.model_hash)
        deltas, unserved, segments = host._accepted_deltas(e, optimistic)
        assert cheater not in deltas and not unserved and len(deltas) == 3
        kept = within_peer_bound(deltas).kept  # as every proposer bounds and clips them
        step = aggregate(spec.aggregation, kept, {a: segments[a] for a in kept})
        assert info.settled_start is not None and info.settled_start != info.model_hash
        settled = outer_step(host.globals.get(info.settled_start), step, spec.outer)
        assert settled.hash().hex() == info.next_model_hash
        assert outer_step(optimistic, step, spec.outer).hash().hex() != info.next_model_hash

    # A held phase keeps its old deadline: no node asks the contract to advance it again and again.
    refused = [(ev.who, ev.epoch, ev.detail) for ev in events if ev.kind == EventKind.ADVANCED and ev.refused]
    assert len(refused) == len(set(refused)), refused

    # The overlap, by each honest host's own clock: it began training e + 1 while the chain said e
    # was settling, before it proposed e's settled model.
    for node in net.hosts[:3]:
        trained = {t.epoch: t for t in node.trainings}
        proposed = {ev.epoch: ev.at for ev in events
                    if ev.who == node.name and ev.kind == EventKind.PROPOSED and not ev.refused}
        started = {ev.epoch: ev.at for ev in events
                   if ev.who == node.name and ev.kind == EventKind.PROPOSED_START and not ev.refused}
        for e in range(3):
            later = trained[e + 1]
            assert later.settling == e, (node.name, later)
            assert e in proposed and later.started < proposed[e], (node.name, e, later, proposed)
            # A host still busy with e − 1's settlement may find e's start already agreed without it.
            assert e not in started or started[e] < later.started, (node.name, e, later, started)
