"""``veriloco train``: the Typer app runs every mode and prints a JSON summary."""

from __future__ import annotations

import json

import typer
from typer.testing import CliRunner

from veriloco.commands.train import app


def _cli() -> typer.Typer:
    root = typer.Typer()
    root.add_typer(app, name="train")
    return root


def test_train_all_modes_json(veriloco_home) -> None:
    result = CliRunner().invoke(_cli(), ["train", "--preset", "tiny", "-k", "2", "-H", "8", "--steps", "16",
                                         "--evals", "1", "--home", str(veriloco_home), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    runs = {r["mode"]: r for r in summary["runs"]}
    assert set(runs) == {"diloco", "ddp", "single"} and summary["quantization"] == "int8"
    assert all(r["val_loss"] < 5.0 for r in runs.values())  # from ~5.5 nats/byte at initialization
    assert runs["single"]["bytes_sent"] == 0 and runs["ddp"]["bytes_sent"] > runs["diloco"]["bytes_sent"] > 0


def test_topk2_sends_far_fewer_bytes_than_int8(veriloco_home) -> None:
    sent = {}
    for option, quant in (("--quant", "int8"), ("--quant", "topk2"), ("--quant-schedule", "int8@0,topk2@1")):
        result = CliRunner().invoke(_cli(), ["train", "--preset", "tiny", "--mode", "diloco", "-k", "2", "-H", "8",
                                             "--steps", "16", "--evals", "1", option, quant,
                                             "--home", str(veriloco_home), "--json"])
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout)
        assert summary["quantization"] == quant
        # What the command writes into a topk2 spec: β = 0.9 and the topk2 allowance 0.03 + 5 %.
        topk2 = "topk2" in quant
        assert summary["error_decay"] == ("0.9" if topk2 else "1")
        assert summary["probe_margin_topk2"] == ("0.03" if topk2 else None)
        assert summary["outer"] == ({"lr": "1", "momentum": "0"} if topk2 else {"lr": "0.7", "momentum": "0.9"})
        run = summary["runs"][0]
        assert run["val_loss"] < 5.4  # from ~5.5 nats/byte at initialization, after two rounds
        sent[quant] = run["bytes_sent"]
    assert sent["int8"] > 10 * sent["topk2"] > 0
    # The schedule's first round is sent as int8, its second as topk2.
    assert sent["int8@0,topk2@1"] == sent["int8"] // 2 + sent["topk2"] // 2


def test_an_outer_lr_given_overrides_the_topk2_outer_lr(veriloco_home) -> None:
    result = CliRunner().invoke(_cli(), ["train", "--preset", "tiny", "--mode", "diloco", "-k", "2", "-H", "8",
                                         "--steps", "8", "--evals", "1", "--quant", "topk2", "--outer-lr", "1.5",
                                         "--home", str(veriloco_home), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["outer"] == {"lr": "1.5", "momentum": "0"}


def test_bad_arguments_are_refused(tmp_path) -> None:
    result = CliRunner().invoke(_cli(), ["train", "--preset", "tiny", "-H", "8", "--steps", "12",
                                         "--home", str(tmp_path)])
    assert result.exit_code != 0 and "multiple of --inner-steps" in str(result.exception)
    result = CliRunner().invoke(_cli(), ["train", "--mode", "gossip", "--home", str(tmp_path)])
    assert result.exit_code != 0 and "unknown mode" in str(result.exception)
    for extra, message in ((["--quant-schedule", "topk2@0,int8@2"], "drop the error-feedback residual"),
                           (["--quant-schedule", "int8@1"], "must start at epoch 0"),
                           (["--quant", "int8", "--quant-schedule", "int8@0"], "not both")):
        result = CliRunner().invoke(_cli(), ["train", *extra, "--home", str(tmp_path)])
        assert result.exit_code != 0 and message in str(result.exception), result.output


def test_device_option(tmp_path) -> None:
    # --device cpu is the default path; a device this machine cannot compute on is a clear refusal.
    result = CliRunner().invoke(_cli(), ["train", "--preset", "tiny", "--mode", "single", "-k", "1", "-H", "4",
                                         "--steps", "4", "--evals", "1", "--device", "cpu", "--home", str(tmp_path),
                                         "--json"])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(_cli(), ["train", "--device", "meta", "--home", str(tmp_path)])
    assert result.exit_code != 0 and "only cpu and cuda" in str(result.exception)
    import torch

    if not torch.cuda.is_available():
        result = CliRunner().invoke(_cli(), ["train", "--device", "cuda", "--home", str(tmp_path)])
        assert result.exit_code != 0 and "no CUDA device" in str(result.exception)


def test_muon_inner_trains_and_a_bad_optimizer_is_refused(veriloco_home) -> None:
    result = CliRunner().invoke(_cli(), ["train", "--preset", "tiny", "--mode", "diloco", "-k", "2", "-H", "8",
                                         "--steps", "16", "--evals", "1", "--inner-optimizer", "muon",
                                         "--home", str(veriloco_home), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["inner_optimizer"] == "muon"
    assert summary["runs"][0]["val_loss"] < 5.4  # from ~5.5 nats/byte at initialization, after two rounds
    result = CliRunner().invoke(_cli(), ["train", "--preset", "tiny", "--inner-optimizer", "sgd",
                                         "--home", str(veriloco_home)])
    assert result.exit_code != 0 and "Input should be 'adamw' or 'muon'" in str(result.exception)
