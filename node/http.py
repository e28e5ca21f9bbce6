"""The one HTTP layer of veriloco: every client request and every server the project runs goes here.

A peer is an adversary until its bytes check out, so both sides are bounded in time, bytes and
state, whatever the other end does (``docs/network.md`` has the threat list and the design).

Client (:class:`SafeClient`):

* an **overall deadline** per request that grows with the most bytes its answer may have
  (:meth:`ClientLimits.request_deadline_s`: ``deadline_s + max_bytes / min_rate``): a watchdog
  shuts the socket down when it passes, so a peer that drips its status line, headers or body one
  byte at a time cannot hold the reader longer, while an honest peer sending a large artifact at
  ``min_rate`` or faster is not cut (each silence is also bounded by the read timeout);
* **byte caps** on every body, error bodies included, enforced while streaming (a declared
  ``Content-Length`` over the cap is refused before reading); a body is read chunk by chunk as
  the reader pulls it (:meth:`SafeClient.body`, or pushed to a callback by
  :meth:`SafeClient.stream`), so a streaming reader never holds it whole;
* **identity encoding only**: it asks for ``Accept-Encoding: identity``, reads raw bytes (nothing
  is ever inflated) and refuses any answer with a ``Content-Encoding``, so a compression bomb
  costs its compressed size;
* **JSON size and depth limits** checked on the raw bytes before parsing (:func:`parse_json`), so
  deeply nested JSON is refused instead of raising ``RecursionError``;
* **retries with backoff** (:func:`retry_until`) on what may heal (refused connections, timeouts,
  5xx, 429), never on a definite answer (404, caps exceeded, a refused encoding); a body that
  fails part-way is resumed by asking again and skipping what was handed over
  (:func:`resumed_body`), so a reader decoding as bytes arrive never restarts;
* no redirects, no proxies from the environment, and a fresh connection per request (so the
  watchdog always owns the socket).

Server (:func:`server_config`, :class:`GuardedH11Protocol`, :func:`body_limit`): uvicorn/h11's own
settings where they exist (``timeout_keep_alive``, ``limit_concurrency``,
``h11_max_incomplete_event_size``), plus a deadline on every stage of a connection's life (its
request head within ``header_timeout_s``, its whole request body within ``body_timeout_s`` of the
head, a response its reader stopped reading closed after ``response_stall_s``), a connection cap
that evicts a waiting connection (a head or a body still to come, or a stalled reader) of the peer
address holding the most of them, so a flood of half-open or slow-body connections cannot lock
honest readers out, request bodies refused before reading when declared too large, chunked, or
refused by the server's admission check (unsigned, not a member), and a bounded read of what
remains.

Endpoints a reader dials are checked first by :func:`protocol.rules.endpoints.check_endpoint`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from protocol.errors import VerilocoError

log = logging.getLogger("veriloco.http")

T = TypeVar("T")


class HttpFailure(VerilocoError):
    """A request that did not deliver a usable answer.

    Attributes:
        retryable: whether trying again later may succeed (refused connection, timeout, 5xx, 429);
            a definite answer (404, a cap exceeded, a refused encoding) is not.
        status: the HTTP status, when an answer arrived.
    """

    def __init__(self, message: str, retryable: bool, status: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status


# -- JSON --------------------------------------------------------------------------------------

MAX_JSON_DEPTH = 16
"""Deepest nesting of arrays and objects a peer's JSON may have (a Merkle proof needs 2)."""

