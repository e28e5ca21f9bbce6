"""A host's artifact server (FastAPI) and the thread that runs it beside the node.

The server exposes one :class:`~trainer.artifacts.ArtifactSource` over HTTP. Every request must be
signed by a participant's chain key (``protocol.auth``: timestamped, replay-protected, bound to
method, path, body and run) and the signer must be a bonded member (``authorize``, asked of the
chain). The signature is checked before the membership (so an outsider costs one signature check and
no chain query), and the nonce is recorded only after both (so outsiders cannot fill the replay
cache). Rejections get a one-line JSON error (4xx, never a traceback) and are counted in
:class:`ServerStats`; the log gets a rate-limited summary (each rejection at debug level), so an
attacked server's log stays small. Checkpoints, Δs and models that are files on disk
(:meth:`~trainer.artifacts.ArtifactSource.file`) are streamed from the file in chunks. Requests
carry no body; one declared larger than :data:`MAX_REQUEST_BYTES` (or chunked), or whose head is
unsigned or claims a non-member, is refused before it is read (``node.http.body_limit`` with the
app's ``admit``). One member has at most :data:`MAX_REQUESTS_PER_MEMBER` requests in progress at
once (:class:`MemberSlots`), and its nonces are its own (``protocol.auth.NonceCache``), so a member
flooding hurts only itself. Connections, request heads and bodies, stalled answers and keep-alive
are bounded by ``node.http`` (:class:`ServerThread` runs uvicorn with
:func:`node.http.server_config`).

The client peers read it with is :class:`node.http_client.HttpArtifacts`.

Routes (all ``GET``; OpenAPI schema at ``/openapi.json``):

* ``/v1/health`` (unsigned) — run id and host address;
* ``/v1/epochs/{epoch}/checkpoints/{leaf}`` — safetensors bytes;
* ``/v1/epochs/{epoch}/checkpoints/{leaf}/digests`` — the leaf's chunk digests
  (:class:`~trainer.leaf_digests.LeafDigests`); ``…/checkpoints/{leaf}/chunks/{tensor}/{chunk}`` —
  one 1 MiB chunk of one tensor (index in name order): what a validator that replayed the segment
  lacks of its end leaf;
* ``/v1/epochs/{epoch}/proofs/{leaf}`` — a :class:`~protocol.rules.merkle.MerkleProof`;
* ``/v1/epochs/{epoch}/delta`` — the quantized Δ (safetensors);
* ``/v1/epochs/{epoch}/losses`` — ``{"losses_micro": [...]}``;
* ``/v1/models/{model_hash}`` — a global state (safetensors);
* ``/v1/deltas/{delta_hash}`` — a pseudo-gradient the server holds by hash (its own or another
  host's: content-addressed, the reader checks the hash);
* ``/v1/held/{epoch}/{checkpoint_root}/checkpoints/{leaf}`` (and its ``/digests`` and
  ``/chunks/{tensor}/{chunk}``), ``…/proofs/{leaf}``, ``…/losses`` —
  the challenge artifacts of a host's epoch that a validator read, checked and kept
  (``node.leaf_holding``), named by the host's committed Merkle root (the reader checks each leaf
  against it): only of the server's newest held epoch and the one before, each at most
  :data:`HELD_READS_PER_MEMBER` times per member.
"""

from __future__ import annotations

import logging
import resource
import threading
import time
from collections import Counter
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Annotated, Any

import uvicorn
from fastapi import Depends, FastAPI, HTTPException, Path, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from pydantic import BaseModel

from node.http import Admission, RateLimitedLog, ServerLimits, server_config
from protocol.auth import AuthError, NonceCache, claimed_signer, request_nonce, request_timestamp, verify_request
from protocol.keys import DEFAULT_PREFIX
from protocol.rules.hashing import HEX_DIGEST_PATTERN
from protocol.rules.limits import MAX_SEGMENTS
from protocol.rules.merkle import MerkleProof
from protocol.types import COUNT_MAX
from trainer.artifacts import ArtifactSource, ArtifactUnavailable, BlobKind
from trainer.leaf_digests import MAX_CHUNKS, MAX_TENSORS, LeafDigests

