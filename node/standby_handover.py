"""Handing a standby revealer its member's beacon secret over HTTP (issue 30): sealed to the
standby's key, signed by the member, instead of a journal folder the operator syncs.

Two sides:

* **the standby** (``veriloco standby run --listen``) runs :func:`create_standby_app`: one route,
  ``PUT /v1/secret`` with ``{"epoch": e, "sealed": hex}``, signed with the request-signature scheme
  of ``protocol.auth`` by **the member it stands for** (any other signer is refused before its body
  is read). It opens the sealed secret with its own key (``protocol.sealing``, bound to the run,
  the epoch, the member and the standby) and writes it as the journal entry the reveal loop
  already reads (``node.participant.write_secret``: atomic, fsynced), so :class:`node.standby.Standby`
  is unchanged. It refuses an epoch more than :data:`MAX_EPOCH_DISTANCE` from the chain's current
  one, a sealed secret that does not open, and a second, different secret for an epoch it holds
  (it keeps the first: an honest primary creates each secret once, before the join that commits to
  it, and never changes it, so a different one is a mistake or a replay, and the first is the one
  the join committed to). The same secret again (a retry whose answer was lost) is acknowledged
  at once, without asking the chain. It keeps the entries of :data:`KEEP_EPOCHS` epochs before
  the current one and deletes older ones. It waits at most :data:`CHAIN_WAIT_S` for the chain's
  current epoch (503 after that), with one read in flight at a time, on a chain client that
  ``veriloco standby run`` opens for it apart from the reveal loop's. Bounded as every server of
  the project (``node.http``): a body of at most :data:`MAX_BODY_BYTES`, head and body deadlines,
  a connection cap, one-line errors.
* **the primary** (``host run`` / ``validator run`` with ``--standby-url`` and
  ``--standby-pubkey``) runs a :class:`SecretCourier`: the daemon's tick offers it each status it
  reads (no work on the training or commit path); its own thread seals the epoch's secret once the
  journal entry exists, PUTs it, and retries with backoff until the standby acknowledges (with
  its signed receipt: ``protocol.sealing.receipt_digest``) or the epoch is past its reveal; a
  refusal is retried too (an answer is not authenticated). A standby that is down or slow costs
  the daemon nothing (logged once per epoch).

The chain still decides: a secret that is not the one the member committed to is refused by the
contract's commitment check, so the worst a wrong hand-over does is leave the standby unable to
reveal (docs/contract.md, "A standby revealer").
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from chain.ledger import Ledger, LedgerError
from node.http import ClientLimits, HttpFailure, SafeClient, ServerLimits, parse_json
from node.participant import Participant, journal_dir, secret_file, write_secret
from node.server import ServerStats, ServerThread, claimed_address, verified_signer
from node.standby import read_secret
from protocol.auth import AuthError, NonceCache, sign_request
from protocol.keys import KeyFormatError, PrivateKey, PublicKey, is_address
from protocol.sealing import SEALED_SIZE, SealContext, SealError, open_sealed, receipt_digest, seal
from protocol.types import COUNT_MAX
from protocol.views import ParticipantStatus

log = logging.getLogger("veriloco.standby")

SECRET_PATH = "/v1/secret"
MAX_BODY_BYTES = 512
"""A hand-over's body: ``{"epoch": …, "sealed": <164 hex>}`` is under 200 bytes."""
MAX_EPOCH_DISTANCE = 1
"""How far from the chain's current epoch a handed secret's epoch may be (the primary writes a
secret in its epoch's join; a pipelined run joins the next while one settles)."""
KEEP_EPOCHS = 2
"""Entries of this many epochs before the current one are kept; older ones are deleted."""
EPOCH_TTL_S = 2.0
"""How long the standby trusts its reading of the current epoch."""
CHAIN_WAIT_S = 3.0
"""How long a hand-over waits for the chain's current epoch before it is answered 503 (and retried
by the courier, whose request deadline is 10 s): a slow chain never holds a server worker long."""
_ENTRY = re.compile(r"^epoch-(\d{6,})\.json$")


