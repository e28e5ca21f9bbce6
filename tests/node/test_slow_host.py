"""A row of the hostile-network suite (issue 29): a slow-drip host cannot spend the validators' window.

The dripper trains and commits honestly but registers a raw server that answers every request
``200, Content-Length 60000`` and then one byte every 0.5 s: each request lasts until the client's
deadline. Fetched inline in host-address order, as validators used to, its challenges held every
validator that sat on one past its give-up margin (issue 29: 1 s blocks, a 100-block window, two
of three validators committed 0 of 9 verdicts, all three slashed as silent). Here blocks come
every 0.25 s of wall time, as on a real chain, and the verify window is 80 blocks (20 s): every
honest validator commits all its verdicts on the honest hosts, the dripper ends slashed as
unavailable, nobody honest is slashed and funds are conserved.
"""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
from hostile import RawServer, drip
from http_network import HttpNetwork

from chain.ledger import ContractError
from trainer.behaviour import HostBehaviour
from trainer.data import Dataset
from trainer.presets import tiny

pytestmark = pytest.mark.slow

BLOCK_S = 0.25
DRIP = b"HTTP/1.1 200 OK\r\nContent-Length: 60000\r\n\r\n" + b"x" * 60000


def slow_spec():
    return tiny("slow-host").with_changes(
        train={"inner_steps": 16, "segment_steps": 4, "batch_size": 8},
        verification={"challenges_k": 2, "validators_r": 1},
        phases={"min_hosts": 3, "min_validators": 3, "join_blocks": 40, "train_blocks": 400, "reveal_blocks": 40,
                "verify_blocks": 80, "verdict_reveal_blocks": 40, "propose_blocks": 40},
    )


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return Dataset.load(slow_spec().data, tmp_path_factory.mktemp("cache"))


def run_in_wall_time(net: HttpNetwork, max_s: float = 300.0):
    """Drive the current epoch with a block every BLOCK_S seconds of wall time (a miner thread), the
    nodes ticking as daemons do; the epoch's report."""
    stop = threading.Event()

    def mine() -> None:
        while not stop.wait(BLOCK_S):
            net.ledger.wait_for_height(net.ledger.height() + 1)

    miner = threading.Thread(target=mine, daemon=True)
    miner.start()
    epoch = net.ledger.epoch().epoch
    end = time.monotonic() + max_s
    try:
        while time.monotonic() < end:
            acted = net.tick_all()
            info = net.ledger.epoch()
            if info.epoch != epoch:
                return net.ledger.report(epoch)
            if not acted:
                if net.ledger.height() > info.phase_deadline:
                    with contextlib.suppress(ContractError):
                        net.ledger.advance(net.operator)
                time.sleep(0.05)
    finally:
        stop.set()
        miner.join()
    raise AssertionError(f"epoch {epoch} did not finish in {max_s} s")


def test_a_slow_drip_host_is_slashed_and_delays_no_other_verdict(tmp_path, dataset) -> None:
    with RawServer(drip(DRIP, 0.5)) as dripper:
        spec = slow_spec()
        net = HttpNetwork(spec, tmp_path, dataset, [HostBehaviour() for _ in range(3)], validators=3,
                          endpoints={2: dripper.url})
        try:
            started = time.monotonic()
            report = run_in_wall_time(net)
            took = time.monotonic() - started
            by_address = {h.address: h for h in report.hosts}
            slow = by_address[net.host(2).node.address]
            assert slow.outcome in ("unavailable", "excluded") and int(slow.slashed) > 0, slow.outcome
            for i in (0, 1):
                honest = by_address[net.host(i).node.address]
                assert honest.outcome == "accepted" and honest.slashed == "0"
            # Every challenge of an honest host got a verdict from the validator it was assigned to.
            for c in report.challenges:
                if c.host != slow.address:
                    assert c.outcome == "pass" and c.votes and all(v.outcome == "pass" for v in c.votes), c
            assert all(v.slashed == "0" for v in report.validators), [(v.outcome, v.voted) for v in report.validators]
            assert report.agreed and report.next_model_hash
            assert net.total_funds() == net.initial_funds
            print(f"\nslow drip: dripper {slow.outcome}, slashed {slow.slashed}; {dripper.connections} connections "
                  f"to it; epoch in {took:.0f} s of wall time at {BLOCK_S} s blocks")
        finally:
            net.close()
