"""The run spec: every parameter of a training run, stored by the contract at instantiation.

The canonical JSON of a :class:`RunSpec` (see :mod:`protocol.rules.encoding`) is what the operator
deploys; its tagged hash is the run id that names the run everywhere (``H("run-spec", bytes)``).
The contract parses the ``economics``, ``phases``, ``verification`` and ``train`` sections, so the
field names here are part of the contract's interface (``docs/protocol.md``).
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, field_validator, model_serializer, model_validator

from protocol.rules import vdf
from protocol.rules.encoding import I64_MAX, EncodingError, canonical_json, parse_canonical
from protocol.rules.hashing import HexDigest, Tag, tagged_hash
from protocol.rules.limits import (
    BPS_DENOMINATOR,
    MAX_BLOCKS,
    MAX_HELD_BITS,
    MAX_JOIN_EXTENSIONS,
    MAX_MISS_WINDOW_EPOCHS,
    MAX_PARTICIPANTS,
    MAX_SEATS_CAP,
    MAX_SEGMENTS,
    MIN_STAKE,
    MIN_UNBONDING_EPOCHS,
)
from protocol.rules.models import check_model
from protocol.types import Amount, Blocks, Boundary, Bps, Count, Dec

_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_DENOM = re.compile(r"^[a-zA-Z][a-zA-Z0-9/:._-]{2,127}$")

AggregationRule = Literal["mean", "median", "trimmed_mean", "centered_clip", "krum", "multi_krum",
                          "geometric_median"]
QuantScheme = Literal["none", "int8", "int4", "topk2"]
InnerOptimizer = Literal["adamw", "muon"]
TOPK_KEEP_DIVISOR = 64
"""A ``topk2`` block keeps ``block_size / TOPK_KEEP_DIVISOR`` values (``trainer.compress``)."""
DEFAULT_MISS_WINDOW_EPOCHS = 8
"""The default W of ``economics.miss_window_epochs`` (the contract's ``DEFAULT_MISS_WINDOW_EPOCHS``)."""
TOPK_MAX_BLOCK = 32_768
"""A ``topk2`` block's offsets are int16."""
DEFAULT_PROBE_WINDOWS = 64
"""The default ``verification.probe_windows`` (``trainer.probe``; docs/verification.md, "The probe")."""
MAX_PROBE_WINDOWS = 4096
"""The most validation windows a probe may score (a validator's forward passes per host)."""
DEFAULT_PROBE_MARGIN = Decimal("0.02")
"""The default ``aggregation.probe_margin`` in nats (docs/verification.md, "The probe")."""
MAX_PROBE_MARGIN = Decimal("1000")


class ModelSpec(Boundary):
    """Which model to build: an architecture the project ships (``protocol.rules.models``) and its
    parameters. Nothing here is ever imported or called: an unknown name is refused."""

    architecture: str = "gpt"
    params: dict[str, int | bool | str] = Field(default_factory=dict, max_length=64)

    @model_validator(mode="after")
    def _known(self) -> ModelSpec:
        check_model(self.architecture, dict(self.params))
        return self


class DataSpec(Boundary):
    """The corpus, its content address, and how windows are cut from it."""

    corpus: str = Field(pattern=r"^[a-z0-9_-]{1,64}$")
    dataset_hash: HexDigest
    tokenizer: Literal["bytes"] = "bytes"
    seq_len: int = Field(ge=8, le=65_536, strict=True)
    val_fraction: Dec = Decimal("0.05")
    # How many evenly spread validation windows a proposal's loss is scored on: one number for the
    # run, so every host that holds the same model posts the same loss. The forward passes are a
    # fixed cost per epoch on every host (docs/benchmarks.md#scale-the-small-preset).
    val_windows: int = Field(default=512, ge=1, le=65_536, strict=True)

    @field_validator("val_fraction")
    @classmethod
    def _val(cls, v: Decimal) -> Decimal:
        if not Decimal("0.001") <= v <= Decimal("0.5"):
            raise ValueError("val_fraction must be between 0.001 and 0.5")
        return v


class TrainSpec(Boundary):
    """The inner loop: H inner steps per epoch (AdamW, or Muon on hidden matrices), a checkpoint every c steps."""

    inner_steps: int = Field(ge=1, le=1_000_000, strict=True)
    segment_steps: int = Field(ge=1, le=1_000_000, strict=True)
    batch_size: int = Field(ge=1, le=65_536, strict=True)
    lr: Dec
    beta1: Dec = Decimal("0.9")
    beta2: Dec = Decimal("0.95")
    # 1e-6 rather than the usual 1e-8: AdamW's first step on a coordinate is ~ g / (|g| + ε), so ε
    # bounds how much a near-zero gradient's rounding noise can be amplified into a step, which is
    # what honest replays on other hardware differ by (docs/verification.md); training loses nothing
    # measurable (docs/benchmarks.md#verifier, "AdamW's ε").
    eps: Dec = Decimal("1e-6")
    weight_decay: Dec = Decimal("0.1")
    grad_clip: Dec = Decimal("1.0")
    seed: int = Field(default=0, ge=0, le=I64_MAX, strict=True)
    # ``muon``: Muon (momentum beta1, Nesterov, Newton–Schulz, lr adjusted to AdamW's RMS) on the
    # hidden matrices of the blocks, AdamW on the rest (``trainer.step.uses_muon``). Omitted from
    # the canonical JSON at its default, so specs (and run ids) from before the field are unchanged.
    inner_optimizer: InnerOptimizer = "adamw"

    @model_serializer(mode="wrap")
    def _omit_default_optimizer(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if data.get("inner_optimizer") == "adamw":
            del data["inner_optimizer"]
        return data

    @model_validator(mode="after")
    def _segments(self) -> TrainSpec:
        if self.inner_steps % self.segment_steps:
            raise ValueError(f"inner_steps ({self.inner_steps}) must be a multiple of "
                             f"segment_steps ({self.segment_steps})")
        if self.inner_steps // self.segment_steps > MAX_SEGMENTS:
            raise ValueError(f"at most {MAX_SEGMENTS} segments per epoch")
        for name in ("lr", "eps"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        for name in ("beta1", "beta2"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"{name} must be in [0, 1)")
        if self.weight_decay < 0 or self.grad_clip < 0:
            raise ValueError("weight_decay and grad_clip must be >= 0 (grad_clip 0 turns clipping off)")
        return self

    @property
    def segments(self) -> int:
        """S = H / c."""
        return self.inner_steps // self.segment_steps


class OuterSpec(Boundary):
    """The outer optimizer: SGD with (Nesterov) momentum on the pseudo-gradient (DiLoCo: 0.7, 0.9)."""

    lr: Dec = Decimal("0.7")
    momentum: Dec = Decimal("0.9")
    nesterov: bool = True

    @model_validator(mode="after")
    def _ranges(self) -> OuterSpec:
        if not 0 < self.lr <= 10:
            raise ValueError("outer lr must be in (0, 10]")
        if not 0 <= self.momentum < 1:
            raise ValueError("outer momentum must be in [0, 1)")
        return self


class AggregationSpec(Boundary):
    """The robust rule over accepted pseudo-gradients, and its parameters."""

    rule: AggregationRule = "centered_clip"
    trim_fraction: Dec = Decimal("0.2")
    krum_f: Count = 1
    multi_krum_m: Count = 0
    clip_radius: Dec = Decimal("1.0")
    clip_iters: int = Field(default=3, ge=1, le=100, strict=True)
    gm_iters: int = Field(default=16, ge=1, le=1000, strict=True)
    gm_eps: Dec = Decimal("1e-8")
    # The probe rule (trainer.probe.probe_outliers): proposers leave out an accepted Δ whose decided
    # probe gain is below its peers' median by more than this many nats (a multiple of 1e-6: the
    # chain records micro-nats). Applies when verification.probe_windows > 0. Omitted from the
    # canonical JSON at its default, so specs (and run ids) from before the field are unchanged.
    probe_margin: Dec = DEFAULT_PROBE_MARGIN
    # The absolute part of the allowance in a topk2 epoch (trainer.probe.probe_rule), in nats, a
    # multiple of 1e-6. Unset (None, omitted from the canonical JSON, so older run ids are
    # unchanged) means PROBE_MARGIN_TIMES_TOPK2 × probe_margin.
    probe_margin_topk2: Dec | None = None

    @model_serializer(mode="wrap")
    def _omit_default_probe_margin(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if "probe_margin" in data and Decimal(str(data["probe_margin"])) == DEFAULT_PROBE_MARGIN:
            del data["probe_margin"]
        if data.get("probe_margin_topk2", 0) is None:
            del data["probe_margin_topk2"]
        return data

    @property
    def probe_margin_micro(self) -> int:
        """``probe_margin`` in integer micro-nats (exact: the validator allows only multiples of 1e-6)."""
        return int(self.probe_margin * 1_000_000)

    @property
    def probe_margin_topk2_micro(self) -> int | None:
        """``probe_margin_topk2`` in integer micro-nats, or None when the run leaves it unset."""
        return None if self.probe_margin_topk2 is None else int(self.probe_margin_topk2 * 1_000_000)

    @model_validator(mode="after")
    def _ranges(self) -> AggregationSpec:
        if not 0 <= self.trim_fraction < Decimal("0.5"):
            raise ValueError("trim_fraction must be in [0, 0.5)")
        if self.clip_radius <= 0 or self.gm_eps <= 0:
            raise ValueError("clip_radius and gm_eps must be positive")
        for name, margin in (("probe_margin", self.probe_margin), ("probe_margin_topk2", self.probe_margin_topk2)):
            if margin is not None and (not 0 <= margin <= MAX_PROBE_MARGIN or (margin * 1_000_000) % 1):
                raise ValueError(f"{name} must be in [0, {MAX_PROBE_MARGIN}] nats, a multiple of 0.000001")
        return self


def _check_topk_block(scheme: str, block_size: int) -> None:
    # k = block_size / 64 kept values per block, packed four 2-bit codes to a byte.
    if scheme == "topk2" and (block_size % (4 * TOPK_KEEP_DIVISOR) or block_size > TOPK_MAX_BLOCK):
        raise ValueError(f"topk2 needs a block_size that is a multiple of {4 * TOPK_KEEP_DIVISOR} and at "
                         f"most {TOPK_MAX_BLOCK} (got {block_size})")


MAX_SCHEDULE_STEPS = 16


class QuantStep(Boundary):
    """One step of a compression schedule: from epoch ``from_epoch`` on, Δs travel as ``scheme``."""

    from_epoch: int = Field(ge=1, le=I64_MAX, strict=True)
    scheme: QuantScheme
    block_size: int = Field(ge=8, le=65_536, strict=True)

    @model_validator(mode="after")
    def _sparse_block(self) -> QuantStep:
        _check_topk_block(self.scheme, self.block_size)
        return self


class QuantizationSpec(Boundary):
    """How pseudo-gradients travel: blockwise int8/int4 with one scale per block, unquantized, or
    ``topk2``: the largest 1/64 of every block at 2 bits with error feedback (``trainer.compress``;
    its block is a multiple of 256 and at most 32,768).

    ``schedule`` (DiLoCoX's adaptive compression, made deterministic): steps ``(from_epoch, scheme,
    block_size)`` with strictly increasing ``from_epoch >= 1``; epoch ``e`` uses the last step with
    ``from_epoch <= e``, or ``scheme``/``block_size`` before the first (:meth:`at`). Once a run is
    on ``topk2`` it stays on it (a step away would drop the error-feedback residual). Omitted from
    the canonical JSON when empty, so specs (and run ids) from before the field are unchanged.

    ``error_decay`` (β, SparseLoCo's decay of the error-feedback accumulator): a ``topk2`` epoch
    compresses ``Δ + β·r`` (``trainer.compress.decay_residual``); a decimal in ``[0, 1]`` (1: no
    decay, 0: no error feedback), other than 1 only in a run that reaches ``topk2``. Omitted from
    the canonical JSON at 1, so specs (and run ids) from before the field are unchanged."""

    scheme: QuantScheme = "int8"
    block_size: int = Field(default=64, ge=8, le=65_536, strict=True)
    schedule: tuple[QuantStep, ...] = Field(default=(), max_length=MAX_SCHEDULE_STEPS)
    error_decay: Dec = Decimal(1)

    @model_serializer(mode="wrap")
    def _omit_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if not data.get("schedule"):
            data.pop("schedule", None)
        if "error_decay" in data and Decimal(str(data["error_decay"])) == 1:
            data.pop("error_decay")
        return data

    @model_validator(mode="after")
    def _sparse_block(self) -> QuantizationSpec:
        _check_topk_block(self.scheme, self.block_size)
        if not 0 <= self.error_decay <= 1:
            raise ValueError(f"quantization.error_decay must be in [0, 1] (got {self.error_decay})")
        if self.error_decay != 1 and not self.reaches_topk2:
            raise ValueError("quantization.error_decay applies to topk2 only (no epoch of this run uses it)")
        previous, scheme = 0, self.scheme
        for step in self.schedule:
            if step.from_epoch <= previous:
                raise ValueError(f"quantization.schedule: from_epoch must increase strictly (epoch "
                                 f"{step.from_epoch} after {previous})")
            if scheme == "topk2" and step.scheme != "topk2":
                raise ValueError(f"quantization.schedule: epoch {step.from_epoch} leaves topk2 for "
                                 f"{step.scheme}, which would drop the error-feedback residual")
            previous, scheme = step.from_epoch, step.scheme
        return self

    @property
    def reaches_topk2(self) -> bool:
        """Whether any epoch of the run uses ``topk2`` (the section's scheme or a schedule step)."""
        return "topk2" in {self.scheme, *(step.scheme for step in self.schedule)}

    def at(self, epoch: int) -> QuantizationSpec:
        """The scheme epoch ``epoch`` uses (without a schedule): the last step that has begun."""
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0 (got {epoch})")
        scheme, block_size = self.scheme, self.block_size
        for step in self.schedule:
            if step.from_epoch > epoch:
                break
            scheme, block_size = step.scheme, step.block_size
        decay = self.error_decay if scheme == "topk2" else Decimal(1)  # the run's β, for its topk2 epochs
        return QuantizationSpec(scheme=scheme, block_size=block_size, error_decay=decay)


def parse_quant_schedule(text: str) -> QuantizationSpec:
    """A quantization with a schedule from ``SCHEME[/BLOCK]@FROM,...`` (the first ``@0``), e.g.
    ``int8@0,topk2/1024@10``; BLOCK defaults to 64, or 1024 for ``topk2``.

    Raises:
        ValueError: a malformed item, or a schedule :class:`QuantizationSpec` refuses.
    """
    steps: list[dict[str, Any]] = []
    for item in text.split(","):
        match = re.fullmatch(r"([a-z0-9]+)(?:/([0-9]{1,6}))?@([0-9]{1,9})", item.strip())
        if match is None:
            raise ValueError(f"quantization schedule item {item!r} is not SCHEME[/BLOCK]@FROM_EPOCH")
        scheme, block, start = match.groups()
        default = 1024 if scheme == "topk2" else 64
        steps.append({"from_epoch": int(start), "scheme": scheme, "block_size": int(block) if block else default})
    if steps[0]["from_epoch"] != 0:
        raise ValueError("the first quantization schedule item must start at epoch 0 (e.g. int8@0)")
    first = steps.pop(0)
    return QuantizationSpec(scheme=first["scheme"], block_size=first["block_size"],
                            schedule=tuple(QuantStep(**step) for step in steps))


class VerificationSpec(Boundary):
    """Spot checks: k challenged segments (plus the last), r validators each, and the pass thresholds.

    A replayed segment passes when the relative distance of every tensor of the parameters and of
    AdamW's first and second moments is at most ``tau``, every moment coordinate is within
    ``moment_tolerance`` of the replay (relative to ``√v + ε``), every per-step loss within
    ``loss_tolerance``, and the committed update at least ``min_update_ratio · lr · √(c · N)``
    (``docs/verification.md`` has the calibration). ``compute_fingerprint``, when set, is the one
    compute profile the run admits.

    The settlement game (``docs/contract.md``): each host's challenges are picked by a committee of
    validators drawn by stake until it holds more than 1/3 of the joined stake or ``seats_cap``
    seats were drawn (19: an all-Byzantine committee has probability β^19 < 10^-9 at β = 1/3); each
    picker picks ``challenges_k`` segments, the last one is always checked. A disputed challenge is
    decided by one stake-weighted vote of every validator of the epoch (there are no growing
    committee rounds any more). A host's declared trap that the vote fails is valid when the
    deciding replay distance lies in ``[tau, trap_max_distance]`` (default ``100 × tau``); every
    honest host traps one segment with probability ``trap_probability`` per epoch (hosts only).
    ``validators_r`` is no longer read by the contract (a challenge's first-round seats are the
    pickers that picked it); it is kept for the cost estimates of the presets and ``simulate``.
    """

    enabled: bool = True
    challenges_k: Count = 2
    validators_r: Count = 2
    seats_cap: int = Field(default=19, ge=1, le=MAX_SEATS_CAP, strict=True)
    # Calibrated in docs/verification.md. Within one compute profile (same torch build, CPU kernels
    # or GPU model) honest replays are bitwise equal at any thread count and island size, so the
    # thresholds sit 30× below the nearest cheats (one float16 or bfloat16 step per segment, a
    # learning rate off by 0.1 %) and far above the 0 honest error; across profiles they are not
    # meant to hold, which ``compute_fingerprint`` lets a run enforce.
    tau: Dec = Decimal("0.00001")
    moment_tolerance: Dec = Decimal("0.0001")
    loss_tolerance: Dec = Decimal("0.0001")
    min_update_ratio: Dec = Decimal("0.05")
    # The compute profile every host and validator of the run must have: the fingerprint
    # (``trainer.fingerprint``) of two steps of the run's model, which equal profiles compute bit
    # for bit. Nodes whose own fingerprint differs refuse to start; "" pins nothing.
    compute_fingerprint: str = Field(default="", pattern=r"^([0-9a-f]{64})?$")
    # The window of a valid trap's replay distance, from tau (default 100 × tau, filled in
    # before validation so that the deployed spec always states it).
    trap_max_distance: Dec = Decimal("0.001")
    # Every honest host traps (trainer.trap): in each epoch, with this probability, one segment,
    # drawn from its own secret. Hosts only; the contract ignores it. Omitted from the canonical
    # JSON at its default, so specs (and run ids) from before the field are unchanged.
    trap_probability: Dec = Decimal("0.2")
    # The probe (trainer.probe): the validators of each host's last segment post with their verdict
    # the host's probe gain L(θ_e) − L(θ_e − Δ̂) on this many validation windows drawn from the
    # epoch's beacon; 0 turns the probe (and the probe rule, aggregation.probe_margin) off. Omitted
    # from the canonical JSON at its default, so specs (and run ids) from before the field are unchanged.
    probe_windows: int = Field(default=DEFAULT_PROBE_WINDOWS, ge=0, le=MAX_PROBE_WINDOWS, strict=True)
    # The delayed seed (protocol.rules.vdf, docs/contract.md "The delayed seed"): > 0, the squarings
    # T of a VDF over the epoch seed whose output picks every host's challenges, the same for all of
    # its pickers (each sits on all k + 1); 0, each picker's revealed secret picks its own. T must
    # take the fastest squarer longer than the reveal window. Omitted from the canonical JSON at 0.
    delay_squarings: int = Field(default=0, ge=0, le=vdf.MAX_SQUARINGS, strict=True)
    # With a delayed seed: the blocks phase delay waits for the output; past them the challenges
    # fall back to each picker's own picks. 0 (the default, omitted): it waits however long it
    # takes. Size it well past an honest evaluation (docs/contract.md, "The delayed seed").
    delay_blocks: int = Field(default=0, ge=0, le=MAX_BLOCKS, strict=True)

    @model_serializer(mode="wrap")
    def _omit_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if "trap_probability" in data and Decimal(str(data["trap_probability"])) == Decimal("0.2"):
            del data["trap_probability"]
        if data.get("probe_windows") == DEFAULT_PROBE_WINDOWS:
            del data["probe_windows"]
        for field in ("delay_squarings", "delay_blocks"):
            if data.get(field) == 0:
                del data[field]
        return data

    @model_validator(mode="before")
    @classmethod
    def _trap_window(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("trap_max_distance") is None and "tau" in data:
            data = {**data, "trap_max_distance": Decimal(str(data["tau"])) * 100}
        return data

    @model_validator(mode="after")
    def _ranges(self) -> VerificationSpec:
        if self.enabled and self.validators_r < 1:
            raise ValueError("validators_r must be >= 1 when verification is enabled")
        if self.trap_max_distance < self.tau:
            raise ValueError("trap_max_distance must be at least tau")
        if not 0 <= self.trap_probability <= 1:
            raise ValueError("trap_probability must be in [0, 1]")
        if self.tau <= 0 or self.moment_tolerance <= 0:
            raise ValueError("tau and moment_tolerance must be positive")
        if self.loss_tolerance < 0 or self.min_update_ratio < 0:
            raise ValueError("loss_tolerance and min_update_ratio must be >= 0")
        return self


class EconomicsSpec(Boundary):
    """Stake, slashing and rewards. Amounts in base units of ``denom``; fractions in basis points."""

    denom: str
    min_host_stake: Amount
    min_validator_stake: Amount
    unbonding_epochs: int = Field(default=2, ge=MIN_UNBONDING_EPOCHS, le=10_000, strict=True)
    slash_invalid_bps: Bps = 5_000
    # At least invalid (a rule): a host that cannot back a faked segment must gain nothing by
    # withholding it, or by serving something that is not what it committed.
    slash_unavailable_bps: Bps = 5_000
    slash_absent_bps: Bps = 500
    # Withholding a reveal must never pay (docs/contract.md): not revealing a beacon secret costs at
    # least being caught cheating, and not opening a committed verdict at least being wrong.
    slash_no_reveal_bps: Bps = 5_000
    slash_validator_wrong_bps: Bps = 2_000
    slash_validator_silent_bps: Bps = 2_000
    # An `unavailable` objection that the vote of the epoch's stake contradicts (the host served
    # the others): at most the wrong slash (a reader may have met a real network fault).
    slash_validator_unserved_bps: Bps = 500
    catcher_share_bps: Bps = 5_000
    reward_per_epoch: Amount = "0"
    host_reward_share_bps: Bps = 8_000
    # W (docs/contract.md, "Absences"): a host's misses (epochs it joined and trained nothing in:
    # sat out or absent) of the last W epochs rank its seat at join, and an absence is excused (not
    # slashed) only when it missed none of them. Omitted from the canonical JSON at its default, so
    # specs (and run ids) from before the field are unchanged.
    miss_window_epochs: int = Field(default=DEFAULT_MISS_WINDOW_EPOCHS, ge=1, le=MAX_MISS_WINDOW_EPOCHS, strict=True)

    @model_serializer(mode="wrap")
    def _omit_default_miss_window(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if data.get("miss_window_epochs") == DEFAULT_MISS_WINDOW_EPOCHS:
            del data["miss_window_epochs"]
        return data

    @field_validator("denom")
    @classmethod
    def _denom(cls, v: str) -> str:
        if not _DENOM.match(v):
            raise ValueError("denom must be 3-128 characters: a letter, then letters, digits, '/:._-'")
        return v

    @model_validator(mode="after")
    def _withholding_never_pays(self) -> EconomicsSpec:
        if self.slash_unavailable_bps < self.slash_invalid_bps:
            raise ValueError(f"slash_unavailable_bps ({self.slash_unavailable_bps}) must be at least "
                             f"slash_invalid_bps ({self.slash_invalid_bps})")
        if self.slash_no_reveal_bps < self.slash_invalid_bps:
            raise ValueError(f"slash_no_reveal_bps ({self.slash_no_reveal_bps}) must be at least "
                             f"slash_invalid_bps ({self.slash_invalid_bps})")
        if self.slash_validator_silent_bps < self.slash_validator_wrong_bps:
            raise ValueError(f"slash_validator_silent_bps ({self.slash_validator_silent_bps}) must be at least "
                             f"slash_validator_wrong_bps ({self.slash_validator_wrong_bps})")
        if self.slash_validator_unserved_bps > self.slash_validator_wrong_bps:
            raise ValueError(f"slash_validator_unserved_bps ({self.slash_validator_unserved_bps}) must be at most "
                             f"slash_validator_wrong_bps ({self.slash_validator_wrong_bps})")
        return self

    @model_validator(mode="after")
    def _amounts_fit(self) -> EconomicsSpec:
        # protocol.rules.limits.MAX_HELD_BITS: what the contract may hold in all.
        for name in ("min_host_stake", "min_validator_stake", "reward_per_epoch"):
            if int(getattr(self, name)) > 2**MAX_HELD_BITS:
                raise ValueError(f"{name} must be at most 2^{MAX_HELD_BITS} base units")
        return self

    def reward_parts(self) -> tuple[int, int]:
        """The most one host and one validator can earn from an epoch's reward, in base units.

        Finalize splits ``reward_per_epoch`` (at most) into the hosts' part,
        ``reward_per_epoch · host_reward_share_bps / 10^4`` floored, shared equally by the accepted
        hosts, and the rest, shared equally by the diligent validators; a lone member of its role
        takes its role's whole part.
        """
        reward = int(self.reward_per_epoch)
        hosts = reward * self.host_reward_share_bps // BPS_DENOMINATOR
        return hosts, reward - hosts

    @model_validator(mode="after")
    def _sybils_are_costly(self) -> EconomicsSpec:
        # docs/network.md, "Spec rules that the game needs": every minimum stake is at least
        # MIN_STAKE (a 1 bps slash of it is never floored to nothing) and at least what one member
        # of its role can earn from an epoch's reward (no identity earns more in an epoch than it
        # stakes). The contract checks the same at instantiation (contracts/veriloco/src/spec.rs).
        for name, role, part in zip(("min_host_stake", "min_validator_stake"), ("host", "validator"),
                                    self.reward_parts(), strict=True):
            stake = int(getattr(self, name))
            if stake < MIN_STAKE:
                raise ValueError(f"{name} ({stake}) must be at least {MIN_STAKE} base units: smaller "
                                 "stakes make sybils cheap and floor small slashes to nothing")
            if stake < part:
                raise ValueError(f"{name} ({stake}) must be at least the {role}s' part of "
                                 f"reward_per_epoch ({part}): one {role} could earn more in an epoch "
                                 "than it stakes")
        return self


class PhaseSpec(Boundary):
    """Phase windows in blocks (each counted from the block at which the phase actually opened),
    how many participants an epoch needs and admits, and how often a join phase short of its
    minimums is extended before the epoch is abandoned.

    ``verify_blocks`` is each verdict-commit window (``verify`` and every ``dispute`` round),
    ``verdict_reveal_blocks`` each verdict-opening window (``verdict_reveal`` and every
    ``dispute_reveal``).
    """

    join_blocks: Blocks = 20
    train_blocks: Blocks = 200
    reveal_blocks: Blocks = 20
    verify_blocks: Blocks = 100
    # One opening per verdict of the round, like the commitments (not one per member like the
    # beacon reveals): a validator sends them one transaction after another.
    verdict_reveal_blocks: Blocks = 50
    propose_blocks: Blocks = 50
    max_join_extensions: int = Field(default=10, ge=0, le=MAX_JOIN_EXTENSIONS, strict=True)
    min_hosts: int = Field(default=1, ge=1, le=MAX_PARTICIPANTS, strict=True)
    min_validators: int = Field(default=1, ge=0, le=MAX_PARTICIPANTS, strict=True)
    max_hosts: int = Field(default=64, ge=1, le=MAX_PARTICIPANTS, strict=True)
    max_validators: int = Field(default=32, ge=0, le=MAX_PARTICIPANTS, strict=True)
    # Two epochs in flight (docs/contract.md, "Pipelined epochs"): epoch e + 1 opens from the
    # optimistic start e's committed hosts agree on while e settles. Omitted from the canonical
    # JSON at its default (False), so specs (and run ids) from before the field are unchanged.
    pipelined: bool = Field(default=False, strict=True)

    @model_serializer(mode="wrap")
    def _omit_default_pipelined(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if data.get("pipelined") is False:
            del data["pipelined"]
        return data

    @model_validator(mode="after")
    def _ranges(self) -> PhaseSpec:
        if self.min_hosts > self.max_hosts or self.min_validators > self.max_validators:
            raise ValueError("min_hosts/min_validators must not exceed max_hosts/max_validators")
        return self


class RunSpec(Boundary):
    """Everything that defines a run. Its canonical JSON is deployed; its hash is the run id."""

    version: Literal[1] = 1
    name: str
    model: ModelSpec
    data: DataSpec
    train: TrainSpec
    outer: OuterSpec = OuterSpec()
    aggregation: AggregationSpec = AggregationSpec()
    quantization: QuantizationSpec = QuantizationSpec()
    verification: VerificationSpec = VerificationSpec()
    economics: EconomicsSpec
    phases: PhaseSpec = PhaseSpec()

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError("run names are 1-64 characters: lowercase letters, digits, '.', '_', '-'")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> RunSpec:
        ver = self.verification
        if ver.enabled and self.phases.min_validators < 1:
            raise ValueError("verification needs phases.min_validators >= 1")
        if ver.enabled and ver.validators_r > self.phases.max_validators:
            raise ValueError("verification.validators_r exceeds phases.max_validators")
        return self

    def for_epoch(self, epoch: int) -> RunSpec:
        """This spec with epoch ``epoch``'s quantization (``quantization.schedule`` resolved, no
        schedule left); itself when there is no schedule. The copy's :meth:`run_id` is not the run's:
        take that from the deployed spec."""
        if not self.quantization.schedule:
            return self
        return self.model_copy(update={"quantization": self.quantization.at(epoch)})

    def canonical(self) -> bytes:
        """The canonical JSON bytes that are deployed and hashed."""
        return canonical_json(self.model_dump(mode="json"))

    def run_id(self) -> bytes:
        """``H("run-spec", canonical bytes)``: the run's name everywhere."""
        return tagged_hash(Tag.RUN_SPEC, self.canonical())

    @classmethod
    def from_canonical(cls, data: bytes | str) -> RunSpec:
        """Parse canonical JSON (non-canonical bytes are refused, so the run id is unambiguous).

        Raises:
            EncodingError: also when the bytes spell out a field the canonical form omits
                (``train.inner_optimizer``, ``verification.trap_probability``,
                ``economics.miss_window_epochs``, ``quantization.error_decay``,
                ``verification.probe_windows``, ``aggregation.probe_margin`` at their defaults,
                ``aggregation.probe_margin_topk2`` as null).
        """
        spec = cls.model_validate(parse_canonical(data))
        if spec.canonical() != (data.encode() if isinstance(data, str) else data):
            raise EncodingError("run spec is not in canonical form (a default-omitted field is spelled out)")
        return spec

    def with_changes(self, **sections: Any) -> RunSpec:
        """A copy with whole sections or fields replaced (dicts are merged into sections), re-validated."""
        data = self.model_dump(mode="json")
        for key, value in sections.items():
            if isinstance(value, dict) and isinstance(data.get(key), dict):
                data[key] = {**data[key], **value}
            elif isinstance(value, Boundary):
                data[key] = value.model_dump(mode="json")
            else:
                data[key] = value
        return RunSpec.model_validate(data)
