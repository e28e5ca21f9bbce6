"""Seats in turn (issue 27, ``node.leaf_holding``): through the daemons' prefetch threads, over real
HTTP, a challenge's second seat reads the first seat's kept leaves instead of the host, so the host
uploads each challenged leaf about once, with the same verdicts; a first seat that never answers,
or a host that refuses the first seat, costs the other seat part of its window, never its verdict.

One honest host (4 segments, every segment challenged by both of its 2 pickers), 3 validators."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from http_network import HttpNetwork, key
from test_slow_host import run_in_wall_time

from node.leaf_holding import HOLDER_WAIT_SHARE, holder_wait_end
from node.validator import ValidatorNode
from protocol.auth import HEADER_ADDRESS
from protocol.rules.sampling import pickers
from protocol.views import EpochReport
from trainer.behaviour import HostBehaviour
from trainer.presets import tiny

# A host's challenged leaves (whole, their chunk digests, single chunks), their proofs and its
# losses; the same kept by a holder.
LEAF_PATH = re.compile(r"^/v1/(epochs/\d+|held/\d+/[0-9a-f]{64})/"
                       r"(checkpoints/\d+(/digests|/chunks/\d+/\d+)?|proofs/\d+|losses)$")
VALIDATORS = [key(f"validator-{i}").address() for i in range(3)]


def seats_spec():
    return tiny("seats-in-turn").with_changes(
        train={"inner_steps": 8, "segment_steps": 2, "batch_size": 4},
        verification={"challenges_k": 3},
        phases={"min_hosts": 1, "min_validators": 3, "join_blocks": 40, "train_blocks": 400, "reveal_blocks": 40,
                "verify_blocks": 120, "verdict_reveal_blocks": 40, "propose_blocks": 40},
    )


@pytest.fixture(scope="module")
def dataset(load_dataset):
    return load_dataset(seats_spec().data)


def counting(app: Any, sent: Counter[str], who: str, refuse: Callable[[str], bool] = lambda _: False) -> Any:
    """An ASGI wrapper around a member's server: the bytes of every leaf, proof and loss answer it
    sends (by Content-Length) added to ``sent[who]``; a reader ``refuse`` names gets 404 there."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not LEAF_PATH.match(path):
            await app(scope, receive, send)
            return
        if refuse(dict(scope["headers"]).get(HEADER_ADDRESS.encode(), b"").decode()):
            await send({"type": "http.response.start", "status": 404, "headers": [(b"content-length", b"2")]})
            await send({"type": "http.response.body", "body": b"{}"})
            return

        async def counted(message: Any) -> None:
            if message["type"] == "http.response.start" and message["status"] == 200:
                sent[who] += int(dict(message["headers"]).get(b"content-length", b"0"))
            await send(message)

        await app(scope, receive, counted)

    return wrapped


