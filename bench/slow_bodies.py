"""How many slow-body connections it takes to deny an artifact server's honest readers (issue 29).

Each attacking connection sends a complete request head declaring ``Content-Length: 1000`` and
then one body byte every 3 s (unsigned, or with the headers of a real member's request copied, so
it passes every check that can be made before the body). While N of them are held open — evicted
ones reconnected at once with ``--reconnect`` — an honest member makes 4 signed reads, one every
3 s, each with a 2 s retry budget; the row says how many were served. Loopback only (127.0.0.1),
every loop bounded: the whole run stops by itself.

    PYTHONPATH=. .venv/bin/python bench/slow_bodies.py [--counts 100,255,256,300,1000] [--reconnect]

Prints one Markdown row per count (docs/network.md, "Slow bodies").
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "node"))

from hostile import SLOW_BODY_HEAD, SlowBodies

from node.http import ClientLimits, GuardedH11Protocol
from node.http_client import HttpArtifacts
from node.server import ServerThread, create_app
from protocol.auth import sign_request
from protocol.keys import PrivateKey
from trainer.artifacts import ArtifactSource, ArtifactUnavailable
from trainer.presets import tiny

SPEC = tiny("bench-slow-bodies").with_changes(train={"inner_steps": 16, "segment_steps": 4, "batch_size": 8})
MEMBER = PrivateKey(b"\x07" * 32)
PATH = "/v1/epochs/0/delta"
MiB = 1 << 20


class Static(ArtifactSource):
    """Fixed bytes for everything."""

    def checkpoint(self, epoch: int, leaf: int) -> bytes:
        return b"delta-bytes"

    def proof(self, epoch: int, leaf: int) -> dict[str, object]:
        raise ArtifactUnavailable("none")

    def delta(self, epoch: int) -> bytes:
        return b"delta-bytes"

    def losses(self, epoch: int) -> list[int]:
        return [1]

    def global_state(self, model_hash: str) -> bytes:
        return b"delta-bytes"


def slow_head(forged: bool) -> bytes:
    if not forged:
        return SLOW_BODY_HEAD
    # A member's real headers (signed over an empty body): only the body gives it away.
    signed = sign_request(MEMBER, "GET", PATH, SPEC.run_id().hex())
    return SLOW_BODY_HEAD + "".join(f"{k}: {v}\r\n" for k, v in signed.items()).encode()


def honest_reads(url: str, reads: int = 4, every_s: float = 3.0) -> int:
    served = 0
    for i in range(reads):
        reader = HttpArtifacts(url, MEMBER, SPEC, limits=ClientLimits(connect_s=1, read_s=1, deadline_s=2),
                               allow_private=True, retry_budget_s=2.0)
        try:
            served += reader.delta(0) == b"delta-bytes"
        except ArtifactUnavailable:
            pass
        finally:
            reader.close()
        if i < reads - 1:
            time.sleep(every_s)
    return served


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--counts", default="100,255,256,300,1000,3000")
    parser.add_argument("--reconnect", action="store_true")
    args = parser.parse_args()
    app = create_app(Static(), SPEC.run_id().hex(), "host", authorize=lambda a: a == MEMBER.address())
    print("| slow-body connections | headers | reconnect | honest reads served | evicted | peak Python memory (MiB) |")
    print("| --- | --- | --- | --- | --- | --- |")
    with ServerThread(app) as server:
        for forged in (False, True):
            for count in (int(c) for c in args.counts.split(",")):
                evicted = GuardedH11Protocol.evicted
                tracemalloc.start()
                flood = SlowBodies(server.port, count, slow_head(forged), reconnect=args.reconnect, max_s=60)
                try:
                    time.sleep(1.0)
                    served = honest_reads(server.url)
                finally:
                    peak = tracemalloc.get_traced_memory()[1] / MiB
                    tracemalloc.stop()
                    flood.close()
                print(f"| {count} | {'a member' if forged else 'unsigned'}'s | {'yes' if args.reconnect else 'no'} "
                      f"| {served} of 4 | {GuardedH11Protocol.evicted - evicted} | {peak:.1f} |", flush=True)
                time.sleep(2.0)  # the server sees every closed connection go


if __name__ == "__main__":
    main()
