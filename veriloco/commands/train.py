"""``veriloco train``: plain DiLoCo next to data-parallel and single-worker training, no chain.

Runs :func:`trainer.diloco.simulate` for the chosen modes at equal compute on a preset's run spec
and prints validation loss and communication side by side, and the validation curve of each mode
(``--evals`` points).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from protocol.rules.spec import parse_quant_schedule
from trainer.presets import PRESETS, preset, with_topk2_settings
from veriloco.commands.common import Device, check_device
from veriloco.errors import CommandError
from veriloco.home import home_dir
from veriloco.output import console, err_console, print_json, table

MODES = ("diloco", "ddp", "single")  # trainer.diloco.MODES, without loading torch for --help

app = typer.Typer(help="Train without the chain: DiLoCo vs data-parallel vs one worker, at equal compute.")


def _bytes(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


@app.callback(invoke_without_command=True)
def train(
    preset_name: Annotated[str, typer.Option("--preset", help=f"run spec preset: {', '.join(PRESETS)}")] = "demo",
    mode: Annotated[str, typer.Option(help=f"{', '.join(MODES)} or all")] = "all",
    workers: Annotated[int, typer.Option("--workers", "-k", min=1, help="K workers")] = 4,
    inner_steps: Annotated[int | None, typer.Option("--inner-steps", "-H", min=1,
                                                       help="H inner steps per round (default: the preset's)")] = None,
    steps: Annotated[int | None, typer.Option(min=1, help="T steps per worker, a multiple of H (default 10·H)")] = None,
    quant: Annotated[str | None, typer.Option(help="Δ quantization: none, int8, int4, topk2 (the largest 1/64 of "
                                                   "every 1024 values at 2 bits, with error feedback decayed by "
                                                   "0.9, probed with 0.03 nats + 5 %, outer SGD lr 1 without "
                                                   "momentum) (default: the preset's)")] = None,
    quant_schedule: Annotated[str | None, typer.Option(
        help="Δ quantization by epoch (quantization.schedule), SCHEME[/BLOCK]@FROM_EPOCH,..., the first @0, "
             "e.g. int8@0,topk2/1024@10; replaces --quant")] = None,
    outer_lr: Annotated[str | None, typer.Option(
        help="outer learning rate (default: the preset's, 0.7; 1 in a topk2 run)")] = None,
    inner_state: Annotated[str, typer.Option(help="DiLoCo inner AdamW state per round: fresh (the protocol) "
                                                  "or kept (the DiLoCo paper)")] = "fresh",
    inner_optimizer: Annotated[str | None, typer.Option(
        help="inner optimizer: adamw, or muon (Muon on the hidden matrices, AdamW on the rest) "
             "(default: the preset's)")] = None,
    evals: Annotated[int, typer.Option(min=1, help="validation measurements per run (the last at the end)")] = 10,
    threads: Annotated[int | None, typer.Option(min=1, help="torch threads")] = None,
    device: Device = "cpu",
    home: Annotated[str | None, typer.Option("--home", help="veriloco home (dataset cache)")] = None,
    json: Annotated[bool, typer.Option("--json", help="print a JSON summary")] = False,
) -> None:
    """Train the preset's model in the chosen modes and compare validation loss and bytes sent."""
    from trainer.data import Dataset  # noqa: PLC0415 (torch loads only when training)
    from trainer.determinism import configure  # noqa: PLC0415 (as above)
    from trainer.diloco import MODES as TRAINER_MODES  # noqa: PLC0415 (as above)
    from trainer.diloco import Mode, simulate  # noqa: PLC0415 (as above)

    assert MODES == TRAINER_MODES, "veriloco.commands.train.MODES must list trainer.diloco.MODES"
    modes: list[Mode] = list(TRAINER_MODES) if mode == "all" else [m for m in TRAINER_MODES if m == mode]
    if not modes:
        raise CommandError(f"unknown mode {mode!r} (use {', '.join(MODES)} or all)")
    if inner_state not in ("fresh", "kept"):
        raise CommandError(f"inner_state must be 'fresh' or 'kept', not {inner_state!r}")
    state: Literal["fresh", "kept"] = "kept" if inner_state == "kept" else "fresh"
    try:
        spec = preset(preset_name)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    h = inner_steps or spec.train.inner_steps
    changes: dict = {"train": {"inner_steps": h, "segment_steps": h}
                     | ({} if inner_optimizer is None else {"inner_optimizer": inner_optimizer})}
    if quant is not None and quant_schedule is not None:
        raise CommandError("give --quant or --quant-schedule, not both")
    if quant is not None:
        changes["quantization"] = {"scheme": quant} | ({"block_size": 1024} if quant == "topk2" else {})
    if quant_schedule is not None:
        try:
            changes["quantization"] = parse_quant_schedule(quant_schedule).model_dump(mode="json")
        except ValueError as exc:
            raise CommandError(f"invalid --quant-schedule: {exc}") from None
    try:
        # A topk2 run gets its outer step (SGD lr 1, no momentum) first; --outer-lr then overrides the lr.
        spec = with_topk2_settings(spec.with_changes(**changes))
        if outer_lr is not None:
            spec = spec.with_changes(outer={"lr": outer_lr})
    except ValueError as exc:
        raise CommandError(f"invalid run spec: {exc}") from None
    t = steps or 10 * h
    if t % h:
        raise CommandError(f"--steps ({t}) must be a multiple of --inner-steps ({h})")
    check_device(device)
    configure(threads, device)
    dataset = Dataset.load(spec.data, home_dir(home) / "cache")

    results = []
    with Progress(TextColumn("{task.description:>8}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console, disable=json) as progress:
        for m in modes:
            task = progress.add_task(m, total=workers * t)

            def advance(done: int, total: int, task: TaskID = task) -> None:
                progress.update(task, completed=done)

            results.append(simulate(spec, dataset, m, workers, t, evals=evals, inner_state=state, device=device,
                                    progress=advance))
    rows: list[dict[str, Any]] = [{"mode": r.mode, "workers": r.workers, "inner_steps": r.inner_steps, "steps": r.steps,
             "val_loss": round(r.val_loss, 4), "bytes_sent": r.bytes_sent,
             "quant_error": None if r.quant_error is None else round(r.quant_error, 5),
             "wall_s": round(r.wall_s, 1),
             "curve": [{"steps": done, "val_loss": round(v, 4)} for done, v in r.curve]} for r in results]
    scheme = quant_schedule if quant_schedule is not None else spec.quantization.scheme
    if json:
        print_json({"preset": preset_name, "quantization": scheme, "error_decay": str(spec.quantization.error_decay),
                    "probe_margin_topk2": None if spec.aggregation.probe_margin_topk2 is None
                    else str(spec.aggregation.probe_margin_topk2),
                    "outer": {"lr": str(spec.outer.lr), "momentum": str(spec.outer.momentum)},
                    "inner_optimizer": spec.train.inner_optimizer, "runs": rows})
        return
    console.print(table(
        f"{preset_name}: K={workers}, H={h}, T={t} steps per worker, Δ {scheme}"
        + (f" (β {spec.quantization.error_decay})" if spec.quantization.reaches_topk2 else "")
        + f", outer lr {spec.outer.lr} momentum {spec.outer.momentum}, inner {spec.train.inner_optimizer}",
        ["mode", "val loss (nats/byte)", "bytes sent", "Δ quant. error", "wall s"],
        [[r["mode"], f"{r['val_loss']:.4f}", _bytes(r["bytes_sent"]),
          "" if r["quant_error"] is None else f"{100 * r['quant_error']:.2f}%", r["wall_s"]] for r in rows]))
    console.print(table("validation curve: steps of compute (all workers together) → val loss (nats/byte)",
                        ["mode", "curve"],
                        [[r["mode"], "  ".join(f"{p['steps']}→{p['val_loss']:.4f}" for p in r["curve"])]
                         for r in rows]))