def standby_limits() -> ServerLimits:
    """The standby server's bounds: one member sends to it, so few connections and tiny bodies."""
    return ServerLimits(max_connections=16, max_body_bytes=MAX_BODY_BYTES)


class SecretPut(BaseModel):
    """The body of ``PUT /v1/secret``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    epoch: Annotated[int, Field(ge=0, le=COUNT_MAX)]
    sealed: Annotated[str, Field(pattern=rf"^[0-9a-f]{{{2 * SEALED_SIZE}}}$")]


class SecretHeld(BaseModel):
    """The standby's answer: it holds the epoch's secret, with its receipt (its signature over
    :func:`protocol.sealing.receipt_digest`), which the primary checks."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    epoch: Annotated[int, Field(ge=0, le=COUNT_MAX)]
    held: bool
    receipt: Annotated[str, Field(pattern=r"^[0-9a-f]{128}$")]


def prune(journal: Path, current: int, keep: int = KEEP_EPOCHS) -> list[int]:
    """Delete the secret entries of epochs before ``current - keep`` in ``journal``; returns them."""
    gone = []
    for path in journal.glob("epoch-*.json"):
        match = _ENTRY.match(path.name)
        if match is not None and int(match[1]) < current - keep:
            path.unlink(missing_ok=True)
            gone.append(int(match[1]))
    return sorted(gone)


