"""The catalogue's registry turns text into behaviours with typed, checked parameters, and every
behaviour overrides its base class with exactly the base's signature."""

from __future__ import annotations

import inspect
import typing
from typing import Literal

import pytest
import torch

from protocol.rules.merkle import MerkleProof
from trainer.artifacts import ArtifactSource
from verifier.adversaries import (
    ADVERSARIES,
    VALIDATORS,
    Copycat,
    Interpolate,
    Lazy,
    WithheldSource,
    make_adversary,
    parse_adversary,
)
from verifier.adversaries.registry import text_parameters


class _Nothing(ArtifactSource):
    """A source that is never read (the registry only hands it over)."""

    def checkpoint(self, epoch: int, leaf: int) -> bytes:
        raise AssertionError("not read")

    def proof(self, epoch: int, leaf: int) -> MerkleProof:
        raise AssertionError("not read")

    def delta(self, epoch: int) -> bytes:
        raise AssertionError("not read")

    def losses(self, epoch: int) -> list[int]:
        raise AssertionError("not read")

    def global_state(self, model_hash: str) -> bytes:
        raise AssertionError("not read")


def test_text_parameters_come_from_the_constructors_types() -> None:
    assert text_parameters(Lazy) == {"f": float, "unit": Literal["segment", "step"],
                                     "how": Literal["copy", "extrapolate"], "seed": int}
    assert text_parameters(Copycat) == {"mode": Literal["all", "delta"], "seed": int}  # victim is no text
    assert text_parameters(Interpolate) == {"scale": float, "seed": int}
    for name, cls in ADVERSARIES.items():
        assert set(cls.PARAMS) <= set(text_parameters(cls)), name  # every positional parameter is text


def test_values_are_converted_by_type_and_refused_with_a_reason() -> None:
    assert parse_adversary("lazy:0.25,step,how=extrapolate,seed=7") == (
        Lazy, {"f": 0.25, "unit": "step", "how": "extrapolate", "seed": 7})
    assert parse_adversary("withhold:delta")[1] == {"what": "delta"}
    for text, words in (("lazy:0.5,sideways", "unit is one of segment, step"),
                        ("lazy:half", "f must be a number"),
                        ("lazy:seed=1.5", "seed must be a number"),
                        ("copycat:victim=inj1x", "no parameter 'victim' that text can set"),
                        ("stale:later", "mode is one of all, delta"),
                        ("withhold:some", "what is one of"),
                        ("sign_flip:1", "at most 0 positional"),
                        ("lazy:2", "f must be in")):
        with pytest.raises(ValueError, match=words):
            make_adversary(text)


def test_context_goes_only_where_it_is_taken() -> None:
    source = _Nothing()
    target = {"w": torch.zeros(1)}
    assert make_adversary("copycat:delta", victim=source, seed=2).victim is source
    assert make_adversary("interpolate:0.5", target=target).target is target
    lazy = make_adversary("lazy:0.1", victim=source, peers=[source], target=target, seed=5)
    assert (lazy.f, lazy.seed) == (0.1, 5)
    assert make_adversary("lazy:seed=9", seed=5).seed == 9  # the text wins
    assert make_adversary("alie:2", peers=[source]).peers == [source]


def _overrides(cls: type) -> list[tuple[str, object, object]]:
    """(name, method, the base method it overrides) for every method ``cls`` itself defines."""
    out = []
    for name, member in vars(cls).items():
        if name == "__init__" or not inspect.isfunction(member):
            continue
        base = next((vars(b)[name] for b in cls.__mro__[1:] if name in vars(b)), None)
        if base is not None and inspect.isfunction(base):
            out.append((name, member, base))
    return out


def _shape(fn: object) -> tuple:
    signature = inspect.signature(fn)  # type: ignore[arg-type]
    hints = typing.get_type_hints(fn)
    return (tuple((p.name, p.kind, p.default, hints.get(p.name)) for p in signature.parameters.values()),
            hints.get("return"))


def _classes() -> list[type]:
    seen: list[type] = []
    for cls in [*ADVERSARIES.values(), *VALIDATORS.values(), WithheldSource]:
        for c in cls.__mro__:
            if c.__module__.startswith(("verifier.adversaries", "trainer.")) and c not in seen:
                seen.append(c)
    return seen


@pytest.mark.parametrize("cls", _classes(), ids=lambda c: c.__name__)
def test_every_override_has_the_base_signature(cls) -> None:
    for name, method, base in _overrides(cls):
        assert _shape(method) == _shape(base), f"{cls.__name__}.{name} differs from its base"
        hints = typing.get_type_hints(method)
        params = [p for p in inspect.signature(method).parameters if p != "self"]
        assert all(p in hints for p in params) and "return" in hints, f"{cls.__name__}.{name} is not fully typed"
