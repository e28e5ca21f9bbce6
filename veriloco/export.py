"""The trained model out of veriloco: a folder that plain PyTorch loads (``veriloco model export``).

A global state (``trainer.outer.GlobalState``) holds ``param/<name>`` and ``momentum/<name>``
tensors and is named by its hash on chain. An export keeps only the parameters, under their
PyTorch names (``model.state_dict()`` keys, no prefix), in a plain safetensors file, beside a
``config.json`` with what building and evaluating the model needs and a small validation sample:

* ``model.safetensors`` — the parameters (float32), metadata ``format: pt`` plus the run id,
  model hash and epoch;
* ``config.json`` — ``architecture`` and ``model_params`` (the run spec's model: for ``gpt``,
  ``build_gpt(**model_params)`` builds it), ``vocab_size`` (256: the tokens are the bytes of UTF-8 text), ``seq_len``,
  the run, the epoch, the model hash, and ``sample_loss``: the mean cross-entropy of this model
  on ``sample.bin`` as veriloco measures it;
* ``sample.bin`` — ``sample_windows`` validation windows of ``seq_len + 1`` bytes each.

``docs/operators.md`` shows the few lines of PyTorch that load and evaluate it; a test runs them.

With ``fmt="hf"`` the same folder is in Hugging Face's GPT-2 layout instead (``veriloco.hf_layout``):
``model.safetensors`` under GPT2LMHeadModel's names, a ``transformers`` ``config.json`` (``model_type``
``gpt2``) whose ``veriloco`` section holds the fields above, ``sample.bin``, and a README on the
byte-level vocabulary; ``AutoModelForCausalLM.from_pretrained(folder)`` loads it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from safetensors.torch import save_file

from protocol.rules.models import check_model
from protocol.rules.spec import RunSpec
from trainer.artifacts import global_path
from trainer.data import VOCAB_SIZE, Dataset
from trainer.evaluate import validation_loss, validation_starts
from trainer.model import build_model
from trainer.outer import GlobalState, load_global
from veriloco.errors import CommandError
from veriloco.hf_layout import HF_README, gpt2_config, gpt2_state_dict

ExportFormat = Literal["plain", "hf"]

SAMPLE_WINDOWS = 64
EXPORT_FORMAT = "veriloco/export-1"


def find_state(spec: RunSpec, model_hash: str, places: Sequence[Path]) -> GlobalState:
    """The global state with ``model_hash`` from a work directory under ``places``, checked by hash.

    Each place is searched itself and one level down (a simulation's work directory holds
    ``host-0/``, ``host-1/``…; a veriloco home holds ``host-<key>/`` and ``validator-<key>/``).
    θ_0 needs no file: it is computed from the spec.

    Raises:
        CommandError: no place holds a state with that hash.
    """
    initial = GlobalState.initial(spec)
    if initial.hash().hex() == model_hash:
        return initial
    run_id = spec.run_id()
    roots: list[Path] = []
    for place in places:
        if place.is_dir():
            roots.append(place)
            roots.extend(sorted(p for p in place.iterdir() if p.is_dir()))
    for root in roots:
        path = global_path(root, run_id, model_hash)
        if path.is_file():
            state = load_global(path, spec)
            if state.hash().hex() == model_hash:
                return state
    searched = ", ".join(str(p) for p in places) or "nowhere"
    raise CommandError(f"no local copy of model {model_hash[:16]}… (searched {searched} and their subfolders): "
                       "export where a host or validator of this run keeps its work directory, or pass --from DIR")


def export_model(state: GlobalState, spec: RunSpec, dataset: Dataset, out: Path, *, model_hash: str,
                 epoch: int, fmt: ExportFormat = "plain") -> dict[str, Any]:
    """Write ``state``'s parameters, config and validation sample to ``out``; return veriloco's
    config (for ``hf``, the ``veriloco`` section of the written ``config.json``).

    Raises:
        CommandError: ``out`` exists and is not an empty folder, or ``hf`` asked for an
            architecture without a Hugging Face layout.
    """
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CommandError(f"{out} exists and is not an empty folder")
    if fmt == "hf" and spec.model.architecture != "gpt":
        raise CommandError(f"no Hugging Face layout for architecture {spec.model.architecture!r}")
    params = {name: t.detach().to(torch.float32).contiguous() for name, t in sorted(state.params.items())}
    model_params = check_model(spec.model.architecture, dict(spec.model.params)).model_dump()  # defaults filled in
    written = gpt2_state_dict(params, int(model_params["n_layer"])) if fmt == "hf" else params
    out.mkdir(parents=True, exist_ok=True)
    save_file(written, str(out / "model.safetensors"),
              metadata={"format": "pt", "veriloco.run_id": spec.run_id().hex(), "veriloco.model_hash": model_hash,
                        "veriloco.epoch": str(epoch)})
    starts = validation_starts(dataset, SAMPLE_WINDOWS)
    x, y = dataset.windows(starts, split="val")
    sample = torch.cat([x, y[:, -1:]], dim=1).to(torch.uint8)
    (out / "sample.bin").write_bytes(sample.numpy().tobytes())
    model = build_model(spec)
    loss = validation_loss(model, dataset, windows=SAMPLE_WINDOWS, batch_size=SAMPLE_WINDOWS, params=params)
    config = {
        "format": EXPORT_FORMAT,
        "architecture": spec.model.architecture,
        "model_params": spec.model.params,
        "vocab_size": VOCAB_SIZE,
        "tokenizer": "bytes: each byte of UTF-8 text is one token (0-255)",
        "seq_len": spec.data.seq_len,
        "corpus": spec.data.corpus,
        "dataset_hash": spec.data.dataset_hash,
        "run": spec.name,
        "run_id": spec.run_id().hex(),
        "epoch": epoch,
        "model_hash": model_hash,
        "parameters": sum(t.numel() for t in params.values()),
        "sample_windows": len(starts),
        "sample_loss": round(loss, 6),
    }
    document = config
    if fmt == "hf":
        document = {**gpt2_config(model_params, VOCAB_SIZE), "veriloco": config}
        (out / "README.md").write_text(HF_README.format(
            folder=out, epoch=epoch, run=spec.name, run_id=config["run_id"], model_hash=model_hash,
            windows=len(starts), window=spec.data.seq_len + 1))
    (out / "config.json").write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    return config
