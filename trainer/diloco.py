"""Plain DiLoCo without the chain, in one process, next to its baselines at equal compute.

For comparisons only: no checkpoints, no commitments, no verification. Every mode spends the same
compute, ``K · T`` micro-steps of ``batch_size`` rows, and sees the same windows:

``diloco``  K workers, each ``H`` inner AdamW steps per round from the global model (fresh
            optimizer state every round, as in the protocol; ``inner_state="kept"`` carries each
            worker's AdamW moments and step count across rounds instead, as in the DiLoCo
            paper), then the Δs are quantized
            (``spec.quantization``), dequantized, averaged with ``spec.aggregation`` and applied
            with the outer Nesterov step (``spec.outer``). ``T / H`` rounds. The Δs pass the
            proposers' peer bound first (``trainer.peer_bound.within_peer_bound``, as
            ``node/host.py`` applies it): from 3 Δs on, one beyond 1.5× the median norm in some
            tensor is left out and small tensors are clipped to 1.5× their median; with
            ``verification.probe_windows`` > 0, so is one whose probe gain (``trainer.probe``, on
            windows drawn from the epoch's beacon) is below the median by more than
            ``aggregation.probe_margin`` (not in an optimistic start: no validator has posted yet). With ``topk2`` each
            worker carries its error-feedback residual from round to round, as a host does
            (``trainer.delta.carried_from``: from the round before under the ``synchronous``
            schedule; from two rounds before under the pipelined ones, as a pipelined run's
            hosts do, whatever ``spec.phases.pipelined`` says, so the run id stays the spec's).
            ``schedule`` says
            which model a round trains from (pipelined epochs, docs/training.md):
            ``synchronous``: the global model after the previous round's outer step.
            ``delayed``: round ``e``'s aggregate enters the model round ``e + 2`` trains from
            (``e + 1`` started before ``e`` settled); the aggregates left when training ends are
            applied then, so every schedule takes ``T / H`` outer steps on the same Δ bytes.
            ``optimistic``: round ``e + 1`` trains from the outer step of EVERY committed Δ of
            ``e`` on the settled model, while the settled model (the one measured) takes only
            the accepted Δs. ``cheaters`` workers (the first ones) commit their Δ sign-flipped
            (``cheat="scaled"``: 3× its size, beyond the peer bound), and settlement always rejects
            them: only an optimistic start ever contains them, bounded by the peer bound as the
            proposers' start is (a scaled Δ is left out of it).
``ddp``     synchronous data parallelism: ``T`` steps on the K workers' batches together, the
            gradients averaged every step (the step's ``K`` micro-batches).
``single``  one worker, ``K · T`` steps of one worker-batch each.

Worker ``k`` is host ``worker-k``; its batch at inner step ``t`` of round ``e`` is the protocol's
assignment (:func:`protocol.rules.sampling.batch_indices`) with the seed of round ``e − 1`` (the genesis
seed, then :func:`protocol.rules.beacon.epoch_seed` with no reveals). ``ddp`` uses all K workers'
batches of (e, t) in one step; ``single`` uses them one after another.

Communication is counted as the tensor bytes each worker sends: a float32 gradient every step for
``ddp``; its quantized Δ payload every round for ``diloco``; nothing for ``single``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import torch

from protocol.rules.beacon import epoch_seed, genesis_seed
from protocol.rules.spec import RunSpec
from protocol.tensors.aggregation import aggregate
from trainer.data import Dataset
from trainer.delta import (
    carried_from,
    dequantize,
    encode_pseudo_gradient,
    payload_bytes,
    pseudo_gradient,
    relative_error,
)
from trainer.evaluate import validation_loss
from trainer.inner import EpochContext, start_checkpoint, train_steps
from trainer.outer import GlobalState, outer_step
from trainer.probe import (
    PROBE_SCALE,
    admitted,
    probe_applies,
    probe_gains,
    probe_rule,
    probe_seed,
    probe_starts,
)
from trainer.step import Stepper, TrainState

Mode = Literal["diloco", "ddp", "single"]
MODES: tuple[Mode, ...] = ("diloco", "ddp", "single")
Schedule = Literal["synchronous", "delayed", "optimistic"]
SCHEDULES: tuple[Schedule, ...] = ("synchronous", "delayed", "optimistic")

CHEAT_SCALE = 3.0
"""How much a ``scaled`` cheater enlarges its Δ: twice the peer bound's factor (1.5× the median)."""

Progress = Callable[[int, int], None]
"""Called with (micro-steps done, total micro-steps)."""