log = logging.getLogger("veriloco.server")

MAX_REQUEST_BYTES = 1024
MAX_REQUESTS_PER_MEMBER = 8
"""Requests of one signed member a server works on at once (answers still flowing included); more
are answered 429 at once, so a member cannot hold the server's workers or connections for itself."""
HELD_READS_PER_MEMBER = 2
"""How often one member may read each held leaf, proof or loss list of a server (a reader needs
each once; one retry). A holder's serving is thus bounded per member by what it holds, which is
two epochs of the challenges it sat on."""
_SLOT = "veriloco.member"  # the ASGI scope key under which a request holds its member's slot

Epoch = Annotated[int, Path(ge=0, le=COUNT_MAX)]
Leaf = Annotated[int, Path(ge=0, le=MAX_SEGMENTS)]
ModelHash = Annotated[str, Path(pattern=HEX_DIGEST_PATTERN)]
TensorIndex = Annotated[int, Path(ge=0, lt=MAX_TENSORS)]
ChunkIndex = Annotated[int, Path(ge=0, lt=MAX_CHUNKS)]


class Health(BaseModel):
    run_id: str
    host: str


class LossesAnswer(BaseModel):
    losses_micro: list[int]


@dataclass
class ServerStats:
    """What the server refused and served, for operators (and tests)."""

    served: Counter[str] = field(default_factory=Counter)
    rejected: Counter[str] = field(default_factory=Counter)
    last_rejections: list[str] = field(default_factory=list)
    _log: RateLimitedLog = field(default_factory=lambda: RateLimitedLog(log))

    def reject(self, reason: str, detail: str) -> None:
        self.rejected[reason] += 1
        self.last_rejections = [*self.last_rejections, detail[:300]][-100:]
        self._log.event(reason, detail)


class HeldReads:
    """How often each member read each held artifact (:data:`HELD_READS_PER_MEMBER` at most), for
    the two newest epochs asked about only (older counts are dropped, and the server holds nothing
    older)."""

    def __init__(self, limit: int = HELD_READS_PER_MEMBER) -> None:
        self.limit = limit
        self._counts: Counter[tuple[str, int, str, str]] = Counter()
        self._newest = -1
        self._lock = threading.Lock()

    def take(self, member: str, epoch: int, root: str, what: str) -> bool:
        """Count one read of ``what`` of (``epoch``, ``root``) by ``member``; False past the limit."""
        with self._lock:
            if epoch > self._newest:
                self._newest = epoch
                for key in [k for k in self._counts if k[1] < epoch - 1]:
                    del self._counts[key]
            key = (member, epoch, root, what)
            if self._counts[key] >= self.limit:
                return False
            self._counts[key] += 1
            return True

    def give_back(self, member: str, epoch: int, root: str, what: str) -> None:
        """Undo one :meth:`take` whose read found nothing held: asking before the holder holds it
        (a seat waiting for the seat before it, ``node.leaf_holding``) costs no read."""
        with self._lock:
            key = (member, epoch, root, what)
            if self._counts[key] > 0:
                self._counts[key] -= 1


class MemberSlots:
    """Requests in progress per signed member, at most ``limit`` each: a request takes a slot once
    its signer is known (:meth:`take`) and gives it back when its answer is over, sent or
    abandoned (:meth:`middleware`, around the whole app)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._busy: Counter[str] = Counter()
        self._lock = threading.Lock()

    def busy(self, address: str) -> int:
        with self._lock:
            return self._busy[address]

    def take(self, scope: MutableMapping[str, Any], address: str) -> bool:
        """Take a slot of ``address`` for the request of ``scope``; False when it has none left."""
        with self._lock:
            if scope.get(_SLOT) == address:
                return True
            if self._busy[address] >= self.limit:
                return False
            self._busy[address] += 1
            scope[_SLOT] = address
            return True

    def give_back(self, scope: MutableMapping[str, Any]) -> None:
        address = scope.pop(_SLOT, None)
        if isinstance(address, str):
            with self._lock:
                self._busy[address] -= 1
                if self._busy[address] <= 0:
                    del self._busy[address]

    def middleware(self, app: Any) -> Any:
        """An ASGI middleware giving back a request's slot when the app is done with it."""

        async def released(scope: dict[str, object], receive: Any, send: Any) -> None:
            try:
                await app(scope, receive, send)
            finally:
                self.give_back(scope)

        return released