def create_standby_app(key: PrivateKey, member: str, run_id: str, journal: Path,
                       current_epoch: Callable[[], int], prefix: str, max_skew: int = 60,
                       chain_wait_s: float = CHAIN_WAIT_S) -> FastAPI:
    """The standby's hand-over endpoint (see the module docstring).

    Args:
        key: the standby's key (its own, or the member's); sealed secrets are opened with it.
        member: the address it stands for: the only signer it accepts.
        run_id: the run id (hex); requests and sealings of another run are refused.
        journal: the folder its reveal loop reads (:func:`node.participant.secret_file`).
        current_epoch: the chain's current epoch (raises ``LedgerError`` when the chain is down);
            best on a chain client of its own, not the reveal loop's (``veriloco standby run``).
        prefix: the chain's bech32 prefix.
        max_skew: accepted clock difference in seconds.
        chain_wait_s: how long a request waits for ``current_epoch`` before it is answered 503;
            one read at a time is in flight, shared by the requests that wait for it.
    """
    if not is_address(member, prefix):
        raise ValueError(f"member {member!r} is not an address of this chain ({prefix}1…)")
    journal = Path(journal)
    standby = key.address(prefix)
    app = FastAPI(title="veriloco standby", version="1",
                  description="Receives its member's sealed beacon secrets (docs/contract.md, 'A standby revealer').")
    stats = ServerStats()
    nonces = NonceCache(window_s=2 * max_skew, max_entries=4096, per_address=4096)
    lock = threading.Lock()
    seen: list[tuple[float, int]] = []  # (read at, epoch): the last reading of the current epoch
    reading = threading.Lock()
    reads: list[Future[int]] = []  # the chain read in flight, or the last one
    app.state.stats = stats

    def admit(scope: dict[str, Any]) -> tuple[int, str, str] | None:
        address = claimed_address(scope, max_skew, prefix)
        if isinstance(address, AuthError):
            return 401, "auth", str(address)
        if address != member:
            return 403, "not_member", f"{address} is not the member this standby reveals for"
        return None

    app.state.admit = admit

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        stats.reject("malformed", f"{request.url.path[:100]}: {type(exc).__name__}")
        return JSONResponse({"detail": "the standby failed to take it"}, status_code=500)  # its own fault: retried

    def refuse(status: int, reason: str, detail: str) -> HTTPException:
        stats.reject(reason, detail)
        return HTTPException(status, detail)

    def read_epoch() -> Future[int]:
        """One chain read on a thread of its own (a daemon: a read stuck in the chain client
        never holds up the process's exit)."""
        future: Future[int] = Future()

        def run() -> None:
            try:
                future.set_result(current_epoch())
            except BaseException as exc:  # noqa: BLE001 (handed to the waiting request)
                future.set_exception(exc)

        threading.Thread(target=run, name="standby-chain-read", daemon=True).start()
        return future

    def current() -> int:
        now = time.monotonic()
        with lock:
            if seen and now - seen[0][0] < EPOCH_TTL_S:
                return seen[0][1]
        with reading:  # at most one chain read in flight: concurrent requests wait on the same one
            if not reads or reads[0].done():
                reads[:] = [read_epoch()]
            future = reads[0]
        try:
            epoch = future.result(timeout=chain_wait_s)
        except FutureTimeout:
            raise refuse(503, "chain", f"the chain did not answer within {chain_wait_s:g} s") from None
        except LedgerError as exc:
            raise refuse(503, "chain", f"the chain does not answer: {str(exc)[:200]}") from None
        with lock:
            seen[:] = [(now, epoch)]
        return epoch

    def only_member(signer: str, _where: str) -> None:  # admit checked the claim; this, the signature
        if signer != member:
            raise refuse(403, "not_member", f"{signer} is not the member this standby reveals for")

    @app.put(SECRET_PATH, response_model=SecretHeld)
    async def handle(request: Request) -> SecretHeld:
        body = await request.body()  # at most MAX_BODY_BYTES: node.http.body_limit refused more
        verified_signer(request, body, run_id, nonces, stats, only_member, max_skew, prefix)
        return await run_in_threadpool(accept, body)  # a chain read and a file write

    def accept(body: bytes) -> SecretHeld:
        try:
            put = SecretPut.model_validate(parse_json(body, MAX_BODY_BYTES, max_depth=1))
        except (ValueError, ValidationError) as exc:
            raise refuse(400, "body", f"expected {{epoch, sealed}}: {str(exc).splitlines()[0][:200]}") from None
        context = SealContext(run_id=run_id, epoch=put.epoch, member=member, standby=standby)
        try:
            secret = open_sealed(bytes.fromhex(put.sealed), key, context)
        except SealError as exc:
            raise refuse(400, "seal", str(exc)) from None
        def receipt() -> SecretHeld:
            return SecretHeld(epoch=put.epoch, held=True, receipt=key.sign(receipt_digest(context, secret)).hex())

        with lock:
            if read_secret(journal, put.epoch) == secret:
                # Held already (a retry whose first answer was lost): acknowledged without asking
                # the chain, so a slow or down chain cannot make a held secret look undelivered.
                return receipt()
        now = current()
        if abs(put.epoch - now) > MAX_EPOCH_DISTANCE:
            raise refuse(409, "epoch", f"epoch {put.epoch} is not within {MAX_EPOCH_DISTANCE} of the chain's "
                                       f"current epoch {now}")
        with lock:  # one hand-over at a time: the check and the write are one step
            held = read_secret(journal, put.epoch)
            if held is not None and held != secret:
                raise refuse(409, "different", f"a different secret of epoch {put.epoch} is already held; the "
                                               "first is kept (a member's secret never changes once written)")
            if held is None:
                if secret_file(journal, put.epoch).exists():
                    log.warning("replacing the unreadable entry of epoch %d in %s", put.epoch, journal)
                write_secret(journal, put.epoch, secret)
                stats.served["secret"] += 1
                log.info("standby: holds the beacon secret of epoch %d for %s", put.epoch, member)
            prune(journal, now)
        return receipt()

    return app


def standby_server(app: FastAPI, listen: str) -> ServerThread:
    """Start ``app`` (:func:`create_standby_app`) on ``listen`` (``host:port``) with the standby's bounds."""
    host, _, port = listen.rpartition(":")
    return ServerThread(app, host or "127.0.0.1", int(port), limits=standby_limits()).start()


