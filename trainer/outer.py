"""The outer step: SGD with Nesterov momentum on the aggregated pseudo-gradient, and the global state.

The global state of epoch ``e`` is the model parameters θ_e and the outer momentum buffers
``b_e`` (zeros at θ_0). From the aggregated Δ (``protocol.tensors.aggregation.aggregate``), with outer
learning rate η and momentum μ (``spec.outer``; DiLoCo: 0.7 and 0.9)::

    b_{e+1} = μ · b_e + Δ
    u       = Δ + μ · b_{e+1}      (Nesterov; plain momentum uses u = b_{e+1})
    θ_{e+1} = θ_e − η · u

This is ``torch.optim.SGD(nesterov=True, dampening=0)``, written out so that each operation is a
separate, exactly rounded elementwise op in float32 (no fused multiply-add, no reduction, tensors
in name order): the result depends only on the inputs, never on the thread count, so every honest
host computes the same bits and therefore the same global state hash
``tensors_digest("model", {"param/<p>": θ, "momentum/<p>": b})``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from protocol.rules.hashing import Tag
from protocol.rules.spec import OuterSpec, RunSpec
from protocol.tensors.digest import tensors_digest
from trainer.model import build_model, parameter_shapes
from trainer.tensorfile import Layout, decode_tensors, encode_tensors, load_tensors, save_tensors
from trainer.tensorstream import TensorStream

FORMAT = {"format": "veriloco/global-1"}


@dataclass
class GlobalState:
    """θ_e and the outer momentum buffers: what the network agrees on between epochs."""

    params: dict[str, torch.Tensor]
    momentum: dict[str, torch.Tensor]

    @classmethod
    def initial(cls, spec: RunSpec) -> GlobalState:
        """θ_0 (the model's deterministic initialization) with zero momentum."""
        params = {n: p.detach().clone() for n, p in build_model(spec).named_parameters()}
        return cls(params, {n: torch.zeros_like(p) for n, p in params.items()})

    def tensors(self) -> dict[str, torch.Tensor]:
        """``param/<p>`` and ``momentum/<p>`` for every parameter."""
        out = {f"param/{n}": t for n, t in self.params.items()}
        out.update({f"momentum/{n}": t for n, t in self.momentum.items()})
        return out

    def hash(self) -> bytes:
        """The global state hash hosts propose and the chain agrees on."""
        return tensors_digest(Tag.MODEL, self.tensors())

    def encode(self) -> bytes:
        """Safetensors bytes, as stored and served."""
        return encode_tensors(self.tensors(), FORMAT)

    def save(self, path: Path) -> None:
        """Write atomically: the bytes of :meth:`encode`, streamed without building them in memory."""
        save_tensors(Path(path), self.tensors(), FORMAT)


def global_layout(spec: RunSpec) -> Layout:
    """Names, dtypes and shapes of a run's global state."""
    layout = {}
    for name, shape in parameter_shapes(spec).items():
        layout[f"param/{name}"] = (torch.float32, tuple(shape))
        layout[f"momentum/{name}"] = (torch.float32, tuple(shape))
    return layout


def _split(tensors: dict[str, torch.Tensor]) -> GlobalState:
    params = {k[len("param/"):]: v for k, v in tensors.items() if k.startswith("param/")}
    momentum = {k[len("momentum/"):]: v for k, v in tensors.items() if k.startswith("momentum/")}
    return GlobalState(params, momentum)


def decode_global(data: bytes, spec: RunSpec, what: str = "global state") -> GlobalState:
    """Validate and parse global-state bytes against the run's model."""
    return _split(decode_tensors(data, global_layout(spec), what, FORMAT))


def stream_global(chunks: Iterable[object], spec: RunSpec, what: str = "global state") -> tuple[GlobalState, bytes]:
    """:func:`decode_global` for bytes arriving in chunks, hashed as they arrive.

    Returns:
        The state and its hash (:meth:`GlobalState.hash` of what arrived), in one pass: never the
        file's bytes and the decoded state at once.

    Raises:
        TensorFileError: malformed, wrong layout, oversized, truncated or non-finite.
    """
    stream = TensorStream(chunks, global_layout(spec), Tag.MODEL, what, FORMAT)
    state = _split(stream.read_all())
    assert stream.digest is not None  # set by the finished iteration
    return state, stream.digest


def load_global(path: Path, spec: RunSpec) -> GlobalState:
    """:func:`decode_global` for a file."""
    return _split(load_tensors(path, global_layout(spec), FORMAT))


def outer_step(state: GlobalState, delta: Mapping[str, torch.Tensor], outer: OuterSpec) -> GlobalState:
    """The next global state from the aggregated pseudo-gradient.

    Args:
        state: θ_e and its momentum buffers.
        delta: the aggregated Δ, one float32 tensor per parameter (same names and shapes).
        outer: the run spec's outer section (η, μ, Nesterov).

    Returns:
        A new :class:`GlobalState`; ``state`` is not modified.
    """
    if set(delta) != set(state.params):
        raise ValueError("the aggregated Δ does not have the model's parameter names")
    lr, mu = float(outer.lr), float(outer.momentum)
    params, momentum = {}, {}
    for name in sorted(state.params):
        d = delta[name].to(torch.float32)
        if d.shape != state.params[name].shape:
            raise ValueError(f"Δ {name} has shape {tuple(d.shape)}, expected {tuple(state.params[name].shape)}")
        buf = torch.add(torch.mul(state.momentum[name], mu), d)
        update = torch.add(d, torch.mul(buf, mu)) if outer.nesterov else buf
        params[name] = torch.sub(state.params[name], torch.mul(update, lr))
        momentum[name] = buf
    return GlobalState(params, momentum)
