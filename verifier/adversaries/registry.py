"""The catalogue by name: host behaviours from ``name:a,b,key=value`` text, validator behaviours by name.

A behaviour's text parameters are its constructor's parameters of a text-like type (``float``,
``int``, ``str`` or a ``Literal`` of strings), converted and checked by that type; ``PARAMS``
orders the ones that may be given positionally. What text cannot carry (another host's artifact
source, a target model) is passed to :func:`make_adversary` as a keyword.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Mapping, Sequence
from typing import Literal

import torch

from trainer.artifacts import ArtifactSource
from verifier.adversaries.aggregation import ALIE, IPM
from verifier.adversaries.base import Adversary, Honest
from verifier.adversaries.forged import Copycat, FakeLosses, NoiseDelta, ScaledDelta, SignFlipDelta, StaleDelta
from verifier.adversaries.forgery import FakeTrainLoss, LowPrecision, Moments, MuonMomentum, Poison
from verifier.adversaries.game import Auditor, SelectiveReveal
from verifier.adversaries.pol import Blindfold, Crafted, Interpolate
from verifier.adversaries.serving import SelectiveServe, SlowDrip, Withhold
from verifier.adversaries.unseen import Jump, ShiftedStart
from verifier.adversaries.validators import (
    AlwaysFail,
    AlwaysPass,
    Colluder,
    CopycatValidator,
    DisputeCopier,
    GainCopier,
    GainLiar,
    Silent,
    SybilSeatGrabber,
    SybilWithholder,
    TrapReader,
    UnavailableSpammer,
    ValidatorBehaviour,
)
from verifier.adversaries.work import Infinitesimal, Lazy, WrongData, WrongLR

ADVERSARIES: dict[str, type[Adversary]] = {cls.name: cls for cls in (
    Honest, Lazy, NoiseDelta, ScaledDelta, SignFlipDelta, StaleDelta, Copycat, WrongData, WrongLR,
    FakeLosses, Withhold, SelectiveServe, SlowDrip, SelectiveReveal, Auditor, Crafted, Blindfold, Interpolate,
    Infinitesimal, ALIE, IPM, Poison, Moments, MuonMomentum, LowPrecision, FakeTrainLoss, ShiftedStart, Jump)}
"""Host behaviour name -> class; construct with keyword parameters, or from ``name:a,b`` with :func:`make_adversary`."""

VALIDATORS: dict[str, type[ValidatorBehaviour]] = {cls.name: cls for cls in (
    ValidatorBehaviour, AlwaysPass, AlwaysFail, Silent, CopycatValidator, Colluder, SybilSeatGrabber, SybilWithholder,
    TrapReader, DisputeCopier, GainCopier, GainLiar, UnavailableSpammer)}
"""Validator behaviour name -> class."""


def text_parameters(cls: type[Adversary]) -> dict[str, object]:
    """The constructor parameters of ``cls`` that text can set: name -> type (``float``, ``int``,
    ``str`` or a ``Literal`` of strings)."""
    hints = typing.get_type_hints(cls.__init__)
    out: dict[str, object] = {}
    for name in inspect.signature(cls.__init__).parameters:
        hint = hints.get(name)
        if hint in (float, int, str) or (typing.get_origin(hint) is Literal
                                         and all(isinstance(a, str) for a in typing.get_args(hint))):
            out[name] = hint
    return out


def _convert(adversary: str, key: str, value: str, hint: object) -> object:
    try:
        if hint is float:
            return float(value)
        if hint is int:
            return int(value)
    except ValueError:
        raise ValueError(f"{adversary}: {key} must be a number, not {value!r}") from None
    if typing.get_origin(hint) is Literal and value not in typing.get_args(hint):
        raise ValueError(f"{adversary}: {key} is one of {', '.join(typing.get_args(hint))}, not {value!r}")
    return value


def parse_adversary(text: str) -> tuple[type[Adversary], dict[str, object]]:
    """The class and keyword parameters that ``name`` or ``name:a,b,key=value`` names.

    Positional values fill the class's ``PARAMS`` in order; ``key=value`` sets any text parameter
    (:func:`text_parameters`).

    Raises:
        ValueError: unknown name, too many or unknown parameters, or a value of the wrong type.
    """
    name, _, rest = text.partition(":")
    if name not in ADVERSARIES:
        raise ValueError(f"unknown adversary {name!r} (known: {', '.join(sorted(ADVERSARIES))})")
    cls = ADVERSARIES[name]
    settable = text_parameters(cls)
    kwargs: dict[str, object] = {}
    for i, item in enumerate(x for x in rest.split(",") if x):
        key, eq, value = item.partition("=")
        if not eq:
            if i >= len(cls.PARAMS):
                raise ValueError(f"{name} takes at most {len(cls.PARAMS)} positional parameters "
                                 f"({', '.join(cls.PARAMS)})")
            key, value = cls.PARAMS[i], item
        if key not in settable:
            raise ValueError(f"{name} has no parameter {key!r} that text can set")
        kwargs[key] = _convert(name, key, value, settable[key])
    return cls, kwargs


def make_adversary(text: str, *, seed: int = 0, victim: ArtifactSource | None = None,
                   peers: Sequence[ArtifactSource] = (),
                   target: Mapping[str, torch.Tensor] | None = None) -> Adversary:
    """Build a host behaviour from ``name`` or ``name:a,b,key=value`` (e.g. ``lazy:0.5``, ``wrong_lr:1.5,0.25``).

    Args:
        text: the behaviour and its text parameters (:func:`parse_adversary`).
        seed: mixes into the behaviour's random choices (``seed=`` in the text wins).
        victim: the artifact source ``copycat`` copies from.
        peers: the artifact sources whose Δs ``alie`` reads.
        target: the model ``interpolate`` heads for.
        Each goes only to a behaviour whose constructor takes it.

    Raises:
        ValueError: unknown name, bad parameters, or a behaviour that lacks what it needs.
    """
    cls, kwargs = parse_adversary(text)
    accepted = inspect.signature(cls.__init__).parameters
    context: dict[str, object] = {"seed": seed, "victim": victim, "peers": peers, "target": target}
    kwargs = {**{k: v for k, v in context.items() if k in accepted}, **kwargs}
    return cls(**kwargs)  # type: ignore[arg-type]  # each value was checked against its parameter's type


def make_validator_behaviour(name: str) -> ValidatorBehaviour:
    """The validator behaviour called ``name`` (``honest``, ``always_pass``, ``always_fail``, ``silent``,
    ``copycat``, and issue 27's ``colluder``, ``sybil``, ``withholder``, ``trap_reader``,
    ``dispute_copier``, ``unavailable``, and issue 28's ``gain_copier`` and ``gain_liar``)."""
    if name not in VALIDATORS:
        raise ValueError(f"unknown validator behaviour {name!r} (known: {', '.join(sorted(VALIDATORS))})")
    return VALIDATORS[name]()
