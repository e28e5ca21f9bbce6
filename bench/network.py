"""What each hostile-network attack costs its victim: peak Python memory (tracemalloc, all threads)
and resident-set growth, for the hardened reader and server (``node.http``) and, side by side, for a
plain reader (``httpx`` as the artifact client used it before: decoding, error bodies read whole).

    PYTHONPATH=. .venv/bin/python bench/network.py

Prints a Markdown table (docs/benchmarks.md, "Hostile network").
"""

from __future__ import annotations

import json
import resource
import socket
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "node"))

from hostile import RawServer, answer, gzip_bomb, half_open, zeros

from node.http import ServerLimits
from node.http_client import HttpArtifacts
from node.server import ServerThread, create_app
from protocol.keys import PrivateKey
from trainer.artifacts import ArtifactSource, ArtifactUnavailable
from trainer.presets import tiny

MiB = 1 << 20
SPEC = tiny("bench-net").with_changes(train={"inner_steps": 16, "segment_steps": 4, "batch_size": 8})
KEY = PrivateKey(b"\x07" * 32)


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(run: Callable[[], object]) -> tuple[float, float, float, str]:
    """(peak traced MiB, max-RSS growth MiB, seconds, outcome) of ``run``."""
    rss = rss_mib()
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        run()
        outcome = "read"
    except (ArtifactUnavailable, httpx.HTTPError, ValueError, RecursionError) as exc:
        outcome = type(exc).__name__
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] / MiB
    tracemalloc.stop()
    return peak, rss_mib() - rss, seconds, outcome


def plain_get(url: str) -> bytes:
    """The reader before: httpx with its defaults (gzip decoded), the whole body read."""
    return httpx.get(url, timeout=30).content


def reading(reader: str, client: HttpArtifacts, url: str, is_json: bool) -> Callable[[], object]:
    """What one reader does with one answer: the artifact (Δ, or a proof as JSON)."""
    if reader == "hardened":
        return (lambda: client.proof(0, 1)) if is_json else (lambda: client.delta(0))

    def plain() -> object:
        data = plain_get(url)
        return json.loads(data) if is_json else data

    return plain


class Static(ArtifactSource):
    """A host that serves a few bytes for everything."""

    def checkpoint(self, epoch: int, leaf: int) -> bytes:
        return b"x"

    def proof(self, epoch: int, leaf: int) -> bytes:
        return b"x"

    def delta(self, epoch: int) -> bytes:
        return b"x"

    def losses(self, epoch: int) -> list[int]:
        return [1]

    def global_state(self, model_hash: str) -> bytes:
        return b"x"


def main() -> None:
    rows = []
    nested = b"[" * 30_000 + b"]" * 30_000
    attacks = {
        "gzip bomb (256 MiB inflated)": answer("200 OK", {"Content-Encoding": "gzip"}, gzip_bomb(256 * MiB)),
        "double gzip (512 MiB inflated)": answer("200 OK", {"Content-Encoding": "gzip"},
                                                 gzip_bomb(512 * MiB, layers=2)),
        "404 with a 400 MiB body": answer("404 Not Found", {"Content-Length": str(400 * MiB)}, zeros(400 * MiB)),
        "300 MiB answer, no length": answer("200 OK", {"Connection": "close"}, zeros(300 * MiB)),
        "JSON nested 30,000 deep": answer("200 OK", {"Content-Length": str(len(nested))}, nested),
    }
    for name, handler in attacks.items():
        is_json = "JSON" in name
        # Hardened first: max RSS is a high-water mark, so the plain reader's growth comes after.
        for reader in ("hardened", "plain httpx"):
            with RawServer(handler) as server:
                client = HttpArtifacts(server.url, KEY, SPEC, allow_private=True, retry_budget_s=0)
                peak, rss, seconds, outcome = measure(reading(reader, client, server.url, is_json))
            rows.append((name, reader, peak, rss, seconds, outcome))

    # Server side: a half-open flood, a big declared upload, then an honest read.
    app = create_app(Static(), SPEC.run_id().hex(), "inj1host", authorize=lambda a: True)
    with ServerThread(app, limits=ServerLimits(max_connections=256, header_timeout_s=5)) as thread:
        client = HttpArtifacts(thread.url, KEY, SPEC, allow_private=True, retry_budget_s=10)

        def flood_then_read() -> object:
            socks = half_open(thread.port, 1100)
            try:
                return client.delta(0)
            finally:
                for s in socks:
                    s.close()

        def upload() -> object:
            with socket.create_connection(("127.0.0.1", thread.port)) as s:
                s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nContent-Length: 314572800\r\n\r\n" + bytes(1 << 20))
                return s.recv(64)

        for name, run in (("1,100 half-open connections, then an honest read", flood_then_read),
                          ("unsigned 300 MiB upload (declared)", upload)):
            peak, rss, seconds, outcome = measure(run)
            rows.append((name, "hardened server", peak, rss, seconds, outcome))

    print("| attack | victim | peak Python memory (MiB) | max RSS growth (MiB) | seconds | outcome |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, reader, peak, rss, seconds, outcome in rows:
        print(f"| {name} | {reader} | {peak:.1f} | {rss:.0f} | {seconds:.2f} | {outcome} |")


if __name__ == "__main__":
    main()