def silent_holder(app: Any, silent: Callable[[], bool]) -> Any:
    """An ASGI wrapper around a validator's server: while ``silent()``, its held leaves do not
    answer for 6 s (past the reader's deadline and retry budget)."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope.get("path", "").startswith("/v1/held/") and silent():
            await asyncio.sleep(6)
        await app(scope, receive, send)

    return wrapped


def network(tmp_path, dataset, holders_first: bool, sent: Counter[str] | None = None,
            refuse: Callable[[str], bool] = lambda _: False,
            silent: Callable[[str], bool] = lambda _: False, end_by_digests: bool = True) -> HttpNetwork:
    """One host and 3 validators over HTTP, every member's leaf bytes counted in ``sent``; the
    host refuses the readers ``refuse`` names; a validator ``silent`` names holds its held leaves;
    ``end_by_digests`` off: the validators prefetch the end leaf whole (how the daemons were)."""
    sent = Counter() if sent is None else sent
    wrap: dict[int, Callable[[Any], Any]] = {0: lambda app: counting(app, sent, "host-0", refuse)}
    for i, address in enumerate(VALIDATORS):
        def holder(app: Any, i: int = i, a: str = address) -> Any:
            return silent_holder(counting(app, sent, f"validator-{i}"), lambda: silent(a))
        wrap[1 + i] = holder
    net = HttpNetwork(seats_spec(), tmp_path, dataset, [HostBehaviour()], validators=3, wrap=wrap)
    for node in net.nodes:
        if isinstance(node, ValidatorNode):
            node.holders_first = holders_first
            node.end_by_digests = end_by_digests
    return net


def first_seat(net: HttpNetwork) -> str:
    """The first of the host's pickers this epoch (the chain's seat order of its challenges)."""
    seed = bytes.fromhex(net.ledger.epoch().prev_seed)
    return pickers(seed, net.host(0).node.address, dict.fromkeys(VALIDATORS, 1), seats_spec().verification.seats_cap)[0]


def verdicts(report: EpochReport) -> list[tuple[int, str, list[str]]]:
    return sorted((c.segment, c.outcome, sorted(str(v.outcome) for v in c.votes)) for c in report.challenges)


def check_all_passed(net: HttpNetwork, report: EpochReport) -> None:
    assert [h.outcome for h in report.hosts] == ["accepted"]
    assert report.challenges and all(c.outcome == "pass" and c.rounds == 0 for c in report.challenges)
    assert all(len(c.votes) == 2 and {v.outcome for v in c.votes} == {"pass"} for c in report.challenges)
    assert all(v.slashed == "0" for v in report.validators)
    assert net.total_funds() == net.initial_funds


def test_the_wait_for_earlier_seats_is_a_bounded_share_of_the_window() -> None:
    # Verify phase from height 100 to 200, 80 blocks usable before a seat gives up on a host.
    assert holder_wait_end(0, 2, 200, 100, 80) is None  # the first seat reads the host at once
    assert holder_wait_end(1, 2, 200, 100, 80) == 100 + int(80 * HOLDER_WAIT_SHARE)
    assert [holder_wait_end(p, 3, 200, 100, 80) for p in (1, 2)] == [110, 120]
    assert holder_wait_end(0, 1, 200, 100, 80) is None and holder_wait_end(3, 3, 200, 100, 80) is None
    assert holder_wait_end(1, 2, 200, 100, -5) == 100  # no time to wait: the host at once


@pytest.mark.slow
def test_seats_in_turn_the_host_uploads_each_leaf_about_once_with_the_same_verdicts(tmp_path, dataset) -> None:
    reports, uploads = [], []
    for holders_first in (False, True):
        sent: Counter[str] = Counter()
        net = network(tmp_path / f"first-{holders_first}", dataset, holders_first, sent)
        try:
            reports.append(net.run_epoch())
            check_all_passed(net, reports[-1])
            uploads.append(sent["host-0"])
        finally:
            for node in net.nodes:
                node.close()
            net.close()
    assert verdicts(reports[0]) == verdicts(reports[1])
    assert uploads[1] <= 0.6 * uploads[0], uploads
    print(f"\nhost's leaf bytes, host first / seats in turn: {uploads[0]:,} / {uploads[1]:,} "
          f"({uploads[1] / uploads[0]:.2f}x)")


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["first seat never answers", "host refuses the first seat"])
def test_a_silent_first_seat_or_a_refusing_host_lets_every_seat_post_in_time(tmp_path, dataset, fault) -> None:
    first: list[str] = []
    hit: list[str] = []  # the faulty party's faults, as they happened

    def is_first(address: str) -> bool:
        if address in first:
            hit.append(address)
        return address in first

    refused = fault.startswith("host")

    def never(_: str) -> bool:
        return False

    net = network(tmp_path, dataset, True, refuse=is_first if refused else never,
                  silent=never if refused else is_first)
    try:
        first.append(first_seat(net))
        report = run_in_wall_time(net)  # blocks come in wall time: a hang costs blocks, as on a chain
        check_all_passed(net, report)
        assert all(first[0] in {v.validator for v in c.votes} for c in report.challenges)  # it sat on each
        assert hit  # the host did refuse it / a seat after it did wait for it
    finally:
        for node in net.nodes:
            node.close()
        net.close()


@pytest.mark.slow
def test_a_dispute_voter_reads_the_round_0_seats_not_the_host(tmp_path, dataset) -> None:
    # Every host traps one segment: its challenge fails in round 0 and goes to a dispute round,
    # whose voter (the validator that is not one of the host's 2 pickers) asks the holders first on
    # its fetch threads: it reads the round-0 seats' kept leaves and never asks the host.
    readers: list[str] = []

    def note(address: str) -> bool:
        readers.append(address)
        return False

    net = HttpNetwork(seats_spec().with_changes(verification={"trap_probability": "1"}), tmp_path, dataset,
                      [HostBehaviour()], validators=3, wrap={0: lambda app: counting(app, Counter(), "host-0", note)})
    try:
        report = net.run_epoch()
        trapped = [c for c in report.challenges if c.trap]
        assert len(trapped) == 1 and trapped[0].rounds >= 1
        voters = {v.validator for v in trapped[0].votes if v.round >= 1}
        assert voters and readers and not voters & set(readers)
        assert [h.outcome for h in report.hosts] == ["accepted"]
        assert all(v.slashed == "0" for v in report.validators) and net.total_funds() == net.initial_funds
    finally:
        for node in net.nodes:
            node.close()
        net.close()
