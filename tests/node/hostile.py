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
