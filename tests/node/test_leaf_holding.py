"""Leaves moved once (``node.leaf_holding``): a validator keeps exactly what its replay checked, and a
validator the host refuses replays from that holder — in process and over HTTP — to the same verdict
with the same evidence; a holder serves only recent epochs and each held artifact at most twice per
member; nothing is kept of an answer the replay could not check."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.http import ClientLimits
from node.http_client import HttpArtifacts
from node.leaf_holding import FromHolder, Keeping, prune_held
from node.server import HELD_READS_PER_MEMBER, ServerThread, create_app
from protocol.keys import PrivateKey
from protocol.rules.spec import RunSpec
from protocol.views import Challenge
from trainer.artifacts import ArtifactSource, ArtifactUnavailable, LocalArtifacts, held_delta_path, held_leaves_dir
from trainer.behaviour import HostBehaviour
from trainer.epoch_store import EpochStore
from trainer.outer import GlobalState
from trainer.presets import tiny
from verifier.adversaries import WithheldSource
from verifier.replay import VerdictReport, check_challenge
from veriloco.network import LocalNetwork, Roster

READER = PrivateKey(b"\x09" * 32)


def run_spec() -> RunSpec:
    return tiny("holding").with_changes(
        train={"inner_steps": 8, "segment_steps": 2, "batch_size": 4},
        verification={"enabled": False},
        phases={"min_hosts": 1, "min_validators": 0},
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory, load_dataset) -> tuple[RunSpec, object, Path, str, list[Challenge], bytes]:
    """One honest host's epoch 0 (real training, 4 segments) and a challenge of each segment."""
    spec = run_spec()
    root = tmp_path_factory.mktemp("holding")
    dataset = load_dataset(spec.data)
    net = LocalNetwork(spec, root / "net", Roster(hosts=[HostBehaviour()]), dataset)
    prev_seed = bytes.fromhex(net.ledger.epoch(0).prev_seed)
    net.run_epoch()
    host = net.hosts[0]
    commitment = EpochStore(host.root, spec.run_id(), host.address).read_record(0).commitment
    challenges = [Challenge.of(commitment, host.address, g, "http://host-0.sim", [])
                  for g in range(spec.train.segments)]
    return spec, dataset, host.root, host.address, challenges, prev_seed


def replay(spec: RunSpec, dataset: object, challenge: Challenge, source: ArtifactSource, prev_seed: bytes,
           keep_at: Path | None = None) -> VerdictReport:
    theta = GlobalState.initial(spec)
    if keep_at is None:
        return check_challenge(spec, dataset, challenge, source, theta, prev_seed)  # type: ignore[arg-type]
    with Keeping(source, challenge, keep_at, spec.run_id()) as keeping:
        report = check_challenge(spec, dataset, challenge, keeping, theta, prev_seed)  # type: ignore[arg-type]
        keeping.settle(report)
    return report


def test_a_holder_keeps_what_it_checked_and_a_refused_reader_reaches_the_same_verdict(trained, tmp_path) -> None:
    spec, dataset, host_root, host, challenges, seed = trained
    host_source = LocalArtifacts(host_root, spec.run_id(), host)
    holder = tmp_path / "holder"
    last = challenges[-1]
    direct = replay(spec, dataset, last, host_source, seed, keep_at=holder)
    assert direct.verdict.outcome == "pass"
    held = held_leaves_dir(holder, spec.run_id(), 0, last.checkpoint_root)
    S = spec.train.segments
    # The two leaves of the segment, their proofs, leaf 0's proof (checked from θ_0), the losses;
    # the Δ by its hash (what aggregation reads).
    assert sorted(p.name for p in held.iterdir()) == sorted(
        [f"leaf-{S - 1}.safetensors", f"leaf-{S}.safetensors", f"proof-{S - 1}.json", f"proof-{S}.json",
         "proof-0.json", "losses.json"])
    assert held_delta_path(holder, spec.run_id(), last.delta_hash).is_file()
    # The end leaf was not read (the replay reproduced it bit for bit): the holder keeps its own,
    # the very bytes the host stores.
    assert direct.transfer["end_leaf"] == "own"
    assert (held / f"leaf-{S}.safetensors").read_bytes() == host_source.checkpoint(0, S)
    # The host refuses the reader; the holder's kept bytes decide it instead, with the same evidence.
    refused = replay(spec, dataset, last, WithheldSource(host_source, "all"), seed)
    assert refused.verdict.outcome == "unavailable"
    via_holder = replay(spec, dataset, last, FromHolder(LocalArtifacts(holder, spec.run_id(), "someone"), last),
                        seed)
    assert via_holder.verdict == direct.verdict
    assert via_holder.transfer["end_leaf"] == "own"  # the holder serves chunk digests too
    # A segment nobody checked is not held: the reader cannot get it from this holder.
    first = challenges[0]
    assert replay(spec, dataset, first, FromHolder(LocalArtifacts(holder, spec.run_id(), "x"), first),
                  seed).verdict.outcome == "unavailable"


