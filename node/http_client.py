"""The HTTP client peers read a host's artifacts with: :class:`HttpArtifacts`.

It is an :class:`~trainer.artifacts.ArtifactSource` too, so validators and peer hosts cannot tell it
from a local store. It signs every request with the reader's chain key (``protocol.auth``), streams
responses and stops reading at a size limit derived from the run spec, so an oversized answer
cannot exhaust its memory; anything the server does not deliver is
:class:`~trainer.artifacts.ArtifactUnavailable`. It never trusts the bytes: callers check them
against on-chain hashes.
"""

from __future__ import annotations

import json
from typing import cast

import httpx

from protocol.auth import sign_request
from protocol.keys import DEFAULT_PREFIX, PrivateKey
from protocol.rules.spec import RunSpec
from trainer.artifacts import ArtifactSource, ArtifactUnavailable, UntrustedJson
from trainer.checkpoint import checkpoint_layout
from trainer.delta import payload_layout
from trainer.model import parameter_shapes
from trainer.outer import global_layout
from trainer.tensorfile import expected_size

# Safetensors header allowance on top of the tensor bytes (names, shapes, metadata).
HEADER_ALLOWANCE = 64 * 1024
MAX_JSON_BYTES = 16 * 1024 * 1024


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

    def _json(self, path: str) -> UntrustedJson:
        # What the host sent, decoded no further than JSON (raw bytes if not even that): the reader
        # validates it, so a host that serves garbage is caught failing, not excused as unavailable.
        data = self._get(path, "json")
        try:
            decoded: UntrustedJson = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            return data
        return decoded

    def checkpoint(self, epoch: int, leaf: int) -> bytes:
        return self._get(f"/v1/epochs/{epoch}/checkpoints/{leaf}", "checkpoint")

    def proof(self, epoch: int, leaf: int) -> UntrustedJson:
        """The host's proof as served (untrusted; ``verifier.replay`` validates it)."""
        return self._json(f"/v1/epochs/{epoch}/proofs/{leaf}")

    def delta(self, epoch: int) -> bytes:
        return self._get(f"/v1/epochs/{epoch}/delta", "delta")

    def losses(self, epoch: int) -> UntrustedJson:
        """The host's loss list as served (untrusted; ``verifier.replay`` validates it)."""
        answer = self._json(f"/v1/epochs/{epoch}/losses")
        if isinstance(answer, dict):  # a member of decoded JSON is itself decoded JSON
            return cast(UntrustedJson, answer.get("losses_micro", answer))
        return answer

    def global_state(self, model_hash: str) -> bytes:
        return self._get(f"/v1/models/{model_hash}", "model")
