"""``veriloco model export``: the agreed model as a folder that plain PyTorch loads (``veriloco.export``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from veriloco.commands import tx_flags
from veriloco.commands.common import Home, Json, Network
from veriloco.connect import load_network, network_path, open_ledger
from veriloco.errors import CommandError
from veriloco.home import home_dir
from veriloco.output import console, err_console, print_json

app = typer.Typer(help="The trained model: export it for plain PyTorch.", no_args_is_help=True)


@app.command("export")
@tx_flags.reads
def export(
    out: Annotated[Path, typer.Argument(help="folder to create (model.safetensors, config.json, sample.bin)")],
    fmt: Annotated[str, typer.Option(
        "--format", help="plain: PyTorch names and veriloco's config; hf: Hugging Face's GPT-2 layout, which "
                         "transformers.AutoModelForCausalLM.from_pretrained loads")] = "plain",
    epoch: Annotated[int | None, typer.Option(
        help="export θ_EPOCH, the model epoch EPOCH starts from (default: the newest agreed model)")] = None,
    from_: Annotated[list[Path] | None, typer.Option(
        "--from", help="a work directory holding the run's global states (repeatable; default: the "
                       "network file's folder and the veriloco home, and their subfolders)")] = None,
    network: Network = None, home: Home = None, json: Json = False,
) -> None:
    """Write a run's model as safetensors with a config and a sample: plain PyTorch names, or
    with --format hf a folder Hugging Face transformers loads (AutoModelForCausalLM).

    The model is found by its on-chain hash in local work directories (a host's or validator's,
    or a simulation's) and checked against that hash before it is written.
    """
    if fmt not in ("plain", "hf"):
        raise CommandError(f"--format must be plain or hf, not {fmt!r}")
    net = load_network(network, home)
    with open_ledger(net) as ledger:
        current = ledger.epoch(lists=False)
        target = current.epoch if epoch is None else epoch
        if target > current.epoch:
            raise CommandError(f"θ_{target} does not exist yet: the run is in epoch {current.epoch}")
        model_hash = (current if target == current.epoch else ledger.epoch(target, lists=False)).model_hash
        spec = ledger.spec()
    places = from_ or [network_path(network, home).parent, home_dir(home)]
    err_console.print(f"exporting θ_{target} ({model_hash[:16]}…) of run {spec.name} (loads torch)…",
                      highlight=False)
    from trainer.data import Dataset  # noqa: PLC0415 (torch loads only for an export)
    from veriloco.export import export_model, find_state  # noqa: PLC0415 (as above)

    state = find_state(spec, model_hash, places)
    config = export_model(state, spec, Dataset.load(spec.data), out, model_hash=model_hash, epoch=target,
                          fmt="hf" if fmt == "hf" else "plain")
    if json:
        print_json({"folder": str(out), "format": fmt, "config": config})
        return
    layout = " in Hugging Face's GPT-2 layout (README.md says how to load it)" if fmt == "hf" else ""
    console.print(f"wrote θ_{target} ({config['parameters']} parameters) to {out}/{layout}: model.safetensors, "
                  f"config.json, sample.bin (its loss {config['sample_loss']:.4f} nats/byte)", highlight=False)
