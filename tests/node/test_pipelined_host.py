"""A host in a pipelined run (docs/training.md, "Pipelined epochs"): what a stopping host still does
for the epoch that settles (pipelined topk2 runs: tests/e2e/test_pipelined_topk2_network.py)."""

import logging
import threading

from pipelined_network import pipelined_network, tick_until

from node.daemon import Daemon
from trainer.artifacts import ArtifactSource
from trainer.behaviour import HostBehaviour
from trainer.inner import Interrupted
from verifier.adversaries import WithheldSource


def test_a_pipelined_host_stopped_opens_the_settling_epochs_traps_before_it_exits(tmp_path, load_dataset,
                                                                                   caplog) -> None:
    net = pipelined_network(tmp_path / "net", load_dataset, [HostBehaviour(), HostBehaviour()], validators=2)
    host = net.hosts[1]

    def objection_of_0() -> bool:
        info = net.ledger.epoch(0)
        return info.phase == "objection" and info.start_model_hash is not None

    # Every node acts (host 1 included) until epoch 0 reaches objection with epoch 1 opened from the
    # start vote (a host sends its vote before its trap opening): then host 1 goes quiet.
    tick_until(net, lambda node: node is host and objection_of_0())
    assert objection_of_0() and net.ledger.epoch().settling == 0, "epoch 1 opened from its start vote"
    assert not net.ledger.participant(host.address, 0).traps_opened
    daemon = Daemon(host, net.ledger, poll=0.01, drain_s=5)
    daemon.stop()
    with caplog.at_level(logging.INFO):
        daemon.run()
    assert "stopping: waiting for its trap opening of epoch 0" in caplog.text
    assert net.ledger.participant(host.address, 0).traps_opened


def test_a_training_that_ends_after_its_hosts_tick_still_commits(tmp_path, load_dataset) -> None:
    """The simulation's round (``LocalNetwork.run_epoch``): a pipelined training that ends after its
    host's tick looked at it, but before the round's check for work under way, gets the next round
    for its commitment — not a jump to the train deadline, which closes the phase first and leaves
    the host ``absent`` (seen under load in CI). The interleaving is forced here: the host's tick
    returns, then the training it saw running is let finish."""
    net = pipelined_network(tmp_path / "net", load_dataset, [HostBehaviour()], validators=2)
    host = net.hosts[0]
    tick, forced = host.tick, []

    def tick_then_the_training_ends() -> bool:
        running = host.training
        acted = tick()
        if running is not None and host.training is running:  # seen running by this tick
            running.result(timeout=120)
            forced.append(running)
        return acted

    host.tick = tick_then_the_training_ends  # type: ignore[method-assign]
    reports = [net.run_epoch(), net.run_epoch()]
    assert forced, "the interleaving was forced"
    assert [next(h.outcome for h in r.hosts if h.address == host.address) for r in reports] == ["accepted"] * 2


def test_a_host_closed_mid_training_stops_its_training_thread(tmp_path, load_dataset) -> None:
    """``HostNode.close`` stops a pipelined training at its next step and waits for its thread: the
    training ends interrupted, and no thread of the host is left running."""
    net = pipelined_network(tmp_path / "net", load_dataset, [HostBehaviour()], validators=1)
    host = net.hosts[0]
    training = threading.Event()
    before = set(threading.enumerate())  # other tests' nodes may still run threads of the same names

    def held(done: int, _loss: float) -> None:  # the training waits here, mid-epoch, until the close
        if done == 2:
            training.set()
            host.stopping.wait(60)

    host._on_step = held
    for _ in range(400):  # to the training of epoch 0
        acted = [node.tick() for node in net.nodes]
        net.ledger.end_block()
        if host.training is not None:
            break
        info = net.ledger.epoch()
        if not any(acted) and net.ledger.height() < info.phase_deadline:
            net.ledger.wait_for_height(info.phase_deadline)
    assert training.wait(60), "the host started training"
    job = host.training
    assert job is not None and not job.done()
    host.close()
    assert job.done() and isinstance(job.exception(), Interrupted)
    assert host.training is None
    assert not [t for t in threading.enumerate() if t not in before and t.name.startswith(f"{host.name}-train")]
    for validator in net.validators:
        validator.close()


class ServesValidatorsOnly(HostBehaviour):
    """An honest host that refuses its peer hosts (``peers``) everything and serves every other
    reader: its validators check it and pass, so it is accepted and paid."""

    name = "serves_validators_only"

    def __init__(self) -> None:
        self.peers: set[str] = set()

    def serve_to(self, source: ArtifactSource, requester: str) -> ArtifactSource:
        return WithheldSource(source, "all") if requester in self.peers else source


def test_a_host_that_hides_its_delta_from_peers_at_the_start_vote_does_not_stop_it(tmp_path, load_dataset) -> None:
    """Issue 30 review: right after e's reveal closes no validator has replayed (and so holds) the
    griefer's Δ, and the griefer refuses its peers, so the honest hosts' first try at e + 1's
    optimistic start finds no holder. They try again on later ticks (a try used to be the epoch's
    only one, so a single committed host kept e + 1 from opening before e settled, free of cost)
    and vote once a validator that passed its last segment serves the Δ by hash."""
    griefer = ServesValidatorsOnly()
    net = pipelined_network(tmp_path / "net", load_dataset, [HostBehaviour(), HostBehaviour(), griefer],
                            validators=2)
    honest = net.hosts[:2]
    griefer.peers = {h.address for h in honest}

    def revealed() -> bool:
        return net.ledger.epoch(0).phase not in ("join", "train", "reveal")

    tick_until(net, lambda _: revealed())  # every node acts until epoch 0's reveal closes, then nobody more
    assert revealed() and net.ledger.epoch(0).phase == "verify"
    for host in honest:  # before any validator replayed: the griefer's Δ has no holder yet
        assert not host.tick()
    assert net.ledger.epoch(0).start_model_hash is None
    report = net.run_epoch()
    assert report.epoch == 0
    assert all(h.outcome == "accepted" for h in report.hosts)
    assert net.ledger.epoch(0).start_model_hash is not None, "epoch 1 opened from the start vote"
    assert net.overlaps[0][0] == 1, "epoch 1 was open while epoch 0 settled"
    for node in net.nodes:
        node.close()


def test_a_pipelined_host_stopped_while_e_reads_its_leaves_keeps_serving_them(tmp_path, load_dataset,
                                                                              caplog) -> None:
    """Issue 30 review: a Ctrl-C while the validators of the settling epoch e read this host's
    leaves (e in verify) and e + 1 joins: the drain keeps serving e's readers as it does for the
    current epoch's (here until the drain ends: the embedded chain makes no blocks by itself)."""
    net = pipelined_network(tmp_path / "net", load_dataset, [HostBehaviour(), HostBehaviour()], validators=2)
    host = net.hosts[1]

    def read_while_1_joins() -> bool:
        return net.ledger.epoch().settling == 0 and net.ledger.epoch(0).phase == "verify"

    # Every node acts until epoch 1 opened while epoch 0 is in verify; the validators stay quiet in
    # that verify (their replays would close it early).
    tick_until(net, lambda _: read_while_1_joins(),
               quiet=lambda node: node in net.validators and net.ledger.epoch(0).phase == "verify")
    assert read_while_1_joins() and net.ledger.participant(host.address, 0).challenged
    daemon = Daemon(host, net.ledger, poll=0.01, drain_s=1)
    daemon.stop()
    with caplog.at_level(logging.INFO):
        daemon.run()
    assert "the end of verify of epoch 0 while serving the validators" in caplog.text
    for node in net.nodes:
        node.close()