_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def json_depth(data: bytes) -> int:
    """The deepest nesting of ``[`` / ``{`` in JSON text, counted without parsing it (strings are
    skipped, so brackets inside them do not count). Linear in the size and done in C but for
    the brackets themselves."""
    brackets = _STRINGS.sub(b"", data).translate(None, _NOT_BRACKETS)
    depth = deepest = 0
    for b in brackets:
        if b in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def parse_json(data: bytes, max_bytes: int, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse a peer's JSON after checking its size and nesting depth.

    Raises:
        ValueError: too large, too deep, or not JSON (the caller decides what that means).
    """
    if len(data) > max_bytes:
        raise ValueError(f"JSON of {len(data)} bytes exceeds {max_bytes}")
    depth = json_depth(data)
    if depth > max_depth:
        raise ValueError(f"JSON nested {depth} deep exceeds {max_depth}")
    return json.loads(data)


# -- client ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ClientLimits:
    """Time and byte bounds of one client request.

    A request's overall deadline grows with the most bytes its answer may have
    (:meth:`request_deadline_s`): a fixed one would judge an honest host unavailable whenever its
    largest artifact takes longer than that to arrive (a ``gpt124m`` leaf is 1.52 GB: two minutes
    at 100 Mbit/s), and an unbounded one would let a slow-drip host hold a reader forever.

    Args:
        connect_s: longest TCP (and TLS) connect.
        read_s: longest silence between two reads.
        deadline_s: longest whole request, connect to last byte, for an empty answer: the fixed
            part of every request's deadline (connect, the head, a slow start, the reader's own
            time), on top of the transfer time at ``min_rate``.
        min_rate: bytes per second an honest peer must sustain to each reader; an answer of at
            most ``max_bytes`` gets ``max_bytes / min_rate`` more seconds.
        error_body_bytes: most bytes read of a non-200 answer (kept for the error message).

    Raises:
        ValueError: ``min_rate`` is not positive.
    """

    connect_s: float = 5.0
    read_s: float = 10.0
    deadline_s: float = 60.0
    # 12.5 MB/s = 100 Mbit/s per reader: a tenth of the 1 Gbit/s links docs/scaling.md assumes, so
    # a host serving 6 challenged-leaf readers at once on such a link (~20 MB/s each; a host has
    # about P·k + 1 challenges, P its pickers, each read once by seats in turn)
    # is well above it, and n - 1 peers reading a Δ at once fit in the fixed deadline_s besides.
    # Lower would let a slow-drip host hold a reader longer (deadline_s + max_bytes / min_rate per
    # request: 182 s for a gpt124m leaf at this rate, 364 s at half of it).
    min_rate: float = 12.5e6
    error_body_bytes: int = 4096

    def __post_init__(self) -> None:
        if not self.min_rate > 0:
            raise ValueError(f"min_rate must be positive, not {self.min_rate}")

    def transfer_s(self, max_bytes: int) -> float:
        """Seconds ``max_bytes`` take at ``min_rate``: what a request's deadline, and a resumed
        body's retry budget (``node.http_client``), add for an answer that may be that large."""
        return max_bytes / self.min_rate

    def request_deadline_s(self, max_bytes: int) -> float:
        """The longest whole request whose answer may have ``max_bytes``, connect to last byte:
        ``deadline_s + max_bytes / min_rate``.

        Args:
            max_bytes: the most body bytes the request accepts (its cap).
        """
        return self.deadline_s + self.transfer_s(max_bytes)


