"""Bytes a host uploads for its challenged leaves through the daemons' code path (issue 27).

    PYTHONPATH=. .venv/bin/python bench/leaf_uploads_daemons.py

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
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "node"))

from test_seats_in_turn import first_seat, network, seats_spec

from trainer.data import Dataset


def run(root: Path, dataset: Dataset, holders_first: bool, refuse_first: bool, digests: bool) -> dict[str, object]:
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


def main() -> None:
    dataset = Dataset.load(seats_spec().data)
    with tempfile.TemporaryDirectory() as tmp:
        runs = ((False, False, False), (True, False, False), (True, False, True), (True, True, True))
        results = [run(Path(tmp) / f"net-{i}", dataset, first, refuse, digests)
                   for i, (first, refuse, digests) in enumerate(runs)]
    json.dump(results, sys.stdout, indent=1)
    parties = sorted({w for r in results for w in r["sent"]})  # type: ignore[attr-defined]
    base = results[0]["sent"]["host-0"]  # type: ignore[index]
    print("\n\n| run | " + " | ".join(f"{w} sent" for w in parties) + " | host vs host first | votes | slashed |")
    print("| --- |" + " --- |" * (len(parties) + 3))
    for r in results:
        sent = r["sent"]
        assert isinstance(sent, dict)
        name = ("seats in turn" if r["holders_first"] else "every seat from the host") + (
            ", end leaf by chunk digests" if r["end_by_digests"] else ", end leaf whole") + (
            ", host refuses the first seat" if r["refuse_first"] else "")
        votes: Counter[str] = Counter(r["votes"]) if isinstance(r["votes"], list) else Counter()
        print(f"| {name} | " + " | ".join(f"{sent.get(w, 0):,}" for w in parties)
              + f" | {sent.get('host-0', 0) / base:.2f}× | "
              + ", ".join(f"{n} {o}" for o, n in sorted(votes.items())) + f" | {r['slashed']} |")


if __name__ == "__main__":
    main()
