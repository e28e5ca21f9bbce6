"""Bytes a host uploads per epoch, and bytes validators upload as holders of its leaves (issue 27/30).

    PYTHONPATH=. .venv/bin/python bench/leaf_uploads.py [--epochs 1] [--preset tiny|small]

One epoch of ``simulate``'s network in one process (the preset's model, H = 8 in 4 segments, every
segment challenged so both pickers of each host sit on every challenge; 3 honest hosts, 3
validators). Every byte a participant's artifact source hands to a reader is counted (leaves, Δs,
proofs, losses, chunk digests and chunks), per serving party. Four runs side by side: validators
ask the host first (``ValidatorNode.holders_first`` off) and read every end leaf whole (how it
was); holders first (the default), end leaves whole; holders first with end leaves compared by
chunk digests (``trainer.leaf_digests``: nothing read when the replay reproduces it bit for bit,
else only the differing chunks); and that while host 2 refuses one of its pickers (who then reads
host 2's leaves from the validator that holds them, ``node.leaf_holding``). Prints a JSON object
and a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from protocol.rules.merkle import MerkleProof
from protocol.rules.sampling import pickers
from trainer.artifacts import ArtifactSource, ArtifactUnavailable, UntrustedJson
from trainer.behaviour import HostBehaviour
from trainer.data import Dataset
from trainer.leaf_digests import LeafDigests
from trainer.presets import small, tiny
from verifier.adversaries import ValidatorBehaviour, WithheldSource
from veriloco.commands.simulate import simulation_spec
from veriloco.network import LocalNetwork, Roster

SEGMENTS = 4
T = TypeVar("T")


class Counted(ArtifactSource):
    """``inner``, with every byte it hands over added to ``sent[who]``; with ``chunks`` off it serves
    no chunk digests, so every replay reads the end leaf whole (how it was)."""

    def __init__(self, inner: ArtifactSource, who: str, sent: Counter[str], chunks: bool = True) -> None:
        self.inner, self.who, self.sent, self.chunks = inner, who, sent, chunks

    def _count(self, chunks: Iterable[bytes | object]) -> Iterable[bytes | object]:
        for piece in chunks:
            if isinstance(piece, (bytes, bytearray, memoryview)):
                self.sent[self.who] += len(piece)
            yield piece

    def _small(self, value: T) -> T:
        self.sent[self.who] += len(json.dumps(value.model_dump() if isinstance(value, MerkleProof) else value))
        return value

    def checkpoint(self, epoch: int, leaf: int) -> bytes:
        data = self.inner.checkpoint(epoch, leaf)
        self.sent[self.who] += len(data)
        return data

    def checkpoint_chunks(self, epoch: int, leaf: int) -> Iterable[bytes | object]:
        return self._count(self.inner.checkpoint_chunks(epoch, leaf))

    def proof(self, epoch: int, leaf: int) -> MerkleProof | UntrustedJson:
        return self._small(self.inner.proof(epoch, leaf))

    def leaf_digests(self, epoch: int, leaf: int) -> LeafDigests | UntrustedJson:
        if not self.chunks:
            raise ArtifactUnavailable("chunk digests off (the end leaf read whole)")
        answer = self.inner.leaf_digests(epoch, leaf)
        self.sent[self.who] += len(answer.model_dump_json() if isinstance(answer, LeafDigests) else json.dumps(answer))
        return answer

    def leaf_chunk(self, epoch: int, leaf: int, tensor: int, chunk: int) -> bytes:
        data = self.inner.leaf_chunk(epoch, leaf, tensor, chunk)
        self.sent[self.who] += len(data)
        return data

    def delta(self, epoch: int) -> bytes:
        data = self.inner.delta(epoch)
        self.sent[self.who] += len(data)
        return data

    def delta_chunks(self, epoch: int) -> Iterable[bytes | object]:
        return self._count(self.inner.delta_chunks(epoch))

    def delta_by_hash_chunks(self, delta_hash: str, epoch: int | None = None) -> Iterable[bytes | object]:
        return self._count(self.inner.delta_by_hash_chunks(delta_hash, epoch))

    def losses(self, epoch: int) -> list[int] | UntrustedJson:
        return self._small(self.inner.losses(epoch))

    def global_state(self, model_hash: str) -> bytes:
        return self.inner.global_state(model_hash)

    def global_state_chunks(self, model_hash: str) -> Iterable[bytes | object]:
        return self.inner.global_state_chunks(model_hash)  # θ travels the same in both runs: not counted

    def held(self, epoch: int, checkpoint_root: str) -> ArtifactSource:
        return Counted(self.inner.held(epoch, checkpoint_root), self.who, self.sent, self.chunks)


def counted(serve: Callable[[str], ArtifactSource], who: str, sent: Counter[str],
            chunks: bool = True) -> Callable[[str], ArtifactSource]:
    """``serve`` (a party's source for one reader), its bytes counted as ``who``'s."""
    return lambda requester: Counted(serve(requester), who, sent, chunks)


class Refuses(HostBehaviour):
    """An honest host that refuses one reader (none when ``refused`` is empty)."""

    def __init__(self) -> None:
        self.refused = ""

    def serve_to(self, source: ArtifactSource, requester: str) -> ArtifactSource:
        return WithheldSource(source, "all") if requester == self.refused else source


def run(root: Path, dataset: Dataset | None, refuse: bool, epochs: int, preset: str = "tiny",
        holders_first: bool = True, chunks: bool = True) -> dict[str, object]:
    base = {"tiny": tiny, "small": small}[preset]().with_changes(
        train={"inner_steps": 2 * SEGMENTS, "segment_steps": 2, "batch_size": 4},
        verification={"challenges_k": SEGMENTS - 1})
    spec = simulation_spec(base, validators=3, hosts=3)
    dataset = dataset or Dataset.load(spec.data)
    refusing = Refuses()
    roster = Roster(hosts=[HostBehaviour(), HostBehaviour(), refusing],
                    validators=[ValidatorBehaviour() for _ in range(3)])
    net = LocalNetwork(spec, root, roster, dataset)
    for validator in net.validators:
        validator.holders_first = holders_first  # type: ignore[attr-defined]
    sent: Counter[str] = Counter()
    for endpoint, serve in list(net._sources.items()):  # every party's serving, counted
        net._sources[endpoint] = counted(serve, endpoint.removeprefix("http://").removesuffix(".sim"), sent, chunks)
    if refuse:
        stakes = {v.address: 1 for v in net.validators}
        refusing.refused = pickers(bytes.fromhex(net.ledger.epoch().prev_seed), net.hosts[2].address, stakes,
                                   spec.verification.seats_cap)[0]
    reports = [net.run_epoch(max_rounds=300) for _ in range(epochs)]
    slashed = sum(int(h.slashed) for r in reports for h in r.hosts) + sum(
        int(v.slashed) for r in reports for v in r.validators)
    return {"refuse": refuse, "holders_first": holders_first, "chunks": chunks, "preset": preset, "epochs": epochs,
            "sent": dict(sorted(sent.items())), "slashed": slashed,
            "outcomes": [sorted({h.outcome for h in r.hosts}) for r in reports]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--preset", choices=("tiny", "small"), default="tiny")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        runs = ((False, False, False), (True, False, False), (True, False, True), (True, True, True))
        for i, (first, refuse, chunks) in enumerate(runs):
            results.append(run(Path(tmp) / f"net-{i}", None, refuse, args.epochs, args.preset, first, chunks))
    json.dump(results, sys.stdout, indent=1)
    parties = sorted({w for r in results for w in r["sent"]})  # type: ignore[attr-defined]
    print("\n\n| run | " + " | ".join(f"bytes sent by {w}" for w in parties) + " | slashed |")
    print("| --- |" + " --- |" * (len(parties) + 1))
    for r in results:
        sent = r["sent"]
        assert isinstance(sent, dict)
        name = ("holders first, " if r["holders_first"] else "host first, ") + (
            "end leaf by chunk digests, " if r["chunks"] else "end leaf whole, ") + (
            "host-2 refuses one picker" if r["refuse"] else "every host serves everyone")
        print(f"| {name} | " + " | ".join(f"{sent.get(w, 0):,}" for w in parties) + f" | {r['slashed']} |")


if __name__ == "__main__":
    main()