def claimed_address(scope: dict[str, Any], max_skew: int, prefix: str) -> str | AuthError:
    """The address a request's signature headers claim (``protocol.auth.claimed_signer``: everything
    but the signature, which covers the body), or why they are refused: what a server's ``admit``
    asks before it reads any body. Never raises: a malformed header is an :class:`AuthError` too."""
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
    try:
        return claimed_signer(headers, max_skew=max_skew, prefix=prefix).address
    except AuthError as exc:
        return exc
    except Exception:  # noqa: BLE001 (anything a malformed header provokes)
        return AuthError("malformed signature headers")


def verified_signer(request: Request, body: bytes, run_id: str, nonces: NonceCache, stats: ServerStats,
                    admit: Callable[[str, str], None], max_skew: int, prefix: str) -> str:
    """The address that signed ``request``, checked in the order every signed route of the project
    uses (``protocol.auth``): the signature over method, path (with its query), run id and
    ``body`` (401; 400 for headers that do not even parse), then ``admit(address, path)``, which
    raises the route's own refusal (a non-member 403, a busy member 429) and counts it, then the
    nonce, recorded only now so that no outsider fills the replay cache (a replay 401, a member
    over its quota 429). Refusals are :class:`HTTPException` and counted in ``stats``."""
    path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    where = path[:100]
    try:
        address = verify_request(request.headers, request.method, path, run_id, body, None,
                                 max_skew=max_skew, prefix=prefix)
    except AuthError as exc:
        stats.reject("auth", f"{where}: {exc}")
        raise HTTPException(401, str(exc)) from None
    except Exception as exc:  # noqa: BLE001 (any header a client can send is answered 400, not 500)
        stats.reject("malformed", f"{where}: {type(exc).__name__}")
        raise HTTPException(400, "malformed signature headers") from None
    admit(address, where)
    try:
        nonces.check_and_add(address, request_nonce(request.headers), time.time(), request_timestamp(request.headers))
    except AuthError as exc:
        stats.reject("replay", f"{where}: {address}: {exc}")
        raise HTTPException(429 if "too many" in str(exc) else 401, str(exc)) from None
    return address


