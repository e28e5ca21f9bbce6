"""Hostile peers for the network tests: raw TCP servers that answer what an attacker would, and
clients that flood. Real sockets, no mocks: the code under test cannot tell them from a peer."""

from __future__ import annotations

import contextlib
import gzip
import socket
import threading
import time
from collections.abc import Callable, Iterator

Handler = Callable[[socket.socket], None]


class RawServer:
    """A TCP server on 127.0.0.1 whose every connection is handed to ``handler`` in a thread.

    Args:
        handler: writes whatever it likes to the accepted socket (after reading the request head).
    """

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self.connections = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            self.connections += 1
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn:
            conn.settimeout(30)
            read_head(conn)
            self._handler(conn)

    def __enter__(self) -> RawServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()


def read_head(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data and len(data) < 65536:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def drip(data: bytes, every_s: float) -> Handler:
    """Send ``data`` one byte at a time, ``every_s`` apart (a slow-drip host)."""

    def handler(conn: socket.socket) -> None:
        for i in range(len(data)):
            conn.sendall(data[i:i + 1])
            time.sleep(every_s)

    return handler


def answer(status: str, headers: dict[str, str], body: bytes | Iterator[bytes]) -> Handler:
    """Send one HTTP/1.1 answer; ``body`` may be a generator (streamed, never built whole)."""

    def handler(conn: socket.socket) -> None:
        head = f"HTTP/1.1 {status}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        conn.sendall(head.encode())
        for chunk in ([body] if isinstance(body, bytes) else body):
            conn.sendall(chunk)

    return handler


def zeros(total: int, chunk: int = 1 << 20) -> Iterator[bytes]:
    """``total`` zero bytes in chunks (an oversized body that costs the sender nothing to hold)."""
    block = bytes(chunk)
    sent = 0
    while sent < total:
        n = min(chunk, total - sent)
        yield block[:n]
        sent += n


def gzip_bomb(inflated: int, layers: int = 1) -> bytes:
    """``inflated`` zero bytes gzipped ``layers`` times (double gzip: a few hundred bytes)."""
    data = gzip.compress(bytes(inflated), compresslevel=9)
    for _ in range(layers - 1):
        data = gzip.compress(data, compresslevel=9)
    return data


def half_open(port: int, count: int, send: bytes = b"") -> list[socket.socket]:
    """``count`` connections that send ``send`` (nothing, or part of a head) and then stay silent."""
    socks = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        if send:
            s.sendall(send)
        socks.append(s)
    return socks


SLOW_BODY_HEAD = b"GET /v1/epochs/0/delta HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"


class SlowBodies:
    """``count`` connections that each send a complete request head (``head``: its lines up to the
    blank one, which is added) declaring a 1,000-byte body, then one body byte every ``every_s``
    (issue 29's slow-body flood). With ``reconnect``, a connection the server closes is opened again
    at the next drip, so the flood keeps its size. Bounded: it stops after ``max_s`` seconds, or
    at :meth:`close`.
    """

    def __init__(self, port: int, count: int, head: bytes = SLOW_BODY_HEAD, every_s: float = 3.0,
                 reconnect: bool = False, max_s: float = 600.0) -> None:
        self.port, self.head, self.every, self.reconnect = port, head + b"\r\n", every_s, reconnect
        self.socks: list[socket.socket | None] = [self._open() for _ in range(count)]
        self.opened = count
        self._end = time.monotonic() + max_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drip, daemon=True)
        self._thread.start()

    def _open(self) -> socket.socket | None:
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=2)
            s.sendall(self.head)
            s.setblocking(False)
            return s
        except OSError:
            return None

    @property
    def alive(self) -> int:
        return sum(s is not None for s in self.socks)

    def _drip(self) -> None:
        while not self._stop.wait(self.every) and time.monotonic() < self._end:
            for i, s in enumerate(self.socks):
                if s is not None and _still_open(s):
                    with contextlib.suppress(OSError):
                        s.send(b"x")
                    continue
                if s is not None:
                    s.close()
                self.socks[i] = self._open() if self.reconnect else None
                self.opened += self.reconnect

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        for s in self.socks:
            if s is not None:
                s.close()


def _still_open(s: socket.socket) -> bool:
    """Whether the server has neither closed nor answered a non-blocking connection."""
    try:
        s.recv(1, socket.MSG_PEEK)  # an answer (a refusal) or the end: this connection is over
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False