@dataclass
class SimResult:
    """The outcome of one simulated run.

    Attributes:
        mode: ``diloco``, ``ddp`` or ``single``.
        workers: K.
        inner_steps: H (the round length; also the data-assignment epoch length for the baselines).
        steps: T, steps per worker (``single`` takes ``K · T``).
        val_loss: validation loss of the final model (nats per byte).
        bytes_sent: tensor bytes sent by all workers together.
        quant_error: mean relative L2 error of the quantized Δs (``diloco`` only).
        wall_s: seconds of wall-clock time.
        curve: ``(micro-steps done, validation loss)`` at the evaluation points.
    """

    mode: Mode
    workers: int
    inner_steps: int
    steps: int
    val_loss: float
    bytes_sent: int
    quant_error: float | None
    wall_s: float
    curve: list[tuple[int, float]] = field(default_factory=list)


def _round_seed(run_id: bytes, e: int) -> bytes:
    return genesis_seed(run_id) if e == 0 else epoch_seed(run_id, e - 1, {})


def _worker_batch(dataset: Dataset, spec: RunSpec, run_id: bytes, k: int, j: int) -> tuple[torch.Tensor, torch.Tensor]:
    e, t = divmod(j, spec.train.inner_steps)
    return dataset.batch(run_id, _round_seed(run_id, e), f"worker-{k}", t, spec.train.batch_size)


def proposers_aggregate(spec: RunSpec, deltas: Mapping[str, Mapping[str, torch.Tensor]],
                        gains: Mapping[str, int] | None = None, epoch: int = 0) -> dict[str, torch.Tensor]:
    """The aggregate a proposer takes the outer step with (``node/host.py``): the peer bound, the
    probe rule on the decided probe ``gains`` (micro-nats; ``None`` or ``verification.probe_windows``
    0: no probe, e.g. an optimistic start, taken before any validator posted) and the small-tensor
    clip (:func:`trainer.probe.admitted`), then the run's rule over the kept Δs. Whole epochs only,
    so every Δ weighs the same (the unweighted rule, bit for bit). ``epoch`` picks the allowance for
    its scheme (:func:`trainer.probe.probe_rule`)."""
    probed = gains if probe_applies(spec, epoch) else None
    margin, relative = probe_rule(spec, epoch)
    return aggregate(spec.aggregation, admitted(deltas, probed, margin, relative_bps=relative).kept)


def epoch_gains(spec: RunSpec, model: torch.nn.Module, dataset: Dataset, theta: Mapping[str, torch.Tensor],
                deltas: Mapping[str, Mapping[str, torch.Tensor]], beacon: bytes, epoch: int) -> dict[str, int] | None:
    """What the validators of epoch ``epoch`` post: every host's probe gain of its Δ from ``theta``
    on ``verification.probe_windows`` windows drawn from ``beacon`` (:mod:`trainer.probe`); ``None``
    when the probe is off (:func:`trainer.probe.probe_applies`)."""
    if not probe_applies(spec, epoch):
        return None
    starts = probe_starts(dataset, probe_seed(beacon, epoch), spec.verification.probe_windows)
    return probe_gains(model, dataset, theta, deltas, starts, PROBE_SCALE)