class SafeClient:
    """An HTTP client that no peer can hold, bloat or crash (see the module docstring).

    Args:
        limits: time and byte bounds per request.
    """

    def __init__(self, limits: ClientLimits | None = None) -> None:
        self.limits = limits or ClientLimits()
        self._client = httpx.Client(
            follow_redirects=False, trust_env=False,
            headers={"Accept-Encoding": "identity"},
            # No keep-alive: every request opens its own connection, so the watchdog below always
            # knows the socket to shut down.
            limits=httpx.Limits(max_connections=8, max_keepalive_connections=0))

    def close(self) -> None:
        self._client.close()

    @contextmanager
    def _watchdog(self, deadline: float) -> Iterator[dict[str, Any]]:
        sockets: list[socket.socket] = []
        fired = threading.Event()

        def trace(event: str, info: dict[str, Any]) -> None:
            if event == "connection.connect_tcp.complete" and info.get("return_value") is not None:
                sock = info["return_value"].get_extra_info("socket")
                if sock is not None:
                    sockets.append(sock)

        def fire() -> None:
            fired.set()
            for sock in sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)  # wakes a blocked read at once

        timer = threading.Timer(max(0.0, deadline - time.monotonic()), fire)
        timer.daemon = True
        timer.start()
        try:
            yield {"trace": trace, "fired": fired}
        finally:
            timer.cancel()

    def body(self, url: str, headers: dict[str, str], max_bytes: int,
             deadline: float | None = None, method: str = "GET",
             content: bytes | None = None) -> Generator[bytes, None, None]:
        """GET ``url`` and yield the body chunk by chunk as it arrives (a pull iterator: the reader
        decides when the next chunk is read, and nothing is held but the chunk it is handed).

        Nothing is dialed until the first ``next()``; the connection closes when the body ends, on
        any failure, or when the iterator is closed (``close()``, or dropped): a reader that stops
        early holds nothing. Every bound of :meth:`stream` applies, and the overall deadline counts
        the reader's own time between chunks too.

        Args:
            url: the full URL (already checked by the caller).
            headers: request headers (signatures).
            max_bytes: most body bytes accepted; more is a definite failure.
            deadline: ``time.monotonic()`` by which the request must be over (default: now +
                ``limits.request_deadline_s(max_bytes)``; the earlier of the two otherwise), fixed
                at the first ``next()``.
            method: the HTTP method (``PUT`` with ``content``: a standby's secret, ``node.standby_handover``).
            content: the request body (small: it is sent at once).

        Raises (while iterating):
            HttpFailure: with ``retryable`` telling whether trying later may help.
        """
        lim = self.limits
        end = time.monotonic() + lim.request_deadline_s(max_bytes)
        end = min(end, deadline) if deadline is not None else end
        remaining = end - time.monotonic()
        if remaining <= 0:
            raise HttpFailure(f"{url}: no time left before the deadline", retryable=False)
        timeout = httpx.Timeout(connect=min(lim.connect_s, remaining), read=min(lim.read_s, remaining),
                                write=min(lim.read_s, remaining), pool=min(lim.connect_s, remaining))
        with self._watchdog(end) as dog:
            try:
                with self._client.stream(method, url, headers=headers, content=content, timeout=timeout,
                                         extensions={"trace": dog["trace"]}) as response:
                    yield from self._read(url, response, max_bytes, end)
            except httpx.HTTPError as exc:
                if dog["fired"].is_set():
                    raise HttpFailure(f"{url}: deadline passed ({type(exc).__name__})", retryable=True) from None
                raise HttpFailure(f"{url}: {type(exc).__name__}: {exc}", retryable=True) from None

    def stream(self, url: str, headers: dict[str, str], max_bytes: int, consume: Callable[[bytes], None],
               deadline: float | None = None) -> int:
        """GET ``url`` and hand the body to ``consume`` chunk by chunk; return the byte count
        (:meth:`body` pushed to a callback).

        Args:
            url: the full URL (already checked by the caller).
            headers: request headers (signatures).
            max_bytes: most body bytes accepted; more is a definite failure.
            consume: called with each chunk as it arrives (it may raise to stop reading).
            deadline: as for :meth:`body`.

        Raises:
            HttpFailure: with ``retryable`` telling whether trying later may help.
        """
        total = 0
        with contextlib.closing(self.body(url, headers, max_bytes, deadline)) as chunks:
            for chunk in chunks:
                total += len(chunk)
                consume(chunk)
        return total

    def _read(self, url: str, response: httpx.Response, max_bytes: int, end: float) -> Iterator[bytes]:
        status = response.status_code
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise HttpFailure(f"{url}: refused Content-Encoding {encoding[:40]!r} (identity only)",
                              retryable=False, status=status)
        if status != 200:
            detail = bytearray()
            for chunk in response.iter_raw():  # an error body is read up to a few KiB, never whole
                detail += chunk[: self.limits.error_body_bytes - len(detail)]
                if len(detail) >= self.limits.error_body_bytes or time.monotonic() > end:
                    break
            text = bytes(detail[:300]).decode(errors="replace")
            retry = status >= 500 or status in (408, 425, 429)
            raise HttpFailure(f"{url}: HTTP {status} {text}", retryable=retry, status=status)
        declared = response.headers.get("content-length")
        if declared is not None and (not declared.isascii() or not declared.isdigit() or int(declared) > max_bytes):
            raise HttpFailure(f"{url}: Content-Length {declared[:40]} exceeds the limit {max_bytes}",
                              retryable=False, status=status)
        total = 0
        for chunk in response.iter_raw():  # raw: nothing is decoded, whatever the headers say
            total += len(chunk)
            if total > max_bytes:
                raise HttpFailure(f"{url}: oversized, more than {max_bytes} bytes", retryable=False, status=status)
            yield chunk
            # Checked after the reader had the chunk: its time between chunks counts too.
            if time.monotonic() > end:
                raise HttpFailure(f"{url}: deadline passed after {total} bytes", retryable=True, status=status)

    def get_bytes(self, url: str, headers: dict[str, str], max_bytes: int, deadline: float | None = None) -> bytes:
        """The whole body of ``url`` (at most ``max_bytes``)."""
        chunks: list[bytes] = []
        self.stream(url, headers, max_bytes, chunks.append, deadline)
        return b"".join(chunks)

    def put_bytes(self, url: str, headers: dict[str, str], content: bytes, max_bytes: int) -> bytes:
        """PUT ``content`` to ``url``; the whole answer's body (at most ``max_bytes``), every bound of
        :meth:`body` applying."""
        with contextlib.closing(self.body(url, headers, max_bytes, method="PUT", content=content)) as chunks:
            return b"".join(chunks)


