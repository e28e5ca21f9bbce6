"""``veriloco model export`` and the few lines of PyTorch in docs/operators.md that load its output.

A real (embedded-chain) run of one epoch; the export is found by the agreed hash in the hosts' work
directories, and the doc's Python block, run as written, must reproduce the loss veriloco measured.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from doc_steps import DOC, walkthrough
from safetensors.torch import load_file
from typer.testing import CliRunner

from chain.embedded import EmbeddedChain
from trainer.behaviour import HostBehaviour
from trainer.data import Dataset
from trainer.outer import GlobalState, load_global
from trainer.presets import tiny
from veriloco.cli import app
from veriloco.connect import ChainSettings, NetworkFile
from veriloco.network import EmbeddedChainFactory, LocalNetwork, Roster

pytestmark = pytest.mark.slow

SPEC = tiny("export").with_changes(train={"inner_steps": 16, "segment_steps": 4, "batch_size": 8},
                                   verification={"enabled": False}, phases={"min_hosts": 2, "min_validators": 0})


@pytest.fixture(scope="module")
def one_epoch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(network file, work root) of a one-epoch run of two honest hosts, verification off."""
    root = tmp_path_factory.mktemp("run")
    spec = SPEC
    factory = EmbeddedChainFactory()
    net = LocalNetwork(spec, root, Roster(hosts=[HostBehaviour(), HostBehaviour()]), Dataset.load(spec.data),
                       chain=factory)
    net.run_epoch()
    assert isinstance(factory.chain, EmbeddedChain)
    factory.chain.save(root / "chain.json")
    network = NetworkFile(chain=ChainSettings(backend="embedded", state=str(root / "chain.json")),
                          contract=net.ledger.contract_address, run_id=spec.run_id().hex()).save(root / "network.json")
    return network, root


def export(*args: str, home: Path) -> dict:
    result = CliRunner(env={"VERILOCO_HOME": str(home)}).invoke(app, ["model", "export", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_docs_lines_load_and_evaluate_the_export(one_epoch, tmp_path) -> None:
    network, root = one_epoch
    done = export(str(tmp_path / "exported"), "--network", str(network), home=tmp_path / "home")
    config = done["config"]
    assert config["epoch"] == 1 and config["format"] == "veriloco/export-1"
    # Plain PyTorch names, exactly θ_1's parameters (found by the agreed hash in a host's work directory).
    theta1 = load_global(next(root.glob(f"host-*/*/global/{config['model_hash']}.safetensors")), SPEC)
    assert theta1.hash().hex() == config["model_hash"]
    params = load_file(str(tmp_path / "exported" / "model.safetensors"))
    assert not any(name.startswith(("param/", "momentum/")) for name in params)
    assert set(params) == set(theta1.params) and all(torch.equal(params[n], theta1.params[n]) for n in params)
    # The doc's Python, as written, in the folder that holds `exported/`.
    [program] = [s.text for s in walkthrough(DOC.read_text()) if s.kind == "python"]
    ran = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    loss = float(ran.stdout.split()[0])
    assert loss == pytest.approx(config["sample_loss"], abs=1e-4) and loss < 4.0


def test_theta_0_needs_no_files_and_nothing_is_overwritten(one_epoch, tmp_path) -> None:
    network, _ = one_epoch
    nowhere = tmp_path / "empty"
    nowhere.mkdir()
    done = export(str(tmp_path / "theta0"), "--epoch", "0", "--from", str(nowhere), "--network", str(network),
                  home=tmp_path / "home")
    assert done["config"]["model_hash"] == GlobalState.initial(SPEC).hash().hex()
    runner = CliRunner(env={"VERILOCO_HOME": str(tmp_path / "home")})
    again = runner.invoke(app, ["model", "export", str(tmp_path / "theta0"), "--epoch", "0", "--network", str(network)])
    assert again.exit_code == 1 and "exists and is not an empty folder" in again.stderr
    missing = runner.invoke(app, ["model", "export", str(tmp_path / "x"), "--from", str(nowhere), "--network",
                                  str(network)])
    assert missing.exit_code == 1 and "no local copy of model" in missing.stderr


def test_the_hf_export_loads_in_transformers_and_gives_the_projects_logits(one_epoch, tmp_path) -> None:
    """`--format hf`: AutoModelForCausalLM loads the folder and computes the project's own logits and
    loss on the same bytes; the folder's README, run as written, loads it too."""
    transformers = pytest.importorskip("transformers")
    from trainer.model import build_model

    network, root = one_epoch
    folder = tmp_path / "hf"
    done = export(str(folder), "--format", "hf", "--network", str(network), home=tmp_path / "home")
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "gpt2" and config["veriloco"]["model_hash"] == done["config"]["model_hash"]
    theta1 = load_global(next(root.glob(f"host-*/*/global/{done['config']['model_hash']}.safetensors")), SPEC)
    ours = build_model(SPEC).eval()
    ours.load_state_dict(theta1.params)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    sample = torch.frombuffer(bytearray((folder / "sample.bin").read_bytes()), dtype=torch.uint8)
    windows = sample.view(done["config"]["sample_windows"], -1).long()
    x, y = windows[:, :-1], windows[:, 1:]
    with torch.no_grad():
        expected, got = ours(x), theirs(x).logits
    assert got.shape == expected.shape and torch.allclose(got, expected, atol=1e-5, rtol=1e-5)
    loss = torch.nn.functional.cross_entropy(got.reshape(-1, got.size(-1)), y.reshape(-1)).item()
    assert loss == pytest.approx(done["config"]["sample_loss"], abs=1e-4)
    readme = (folder / "README.md").read_text()
    [program] = [block.split("\n", 1)[1] for block in readme.split("```")[1::2] if block.startswith("python")]
    ran = subprocess.run([sys.executable, "-c", program + "print(tuple(logits.shape))"], capture_output=True,
                         text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip().splitlines()[-1] == "(1, 19, 256)"


def test_the_hf_layout_refuses_parameters_of_another_model() -> None:
    from veriloco.hf_layout import gpt2_state_dict

    params = {"tok.weight": torch.zeros(256, 8), "pos.weight": torch.zeros(16, 8)}
    with pytest.raises(ValueError, match="missing: not the gpt architecture"):
        gpt2_state_dict(params, n_layer=1)
    with pytest.raises(ValueError, match="left over"):
        gpt2_state_dict({**params, "ln_f.weight": torch.ones(8), "ln_f.bias": torch.zeros(8),
                         "head.weight": torch.zeros(256, 8), "extra": torch.zeros(1)}, n_layer=0)
