"""The HTTP client peers read a host's artifacts with: :class:`HttpArtifacts`.

It is an :class:`~trainer.artifacts.ArtifactSource` too, so validators and peer hosts cannot tell it
from a local store. Every request goes through the project's one hardened HTTP layer
(:class:`node.http.SafeClient`: an overall deadline that grows with the kind's byte cap, byte caps
on every body enforced while streaming, identity encoding only, no redirects), is signed with the
reader's chain key (``protocol.auth``) and is retried with backoff while the failure may heal (a
host restarting, a timeout, a 5xx) within a per-artifact budget. Byte caps come from the run spec (exact tensor bytes
plus a header allowance); JSON answers are checked for size and nesting depth before parsing. The
endpoint is checked (``protocol.rules.endpoints``) before anything is dialed. Anything the server
does not deliver is :class:`~trainer.artifacts.ArtifactUnavailable`. It never trusts the bytes:
callers check them against on-chain hashes. Leaves, Δs and global states are handed over as the
body arrives (:meth:`HttpArtifacts.chunks`), so the streaming readers hash and decode them without
the body ever being gathered here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import cast

from node.http import Body, ClientLimits, HttpFailure, SafeClient, parse_json, resolve, resumed_body
from protocol.auth import sign_request
from protocol.keys import DEFAULT_PREFIX, PrivateKey
from protocol.rules.endpoints import EndpointError, check_endpoint
from protocol.rules.spec import RunSpec
from protocol.tensors.digest import CHUNK_BYTES as LEAF_CHUNK_BYTES
from trainer.artifacts import ArtifactSource, ArtifactUnavailable, UntrustedJson
from trainer.checkpoint import checkpoint_layout
from trainer.delta import payload_layout
from trainer.leaf_digests import digests_json_bytes
from trainer.model import parameter_shapes
from trainer.outer import global_layout
from trainer.tensorfile import expected_size

# Safetensors header allowance on top of the tensor bytes (names, shapes, metadata).
HEADER_ALLOWANCE = 64 * 1024
# A Merkle proof of at most MAX_SEGMENTS + 1 leaves is a few hundred bytes; losses are one
# integer of at most 20 digits per inner step.
MIN_JSON_BYTES = 64 * 1024
RETRY_BUDGET_S = 20.0
"""How long one artifact is retried (with backoff) while its failures may heal, on top of the time
its kind's largest answer takes at ``ClientLimits.min_rate`` (see :meth:`HttpArtifacts.chunks`); a
validator keeps retrying a challenge on later ticks until its phase deadline is near
(``node.validator``)."""


def artifact_limits(spec: RunSpec, epoch: int | None = None) -> dict[str, int]:
    """The most bytes each kind of answer may have under ``spec`` (exact tensor bytes plus a header).

    With a ``quantization.schedule`` the Δ and leaf caps follow ``epoch``'s scheme when the caller
    names the epoch (a Δ or leaf of that epoch), else the largest over the schedule's schemes (a Δ
    fetched by hash alone names no epoch); the reader then checks the exact layout."""
    shapes = parameter_shapes(spec)
    epochs = [0, *(step.from_epoch for step in spec.quantization.schedule)] if epoch is None else [epoch]
    schemes = [spec.for_epoch(e) for e in epochs]
    return {
        "checkpoint": max(expected_size(checkpoint_layout(s, leaf)) for s in schemes
                          for leaf in (0, 1, spec.train.segments)) + HEADER_ALLOWANCE,
        "delta": max(expected_size(payload_layout(shapes, s.quantization)) for s in schemes) + HEADER_ALLOWANCE,
        "model": expected_size(global_layout(spec)) + HEADER_ALLOWANCE,
        "json": max(MIN_JSON_BYTES, spec.train.inner_steps * 24 + 1024),
        "digests": max(digests_json_bytes(checkpoint_layout(s, leaf)) for s in schemes
                       for leaf in (0, 1, spec.train.segments)),
        "chunk": LEAF_CHUNK_BYTES,
    }


class HttpArtifacts(ArtifactSource):
    """Another host's artifacts over HTTP, with signed requests and bounded, streamed responses.

    Args:
        endpoint: the host's advertised base URL (``http://127.0.0.1:8101``).
        key: the reader's chain key (signs every request).
        spec: the run spec (run id and size limits).
        limits: time bounds of one request (``node.http.ClientLimits``).
        prefix: the chain's bech32 prefix.
        allow_private: whether endpoints on loopback and private networks may be dialed (local
            runs, or an operator who allows them).
        retry_budget_s: how long one artifact is retried while its failures may heal, on top of
            the time its kind's largest answer takes at ``limits.min_rate``.

    Raises:
        ArtifactUnavailable: the endpoint is malformed or not allowed (nothing is dialed).
    """

    def __init__(self, endpoint: str, key: PrivateKey, spec: RunSpec, limits: ClientLimits | None = None,
                 prefix: str = DEFAULT_PREFIX, allow_private: bool = False,
                 retry_budget_s: float = RETRY_BUDGET_S) -> None:
        try:
            self.endpoint = check_endpoint(endpoint, allow_private, resolve)
        except EndpointError as exc:
            raise ArtifactUnavailable(f"endpoint {str(endpoint)[:100]!r} refused: {exc}") from None
        self._key = key
        self._run_id = spec.run_id().hex()
        self._spec = spec
        self._limits = artifact_limits(spec)
        # Per-epoch caps, only where a schedule makes them differ (kept for the epochs asked for).
        self._by_epoch: dict[int, dict[str, int]] = {}
        self._by_epoch_lock = threading.Lock()
        self._prefix = prefix
        self._budget = retry_budget_s
        self._client = SafeClient(limits)

    def close(self) -> None:
        self._client.close()

    def limits_at(self, epoch: int | None) -> dict[str, int]:
        """The caps of an answer about ``epoch`` (its scheme's under a ``quantization.schedule``), or
        the run's largest when the epoch is not known (None)."""
        if epoch is None or not self._spec.quantization.schedule:
            return self._limits
        limits = self._by_epoch.get(epoch)
        if limits is None:
            limits = artifact_limits(self._spec, epoch)
            # The validator's fetch threads and its tick share one reader per endpoint.
            with self._by_epoch_lock:
                while len(self._by_epoch) >= 64:  # a long-lived reader: keep the few recent epochs
                    self._by_epoch.pop(next(iter(self._by_epoch)))
                self._by_epoch[epoch] = limits
        return limits

    def chunks(self, path: str, kind: str, epoch: int | None = None) -> Body:
        """One answer as it arrives, chunk by chunk, under the cap of ``kind`` (``checkpoint``,
        ``delta``, ``model`` or ``json``; of ``epoch``'s scheme when given, :meth:`limits_at`:
        a Δ or leaf larger than its epoch's layout is refused at its ``Content-Length``, before
        its body is read): what the streaming readers (``trainer.tensorstream``)
        pull, so a remote leaf, Δ or global state is checked, hashed and decoded as its bytes
        arrive and never held whole here.

        Nothing is dialed until the first ``next()``; closing the iterator closes the connection.
        Each request has the deadline of the kind's cap (``ClientLimits.request_deadline_s``).
        Failures that may heal are retried within the retry budget; a retry after part of the
        body resumes it (:func:`node.http.resumed_body`): the reader sees one continuous body.

        Raises (while iterating):
            ArtifactUnavailable: not delivered within the caps and the retry budget.
        """
        limit = self.limits_at(epoch)[kind]

        def attempt() -> Body:
            headers = sign_request(self._key, "GET", path, self._run_id, prefix=self._prefix)
            return self._client.body(self.endpoint + path, headers, limit)

        # The budget bounds when a new try may start (a try under way runs to its own deadline).
        # A resumed try asks for the whole body again and skips what was handed over, so a body
        # that breaks late must still be allowed a new try then: the budget counts from the
        # start and adds the time the largest answer takes at min_rate, else a large body (a
        # gpt124m leaf: 122 s at 100 Mbit/s) could never be resumed after its first 20 s. A host
        # holds the reader at most retry_budget_s + transfer_s + request_deadline_s per answer.
        budget = self._budget + self._client.limits.transfer_s(limit)
        body = resumed_body(attempt, time.monotonic() + budget)
        try:
            yield from body
        except HttpFailure as exc:
            raise ArtifactUnavailable(str(exc)) from None
        finally:
            body.close()

    def _get(self, path: str, kind: str, epoch: int | None = None) -> bytes:
        return b"".join(self.chunks(path, kind, epoch))

    def _json(self, path: str, kind: str = "json") -> UntrustedJson:
        # What the host sent, decoded no further than JSON (raw bytes if not even that, or if too
        # deep to parse safely): the reader validates it, so a host that serves garbage is caught
        # failing, not excused as unavailable.
        data = self._get(path, kind)
        try:
            decoded: UntrustedJson = parse_json(data, self._limits[kind])
        except (ValueError, UnicodeDecodeError):
            return data
        return decoded

    def checkpoint(self, epoch: int, leaf: int) -> bytes:
        return self._get(f"/v1/epochs/{epoch}/checkpoints/{leaf}", "checkpoint", epoch)

    def checkpoint_chunks(self, epoch: int, leaf: int) -> Iterator[bytes]:
        return self.chunks(f"/v1/epochs/{epoch}/checkpoints/{leaf}", "checkpoint", epoch)

    def delta_chunks(self, epoch: int) -> Iterator[bytes]:
        return self.chunks(f"/v1/epochs/{epoch}/delta", "delta", epoch)

    def global_state_chunks(self, model_hash: str) -> Iterator[bytes]:
        return self.chunks(f"/v1/models/{model_hash}", "model")

    def delta_by_hash_chunks(self, delta_hash: str, epoch: int | None = None) -> Iterator[bytes]:
        return self.chunks(f"/v1/deltas/{delta_hash}", "delta", epoch)

    def leaf_digests(self, epoch: int, leaf: int) -> UntrustedJson:
        """The leaf's chunk digests as served (untrusted; ``verifier.replay`` checks them against the root)."""
        return self._json(f"/v1/epochs/{epoch}/checkpoints/{leaf}/digests", "digests")

    def leaf_chunk(self, epoch: int, leaf: int, tensor: int, chunk: int) -> bytes:
        return self._get(f"/v1/epochs/{epoch}/checkpoints/{leaf}/chunks/{int(tensor)}/{int(chunk)}", "chunk")

    def proof(self, epoch: int, leaf: int) -> UntrustedJson:
        """The host's proof as served (untrusted; ``verifier.replay`` validates it)."""
        return self._json(f"/v1/epochs/{epoch}/proofs/{leaf}")

    def delta(self, epoch: int) -> bytes:
        return self._get(f"/v1/epochs/{epoch}/delta", "delta", epoch)

    def losses(self, epoch: int) -> UntrustedJson:
        """The host's loss list as served (untrusted; ``verifier.replay`` validates it)."""
        answer = self._json(f"/v1/epochs/{epoch}/losses")
        if isinstance(answer, dict):  # a member of decoded JSON is itself decoded JSON
            return cast(UntrustedJson, answer.get("losses_micro", answer))
        return answer

    def global_state(self, model_hash: str) -> bytes:
        return self._get(f"/v1/models/{model_hash}", "model")

    def delta_by_hash(self, delta_hash: str) -> bytes:
        return self._get(f"/v1/deltas/{delta_hash}", "delta")

    def held(self, epoch: int, checkpoint_root: str) -> ArtifactSource:
        """The challenge artifacts of a host's ``epoch`` this server's validator kept, named by the
        host's committed root (``node.leaf_holding``; untrusted like any answer)."""
        if len(checkpoint_root) != 64 or any(c not in "0123456789abcdef" for c in checkpoint_root):
            raise ArtifactUnavailable("a checkpoint root is 64 lowercase hex characters")
        return _HeldOver(self, f"/v1/held/{int(epoch)}/{checkpoint_root}", epoch)


class _HeldOver(ArtifactSource):
    """What :meth:`HttpArtifacts.held` reads: one host epoch's kept leaves, proofs and losses on a
    holder's server, through that holder's client."""

    def __init__(self, client: HttpArtifacts, prefix: str, epoch: int) -> None:
        self._client, self._prefix, self._epoch = client, prefix, epoch

    def _at(self, epoch: int, rest: str) -> str:
        if epoch != self._epoch:
            raise ArtifactUnavailable(f"these held leaves are of epoch {self._epoch}, not {epoch}")
        return self._prefix + rest

    def checkpoint(self, epoch: int, leaf: int) -> bytes:
        return self._client._get(self._at(epoch, f"/checkpoints/{leaf}"), "checkpoint", epoch)

    def checkpoint_chunks(self, epoch: int, leaf: int) -> Iterator[bytes]:
        return self._client.chunks(self._at(epoch, f"/checkpoints/{leaf}"), "checkpoint", epoch)

    def leaf_digests(self, epoch: int, leaf: int) -> UntrustedJson:
        return self._client._json(self._at(epoch, f"/checkpoints/{leaf}/digests"), "digests")

    def leaf_chunk(self, epoch: int, leaf: int, tensor: int, chunk: int) -> bytes:
        return self._client._get(self._at(epoch, f"/checkpoints/{leaf}/chunks/{int(tensor)}/{int(chunk)}"), "chunk")

    def proof(self, epoch: int, leaf: int) -> UntrustedJson:
        return self._client._json(self._at(epoch, f"/proofs/{leaf}"))

    def losses(self, epoch: int) -> UntrustedJson:
        answer = self._client._json(self._at(epoch, "/losses"))
        if isinstance(answer, dict):
            return cast(UntrustedJson, answer.get("losses_micro", answer))
        return answer

    def delta(self, epoch: int) -> bytes:
        raise ArtifactUnavailable("a held Δ is read by its hash (delta_by_hash)")

    def global_state(self, model_hash: str) -> bytes:
        raise ArtifactUnavailable("held leaves hold no global state")