def standby_key(ledger: Ledger, member: str, pubkey_hex: str) -> tuple[PublicKey, str]:
    """The standby's public key and address, checked against the chain: the address the member
    named with ``set_standby`` if it named one, else the member's own (a standby that signs with
    the member's key). Anything else could not reveal for the member, and is refused.

    Raises:
        ValueError: a malformed key, or one that is neither.
    """
    try:
        compressed = bytes.fromhex(pubkey_hex)
        PublicKey(compressed)
    except (ValueError, KeyFormatError) as exc:
        raise ValueError(f"not a compressed secp256k1 public key in hex (66 digits, 02… or 03…): {exc}") from None
    named = ledger.standby(member)
    expected = named if named is not None else member
    try:
        return PublicKey.for_address(compressed, expected), expected
    except KeyFormatError:
        whose = f"the standby {named} that {member} named on chain" if named is not None else (
            f"{member}'s own (it named no standby on chain: `veriloco host set-standby`)")
        raise ValueError(f"the key is not {whose}") from None


JOIN_POLL_S = 0.2
"""How often a courier looks for the epoch's secret while the chain is in ``join`` and the journal
does not hold it yet: the hand-over follows the join's secret within this, not at the next status."""


class SecretCourier:
    """The primary's side: hands each epoch's beacon secret to the standby, off the daemon's path.

    :meth:`offer` is called with every status the daemon reads (it only records it and wakes the
    courier's thread); the thread sends the epoch's secret once its journal entry exists and the
    epoch is not past its reveal (nor revealed), until the standby acknowledges it.
    Every failure, a refusal too, is retried with backoff from ``first_wait`` to ``max_wait`` seconds;
    each epoch's first failure is logged as a warning, the rest at debug level.

    Args:
        journal: the primary's journal folder (``node.participant.journal_dir``).
        key: the member's key (it signs the requests).
        run_id: the run id (hex).
        prefix: the chain's bech32 prefix.
        url: the standby's base URL (``http://host:port``).
        standby: the standby's public key (:func:`standby_key`).
        standby_address: its address (:func:`standby_key`).
        limits: the bounds of one request.
    """

    def __init__(self, journal: Path, key: PrivateKey, run_id: str, prefix: str, url: str,
                 standby: PublicKey, standby_address: str, limits: ClientLimits | None = None,
                 first_wait: float = 1.0, max_wait: float = 30.0) -> None:
        self.journal = Path(journal)
        self.key = key
        self.member = key.address(prefix)
        self.run_id = run_id
        self.prefix = prefix
        self.url = url.rstrip("/") + SECRET_PATH
        self.standby = standby
        self.standby_address = standby_address
        self.first_wait, self.max_wait = first_wait, max_wait
        self.client = SafeClient(limits or ClientLimits(connect_s=3.0, read_s=5.0, deadline_s=10.0))
        self.delivered: dict[int, bool] = {}
        """Epochs done: True acknowledged, False refused or given up (the newest few)."""
        self._status: ParticipantStatus | None = None
        self._failed: dict[int, int] = {}  # epoch -> failed tries
        self._next_try = 0.0
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="standby-courier", daemon=True)
        self._thread.start()

    @classmethod
    def of(cls, node: Participant, url: str, standby: PublicKey, standby_address: str) -> SecretCourier:
        """The courier of ``node``'s beacon secrets (its journal, key and run), to the standby at ``url``."""
        return cls(journal_dir(node.root, node.run_id, node.address), node.key, node.run_id.hex(),
                   node.ledger.prefix, url, standby, standby_address)

    def offer(self, status: ParticipantStatus) -> None:
        """The daemon's latest status (cheap: records it and wakes the thread)."""
        self._status = status
        self._wake.set()

    def close(self) -> None:
        self._closed.set()
        self._wake.set()
        self._thread.join(timeout=15)
        self.client.close()

    def _run(self) -> None:
        wait: float | None = None
        while not self._closed.is_set():
            self._wake.wait(wait)
            self._wake.clear()
            if self._closed.is_set():
                return
            try:
                wait = self._step()
            except Exception:  # a bug here must not end the hand-overs (nor touch the daemon)
                log.exception("standby hand-over failed; carrying on")
                wait = self.max_wait

    def _step(self) -> float | None:
        """Try the current epoch's hand-over if due; returns how long to wait before looking again
        (None: until the next offer)."""
        status = self._status
        if status is None:
            return None
        epoch = status.epoch
        for older in [e for e in self._failed if e < epoch]:  # the run moved on: past their reveals
            self._give_up(older)
        if epoch in self.delivered:
            return None
        if status.revealed or status.phase not in ("join", "train", "reveal"):
            if self._failed.get(epoch):  # past its reveal: give up
                self._give_up(epoch)
            return None
        secret = read_secret(self.journal, epoch)
        if secret is None:  # not written yet: in `join` it is written just before the join is sent, so
            return JOIN_POLL_S if status.phase == "join" else None  # look again soon, not at the next offer
        left = self._next_try - time.monotonic()
        if left > 0:
            return left
        context = SealContext(run_id=self.run_id, epoch=epoch, member=self.member, standby=self.standby_address)
        body = json.dumps({"epoch": epoch, "sealed": seal(secret, self.standby, context).hex()}).encode()
        headers = sign_request(self.key, "PUT", SECRET_PATH, self.run_id, body, prefix=self.prefix)
        headers["content-type"] = "application/json"
        try:
            self._check_receipt(self.client.put_bytes(self.url, headers, body, max_bytes=4096), context, secret)
        except HttpFailure as exc:
            # Every failure is retried until the reveal ends, a refusal too: an answer is not
            # authenticated (anyone on the path can send a 4xx), and a standby's own passing fault
            # (a full disk, a chain node behind) heals; the backoff bounds what a real refusal costs.
            tries = self._failed[epoch] = self._failed.get(epoch, 0) + 1
            (log.warning if tries == 1 else log.debug)(
                "standby %s did not take the secret of epoch %d (%s: %s); retrying with backoff until the reveal",
                self.url, epoch, "refused" if not exc.retryable else "no answer", str(exc)[:200])
            delay = min(self.max_wait, self.first_wait * 2 ** (tries - 1))
            self._next_try = time.monotonic() + delay
            return delay
        log.info("standby %s holds the beacon secret of epoch %d%s", self.url, epoch,
                 f" (after {self._failed[epoch]} failed tries)" if self._failed.get(epoch) else "")
        self._done(epoch, True)
        return None

    def _check_receipt(self, answer: bytes, context: SealContext, secret: bytes) -> None:
        """Raise a retryable :class:`HttpFailure` unless ``answer`` is the standby's signed receipt
        for this secret (an acknowledgement anyone in between could fake is not one)."""
        try:
            held = SecretHeld.model_validate(parse_json(answer, 4096, max_depth=1))
            signed = self.standby.verify(receipt_digest(context, secret), bytes.fromhex(held.receipt))
        except (ValueError, ValidationError):
            signed = False
        if not signed or held.epoch != context.epoch:
            raise HttpFailure(f"{self.url}: the answer is not the standby's signed receipt", retryable=True)

    def _give_up(self, epoch: int) -> None:
        log.warning("standby %s never acknowledged the secret of epoch %d (%d tries); it can no longer help",
                    self.url, epoch, self._failed[epoch])
        self._done(epoch, False)

    def _done(self, epoch: int, acknowledged: bool) -> None:
        self.delivered[epoch] = acknowledged
        self._failed.pop(epoch, None)
        self._next_try = 0.0
        for old in [e for e in self.delivered if e < epoch - KEEP_EPOCHS]:
            del self.delivered[old]