def create_app(source: ArtifactSource, run_id: str, host: str, authorize: Callable[[str], bool],
               prefix: str = DEFAULT_PREFIX, max_skew: int = 60,
               source_for: Callable[[str], ArtifactSource] | None = None,
               max_requests_per_member: int = MAX_REQUESTS_PER_MEMBER) -> FastAPI:
    """The artifact server of one host.

    Args:
        source: what to serve (the host's behaviour decides, e.g. an adversary withholds).
        source_for: what to serve to one signed reader, by its address, when the host's
            behaviour distinguishes readers (``source`` then serves nobody).
        run_id: the run id (hex); requests signed for another run are refused.
        host: the serving host's address (reported by ``/v1/health``).
        authorize: whether an address may read (a bonded participant of the run).
        prefix: the chain's bech32 prefix.
        max_skew: accepted clock difference in seconds.
        max_requests_per_member: requests of one member worked on at once; more get 429.

    The app's ``state`` holds ``stats`` (:class:`ServerStats`), ``slots`` (:class:`MemberSlots`)
    and ``admit``, the check :class:`ServerThread` runs before reading any request body
    (``node.http.body_limit``): the signature headers as far as they go without the body, and the
    claimed signer's membership, so an unsigned or non-member body is refused unread.
    """
    app = FastAPI(title="veriloco artifact server", version="1",
                  description="Checkpoints, Merkle proofs, pseudo-gradients and global states of one host.")
    stats = ServerStats()
    nonces = NonceCache(window_s=2 * max_skew)
    slots = MemberSlots(max_requests_per_member)
    app.state.stats = stats
    app.state.slots = slots
    app.add_middleware(_Released, slots=slots)

    def admit(scope: dict[str, Any]) -> tuple[int, str, str] | None:
        path = str(scope.get("path", ""))[:100]
        address = claimed_address(scope, max_skew, prefix)
        if isinstance(address, AuthError):
            return 401, "auth", f"{path}: {address}"
        if not authorize(address):
            return 403, "not_member", f"{path}: {address} is not a bonded participant"
        return None

    app.state.admit = admit

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        # Whatever a request provokes, the answer is one line, never a traceback; a 400 because
        # only a malformed request gets here (the handlers refuse everything they anticipate).
        stats.reject("malformed", f"{request.url.path[:100]}: {type(exc).__name__}")
        return JSONResponse({"detail": "malformed request"}, status_code=400)

    async def signer(request: Request) -> str:
        body = await request.body()  # at most MAX_REQUEST_BYTES: node.http.body_limit refused more

        def bonded(address: str, where: str) -> None:
            if not authorize(address):
                stats.reject("not_member", f"{where}: {address} is not a bonded participant")
                raise HTTPException(403, f"{address} is not a bonded participant of this run")
            if not slots.take(request.scope, address):
                stats.reject("busy", f"{where}: {address} has {slots.limit} requests in progress")
                raise HTTPException(429, f"{slots.limit} requests of {address} are in progress; try again")

        return verified_signer(request, body, run_id, nonces, stats, bonded, max_skew, prefix)

    def unavailable(what: str, exc: ArtifactUnavailable) -> HTTPException:
        stats.reject("unavailable", f"{what}: {exc}")
        return HTTPException(404, str(exc))

    def reader_source(address: str) -> ArtifactSource:
        return source_for(address) if source_for is not None else source

    def blob(source: ArtifactSource, kind: BlobKind, read: Callable[[], bytes], key: int | str,
             leaf: int = 0) -> Response:
        # A file on disk is streamed in chunks (FileResponse), so serving a large model does not
        # hold it in memory; other sources (wrappers, tests) hand over bytes.
        path = source.file(kind, key, leaf)
        if path is not None:
            stats.served[kind] += 1
            return FileResponse(path, media_type="application/octet-stream")
        try:
            data = read()
        except ArtifactUnavailable as exc:
            raise unavailable(kind, exc) from None
        stats.served[kind] += 1
        return Response(content=data, media_type="application/octet-stream")

    @app.get("/v1/health", response_model=Health)
    def health() -> Health:
        return Health(run_id=run_id, host=host)

    @app.get("/v1/epochs/{epoch}/checkpoints/{leaf}", response_class=Response,
             responses={200: {"content": {"application/octet-stream": {}}}})
    def checkpoint(epoch: Epoch, leaf: Leaf, reader: str = Depends(signer)) -> Response:
        src = reader_source(reader)
        return blob(src, "checkpoint", lambda: src.checkpoint(epoch, leaf), epoch, leaf)

    def digests(src: ArtifactSource, epoch: int, leaf: int, what: str) -> LeafDigests:
        try:
            # Validated here too (an exception answers 400), so only a well-formed list leaves the server.
            answer = LeafDigests.model_validate(src.leaf_digests(epoch, leaf))
        except ArtifactUnavailable as exc:
            raise unavailable(what, exc) from None
        stats.served[what] += 1
        return answer

    def chunk(src: ArtifactSource, epoch: int, leaf: int, tensor: int, index: int, what: str) -> Response:
        try:
            data = src.leaf_chunk(epoch, leaf, tensor, index)
        except ArtifactUnavailable as exc:
            raise unavailable(what, exc) from None
        stats.served[what] += 1
        return Response(content=data, media_type="application/octet-stream")

    @app.get("/v1/epochs/{epoch}/checkpoints/{leaf}/digests", response_model=LeafDigests)
    def leaf_digests(epoch: Epoch, leaf: Leaf, reader: str = Depends(signer)) -> LeafDigests:
        return digests(reader_source(reader), epoch, leaf, "digests")

    @app.get("/v1/epochs/{epoch}/checkpoints/{leaf}/chunks/{tensor}/{index}", response_class=Response,
             responses={200: {"content": {"application/octet-stream": {}}}})
    def leaf_chunk(epoch: Epoch, leaf: Leaf, tensor: TensorIndex, index: ChunkIndex,
                   reader: str = Depends(signer)) -> Response:
        return chunk(reader_source(reader), epoch, leaf, tensor, index, "chunk")

    @app.get("/v1/epochs/{epoch}/proofs/{leaf}", response_model=MerkleProof)
    def proof(epoch: Epoch, leaf: Leaf, reader: str = Depends(signer)) -> MerkleProof:
        try:
            # The host's own artifacts: validated anyway, so only a well-formed proof leaves the server.
            answer = MerkleProof.model_validate(reader_source(reader).proof(epoch, leaf))
        except ArtifactUnavailable as exc:
            raise unavailable("proof", exc) from None
        stats.served["proof"] += 1
        return answer

    @app.get("/v1/epochs/{epoch}/delta", response_class=Response,
             responses={200: {"content": {"application/octet-stream": {}}}})
    def delta(epoch: Epoch, reader: str = Depends(signer)) -> Response:
        src = reader_source(reader)
        return blob(src, "delta", lambda: src.delta(epoch), epoch)

    @app.get("/v1/epochs/{epoch}/losses", response_model=LossesAnswer)
    def losses(epoch: Epoch, reader: str = Depends(signer)) -> LossesAnswer:
        try:
            answer = LossesAnswer.model_validate({"losses_micro": reader_source(reader).losses(epoch)})
        except ArtifactUnavailable as exc:
            raise unavailable("losses", exc) from None
        stats.served["losses"] += 1
        return answer

    @app.get("/v1/deltas/{delta_hash}", response_class=Response,
             responses={200: {"content": {"application/octet-stream": {}}}})
    def held_delta(delta_hash: ModelHash, _: str = Depends(signer)) -> Response:
        return blob(source, "held_delta", lambda: source.delta_by_hash(delta_hash), delta_hash)

    held_reads = HeldReads()

    def held(reader: str, epoch: int, root: str, what: str) -> ArtifactSource:
        if not held_reads.take(reader, epoch, root, what):
            stats.reject("busy", f"held {what} of epoch {epoch}: {reader} read it {held_reads.limit} times")
            # A definite answer (its reads are used up), not "try again": 429 would make the reader's
            # client retry until its budget is spent, which past a give-up height costs a verdict.
            raise HTTPException(403, f"{reader} already read held {what} {held_reads.limit} times")
        try:
            return reader_source(reader).held(epoch, root)
        except ArtifactUnavailable as exc:
            held_reads.give_back(reader, epoch, root, what)
            raise unavailable(f"held {what}", exc) from None

    @app.get("/v1/held/{epoch}/{checkpoint_root}/checkpoints/{leaf}", response_class=Response,
             responses={200: {"content": {"application/octet-stream": {}}}})
    def held_checkpoint(epoch: Epoch, checkpoint_root: ModelHash, leaf: Leaf,
                        reader: str = Depends(signer)) -> Response:
        src = held(reader, epoch, checkpoint_root, f"leaf {leaf}")
        try:
            return blob(src, "checkpoint", lambda: src.checkpoint(epoch, leaf), epoch, leaf)
        except HTTPException:  # not held (yet): the read is given back
            held_reads.give_back(reader, epoch, checkpoint_root, f"leaf {leaf}")
            raise

    @app.get("/v1/held/{epoch}/{checkpoint_root}/checkpoints/{leaf}/digests", response_model=LeafDigests)
    def held_digests(epoch: Epoch, checkpoint_root: ModelHash, leaf: Leaf,
                     reader: str = Depends(signer)) -> LeafDigests:
        what = f"digests {leaf}"
        src = held(reader, epoch, checkpoint_root, what)
        try:
            return digests(src, epoch, leaf, "held digests")
        except HTTPException:  # not held (yet): the read is given back
            held_reads.give_back(reader, epoch, checkpoint_root, what)
            raise

    @app.get("/v1/held/{epoch}/{checkpoint_root}/checkpoints/{leaf}/chunks/{tensor}/{index}",
             response_class=Response, responses={200: {"content": {"application/octet-stream": {}}}})
    def held_chunk(epoch: Epoch, checkpoint_root: ModelHash, leaf: Leaf, tensor: TensorIndex, index: ChunkIndex,
                   reader: str = Depends(signer)) -> Response:
        what = f"leaf {leaf} chunk {tensor}/{index}"
        src = held(reader, epoch, checkpoint_root, what)
        try:
            return chunk(src, epoch, leaf, tensor, index, "held chunk")
        except HTTPException:  # not held, or no such chunk: the read is given back
            held_reads.give_back(reader, epoch, checkpoint_root, what)
            raise

    @app.get("/v1/held/{epoch}/{checkpoint_root}/proofs/{leaf}", response_model=MerkleProof)
    def held_proof(epoch: Epoch, checkpoint_root: ModelHash, leaf: Leaf,
                   reader: str = Depends(signer)) -> MerkleProof:
        src = held(reader, epoch, checkpoint_root, f"proof {leaf}")
        try:
            answer = MerkleProof.model_validate(src.proof(epoch, leaf))
        except ArtifactUnavailable as exc:
            held_reads.give_back(reader, epoch, checkpoint_root, f"proof {leaf}")
            raise unavailable("held proof", exc) from None
        stats.served["held proof"] += 1
        return answer

    @app.get("/v1/held/{epoch}/{checkpoint_root}/losses", response_model=LossesAnswer)
    def held_losses(epoch: Epoch, checkpoint_root: ModelHash, reader: str = Depends(signer)) -> LossesAnswer:
        src = held(reader, epoch, checkpoint_root, "losses")
        try:
            answer = LossesAnswer.model_validate({"losses_micro": src.losses(epoch)})
        except ArtifactUnavailable as exc:
            held_reads.give_back(reader, epoch, checkpoint_root, "losses")
            raise unavailable("held losses", exc) from None
        stats.served["held losses"] += 1
        return answer

    @app.get("/v1/models/{model_hash}", response_class=Response,
             responses={200: {"content": {"application/octet-stream": {}}}})
    def model(model_hash: ModelHash, reader: str = Depends(signer)) -> Response:
        src = reader_source(reader)
        return blob(src, "model", lambda: src.global_state(model_hash), model_hash)

    return app


