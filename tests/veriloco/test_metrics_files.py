"""Live metrics: each closed epoch appended to CSV and TensorBoard once, across restarts."""

from __future__ import annotations

import csv
import struct
from pathlib import Path

import pytest

from veriloco.connect import NetworkFile, open_ledger
from veriloco.metrics_files import MetricsFollower, MetricsWriter, written_epochs
from veriloco.report import MEMBER_COLUMNS


def scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the TensorBoard event files in ``folder``, by tag (the TFRecord framing read by hand)."""
    from tensorboardX.proto.event_pb2 import Event

    found: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(folder.glob("events.out.tfevents.*")):
        data, at = path.read_bytes(), 0
        while at < len(data):
            (length,) = struct.unpack("<Q", data[at:at + 8])
            event = Event.FromString(data[at + 12:at + 12 + length])
            at += 12 + length + 4
            for value in event.summary.value:
                found.setdefault(value.tag, []).append((event.step, value.simple_value))
    return found


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory, load_dataset) -> Path:
    """Two closed epochs of a small run (verification off) on the embedded chain; the run is in epoch 2."""
    from chain.embedded import EmbeddedChain
    from trainer.behaviour import HostBehaviour
    from trainer.presets import tiny
    from veriloco.connect import ChainSettings
    from veriloco.network import EmbeddedChainFactory, LocalNetwork, Roster

    root = tmp_path_factory.mktemp("run")
    spec = tiny("metrics").with_changes(train={"inner_steps": 8, "segment_steps": 4, "batch_size": 4},
                                        verification={"enabled": False}, phases={"min_hosts": 1, "min_validators": 0})
    factory = EmbeddedChainFactory()
    net = LocalNetwork(spec, root, Roster(hosts=[HostBehaviour()]), load_dataset(spec.data), chain=factory)
    net.run_epoch()
    net.run_epoch()
    assert isinstance(factory.chain, EmbeddedChain)
    factory.chain.save(root / "chain.json")
    return NetworkFile(chain=ChainSettings(backend="embedded", state=str(root / "chain.json")),
                       contract=net.ledger.contract_address, run_id=spec.run_id().hex()).save(root / "network.json")


def test_a_follower_writes_each_closed_epoch_once_and_resumes_after_a_restart(saved_run, tmp_path) -> None:
    out = tmp_path / "metrics"
    with open_ledger(NetworkFile.model_validate_json(saved_run.read_text())) as ledger:
        follower = MetricsFollower(MetricsWriter(out, ledger.denom, {"x": "y"}))
        assert follower.observe(ledger, 2) == [0, 1]  # epoch 2 is still open: not written
        assert follower.observe(ledger, 2) == []
        rows = list(csv.DictReader((out / "epochs.csv").open()))
        assert [r["epoch"] for r in rows] == ["0", "1"] and all(float(r["val_loss_next"]) > 0 for r in rows)
        assert [r["epoch"] for r in csv.DictReader((out / "members.csv").open())] == ["0", "1"]
        seen = scalars(out / "tensorboard")
        assert [step for step, _ in seen["loss/validation_of_next_model"]] == [1, 2]
        assert seen["loss/validation_of_next_model"][0][1] == pytest.approx(float(rows[0]["val_loss_next"]))
        # A restarted daemon: a new follower on the same folder appends only what is new.
        restarted = MetricsFollower(MetricsWriter(out, ledger.denom))
        assert restarted.writer.written == {0, 1} == written_epochs(out / "epochs.csv")
        assert restarted.observe(ledger, 3) == [2]
    assert [r["epoch"] for r in csv.DictReader((out / "epochs.csv").open())] == ["0", "1", "2"]
    assert len(scalars(out / "tensorboard")["members/hosts"]) == 3


def test_a_follower_that_cannot_read_the_chain_carries_on(tmp_path, caplog) -> None:
    class Down:
        def report(self, epoch: int) -> None:
            raise ConnectionError("node down")

    follower = MetricsFollower(MetricsWriter(tmp_path, "inj", tensorboard=False))
    assert follower.observe(Down(), 1) == []  # type: ignore[arg-type]
    assert "could not write epochs [0] yet: node down" in caplog.text and follower.writer.written == set()


def test_a_members_file_begun_by_an_older_version_keeps_its_columns(saved_run, tmp_path, caplog) -> None:
    """A ``members.csv`` whose header predates a column (``weight``, issue 27) is appended in its own
    columns: no row shifts under the header, and the log names the column left out once."""
    out = tmp_path / "metrics"
    out.mkdir()
    older = [c for c in MEMBER_COLUMNS if c != "weight"]
    (out / "members.csv").write_text(",".join(older) + "\n")
    with open_ledger(NetworkFile.model_validate_json(saved_run.read_text())) as ledger:
        MetricsFollower(MetricsWriter(out, ledger.denom, tensorboard=False)).observe(ledger, 2)
    with (out / "members.csv").open(newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == older and len(rows) == 3 and all(len(row) == len(older) for row in rows)
    assert [dict(zip(older, row, strict=True))["role"] for row in rows[1:]] == ["host", "host"]
    assert caplog.text.count("members.csv has no column weight") == 1
    # A new folder gets the full header, the weight beside the stake.
    fresh = tmp_path / "fresh"
    MetricsWriter(fresh, "inj", tensorboard=False).write([])
    with open_ledger(NetworkFile.model_validate_json(saved_run.read_text())) as ledger:
        MetricsWriter(fresh, ledger.denom, tensorboard=False).write([ledger.report(0)])
    row = next(csv.DictReader((fresh / "members.csv").open()))
    assert list(row)[:6] == ["epoch", "role", "address", "name", "stake", "weight"] and row["weight"] == row["stake"]

