"""A small decoder-only transformer (GPT) over bytes, in plain torch, and the model resolver.

nanoGPT-shaped: token and position embeddings, ``n_layer`` pre-norm blocks (causal self-attention
then an MLP, each with a residual), a final LayerNorm and an untied output projection (untied so
every parameter is one named tensor in checkpoints). Attention is written out (scores, mask,
softmax) rather than calling a fused kernel: at these context lengths it costs little, and every
operation is one a validator's torch build computes the same way.

A run spec names its model as an architecture of the closed registry
:data:`protocol.rules.models.ARCHITECTURES` plus parameters (``spec.model.architecture`` /
``spec.model.params``); :data:`BUILDERS` maps each name to the builder this module ships, so no
string from a spec is ever imported or called. Initialization is deterministic from
``spec.train.seed``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal

import torch
import torch.nn.functional as F
from torch import nn

from protocol.rules.models import ARCHITECTURES, check_model
from protocol.rules.spec import RunSpec
from trainer.data import VOCAB_SIZE

_draws = threading.local()  # this thread's dropout generator while a step runs (:func:`drawing_from`)


@contextmanager
def drawing_from(generator: torch.Generator) -> Iterator[None]:
    """Dropout masks drawn on this thread come from ``generator`` for the block.

    Not the process-wide default generator: a pipelined host trains on one thread while another
    recomputes a challenged leaf, and a simulation replays beside its hosts' trainings; seeding a
    generator they all share would let one thread's seed reach another's masks."""
    before = getattr(_draws, "generator", None)
    _draws.generator = generator
    try:
        yield
    finally:
        _draws.generator = before


class Dropout(nn.Module):
    """Inverted dropout whose mask comes from the generator :func:`drawing_from` set on this thread
    (the step's per-micro-batch generator); outside such a block, torch's own dropout."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        generator = getattr(_draws, "generator", None)
        if generator is None:
            return F.dropout(x, self.p, training=True)
        keep = torch.empty_like(x).bernoulli_(1.0 - self.p, generator=generator)
        return x * keep / (1.0 - self.p)


class LayerNorm(nn.Module):
    """LayerNorm whose gain and bias gradients do not depend on the thread count.

    The same function and parameters as ``nn.LayerNorm`` (``weight`` initialised to ones, ``bias``
    to zeros). torch's fused CPU kernel sums the gain and bias gradients over the rows in one
    partial sum per thread, so their bits change with the number of intra-op threads: that was the
    last thread-dependent operation of the training step (``docs/verification.md``). Here the
    normalisation is the fused kernel without the affine part and the affine part is two
    broadcasting operations, whose gradients are column sums that torch splits across threads by
    column only, so every thread count (and a gloo island of any size) computes the same bits.
    """

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.weight.shape, None, None, self.eps) * self.weight + self.bias


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where position t sees positions 0..t only.

    The query and value projections have biases; the key projection has none. A key bias adds
    ``q · b`` to every score of a query, which softmax ignores: its gradient is exactly zero in
    exact arithmetic and pure rounding noise in practice, which AdamW normalizes into steps of a
    few percent of the learning rate in directions the thread count decided. It was almost all of
    the honest replay error across thread counts (``docs/verification.md``); the model computes the
    same functions without it.
    """

    mask: torch.Tensor  # a buffer (register_buffer), declared for the type checker

    def __init__(self, d_model: int, n_head: int, block_size: int, dropout: float) -> None:
        super().__init__()
        if d_model % n_head:
            raise ValueError(f"d_model ({d_model}) must be a multiple of n_head ({n_head})")
        self.n_head = n_head
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.q_bias = nn.Parameter(torch.zeros(d_model))
        self.v_bias = nn.Parameter(torch.zeros(d_model))
        self.proj = nn.Linear(d_model, d_model)
        self.dropout = Dropout(dropout)
        mask = torch.tril(torch.ones(block_size, block_size, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, block_size, block_size), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, v = q + self.q_bias, v + self.v_bias
        # [B, T, D] -> [B, heads, T, D/heads]
        q, k, v = (z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(~self.mask[:, :, :t, :t], float("-inf"))
        att = self.dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, d)
        return self.dropout(self.proj(y))


class MLP(nn.Module):
    """Position-wise feed-forward: d -> 4d -> d with GELU."""

    def __init__(self, d_model: int, dropout: float) -> None:
        super().__init__()
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.proj = nn.Linear(4 * d_model, d_model)
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    """Pre-norm transformer block: ``x + attn(ln(x))`` then ``x + mlp(ln(x))``."""

    def __init__(self, d_model: int, n_head: int, block_size: int, dropout: float) -> None:
        super().__init__()
        self.ln1 = LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_head, block_size, dropout)
        self.ln2 = LayerNorm(d_model)
        self.mlp = MLP(d_model, dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Decoder-only transformer language model over a byte vocabulary."""

    def __init__(self, n_layer: int, n_head: int, d_model: int, block_size: int,
                 vocab_size: int = VOCAB_SIZE, dropout: float = 0.0) -> None:
        super().__init__()
        self.block_size = block_size
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(block_size, d_model)
        self.drop = Dropout(dropout)
        self.blocks = nn.ModuleList(Block(d_model, n_head, block_size, dropout) for _ in range(n_layer))
        self.ln_f = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.apply(self._init)
        # GPT-2: scale the residual projections by 1/sqrt(2 * n_layer) so the stream's variance
        # does not grow with depth.
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, T, vocab]`` for int64 tokens ``[B, T]``, ``T <= block_size``."""
        t = idx.size(1)
        if t > self.block_size:
            raise ValueError(f"sequence of {t} tokens exceeds the model's block_size {self.block_size}")
        x = self.drop(self.tok(idx) + self.pos(torch.arange(t, device=idx.device)))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def build_gpt(n_layer: int = 2, n_head: int = 4, d_model: int = 128, block_size: int = 128,
              vocab_size: int = VOCAB_SIZE, dropout: str = "0") -> GPT:
    """The builder of architecture ``gpt``.

    Args:
        n_layer: transformer blocks.
        n_head: attention heads (must divide ``d_model``).
        d_model: embedding width.
        block_size: longest sequence (``spec.data.seq_len`` must not exceed it).
        vocab_size: 256 for the byte tokenizer.
        dropout: dropout probability as a decimal string (run specs carry no floats), e.g. ``"0.1"``.
    """
    p = Decimal(dropout)
    if not 0 <= p < 1:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    return GPT(n_layer, n_head, d_model, block_size, vocab_size, float(p))


BUILDERS: dict[str, Callable[..., nn.Module]] = {"gpt": build_gpt}
"""Architecture name -> its builder: exactly the names of :data:`protocol.rules.models.ARCHITECTURES`."""

if set(BUILDERS) != set(ARCHITECTURES):  # a registry entry without a builder (or the reverse) is a bug
    raise RuntimeError("trainer.model.BUILDERS and protocol.rules.models.ARCHITECTURES differ")


def _construct(spec: RunSpec) -> nn.Module:
    """Build the spec's architecture with its (re-validated) parameters in the current device context."""
    params = check_model(spec.model.architecture, dict(spec.model.params))
    return BUILDERS[spec.model.architecture](**params.model_dump())


_INIT = threading.Lock()
"""Held while a model is built: its initial weights come from torch's process-wide generator, seeded
inside a fork, so two threads building at once must take turns."""


def build_model(spec: RunSpec) -> nn.Module:
    """The run's model with its initial weights θ_0, deterministic from ``spec.train.seed``.

    The global RNG is seeded inside a fork (and under :data:`_INIT`, for threads building at once),
    so building a model neither depends on nor disturbs the caller's random state.
    """
    with _INIT, torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.train.seed)
        model = _construct(spec)
    block = getattr(model, "block_size", None)
    if block is not None and spec.data.seq_len > block:
        raise ValueError(f"data.seq_len {spec.data.seq_len} exceeds the model's block_size {block}")
    return model.float()


def parameter_shapes(spec: RunSpec) -> dict[str, torch.Size]:
    """Name -> shape of every parameter of the run's model (what checkpoints and Δs must contain)."""
    with torch.device("meta"):
        model = _construct(spec)
    return {name: p.shape for name, p in model.named_parameters()}