def resolve(host: str) -> list[str]:
    """Every address ``host`` resolves to (empty when it does not): the DNS lookup for
    :func:`protocol.rules.endpoints.check_endpoint`."""
    try:
        return sorted({str(info[4][0]) for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)})
    except (OSError, UnicodeError):
        return []


class Backoff:
    """Waits between tries that grow exponentially (with jitter) from ``first_wait`` to ``max_wait``,
    never one that would end past ``deadline`` (monotonic): the one schedule of every retry.

    Args:
        deadline: when retrying stops.
        first_wait: the first wait in seconds.
        max_wait: the longest wait.
        sleep: how to wait.
    """

    def __init__(self, deadline: float, first_wait: float = 0.25, max_wait: float = 5.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.deadline, self._wait, self._max, self._sleep = deadline, first_wait, max_wait, sleep

    def wait_or_raise(self, failure: HttpFailure) -> None:
        """Wait before the next try, or raise ``failure`` when it is definite or no time is left."""
        if not failure.retryable or time.monotonic() + self._wait >= self.deadline:
            raise failure
        self._sleep(self._wait * random.uniform(0.8, 1.2))
        self._wait = min(self._wait * 2, self._max)


def retry_until(call: Callable[[], T], deadline: float, first_wait: float = 0.25, max_wait: float = 5.0,
                sleep: Callable[[float], None] = time.sleep) -> T:
    """``call()`` until it succeeds, a failure is definite, or ``deadline`` (monotonic) is near
    (waits as :class:`Backoff`).

    Raises:
        HttpFailure: the last failure.
    """
    backoff = Backoff(deadline, first_wait, max_wait, sleep)
    while True:
        try:
            return call()
        except HttpFailure as exc:
            backoff.wait_or_raise(exc)


Body = Generator[bytes, None, None]
"""A body as it arrives (:meth:`SafeClient.body`): chunks pulled by the reader, closable."""


def resumed_body(attempt: Callable[[], Body], deadline: float, first_wait: float = 0.25,
                 max_wait: float = 5.0, sleep: Callable[[float], None] = time.sleep) -> Body:
    """The chunks of ``attempt()`` (a body such as :meth:`SafeClient.body`), tried again while its
    failures may heal, as one continuous body: a retry after some bytes were handed over asks
    again and skips that many bytes of the new answer, so a reader that decodes as bytes arrive
    never restarts and nothing is buffered. (The bytes are checked by hash downstream: a host
    that answers differently the second time has served what the reader then judges.) A new
    answer shorter than what was already handed over ends the body there.

    Raises (while iterating):
        HttpFailure: the last failure, when definite or the ``deadline`` (monotonic) is near.
    """
    backoff = Backoff(deadline, first_wait, max_wait, sleep)
    delivered = 0
    while True:
        skip = delivered
        try:
            with contextlib.closing(attempt()) as chunks:
                for chunk in chunks:
                    if skip:
                        cut = min(skip, len(chunk))
                        chunk, skip = chunk[cut:], skip - cut
                        if not chunk:
                            continue
                    delivered += len(chunk)
                    yield chunk
            return
        except HttpFailure as exc:
            backoff.wait_or_raise(exc)


# -- server ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ServerLimits:
    """What one server admits. Every stage of a connection's life is bounded: its request head
    (``header_timeout_s``), its request body as a whole (``body_timeout_s``, from the end of the
    head: not per read, so a body dripped a byte at a time is cut there too), and a response the
    peer stops reading (``stall_s`` under the cap, ``response_stall_s`` always).

    Args:
        max_connections: open connections at most; beyond it one connection that is waiting (for
            its request head, in the middle of its request body, or on a reader that stopped
            reading its answer for ``stall_s``) is closed — from the peer address holding the
            most of them, a body first, then the oldest — or the new one, when every connection
            is busy working for a reader.
        header_timeout_s: a connection must complete its request head within this (and again
            after each answer, on keep-alive).
        keep_alive_s: idle keep-alive connections are closed after this (uvicorn's own setting).
        body_timeout_s: a request body must arrive whole within this of the end of its head
            (408; the connection is closed :data:`BODY_GRACE_S` later if the app did not answer).
        max_header_bytes: largest request head (h11's ``max_incomplete_event_size``).
        max_body_bytes: largest request body; larger declared ones are refused before reading.
        stall_s: a response whose peer has not read for this long may be closed to make room.
        response_stall_s: a response whose peer has not read for this long is closed.
    """

    max_connections: int = 256
    header_timeout_s: float = 5.0
    keep_alive_s: int = 5
    body_timeout_s: float = 5.0
    max_header_bytes: int = 16 * 1024
    max_body_bytes: int = 1024
    stall_s: float = 5.0
    response_stall_s: float = 60.0
    upload_rate: float | None = None
    """Response body bytes per second the server sends at most, over all its readers together (a
    token bucket: :class:`TokenBucket`, :func:`paced`): the uplink it models. None: unpaced."""
    upload_burst: int = 256 * 1024
    """Bytes the bucket holds when full (what an idle link sends at once)."""

    def __post_init__(self) -> None:
        if isinstance(self.upload_burst, bool) or not isinstance(self.upload_burst, int) or self.upload_burst < 1:
            raise ValueError(f"upload burst must be a positive whole number of bytes, not {self.upload_burst!r}")
        if self.upload_rate is not None:
            TokenBucket(self.upload_rate, self.upload_burst)  # the same checks, before any server starts


class TokenBucket:
    """``rate`` units per second on average, at most ``burst`` at once after idling: the bytes a link
    may send (:func:`paced`), the chain lookups a membership cache may make (``node.daemon``).

    Two ways to draw. :meth:`reserve` books units and says how long the caller must wait before
    using them: units booked beyond the tokens at hand are a debt the next bookings wait behind, so
    concurrent senders share the rate in booking order and a booking larger than ``burst`` is
    allowed (it just waits longer). :meth:`take` takes units only if the tokens at hand cover them
    (no debt) and says whether it did. Pure arithmetic on the clock readings it is given (a clock
    that goes back mints nothing); thread-safe.

    Args:
        what: what the bucket limits, named in its errors ("upload", "lookup").
        unit: what it counts, named in its errors.

    Raises:
        ValueError: ``rate`` or ``burst`` is not a positive finite number.
    """

    def __init__(self, rate: float, burst: float, *, what: str = "upload", unit: str = "bytes") -> None:
        for name, value in (("rate", rate), ("burst", burst)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
                per = " per second" if name == "rate" else ""
                raise ValueError(f"{what} {name} must be a positive finite number of {unit}{per}, not {value!r}")
        self.rate = float(rate)
        self.burst = float(burst)
        self._tokens = self.burst
        self._last: float | None = None
        self._lock = threading.Lock()

    def _refill(self, now: float) -> None:
        if self._last is not None and now > self._last:
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
        if self._last is None or now > self._last:
            self._last = now

    def reserve(self, n: int, now: float) -> float:
        """Book ``n`` units at clock reading ``now`` (seconds); returns the seconds to wait before
        using them (0 when the tokens at hand cover them)."""
        if n < 0:
            raise ValueError(f"cannot book {n} units")
        with self._lock:
            self._refill(now)
            self._tokens -= n
            return max(0.0, -self._tokens / self.rate)

    def take(self, n: float, now: float) -> bool:
        """Take ``n`` units at clock reading ``now`` if the tokens at hand cover them; else take
        nothing and return False."""
        if n < 0:
            raise ValueError(f"cannot take {n} units")
        with self._lock:
            self._refill(now)
            if self._tokens < n:
                return False
            self._tokens -= n
            return True


PACED_PIECE = 64 * 1024
"""Largest piece of a response body :func:`paced` books and sends at once, so that concurrent
readers share the bucket piece by piece (a FileResponse already sends 64 KiB chunks)."""


def paced(app: Any, bucket: TokenBucket, clock: Callable[[], float] = time.monotonic,
          sleep: Callable[[float], Any] = asyncio.sleep) -> Any:
    """ASGI middleware: every response body byte goes through ``bucket``, in pieces of at most
    :data:`PACED_PIECE`, each sent once its booking's wait (``sleep``, on ``clock``) is over."""

    async def limited(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return

        async def paced_send(message: dict[str, Any]) -> None:
            if message["type"] != "http.response.body":
                await send(message)
                return
            body: bytes = message.get("body", b"")
            more: bool = message.get("more_body", False)
            if not body:
                await send(message)
                return
            for start in range(0, len(body), PACED_PIECE):
                piece = body[start:start + PACED_PIECE]
                wait = bucket.reserve(len(piece), clock())
                if wait > 0:
                    await sleep(wait)
                last = start + PACED_PIECE >= len(body)
                await send({"type": "http.response.body", "body": piece, "more_body": more or not last})

        await app(scope, receive, paced_send)

    return limited


BODY_GRACE_S = 1.0
"""How long past ``body_timeout_s`` the protocol waits for the app's 408 before closing a
connection whose body is still incomplete."""

# uvicorn's H11Protocol is an internal class, not a public API: GuardedH11Protocol overrides these
# of its methods (with their parameters) and reads these of its attributes (and the cycle's
# ``response_complete`` and ``more_body``). pyproject.toml pins uvicorn to the version this was
# checked against, and tests/node/test_http_layer.py fails, naming what is missing, if the
# installed uvicorn lacks any.
H11_OVERRIDDEN: dict[str, tuple[str, ...]] = {
    "connection_made": ("self", "transport"),
    "data_received": ("self", "data"),
    "on_response_complete": ("self",),
    "connection_lost": ("self", "exc"),
    "pause_writing": ("self",),
    "resume_writing": ("self",),
}
H11_ATTRIBUTES_READ = ("loop", "connections", "transport", "client", "cycle")
GUARD_ATTRIBUTES = ("_since", "_timer", "_stage", "_paused_at", "limits", "evicted")
"""The attributes GuardedH11Protocol sets for itself (uvicorn's instances must not have them)."""

# Which waiting connection goes first under the cap, among those of one peer address: a request
# body (an honest reader's arrives with its head), then a connection waiting for a head, then a
# response its reader stopped reading.
_EVICTION_ORDER = {"body": 0, "head": 1, "stalled": 2}


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on every stage of a connection and an evicting
    connection cap (:class:`ServerLimits`).

    A connection is in one stage at a time (:meth:`stage`): ``head`` (waiting for a request head,
    the first or the next), ``body`` (its head is in, its body is not), ``response`` (the app
    works or its answer flows) or ``stalled`` (the peer stopped reading the answer). Each stage
    but ``response`` has a deadline, counted from when the stage began, and all but ``response``
    may be evicted under the cap.

    Configured by :func:`server_config` (the class attribute ``limits`` of a subclass). Built on
    uvicorn's internals (:data:`H11_OVERRIDDEN`, :data:`H11_ATTRIBUTES_READ`), hence uvicorn's exact pin.
    """

    limits: ServerLimits = ServerLimits()
    evicted = 0  # connections closed for the cap or a deadline (all servers; for tests)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._timer: asyncio.TimerHandle | None = None
        self._stage: tuple[str, object] | None = None
        self._paused_at: float | None = None
        self._since = self.loop.time()
        super().connection_made(transport)
        # Connections closed meanwhile stay in ``connections`` until the loop's next turn: a
        # burst must not count them, nor pick one again as its victim.
        others = [c for c in self.connections if c is not self and not c.transport.is_closing()]
        if len(others) >= self.limits.max_connections and not self._make_room(others):
            self.drop("connection cap")
            return
        self._track()

    def stage(self) -> str:
        """``head``, ``body``, ``response`` or ``stalled`` (see the class docstring)."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            return "head"
        if cycle.more_body:
            return "body"
        return "response" if self._paused_at is None else "stalled"

    def waiting_for_head(self) -> bool:
        """No request in progress: the connection is waiting for a (next) request head."""
        return self.stage() == "head"

    def evictable(self, now: float) -> bool:
        stage = self.stage()
        if stage == "stalled":
            return self._paused_at is not None and now - self._paused_at >= self.limits.stall_s
        return stage in _EVICTION_ORDER

    def peer(self) -> str:
        return str(self.client[0]) if self.client else ""

    def _make_room(self, others: list[Any]) -> bool:
        """Close one evictable connection of ``others``; False when there is none."""
        now = self.loop.time()
        waiting = [c for c in others if isinstance(c, GuardedH11Protocol) and c.evictable(now)]
        if not waiting:
            return False
        per_peer = Counter(c.peer() for c in waiting)
        victim = min(waiting, key=lambda c: (-per_peer[c.peer()], _EVICTION_ORDER[c.stage()], c._since))
        victim.drop(f"connection cap ({victim.stage()})")
        return True

    def drop(self, why: str) -> None:
        GuardedH11Protocol.evicted += 1
        log.debug("closing connection from %s: %s", self.client, why)
        self._disarm()
        if not self.transport.is_closing():
            self.transport.close()

    def _track(self) -> None:
        """Start the deadline of the stage the connection is in, if it just entered it (a new
        request, even pipelined, is a new stage)."""
        if self.transport.is_closing():
            self._disarm()
            return
        stage = (self.stage(), self.cycle)
        if self._stage is not None and stage[0] == self._stage[0] and stage[1] is self._stage[1]:
            return
        self._stage, self._since = stage, self.loop.time()
        lim = self.limits
        delay = {"head": lim.header_timeout_s, "body": lim.body_timeout_s + BODY_GRACE_S,
                 "stalled": lim.response_stall_s}.get(stage[0])
        self._disarm()
        if delay is not None:
            self._timer = self.loop.call_later(delay, self._deadline, stage)

    def _disarm(self) -> None:
        timer = getattr(self, "_timer", None)
        if timer is not None:
            timer.cancel()
            self._timer = None

    def _deadline(self, stage: tuple[str, object]) -> None:
        self._timer = None
        if self._stage is stage:
            self.drop(f"{stage[0]} deadline")

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._track()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._paused_at = None
        self._track()

    def pause_writing(self) -> None:
        super().pause_writing()
        self._paused_at = self.loop.time()
        self._track()

    def resume_writing(self) -> None:
        super().resume_writing()
        self._paused_at = None
        self._track()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


Rejecter = Callable[[str, str], None]
"""(reason, detail) -> None: where a server records what it refused."""

Admission = Callable[[dict[str, Any]], "tuple[int, str, str] | None"]
"""ASGI scope -> None to read the request's body, or (status, reason, detail) to refuse it unread."""


def server_config(app: Any, host: str, port: int, limits: ServerLimits | None = None,
                  on_reject: Rejecter | None = None, admit: Admission | None = None) -> uvicorn.Config:
    """A uvicorn configuration with every bound of ``limits`` (see :class:`ServerLimits`);
    ``on_reject`` is told of every body refused; ``admit`` is asked before a body is read."""
    lim = limits or ServerLimits()
    protocol = type("GuardedH11", (GuardedH11Protocol,), {"limits": lim})
    guarded = body_limit(app, lim, on_reject, admit)
    if lim.upload_rate is not None:  # outermost: every body byte the server sends is paced
        guarded = paced(guarded, TokenBucket(lim.upload_rate, lim.upload_burst))
    return uvicorn.Config(
        guarded, host=host, port=port, http=protocol, log_level="warning",
        access_log=False, timeout_keep_alive=lim.keep_alive_s,
        # Connections are capped by the protocol, which evicts idle ones. uvicorn's own
        # limit_concurrency counts connections too (closing ones included) and would answer 503 to
        # an honest request while evicted flood connections wind down: it only bounds a runaway.
        limit_concurrency=4 * lim.max_connections,
        h11_max_incomplete_event_size=lim.max_header_bytes,
        backlog=lim.max_connections, timeout_graceful_shutdown=2)


def body_limit(app: Any, limits: ServerLimits, on_reject: Rejecter | None = None,
               admit: Admission | None = None) -> Any:
    """ASGI middleware: refuse a request body declared larger than the limit, or chunked, or one
    that ``admit`` refuses (an unsigned or non-member request), before reading it; read what
    remains within ``body_timeout_s`` for the whole body (413 / 411 / 408 otherwise)."""

    async def send_error(send: Any, status: int, detail: str, reason: str | None = None) -> None:
        if on_reject is not None:
            on_reject(reason or ("oversized" if status == 413 else "body"), detail)
        body = json.dumps({"detail": detail}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        if b"transfer-encoding" in headers:
            await send_error(send, 411, "chunked request bodies are not accepted")
            return
        if declared is not None and (not declared.isdigit() or int(declared) > limits.max_body_bytes):
            await send_error(send, 413, f"request body larger than {limits.max_body_bytes} bytes")
            return
        more = declared is not None and int(declared) > 0
        refusal = admit(scope) if more and admit is not None else None
        if refusal is not None:
            await send_error(send, refusal[0], refusal[2], refusal[1])
            return
        body = b""
        loop = asyncio.get_running_loop()
        end = loop.time() + limits.body_timeout_s  # for the whole body, not each read
        try:
            while more:
                message = await asyncio.wait_for(receive(), max(0.0, end - loop.time()))
                if message["type"] != "http.request":
                    return
                body += message.get("body", b"")
                more = message.get("more_body", False)
                if len(body) > limits.max_body_bytes:
                    await send_error(send, 413, f"request body larger than {limits.max_body_bytes} bytes")
                    return
        except TimeoutError:
            await send_error(send, 408, "request body too slow")
            return
        delivered = False

        async def replay() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await app(scope, replay, send)

    return guarded


class RateLimitedLog:
    """A warning at most every ``every_s`` seconds summing what happened meanwhile; every event
    goes to the debug level. Keeps an attacked server's log bounded.

    Args:
        logger: where to write.
        every_s: seconds between two warnings.
    """

    def __init__(self, logger: logging.Logger, every_s: float = 10.0) -> None:
        self._log = logger
        self._every = every_s
        self._lock = threading.Lock()
        self._next = 0.0
        self._pending: dict[str, int] = {}

    def event(self, reason: str, detail: str) -> None:
        self._log.debug("%s: %s", reason, detail)
        now = time.monotonic()
        with self._lock:
            self._pending[reason] = self._pending.get(reason, 0) + 1
            if now < self._next:
                return
            summary, self._pending, self._next = self._pending, {}, now + self._every
        self._log.warning("rejected requests (last %.0f s): %s; latest: %s", self._every,
                          ", ".join(f"{k} {v}" for k, v in sorted(summary.items())), detail[:200])
