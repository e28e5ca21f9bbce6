"""The model architectures a run may name: a closed registry, never code named by a spec.

A run spec names its model as one of :data:`ARCHITECTURES` plus parameters checked against that
architecture's parameter model, here, before anything is built. No string from a spec is ever
imported or called: ``trainer.model`` maps each name to the builder the project ships, and a
spec naming anything else is refused when it is parsed, by every node, by ``veriloco run deploy``
and by the contract at instantiation (which holds the same list; ``tests/vectors/architectures.json``
carries it to the Rust tests, which fail unless the two lists are equal).

Parameters are bounded so that a spec cannot make every node that reads it allocate an unbounded
model: each architecture's parameter model caps the shape and the total parameter count.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from pydantic import Field, field_validator, model_validator

from protocol.types import Boundary

MAX_MODEL_PARAMETERS = 2_000_000_000
"""Most parameters a run's model may have (what every node allocates to read a checkpoint)."""


class GptParams(Boundary):
    """Parameters of ``gpt`` (``trainer.model.build_gpt``): a decoder-only transformer over bytes."""

    n_layer: int = Field(default=2, ge=1, le=256, strict=True)
    n_head: int = Field(default=4, ge=1, le=256, strict=True)
    d_model: int = Field(default=128, ge=8, le=16_384, strict=True)
    block_size: int = Field(default=128, ge=8, le=65_536, strict=True)
    vocab_size: int = Field(default=256, ge=2, le=1_048_576, strict=True)
    dropout: str = "0"

    @field_validator("dropout")
    @classmethod
    def _dropout(cls, v: str) -> str:
        try:
            p = Decimal(v)
        except InvalidOperation:
            raise ValueError(f"dropout must be a decimal string, got {v!r}") from None
        if not p.is_finite() or not 0 <= p < 1:
            raise ValueError(f"dropout must be in [0, 1), got {v}")
        return v

    @model_validator(mode="after")
    def _shape(self) -> GptParams:
        if self.d_model % self.n_head:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of n_head ({self.n_head})")
        if self.parameter_count() > MAX_MODEL_PARAMETERS:
            raise ValueError(f"the model would have {self.parameter_count()} parameters, "
                             f"more than {MAX_MODEL_PARAMETERS}")
        return self

    def parameter_count(self) -> int:
        """The parameter count of the model these parameters build (an upper bound: every
        attention projection counted with a bias)."""
        d, v = self.d_model, self.vocab_size
        attention = 3 * d * d + 3 * d + d * d + d  # qkv and its biases, output projection
        mlp = d * 4 * d + 4 * d + 4 * d * d + d
        block = attention + mlp + 4 * d  # two LayerNorms
        return v * d + self.block_size * d + self.n_layer * block + 2 * d + d * v


ARCHITECTURES: dict[str, type[Boundary]] = {"gpt": GptParams}
"""Architecture name -> the model of its parameters. The contract holds the same names."""


def architecture_names() -> list[str]:
    """The registry's names, sorted (what ``tests/vectors/architectures.json`` holds)."""
    return sorted(ARCHITECTURES)


def check_model(architecture: str, params: dict[str, object]) -> Boundary:
    """The validated parameters of ``architecture``.

    Args:
        architecture: a name from the spec.
        params: the spec's parameters for it.

    Raises:
        ValueError: unknown architecture, or parameters its model refuses.
    """
    if architecture not in ARCHITECTURES:
        raise ValueError(f"unknown model architecture {architecture!r} (known: {', '.join(architecture_names())})")
    return ARCHITECTURES[architecture].model_validate(params)