class _Released:
    """Starlette middleware form of :meth:`MemberSlots.middleware`."""

    def __init__(self, app: Any, slots: MemberSlots) -> None:
        self._app = slots.middleware(app)

    async def __call__(self, scope: dict[str, object], receive: Any, send: Any) -> None:
        await self._app(scope, receive, send)


class ServerThread:
    """Run an ASGI app with uvicorn in a background thread (a daemon serves while it trains), with
    every bound of ``node.http`` (connections, request heads, keep-alive, bodies).

    Args:
        app: the FastAPI app.
        host: interface to bind (127.0.0.1 unless the operator says otherwise).
        port: TCP port (0 picks a free one; see :attr:`port` after :meth:`start`).
        limits: the server's bounds.
    """

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0,
                 limits: ServerLimits | None = None) -> None:
        self.limits = limits or ServerLimits(max_body_bytes=MAX_REQUEST_BYTES)
        state = getattr(app, "state", None)
        stats = getattr(state, "stats", None)
        admit: Admission | None = getattr(state, "admit", None)
        self._config = server_config(app, host, port, self.limits,
                                     on_reject=stats.reject if isinstance(stats, ServerStats) else None, admit=admit)
        self._server = uvicorn.Server(self._config)
        self._thread = threading.Thread(target=self._server.run, name="artifact-server", daemon=True)
        self.host = host
        self.port = port
        _raise_fd_limit()

    def start(self, timeout: float = 10.0) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"artifact server did not start on {self.host}:{self.port}")
            time.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()



def _raise_fd_limit() -> None:
    """Lift the soft limit on open files to the hard limit: the connection cap, not the default
    1,024 descriptors, should decide how many connections the server holds."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        pass
