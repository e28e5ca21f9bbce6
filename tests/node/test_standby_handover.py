"""The standby's hand-over endpoint over real HTTP (``node/standby_handover.py``): only the member
it stands for may hand it a secret, sealed to it for that epoch; what it refuses is not written.
(The round trip with a chain, the primary dying and the standby revealing: tests/chain/test_standby.py.)"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, HTTPException

from chain.embedded import EmbeddedChain
from chain.embedded.backend import EmbeddedBackend, deploy_embedded
from chain.ledger import ContractError, Ledger, LedgerError
from node import standby_handover
from node.daemon import Daemon
from node.http import HttpFailure, SafeClient
from node.participant import secret_file, write_secret
from node.server import ServerThread
from node.standby import read_secret
from node.standby_handover import (
    SECRET_PATH,
    SecretCourier,
    create_standby_app,
    prune,
    standby_key,
    standby_limits,
)
from node.validator import ValidatorNode
from protocol.auth import sign_request
from protocol.injective import DENOM, GENESIS_BALANCE
from protocol.keys import PrivateKey
from protocol.sealing import SealContext, receipt_digest, seal
from protocol.views import ParticipantStatus
from trainer.artifacts import ArtifactSource, ArtifactUnavailable
from trainer.presets import tiny
from veriloco.connect import be_brief, be_patient

MEMBER = PrivateKey(bytes([3]) * 32)
OTHER = PrivateKey(bytes([4]) * 32)  # another member, or an outsider: the standby refuses both
STANDBY = PrivateKey(bytes([5]) * 32)
RUN = "ab" * 32
CURRENT = 3
SECRET = bytes(range(32))


def sealed(epoch: int = CURRENT, secret: bytes = SECRET, run: str = RUN, sealed_epoch: int | None = None) -> str:
    context = SealContext(run_id=run, epoch=epoch if sealed_epoch is None else sealed_epoch,
                          member=MEMBER.address(), standby=STANDBY.address())
    return seal(secret, STANDBY.public_key, context).hex()


@pytest.fixture(scope="module")
def standby(tmp_path_factory) -> tuple[str, Path, ServerThread]:
    journal = tmp_path_factory.mktemp("standby")
    app = create_standby_app(STANDBY, MEMBER.address(), RUN, journal, lambda: CURRENT, "inj")
    with ServerThread(app, limits=standby_limits()) as server:
        yield server.url + SECRET_PATH, journal, server


def send(url: str, headers: dict[str, str], data: bytes) -> tuple[int, str]:
    """PUT ``data`` with ``headers``: the status and the answer (the failure's text for a refusal)."""
    client = SafeClient()
    try:
        return 200, client.put_bytes(url, headers, data, max_bytes=4096).decode()
    except HttpFailure as exc:
        assert exc.status is not None, exc
        return exc.status, str(exc)
    finally:
        client.close()


def put(url: str, body: dict | bytes, key: PrivateKey = MEMBER, run: str = RUN, swap: bytes | None = None) -> int:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = sign_request(key, "PUT", SECRET_PATH, run, data, prefix="inj")
    return send(url, headers, swap if swap is not None else data)[0]


@contextlib.contextmanager
def serving(journal: Path, current: Callable[[], int] = lambda: CURRENT, header_check: bool = True,
            chain_wait_s: float = standby_handover.CHAIN_WAIT_S) -> Iterator[str]:
    """A standby app of its own on ``journal`` over real HTTP; yields its PUT URL. Without
    ``header_check`` the server does not run the app's ``admit`` before the body, so what the
    handler itself refuses shows."""
    app = create_standby_app(STANDBY, MEMBER.address(), RUN, journal, current, "inj", chain_wait_s=chain_wait_s)
    if not header_check:
        app.state.admit = None
    with ServerThread(app, limits=standby_limits()) as server:
        yield server.url + SECRET_PATH


def receipt_of(answer: str, epoch: int, secret: bytes = SECRET) -> bool:
    """Whether ``answer`` is the standby's signed receipt for ``secret`` in ``epoch``."""
    held = json.loads(answer)
    context = SealContext(run_id=RUN, epoch=epoch, member=MEMBER.address(), standby=STANDBY.address())
    return held["epoch"] == epoch and STANDBY.public_key.verify(receipt_digest(context, secret),
                                                               bytes.fromhex(held["receipt"]))


def entries(journal: Path) -> dict[int, bytes | None]:
    """The journal's secret entries by epoch."""
    return {int(p.name[6:12]): read_secret(journal, int(p.name[6:12])) for p in journal.glob("epoch-*.json")}


def test_only_the_member_may_hand_its_standby_a_secret_and_only_one_per_epoch(standby) -> None:
    url, journal, _ = standby
    good = {"epoch": CURRENT, "sealed": sealed()}
    assert put(url, good, key=OTHER) == 403  # another member's or an outsider's signature
    assert put(url, good, swap=json.dumps({"epoch": CURRENT, "sealed": sealed()}).encode()) == 401  # body swapped
    assert put(url, good, run="cd" * 32) == 401  # signed for another run
    assert read_secret(journal, CURRENT) is None  # nothing written
    assert put(url, good) == 200
    assert read_secret(journal, CURRENT) == SECRET  # the entry the reveal loop reads
    assert put(url, {"epoch": CURRENT, "sealed": sealed()}) == 200  # the same secret again: acknowledged
    assert put(url, {"epoch": CURRENT, "sealed": sealed(secret=bytes(32))}) == 409  # a different one: refused
    assert read_secret(journal, CURRENT) == SECRET  # the first is kept


def flip_last_byte(hex_blob: str) -> str:
    """The blob with its last byte changed (sealing is randomised: overwriting it with a fixed value
    would leave it unchanged once in 256 runs)."""
    return hex_blob[:-2] + f"{int(hex_blob[-2:], 16) ^ 0x01:02x}"


@pytest.mark.parametrize(("body", "status"), [
    ({"epoch": CURRENT - 1, "sealed": sealed(CURRENT - 1, sealed_epoch=CURRENT)}, 400),  # sealed for another epoch
    ({"epoch": CURRENT + 1, "sealed": sealed(CURRENT + 1, run="cd" * 32)}, 400),  # sealed for another run
    ({"epoch": CURRENT, "sealed": flip_last_byte(sealed())}, 400),  # tampered with
    ({"epoch": CURRENT + 2, "sealed": sealed(CURRENT + 2)}, 409),  # far from the chain's current epoch
    ({"epoch": CURRENT - 2, "sealed": sealed(CURRENT - 2)}, 409),  # as far behind it
    ({"epoch": CURRENT, "sealed": "ab"}, 400),  # malformed
    ({"epoch": CURRENT, "sealed": sealed(), "more": 1}, 400),
    (b"x" * 600, 413),  # oversized
])
def test_the_standby_refuses_what_does_not_open_for_this_epoch(standby, body, status) -> None:
    url, journal, _ = standby
    before = sorted(p.name for p in journal.iterdir())
    assert put(url, body) == status
    assert sorted(p.name for p in journal.iterdir()) == before


def test_an_unsigned_put_is_refused_before_its_body_is_read(standby) -> None:
    url, _, _ = standby
    client = SafeClient()
    with pytest.raises(HttpFailure) as refused:
        client.put_bytes(url, {}, b'{"epoch": 3}', max_bytes=4096)
    client.close()
    assert refused.value.status == 401 and "unsigned request" in str(refused.value)


def test_old_entries_are_pruned(tmp_path) -> None:
    for epoch in (0, 1, 2, 5):
        (tmp_path / f"epoch-{epoch:06d}.json").write_text("{}")
    (tmp_path / "epoch-000001").mkdir()  # a folder of the journal, not an entry
    assert prune(tmp_path, current=4) == [0, 1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch-000001", "epoch-000002.json", "epoch-000005.json"]


def test_a_replayed_put_is_refused_and_writes_nothing(tmp_path) -> None:
    # Someone who captured the member's signed PUT sends it again: its nonce was used, so it is
    # refused, even where the entry it carried is gone (pruned, or cleared by the operator).
    with serving(tmp_path) as url:
        data = json.dumps({"epoch": CURRENT, "sealed": sealed()}).encode()
        headers = sign_request(MEMBER, "PUT", SECRET_PATH, RUN, data, prefix="inj")
        assert send(url, headers, data)[0] == 200
        secret_file(tmp_path, CURRENT).unlink()
        code, detail = send(url, headers, data)
        assert code == 401 and "replayed" in detail
        assert read_secret(tmp_path, CURRENT) is None


@pytest.mark.parametrize("epoch", [CURRENT - 1, CURRENT + 1])
def test_a_secret_one_epoch_from_the_chains_is_taken(tmp_path, epoch) -> None:
    # A pipelined run joins the next epoch while one settles: one epoch either way is within reach.
    with serving(tmp_path) as url:
        assert put(url, {"epoch": epoch, "sealed": sealed(epoch)}) == 200
    assert entries(tmp_path) == {epoch: SECRET}


def test_a_hand_over_prunes_only_entries_more_than_two_epochs_old(tmp_path) -> None:
    # The chain is at 5: entries of 3 and later are kept (docs: "more than 2 before the current one
    # are deleted"), whatever epoch the hand-over is for; what is not an entry is never touched.
    kept = {epoch: bytes([epoch]) * 32 for epoch in (1, 2, 3, 4, 5)}
    for epoch, secret in kept.items():
        write_secret(tmp_path, epoch, secret)
    (tmp_path / "epoch-000001").mkdir()
    (tmp_path / "notes.txt").write_text("the operator's")
    with serving(tmp_path, lambda: 5) as url:
        assert put(url, {"epoch": 6, "sealed": sealed(6, sealed_epoch=5)}) == 400  # refused: prunes nothing
        assert put(url, {"epoch": 4, "sealed": sealed(4, secret=bytes(32))}) == 409  # nor overwrites
        assert put(url, {"epoch": 7, "sealed": sealed(7)}) == 409
        assert entries(tmp_path) == kept
        assert put(url, {"epoch": 6, "sealed": sealed(6)}) == 200  # the chain's epoch 5 prunes 1 and 2
    assert entries(tmp_path) == {3: kept[3], 4: kept[4], 5: kept[5], 6: SECRET}
    assert (tmp_path / "epoch-000001").is_dir() and (tmp_path / "notes.txt").read_text() == "the operator's"


def test_a_damaged_entry_is_replaced_by_the_handed_secret(tmp_path) -> None:
    # An entry the reveal loop cannot read (a torn copy, a disk error) holds nothing: the member's
    # secret replaces it, so the standby can reveal.
    secret_file(tmp_path, CURRENT).write_text('{"secret": "not hex"}')
    with serving(tmp_path) as url:
        assert put(url, {"epoch": CURRENT, "sealed": sealed()}) == 200
    assert read_secret(tmp_path, CURRENT) == SECRET


def test_the_handler_refuses_a_non_member_even_past_the_header_check(tmp_path) -> None:
    # The server's header check (admit) refuses a non-member before the body is read; the handler
    # checks the verified signer again, so a gap in the first check cannot let another key in.
    with serving(tmp_path, header_check=False) as url:
        good = {"epoch": CURRENT, "sealed": sealed()}
        data = json.dumps(good).encode()
        code, detail = send(url, sign_request(OTHER, "PUT", SECRET_PATH, RUN, data, prefix="inj"), data)
        assert code == 403 and f"{OTHER.address()} is not the member" in detail
        assert send(url, {}, data)[0] == 401  # unsigned
        headers = sign_request(MEMBER, "PUT", SECRET_PATH, RUN, data, prefix="inj")
        assert send(url, {**headers, "x-veriloco-signature": "zz"}, data)[0] in (400, 401)  # malformed
        assert entries(tmp_path) == {}
        assert put(url, good) == 200  # the member still gets through


def test_a_held_secret_is_acknowledged_again_while_the_chain_does_not_answer(tmp_path, monkeypatch) -> None:
    # The courier's first PUT was written but its answer lost (its deadline passed while the
    # standby wrote); its retry of the same secret must get the receipt, even from a standby whose
    # chain node is down, or the member's held secret would count as undelivered.
    monkeypatch.setattr(standby_handover, "EPOCH_TTL_S", 0.0)  # every request asks the chain
    chain_down = threading.Event()

    def current() -> int:
        if chain_down.is_set():
            raise LedgerError("the node at grpc+http://127.0.0.1:9900 did not answer within 3 s")
        return CURRENT

    with serving(tmp_path, current) as url:
        assert put(url, {"epoch": CURRENT, "sealed": sealed()}) == 200
        chain_down.set()
        data = json.dumps({"epoch": CURRENT, "sealed": sealed()}).encode()  # sealed anew, signed anew
        code, answer = send(url, sign_request(MEMBER, "PUT", SECRET_PATH, RUN, data, prefix="inj"), data)
        assert code == 200 and receipt_of(answer, CURRENT)
        assert put(url, {"epoch": CURRENT, "sealed": sealed()}) == 200  # any number of times
        assert put(url, {"epoch": CURRENT, "sealed": sealed(secret=bytes(32))}) == 503  # a new one needs the chain
        assert put(url, {"epoch": CURRENT + 1, "sealed": sealed(CURRENT + 1)}) == 503
        with courier_to(tmp_path / "primary", url.removesuffix(SECRET_PATH)) as courier:
            write_secret(tmp_path / "primary", CURRENT, SECRET)
            courier.offer(status(CURRENT, "train"))
            wait_until(lambda: CURRENT in courier.delivered)
    assert courier.delivered == {CURRENT: True}
    assert entries(tmp_path) == {CURRENT: SECRET}


def test_a_slow_chain_costs_a_hand_over_a_quick_503_and_one_read(tmp_path) -> None:
    # A chain node that hangs must not hold the standby's workers: each request waits at most
    # chain_wait_s, and concurrent requests share the one read in flight.
    release, reads = threading.Event(), []

    def hanging() -> int:
        reads.append(time.monotonic())
        release.wait(30)
        return CURRENT

    with serving(tmp_path, hanging, chain_wait_s=0.3) as url:
        start = time.monotonic()
        with ThreadPoolExecutor(4) as pool:
            statuses = list(pool.map(lambda _: put(url, {"epoch": CURRENT, "sealed": sealed()}), range(4)))
        assert statuses == [503] * 4 and time.monotonic() - start < 5
        assert len(reads) == 1 and entries(tmp_path) == {}
        release.set()  # the node answers again
        assert put(url, {"epoch": CURRENT, "sealed": sealed()}) == 200
    assert entries(tmp_path) == {CURRENT: SECRET}


def test_the_standby_asks_the_chain_its_epoch_at_most_every_two_seconds(tmp_path) -> None:
    # Each new secret needs the chain's epoch; hand-overs close together share one reading.
    reads: list[float] = []

    def counting() -> int:
        reads.append(time.monotonic())
        return CURRENT

    with serving(tmp_path, counting) as url:
        for epoch in (CURRENT - 1, CURRENT, CURRENT + 1):
            assert put(url, {"epoch": epoch, "sealed": sealed(epoch)}) == 200
    assert len(reads) == 1 and entries(tmp_path) == {CURRENT - 1: SECRET, CURRENT: SECRET, CURRENT + 1: SECRET}


def test_a_standby_for_a_non_address_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="not an address of this chain"):
        create_standby_app(STANDBY, "inj1nope", RUN, tmp_path, lambda: CURRENT, "inj")
    with pytest.raises(ValueError, match="not an address of this chain"):
        create_standby_app(STANDBY, MEMBER.address(), RUN, tmp_path, lambda: CURRENT, "cosmos")


def status(epoch: int, phase: str, revealed: bool = False) -> ParticipantStatus:
    return ParticipantStatus.model_validate({
        "address": MEMBER.address(), "epoch": epoch, "phase": phase, "phase_deadline": 100, "joined": True,
        "model_hash": "00" * 32, "prev_seed": "00" * 32, "revealed": revealed})


@contextlib.contextmanager
def courier_to(journal: Path, url: str) -> Iterator[SecretCourier]:
    """A courier of MEMBER's secrets in ``journal`` to the standby at ``url``, retrying fast;
    closed (its thread stopped) on leaving."""
    courier = SecretCourier(journal, MEMBER, RUN, "inj", url, STANDBY.public_key, STANDBY.address(),
                            first_wait=0.01, max_wait=0.02)
    try:
        yield courier
    finally:
        courier.close()


@contextlib.contextmanager
def courier_against(journal: Path, answer: Callable[[], Any]) -> Iterator[SecretCourier]:
    """MEMBER's epoch-0 secret written in ``journal`` and a courier of it to a fake standby over
    real HTTP, whose every hand-over ``answer`` answers (raising HTTPException: a refusal)."""
    fake = FastAPI()
    fake.put(SECRET_PATH)(answer)
    write_secret(journal, 0, SECRET)
    with ServerThread(fake, limits=standby_limits()) as server, courier_to(journal, server.url) as courier:
        yield courier


def wait_until(done: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll ``done`` (the courier works on its own thread) until it holds or ``timeout`` passes."""
    end = time.monotonic() + timeout
    while not done() and time.monotonic() < end:
        time.sleep(0.01)


def test_a_courier_to_a_standby_that_is_down_retries_then_gives_up_after_the_reveal(tmp_path, caplog) -> None:
    write_secret(tmp_path, 0, SECRET)
    # A port nothing listens on: every try fails and may heal, so it retries with backoff.
    with courier_to(tmp_path, "http://127.0.0.1:9") as courier:
        courier.offer(status(0, "train"))  # returns at once: the courier's thread does the work
        wait_until(lambda: courier._failed.get(0, 0) >= 2)
        assert courier._failed.get(0, 0) >= 2 and 0 not in courier.delivered
        courier.offer(status(1, "join"))  # the run moved on (epoch 1 has no secret yet): 0 is given up
        wait_until(lambda: 0 in courier.delivered)
        assert courier.delivered == {0: False}
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert sum("did not take the secret" in w for w in warnings) == 1  # logged once, not per try


def test_a_refusal_is_retried_until_the_reveal_not_taken_as_final(tmp_path) -> None:
    # An answer is not authenticated: one 400 from anything on the path (or a standby's passing
    # fault) must not end the epoch's hand-over, so the courier keeps trying with backoff.
    def refuse() -> None:
        raise HTTPException(400, "no")

    with courier_against(tmp_path, refuse) as courier:
        courier.offer(status(0, "train"))
        wait_until(lambda: courier._failed.get(0, 0) >= 3)
        assert courier._failed.get(0, 0) >= 3 and 0 not in courier.delivered


def test_a_secret_written_after_the_join_status_is_handed_over_without_another_offer(tmp_path) -> None:
    # The daemon offers the `join` status before its join writes the secret: the courier looks
    # again on its own, so the standby holds the secret soon after the join, not a poll later.
    primary, folder = tmp_path / "primary", tmp_path / "standby"
    app = create_standby_app(STANDBY, MEMBER.address(), RUN, folder, lambda: 0, "inj")
    with ServerThread(app, limits=standby_limits()) as server, courier_to(primary, server.url) as courier:
        courier.offer(status(0, "join"))  # no secret yet, and no other offer follows
        time.sleep(0.05)
        write_secret(primary, 0, SECRET)
        wait_until(lambda: 0 in courier.delivered)
    assert courier.delivered == {0: True} and read_secret(folder, 0) == SECRET


def test_a_secret_in_the_journal_is_its_owners_only(tmp_path) -> None:
    journal = tmp_path / "journal"
    write_secret(journal, 3, SECRET)
    assert journal.stat().st_mode & 0o777 == 0o700
    assert secret_file(journal, 3).stat().st_mode & 0o077 == 0


def test_an_acknowledgement_without_the_standbys_signed_receipt_is_not_a_delivery(tmp_path, caplog) -> None:
    # Something in between answers 200 for the standby: without the standby's signature over the
    # secret the courier does not count the secret delivered, and keeps trying.
    def ack() -> dict:
        return {"epoch": 0, "held": True, "receipt": OTHER.sign(bytes(32)).hex()}

    with courier_against(tmp_path, ack) as courier:
        courier.offer(status(0, "join"))
        wait_until(lambda: courier._failed.get(0, 0) >= 2)
        assert courier._failed.get(0, 0) >= 2 and 0 not in courier.delivered
    assert any("not the standby's signed receipt" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(("answered", "signed", "delivered"), [
    (0, 0, True),  # the standby's receipt for this epoch: a delivery
    (1, 1, False),  # its genuine receipt of another epoch (an old answer replayed): not one
    (0, 1, False),  # this epoch named, another epoch signed
    (1, 0, False),  # this epoch signed, another named
])
def test_only_a_receipt_signed_for_the_epoch_handed_over_counts(tmp_path, answered, signed, delivered) -> None:
    context = SealContext(run_id=RUN, epoch=signed, member=MEMBER.address(), standby=STANDBY.address())
    def ack() -> dict:
        return {"epoch": answered, "held": True, "receipt": STANDBY.sign(receipt_digest(context, SECRET)).hex()}

    with courier_against(tmp_path, ack) as courier:
        courier.offer(status(0, "train"))
        wait_until(lambda: 0 in courier.delivered or courier._failed.get(0, 0) >= 2)
    assert (courier.delivered == {0: True}) is delivered
    assert delivered or courier._failed.get(0, 0) >= 2


@pytest.mark.parametrize("after", [status(0, "reveal", revealed=True), status(0, "verify")])
def test_a_courier_sends_nothing_once_the_secret_was_revealed_or_the_reveal_is_over(tmp_path, after) -> None:
    # The secret is public then, or too late to help: the standby is not sent it.
    write_secret(tmp_path / "primary", 0, SECRET)
    with serving(tmp_path / "standby", lambda: 0) as url, \
            courier_to(tmp_path / "primary", url.removesuffix(SECRET_PATH)) as courier:
        courier.offer(after)
        time.sleep(0.3)
        assert courier.delivered == {} and not (tmp_path / "standby").exists()
        courier.offer(status(1, "train"))  # the next epoch's secret is not written yet either
        time.sleep(0.1)
        assert courier.delivered == {} and not (tmp_path / "standby").exists()


def test_a_courier_hands_each_epoch_over_once_and_remembers_only_the_last_few(tmp_path, monkeypatch) -> None:
    # The daemon offers every status it reads: a secret the standby acknowledged is not sent
    # again, and the courier's memory of done epochs stays bounded over a long run.
    monkeypatch.setattr(standby_handover, "EPOCH_TTL_S", 0.0)
    chain, requests = {"epoch": 0}, []
    app = create_standby_app(STANDBY, MEMBER.address(), RUN, tmp_path / "standby", lambda: chain["epoch"], "inj")

    @app.middleware("http")
    async def count(request, call_next):  # type: ignore[no-untyped-def]
        requests.append(request.method)
        return await call_next(request)

    with ServerThread(app, limits=standby_limits()) as server, \
            courier_to(tmp_path / "primary", server.url) as courier:
        for epoch in range(6):
            chain["epoch"] = epoch
            write_secret(tmp_path / "primary", epoch, bytes([epoch + 1]) * 32)
            courier.offer(status(epoch, "join"))
            wait_until(lambda e=epoch: e in courier.delivered)
            for phase in ("train", "train", "reveal"):
                courier.offer(status(epoch, phase))
            time.sleep(0.05)
            assert len(requests) == epoch + 1
    assert courier.delivered == {3: True, 4: True, 5: True}
    assert entries(tmp_path / "standby") == {e: bytes([e + 1]) * 32 for e in (3, 4, 5)}


# -- a real daemon with a courier (embedded chain) ---------------------------------------------


@pytest.fixture
def validator(tmp_path, dataset) -> ValidatorNode:
    """A bonded validator on a fresh embedded chain (a run that waits for a host, which never comes)."""
    spec = tiny()
    operator, key = PrivateKey(b"\x21" * 32), PrivateKey(b"\x22" * 32)
    chain = EmbeddedChain(genesis_balances={k.address(): {DENOM: GENESIS_BALANCE} for k in (operator, key)})
    ledger = deploy_embedded(chain, operator, spec, "00" * 32, operator.address())
    ledger.bond(key, "validator", "http://127.0.0.1:1", int(spec.economics.min_validator_stake))

    def no_peers(endpoint: str) -> ArtifactSource:
        raise ArtifactUnavailable(f"no peers here: {endpoint}")

    return ValidatorNode(ledger, key, spec, dataset, tmp_path / "primary", no_peers, name="val")


@pytest.mark.parametrize("standby_up", [True, False])
def test_a_daemon_hands_its_secret_to_its_standby_and_joins_whether_it_is_up_or_not(
        validator, tmp_path, standby_up) -> None:
    node, folder = validator, tmp_path / "standby"
    # The member's own key on the standby (no set_standby): the key check accepts only that one.
    key, address = standby_key(node.ledger, node.address, node.key.public_key.hex())
    app = create_standby_app(node.key, node.address, node.run_id.hex(), folder,
                             lambda: node.ledger.participant(node.address).epoch, node.ledger.prefix)
    with ServerThread(app, limits=standby_limits()) as server:
        url = server.url if standby_up else "http://127.0.0.1:9"  # nothing listens on port 9
        courier = SecretCourier.of(node, url, key, address)
        courier.first_wait = courier.max_wait = 0.01
        daemon = Daemon(node, node.ledger, poll=0.0, on_status=courier.offer)  # as `validator run` wires it
        try:
            assert daemon.step()  # joins epoch 0, its secret durable first, whatever the standby does
            assert node.status().joined
            wait_until(lambda: 0 in courier.delivered or courier._failed.get(0, 0) >= 2)
            assert not daemon.step()  # joined; waiting for a host (the courier's thread does not hold it)
        finally:
            courier.close()
    if standby_up:
        assert courier.delivered == {0: True}
        assert read_secret(folder, 0) == node.secret(0)
    else:
        assert 0 not in courier.delivered and courier._failed[0] >= 2 and not folder.exists()


# -- the standby a member named, read from the contract --------------------------------------


def named_standby_ledger() -> tuple[EmbeddedChain, Ledger, PrivateKey]:
    """A run on the embedded chain with one bonded member (its key returned), which named no standby."""
    operator, member = PrivateKey(b"\x21" * 32), PrivateKey(b"\x22" * 32)
    chain = EmbeddedChain(genesis_balances={k.address(): {DENOM: GENESIS_BALANCE} for k in (operator, member)})
    spec = tiny()
    ledger = deploy_embedded(chain, operator, spec, "00" * 32, operator.address())
    ledger.bond(member, "validator", "http://127.0.0.1:1", int(spec.economics.min_validator_stake))
    return chain, ledger, member


CONTRACT_0_3_0_REFUSAL = (
    "invalid query message: unknown variant `standby`, expected one of `config`, `member`, `members`, "
    "`accounting`, `epoch`, `epochs`, `challenges`, `report`, `participant`, `compute_class`, "
    "`aggregation_inputs` at line 1 column 10")
"""What contract 0.3.0 (the wasm before the ``standby`` query, sha256 8cdb1903…) answered ``standby
{member}`` on the embedded chain, verbatim; ``tests/chain/test_standby.py`` checks on both backends that
the contract's refusal of an unknown query has this form."""


class Contract030(EmbeddedBackend):
    """The contract as 0.3.0 answers: without the ``standby`` query, which it refuses with
    ``refusal`` (every other query, every message and the storage are the real contract's); counts
    the raw reads."""

    def __init__(self, chain: EmbeddedChain, contract_address: str, denom: str,
                 refusal: str = CONTRACT_0_3_0_REFUSAL) -> None:
        super().__init__(chain, contract_address, denom)
        self.refusal = refusal
        self.raw_reads = 0

    def query(self, msg: dict[str, Any]) -> Any:
        if "standby" in msg:
            raise ContractError(self.refusal, contract=self.contract_address, entry_point="query")
        return super().query(msg)

    def raw(self, key: bytes) -> bytes | None:
        self.raw_reads += 1
        return super().raw(key)


def test_the_standby_is_the_contracts_answer_checked_before_use() -> None:
    chain, ledger, member = named_standby_ledger()
    address = member.address()
    assert ledger.standby(address) is None
    ledger.set_standby(member, STANDBY.address())
    assert ledger.standby(address) == STANDBY.address()
    assert ledger.standby(OTHER.address()) is None  # not a member: named nobody
    with pytest.raises(ContractError, match=r"^standby: "):  # refused by the contract, not read raw
        ledger.standby("inj1nope")
    # What only a corrupt store could answer is refused before the hand-over trusts it.
    store = chain._stores[ledger.backend._contract]  # the contract's storage
    key = b"sy/" + address.encode()
    for value, error in [
        (json.dumps(STANDBY.address("cosmos")).encode(), "the standby named by .* is not an address of this chain: "
                                                         "'cosmos1"),
        (b'"inj1nope"', "malformed Standby from the contract"),
        (b"42", f'corrupt state under key "sy/{address}": invalid type: integer `42`, expected a string'),
    ]:
        store[key] = value
        with pytest.raises(LedgerError, match=error):
            ledger.standby(address)
    ledger.set_standby(member, None)
    assert ledger.standby(address) is None


def test_an_answer_about_another_member_is_refused() -> None:
    chain, ledger, member = named_standby_ledger()
    ledger.set_standby(member, STANDBY.address())

    class Confused(EmbeddedBackend):  # a node answering the query about someone else
        def query(self, msg: dict[str, Any]) -> Any:
            if "standby" in msg:
                msg = {"standby": {"member": member.address()}}
            return super().query(msg)

    confused = Ledger(Confused(chain, ledger.backend.contract_address, DENOM))
    assert confused.standby(member.address()) == STANDBY.address()
    with pytest.raises(LedgerError, match=f"the contract answered the standby of {member.address()}, not of "
                                          f"{OTHER.address()}"):
        confused.standby(OTHER.address())


def test_a_contract_without_the_query_has_the_standby_read_from_its_storage_and_validated() -> None:
    # A run on a code id from before 0.3.1 refuses `standby {member}`: Ledger.standby then reads the
    # contract's raw storage (`sy/` + address), and checks whatever is stored there.
    chain, ledger, member = named_standby_ledger()
    old = Contract030(chain, ledger.backend.contract_address, DENOM)
    ledger = Ledger(old)
    address = member.address()
    assert ledger.standby(address) is None
    ledger.set_standby(member, STANDBY.address())
    assert ledger.standby(address) == STANDBY.address()
    assert old.raw_reads == 2
    store = chain._stores[old.contract_address]  # the contract's storage, as wasmd's raw query reads it
    key = b"sy/" + address.encode()
    assert store[key] == json.dumps(STANDBY.address()).encode()
    for value, why in [
        (b"inj1" + b"q" * 38, "not JSON"),  # an address, but not as JSON
        (b"", "not JSON"),
        (b"42", "a JSON int"),
        (json.dumps([STANDBY.address()]).encode(), "a JSON list"),
        (b'"inj1nope"', "inj1nope"),  # not an address
        (json.dumps(STANDBY.address("cosmos")).encode(), "cosmos1"),  # another chain's
        (json.dumps(STANDBY.address() + " ").encode(), "inj1"),
        (json.dumps("x" * 1000).encode(), "1002 bytes, more than 128"),  # oversized
    ]:
        store[key] = value
        with pytest.raises(LedgerError, match=f"the standby stored for {address} is not an address of this "
                                              f"chain: .*{why}"):
            ledger.standby(address)
    del store[key]
    assert ledger.standby(address) is None


def test_only_a_refusal_of_the_unknown_query_falls_back_to_storage() -> None:
    chain, ledger, member = named_standby_ledger()
    ledger.set_standby(member, STANDBY.address())

    for reason in ["standby: address is empty",
                   "invalid query message: unknown variant `standby_of`, expected one of `config`",
                   "invalid query message: missing field `member` at line 1 column 12"]:
        backend = Contract030(chain, ledger.backend.contract_address, DENOM, refusal=reason)
        with pytest.raises(ContractError) as refused:
            Ledger(backend).standby(member.address())
        assert str(refused.value) == reason
        assert backend.raw_reads == 0


def test_the_standby_servers_chain_client_gives_up_in_seconds_not_a_minute() -> None:
    # `standby run --listen` reads the chain for its server on a client of its own made brief
    # (be_brief), where the reveal loop's is patient (be_patient: a minute of retries).
    from chain.cosmos import CosmosBackend, CosmosChain, wasmd

    chain = CosmosChain("grpc+http://127.0.0.1:1", wasmd("w-1"))  # nothing listens there
    try:
        ledger = Ledger(CosmosBackend(chain, OTHER.address("wasm")))
        be_patient(ledger)
        assert chain.client.reconnect_timeout >= 60
        be_brief(ledger, 0.5)
        start = time.monotonic()
        with pytest.raises(LedgerError, match=r"did not answer within 0\.5 s"):
            ledger.participant(MEMBER.address())
        assert time.monotonic() - start < 3
    finally:
        chain.close()
