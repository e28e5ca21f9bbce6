"""Bytes a host uploads for its challenged leaves through the daemons' code path (issue 27).

    PYTHONPATH=. .venv/bin/python bench/leaf_uploads_daemons.py [--dispute]

``bench/leaf_uploads.py`` counts ``simulate``'s in-process network, whose validators read in turn.
The daemons (``veriloco validator run``) prefetch every challenge on fetch threads as soon as it is
known; this runs them as ``tests/node/test_seats_in_turn.py`` does: patient validators with their
prefetch threads, every member behind its real HTTP server on the embedded chain (the tiny
preset, H = 8 in 4 segments, every segment challenged by both of the host's 2 pickers; 1 host, 3
validators). Every member's server counts the bytes (Content-Length) of the leaves (whole, their
chunk digests, single chunks), proofs and losses it sends: the host from ``/v1/epochs/…``, the
validators as holders from ``/v1/held/…``. Four runs side by side: every seat prefetches from the
host (``ValidatorNode.holders_first`` off) and seats in turn (``node.leaf_holding``), both with the
end leaf prefetched whole (``ValidatorNode.end_by_digests`` off: how the daemons were); seats in
turn with the end leaf by its chunk digests (the default: the prefetch fetches the digest list, the
replay the chunks it does not reproduce), and the same while the host refuses the first seat.
Prints a JSON object and a Markdown table.

``--dispute``: instead, a dispute (issue 30): the host traps a segment, whose challenge goes to the
final vote of every validator without a round-0 seat; at V = 8 and 16 validators (the default seats,
over a third of V's stake) and at V = 16 with 2 seats a challenge (the cap binding, as from V ≈ 57
at the default cap), each with the voters reading the round-0 seats first (how the daemons were)
and in the dispute tree (``node.leaf_holding.dispute_tree``), side by side: the bytes of the
trapped segment's start leaf (read whole by each of its readers, by nobody else) that the host,
each round-0 seat and the voters served to the voters.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "node"))

from test_seats_in_turn import dispute_uploads, first_seat, network, seats_spec

from protocol.views import HostOutcome
from trainer.data import Dataset


class Uploads(TypedDict):
    """One run's row (printed as JSON): the switches, the bytes each member sent, the epoch."""

    holders_first: bool
    refuse_first: bool
    end_by_digests: bool
    sent: dict[str, int]  # member name → bytes
    challenges: int
    votes: list[str]  # every vote's outcome, sorted
    slashed: int
    outcomes: list[HostOutcome]
    seconds: float


def run(root: Path, dataset: Dataset, holders_first: bool, refuse_first: bool, digests: bool) -> Uploads:
    sent: Counter[str] = Counter()
    first: list[str] = []
    net = network(root, dataset, holders_first, sent, refuse=first.__contains__ if refuse_first else lambda _: False,
                  end_by_digests=digests)
    try:
        first.append(first_seat(net))
        started = time.monotonic()
        report = net.run_epoch()
        took = time.monotonic() - started
        votes = sorted(str(v.outcome) for c in report.challenges for v in c.votes)
        slashed = sum(int(h.slashed) for h in report.hosts) + sum(int(v.slashed) for v in report.validators)
        return {"holders_first": holders_first, "refuse_first": refuse_first, "end_by_digests": digests,
                "sent": dict(sorted(sent.items())),
                "challenges": len(report.challenges), "votes": votes, "slashed": slashed,
                "outcomes": sorted({h.outcome for h in report.hosts}), "seconds": round(took, 1)}
    finally:
        for node in net.nodes:
            node.close()
        net.close()


def disputes(dataset: Dataset) -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for v, cap in ((8, None), (16, None), (16, 2)):
            for tree in (False, True):
                r = dispute_uploads(Path(tmp) / f"{v}-{cap}-{tree}", dataset, v, tree, seats_cap=cap)
                rows.append({"validators": v, "seats_cap": cap, "tree": tree, **r})
    json.dump(rows, sys.stdout, indent=1)
    print("\n\n| V | seats | reads | host | busiest seat | seats (each) | voters (sum) | final votes | slashed |")
    print("| --- |" + " --- |" * 8)
    for r in rows:
        seats, voters = r["seats"], r["voters"]
        print(f"| {r['validators']} | {len(seats)} | {'dispute tree' if r['tree'] else 'seats first'} | "
              f"{r['host']:,} | {max(seats.values()):,} | {' / '.join(f'{b:,}' for b in seats.values())} | "
              f"{sum(voters.values()):,} | {len(r['votes'])} {'/'.join(sorted(set(r['votes'])))} | "
              f"{sum(int(s) for s in r['slashed'])} |")


def main() -> None:
    dataset = Dataset.load(seats_spec().data)
    if "--dispute" in sys.argv[1:]:
        disputes(dataset)
        return
    with tempfile.TemporaryDirectory() as tmp:
        runs = ((False, False, False), (True, False, False), (True, False, True), (True, True, True))
        results = [run(Path(tmp) / f"net-{i}", dataset, first, refuse, digests)
                   for i, (first, refuse, digests) in enumerate(runs)]
    json.dump(results, sys.stdout, indent=1)
    parties = sorted({w for r in results for w in r["sent"]})
    base = results[0]["sent"]["host-0"]
    print("\n\n| run | " + " | ".join(f"{w} sent" for w in parties) + " | host vs host first | votes | slashed |")
    print("| --- |" + " --- |" * (len(parties) + 3))
    for r in results:
        sent = r["sent"]
        name = ("seats in turn" if r["holders_first"] else "every seat from the host") + (
            ", end leaf by chunk digests" if r["end_by_digests"] else ", end leaf whole") + (
            ", host refuses the first seat" if r["refuse_first"] else "")
        votes = Counter(r["votes"])
        print(f"| {name} | " + " | ".join(f"{sent.get(w, 0):,}" for w in parties)
              + f" | {sent.get('host-0', 0) / base:.2f}× | "
              + ", ".join(f"{n} {o}" for o, n in sorted(votes.items())) + f" | {r['slashed']} |")


if __name__ == "__main__":
    main()
