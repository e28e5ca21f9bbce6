"""A host's artifact server (FastAPI) and the HTTP client peers read it with.

The server exposes one :class:`~trainer.artifacts.ArtifactSource` over HTTP. Every request must be
signed by a participant's chain key (``protocol.auth``: timestamped, replay-protected, bound to
method, path, body and run) and the signer must be a bonded member (``authorize``, asked of the
chain). Rejections get a one-line JSON error and are counted in :class:`ServerStats`, so an
operator sees who tried what. Checkpoints, Δs and models that are files on disk
(:meth:`~trainer.artifacts.ArtifactSource.file`) are streamed from the file in chunks. Requests
carry no body; any body is refused before it is read past :data:`MAX_REQUEST_BYTES`.

The client, :class:`HttpArtifacts`, is an ``ArtifactSource`` too: validators and peer hosts cannot
tell it from a local store. It streams responses and stops reading at a size limit derived from
the run spec, so an oversized answer cannot exhaust its memory; anything the server does not
deliver is :class:`~trainer.artifacts.ArtifactUnavailable`. It never trusts the bytes: callers
check them against on-chain hashes.

Routes (all ``GET``; OpenAPI schema at ``/openapi.json``):

* ``/v1/health`` (unsigned) — run id and host address;
* ``/v1/epochs/{epoch}/checkpoints/{leaf}`` — safetensors bytes;
* ``/v1/epochs/{epoch}/proofs/{leaf}`` — a :class:`~protocol.merkle.MerkleProof`;
* ``/v1/epochs/{epoch}/delta`` — the quantized Δ (safetensors);
* ``/v1/epochs/{epoch}/losses`` — ``{"losses_micro": [...]}``;
* ``/v1/models/{model_hash}`` — a global state (safetensors).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

import httpx
import uvicorn
from fastapi import Depends, FastAPI, HTTPException, Path, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from pydantic import BaseModel

from protocol.auth import AuthError, NonceCache, sign_request, verify_request
from protocol.keys import DEFAULT_PREFIX, PrivateKey
from protocol.merkle import MerkleProof
from protocol.messages import MAX_SEGMENTS
from protocol.spec import RunSpec
from trainer.artifacts import ArtifactSource, ArtifactUnavailable, BlobKind
from trainer.checkpoint import checkpoint_layout
from trainer.delta import payload_layout
from trainer.model import parameter_shapes
from trainer.outer import global_layout
from trainer.tensorfile import expected_size

log = logging.getLogger("veriloco.server")

MAX_REQUEST_BYTES = 1024
# Safetensors header allowance on top of the tensor bytes (names, shapes, metadata).
HEADER_ALLOWANCE = 64 * 1024
MAX_JSON_BYTES = 16 * 1024 * 1024

Epoch = Annotated[int, Path(ge=0, le=2**31 - 1)]
Leaf = Annotated[int, Path(ge=0, le=MAX_SEGMENTS)]
ModelHash = Annotated[str, Path(pattern=r"^[0-9a-f]{64}$")]


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

    def reject(self, reason: str, detail: str) -> None:
        self.rejected[reason] += 1
        self.last_rejections = (self.last_rejections + [detail])[-100:]
        log.warning("rejected request: %s", detail)


def create_app(source: ArtifactSource, run_id: str, host: str, authorize: Callable[[str], bool],
               prefix: str = DEFAULT_PREFIX, max_skew: int = 60) -> FastAPI:
    """The artifact server of one host.

    Args:
        source: what to serve (the host's behaviour decides, e.g. an adversary withholds).
        run_id: the run id (hex); requests signed for another run are refused.
        host: the serving host's address (reported by ``/v1/health``).
        authorize: whether an address may read (a bonded participant of the run).
        prefix: the chain's bech32 prefix.
        max_skew: accepted clock difference in seconds.
    """
    app = FastAPI(title="veriloco artifact server", version="1",
                  description="Checkpoints, Merkle proofs, pseudo-gradients and global states of one host.")
    stats = ServerStats()
    nonces = NonceCache(window_s=2 * max_skew)
    app.state.stats = stats

    @app.middleware("http")
    async def limit_body(request: Request, call_next):  # type: ignore[no-untyped-def]
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > MAX_REQUEST_BYTES):
            stats.reject("oversized", f"{request.url.path}: request body of {declared} bytes")
            return JSONResponse({"detail": f"request body larger than {MAX_REQUEST_BYTES} bytes"}, status_code=413)
        return await call_next(request)

    async def signer(request: Request) -> str:
        body = await request.body()
        if len(body) > MAX_REQUEST_BYTES:
            stats.reject("oversized", f"{request.url.path}: request body of {len(body)} bytes")
            raise HTTPException(413, f"request body larger than {MAX_REQUEST_BYTES} bytes")
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        try:
            address = verify_request(request.headers, request.method, path, run_id, body, nonces,
                                     max_skew=max_skew, prefix=prefix)
        except AuthError as exc:
            stats.reject("auth", f"{path}: {exc}")
            raise HTTPException(401, str(exc)) from None
        if not authorize(address):
            stats.reject("not_member", f"{path}: {address} is not a bonded participant")
            raise HTTPException(403, f"{address} is not a bonded participant of this run")
        return address

    def unavailable(what: str, exc: ArtifactUnavailable) -> HTTPException:
        stats.reject("unavailable", f"{what}: {exc}")
        return HTTPException(404, str(exc))

    def blob(kind: BlobKind, read: Callable[[], bytes], key: int | str, leaf: int = 0) -> Response:
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
    def checkpoint(epoch: Epoch, leaf: Leaf, _: str = Depends(signer)) -> Response:
        return blob("checkpoint", lambda: source.checkpoint(epoch, leaf), epoch, leaf)

    @app.get("/v1/epochs/{epoch}/proofs/{leaf}", response_model=MerkleProof)
    def proof(epoch: Epoch, leaf: Leaf, _: str = Depends(signer)) -> MerkleProof:
        try:
            answer = source.proof(epoch, leaf)
        except ArtifactUnavailable as exc:
            raise unavailable("proof", exc) from None
        stats.served["proof"] += 1
        return answer

    @app.get("/v1/epochs/{epoch}/delta", response_class=Response,
             responses={200: {"content": {"application/octet-stream": {}}}})
    def delta(epoch: Epoch, _: str = Depends(signer)) -> Response:
        return blob("delta", lambda: source.delta(epoch), epoch)

    @app.get("/v1/epochs/{epoch}/losses", response_model=LossesAnswer)
    def losses(epoch: Epoch, _: str = Depends(signer)) -> LossesAnswer:
        try:
            answer = LossesAnswer(losses_micro=source.losses(epoch))
        except ArtifactUnavailable as exc:
            raise unavailable("losses", exc) from None
        stats.served["losses"] += 1
        return answer

    @app.get("/v1/models/{model_hash}", response_class=Response,
             responses={200: {"content": {"application/octet-stream": {}}}})
    def model(model_hash: ModelHash, _: str = Depends(signer)) -> Response:
        return blob("model", lambda: source.global_state(model_hash), model_hash)

    return app


def artifact_limits(spec: RunSpec) -> dict[str, int]:
    """The most bytes each kind of answer may have under ``spec`` (exact tensor bytes plus a header)."""
    shapes = parameter_shapes(spec)
    return {
        "checkpoint": max(expected_size(checkpoint_layout(spec, leaf)) for leaf in (0, 1)) + HEADER_ALLOWANCE,
        "delta": expected_size(payload_layout(shapes, spec.quantization)) + HEADER_ALLOWANCE,
        "model": expected_size(global_layout(spec)) + HEADER_ALLOWANCE,
        "json": MAX_JSON_BYTES,
    }


class HttpArtifacts(ArtifactSource):
    """Another host's artifacts over HTTP, with signed requests and bounded, streamed responses.

    Args:
        endpoint: the host's advertised base URL (``http://127.0.0.1:8101``).
        key: the reader's chain key (signs every request).
        spec: the run spec (run id and size limits).
        timeout: seconds per request.
        prefix: the chain's bech32 prefix.
    """

    def __init__(self, endpoint: str, key: PrivateKey, spec: RunSpec, timeout: float = 30.0,
                 prefix: str = DEFAULT_PREFIX) -> None:
        self.endpoint = endpoint.rstrip("/")
        self._key = key
        self._run_id = spec.run_id().hex()
        self._limits = artifact_limits(spec)
        self._prefix = prefix
        self._client = httpx.Client(timeout=timeout)

    def close(self) -> None:
        self._client.close()

    def _get(self, path: str, kind: str) -> bytes:
        headers = sign_request(self._key, "GET", path, self._run_id, prefix=self._prefix)
        limit = self._limits[kind]
        try:
            with self._client.stream("GET", self.endpoint + path, headers=headers) as response:
                if response.status_code != 200:
                    detail = response.read()[:500].decode(errors="replace")
                    raise ArtifactUnavailable(f"{self.endpoint}{path}: HTTP {response.status_code} {detail}")
                declared = response.headers.get("content-length")
                if declared is not None and declared.isdigit() and int(declared) > limit:
                    raise ArtifactUnavailable(f"{self.endpoint}{path}: {declared} bytes exceeds the limit {limit}")
                chunks, total = [], 0
                for chunk in response.iter_bytes():
                    total += len(chunk)
                    if total > limit:
                        raise ArtifactUnavailable(f"{self.endpoint}{path}: more than {limit} bytes")
                    chunks.append(chunk)
                return b"".join(chunks)
        except httpx.HTTPError as exc:
            raise ArtifactUnavailable(f"{self.endpoint}{path}: {type(exc).__name__}: {exc}") from None

    def _json(self, path: str) -> Any:
        # What the host sent, decoded no further than JSON (raw bytes if not even that): the reader
        # validates it, so a host that serves garbage is caught failing, not excused as unavailable.
        data = self._get(path, "json")
        try:
            return json.loads(data)
        except (ValueError, UnicodeDecodeError):
            return data

    def checkpoint(self, epoch: int, leaf: int) -> bytes:
        return self._get(f"/v1/epochs/{epoch}/checkpoints/{leaf}", "checkpoint")

    def proof(self, epoch: int, leaf: int) -> Any:
        """The host's proof as served (untrusted; ``verifier.replay`` validates it)."""
        return self._json(f"/v1/epochs/{epoch}/proofs/{leaf}")

    def delta(self, epoch: int) -> bytes:
        return self._get(f"/v1/epochs/{epoch}/delta", "delta")

    def losses(self, epoch: int) -> Any:
        """The host's loss list as served (untrusted; ``verifier.replay`` validates it)."""
        answer = self._json(f"/v1/epochs/{epoch}/losses")
        return answer.get("losses_micro", answer) if isinstance(answer, dict) else answer

    def global_state(self, model_hash: str) -> bytes:
        return self._get(f"/v1/models/{model_hash}", "model")


class ServerThread:
    """Run an ASGI app with uvicorn in a background thread (a daemon serves while it trains).

    Args:
        app: the FastAPI app.
        host: interface to bind (127.0.0.1 unless the operator says otherwise).
        port: TCP port (0 picks a free one; see :attr:`port` after :meth:`start`).
    """

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0) -> None:
        self._config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
        self._server = uvicorn.Server(self._config)
        self._thread = threading.Thread(target=self._server.run, name="artifact-server", daemon=True)
        self.host = host
        self.port = port

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