def test_an_answer_the_replay_could_not_check_is_not_kept(trained, tmp_path) -> None:
    spec, dataset, host_root, host, challenges, seed = trained
    source = WithheldSource(LocalArtifacts(host_root, spec.run_id(), host), "losses")  # leaves served, no losses
    report = replay(spec, dataset, challenges[1], source, seed, keep_at=tmp_path / "holder")
    assert report.verdict.outcome == "unavailable"
    held = held_leaves_dir(tmp_path / "holder", spec.run_id(), 0, challenges[1].checkpoint_root)
    assert not held.exists() or not any(held.iterdir())


def test_a_holder_serves_recent_epochs_only(trained, tmp_path) -> None:
    spec, dataset, host_root, host, challenges, seed = trained
    holder = tmp_path / "holder"
    replay(spec, dataset, challenges[1], LocalArtifacts(host_root, spec.run_id(), host), seed, keep_at=holder)
    root = challenges[1].checkpoint_root
    holdings = LocalArtifacts(holder, spec.run_id(), "v")
    assert holdings.held(0, root).proof(0, 1)
    (holder / spec.run_id().hex() / "held" / "2").mkdir(parents=True)  # it now holds a later epoch
    with pytest.raises(ArtifactUnavailable, match="no leaves of epoch 0"):
        holdings.held(0, root)
    assert prune_held(holder, spec.run_id(), 2) == [0]
    assert not held_leaves_dir(holder, spec.run_id(), 0, root).exists()


def test_a_holder_serves_its_leaves_over_http_each_at_most_twice_per_member(trained, tmp_path) -> None:
    spec, dataset, host_root, host, challenges, seed = trained
    holder = tmp_path / "holder"
    challenge = challenges[1]
    direct = replay(spec, dataset, challenge, LocalArtifacts(host_root, spec.run_id(), host), seed, keep_at=holder)
    app = create_app(LocalArtifacts(holder, spec.run_id(), "v"), spec.run_id().hex(), "v", authorize=lambda a: True)
    with ServerThread(app) as server:
        client = HttpArtifacts(server.url, READER, spec, limits=ClientLimits(connect_s=2, read_s=2, deadline_s=10),
                               allow_private=True, retry_budget_s=0)
        for _ in range(HELD_READS_PER_MEMBER):
            assert replay(spec, dataset, challenge, FromHolder(client, challenge), seed).verdict == direct.verdict
        with pytest.raises(ArtifactUnavailable):  # a third read of the same leaf by the same member
            b"".join(client.held(0, challenge.checkpoint_root).checkpoint_chunks(0, 1))
        with pytest.raises(ArtifactUnavailable):  # nothing of another root
            client.held(0, "ab" * 32).proof(0, 1)
        assert app.state.stats.rejected["busy"] >= 1
        assert app.state.stats.served["held digests"] == HELD_READS_PER_MEMBER  # the end leaf as digests