def simulate(spec: RunSpec, dataset: Dataset, mode: Mode, workers: int, steps: int,
             evals: int = 10, eval_windows: int = 512, progress: Progress | None = None,
             inner_state: Literal["fresh", "kept"] = "fresh", device: str = "cpu",
             schedule: Schedule = "synchronous", cheaters: int = 0,
             cheat: Literal["sign_flip", "scaled"] = "sign_flip") -> SimResult:
    """Train one configuration and measure it.

    Args:
        spec: the run spec (model, inner AdamW, H = ``train.inner_steps``, quantization,
            aggregation, outer step).
        dataset: the run's dataset.
        mode: ``diloco``, ``ddp`` or ``single``.
        workers: K.
        steps: T, inner steps per worker; a multiple of H.
        evals: validation measurements along the way (the last one is at the end).
        eval_windows: validation windows per measurement.
        progress: callback with (micro-steps done, total).
        inner_state: ``diloco`` only: ``fresh`` AdamW state every round (the protocol) or each
            worker's state ``kept`` across rounds.
        device: where the steps and evaluations run (``cpu``, ``cuda``; see
            :class:`~trainer.step.Stepper`).
        schedule: ``diloco`` only: ``synchronous``, ``delayed`` or ``optimistic`` (above).
        cheaters: ``diloco`` only: how many workers commit a forged Δ that settlement rejects.
        cheat: what they commit: their Δ ``sign_flip``-ped, or ``scaled`` by :data:`CHEAT_SCALE`.
    """
    h = spec.train.inner_steps
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r} (known: {', '.join(MODES)})")
    if workers < 1:
        raise ValueError("workers must be >= 1")
    if inner_state not in ("fresh", "kept"):
        raise ValueError(f"inner_state must be 'fresh' or 'kept', not {inner_state!r}")
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r} (known: {', '.join(SCHEDULES)})")
    if cheat not in ("sign_flip", "scaled"):
        raise ValueError(f"cheat must be 'sign_flip' or 'scaled', not {cheat!r}")
    if not 0 <= cheaters < workers:
        raise ValueError("cheaters must be >= 0 and leave at least one honest worker")
    if steps % h or steps < h:
        raise ValueError(f"steps ({steps}) must be a positive multiple of inner_steps ({h})")
    run_id, total = spec.run_id(), workers * steps
    stepper = Stepper(spec, device=device)
    shapes = {n: p.shape for n, p in stepper.named.items()}
    marks = {total * (i + 1) // evals for i in range(evals)}
    curve: list[tuple[int, float]] = []
    bytes_sent, errors = 0, []
    started = time.perf_counter()
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(done, total)

    def evaluate(since: int, params: dict[str, torch.Tensor] | None = None) -> None:
        # Measure when an evaluation mark was passed since `since` (a DiLoCo round is measured
        # after its outer step, on the new global model).
        if any(since < m <= done for m in marks):
            curve.append((done, validation_loss(stepper.model, dataset, eval_windows, params=params)))

    if mode == "diloco":
        settled = GlobalState.initial(spec)  # the agreed model: accepted Δs only
        state = settled  # what the next round trains from
        kept: dict[int, TrainState] = {}
        residuals: dict[tuple[int, int], dict[str, torch.Tensor] | None] = {}  # (worker, round) -> left
        rule = spec.with_changes(phases={"pipelined": schedule != "synchronous"})  # whose residual lag
        pending: list[dict[str, torch.Tensor]] = []  # delayed: aggregates not applied yet, oldest first
        for e in range(steps // h):
            since, deltas = done, {}
            for k in range(workers):
                ctx = EpochContext(run_id, e, f"worker-{k}", _round_seed(run_id, e))
                start = start_checkpoint(spec, state.params, e).state
                if inner_state == "kept" and k in kept:
                    start = TrainState(start.params, kept[k].exp_avg, kept[k].exp_avg_sq, kept[k].step, start.rng_key)
                stepper.load(start)
                train_steps(stepper, dataset, spec, ctx, range(h), 1, on_step=lambda _t, _loss: advance(1))
                end = stepper.export()
                kept[k] = end
                delta = pseudo_gradient(state.params, end.params)
                if k < cheaters:
                    factor = -1.0 if cheat == "sign_flip" else CHEAT_SCALE
                    delta = {n: factor * t for n, t in delta.items()}
                # The epoch's scheme (quantization.schedule), and the residual it goes on from (the
                # host's rule; each is read once): None, i.e. zeros, in the first topk2 epochs.
                quant, source = spec.quantization.at(e), carried_from(rule, e)
                carried = residuals.pop((k, source), None) if source is not None else None
                payload, residuals[(k, e)] = encode_pseudo_gradient(delta, quant, carried)
                bytes_sent += payload_bytes(payload)
                deltas[ctx.host] = dequantize(payload, shapes, quant)
                errors.append(relative_error(delta, deltas[ctx.host]))
            accepted = {host: d for host, d in deltas.items() if int(host.split("-")[1]) >= cheaters}
            # The accepted hosts' probe gains, from the model they trained from, on windows of the
            # epoch's beacon (revealed after the Δs were committed).
            gains = epoch_gains(spec, stepper.model, dataset, state.params, accepted, epoch_seed(run_id, e, {}), e)
            if schedule == "optimistic":  # the next start: every committed Δ, before settlement (no gains yet)
                state = outer_step(settled, proposers_aggregate(spec, deltas, epoch=e), spec.outer)
                settled = outer_step(settled, proposers_aggregate(spec, accepted, gains, e), spec.outer)
            elif schedule == "delayed":
                pending.append(proposers_aggregate(spec, accepted, gains, e))
                if len(pending) > 1:
                    settled = outer_step(settled, pending.pop(0), spec.outer)
                state = settled
            else:
                settled = state = outer_step(settled, proposers_aggregate(spec, accepted, gains, e), spec.outer)
            evaluate(since, params=settled.params)
        if pending:  # the pipeline drains: the last round's aggregate
            settled = outer_step(settled, pending.pop(0), spec.outer)
            curve[-1] = (done, validation_loss(stepper.model, dataset, eval_windows, params=settled.params))
    else:
        stepper.load(start_checkpoint(spec, GlobalState.initial(spec).params, 0).state)
        grad_bytes = 4 * sum(p.numel() for p in stepper.named.values())
        for j in range(steps):
            since = done
            if mode == "ddp":
                batches = [_worker_batch(dataset, spec, run_id, k, j) for k in range(workers)]
                x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
                stepper.step(x, y, micro_batches=workers)
                bytes_sent += workers * grad_bytes
                advance(workers)
            else:
                for k in range(workers):
                    stepper.step(*_worker_batch(dataset, spec, run_id, k, j))
                    advance(1)
            evaluate(since)
    return SimResult(mode, workers, h, steps, curve[-1][1], bytes_sent,
                     sum(errors) / len(errors) if errors else None, time.perf_counter() - started, curve)
