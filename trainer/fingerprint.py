"""The compute fingerprint: what this machine computes for a run's training step, as one digest.

A validator's replay reproduces an honest host's leaves bit for bit when both compute the same way
(``docs/verification.md``): the step is thread-invariant, so neither the thread count nor the size
of a gloo island matters, but the torch build, the CPU kernels torch and MKL dispatch to (AVX2,
AVX-512, …) and the device (a CPU, a GPU model) do. The verifier's thresholds are set for bitwise
replays, so a run admits one such compute profile; this module names it.

The fingerprint hashes two things: the leaf hash of the state after :data:`PROBE_STEPS` steps of
the run's own model and :class:`~trainer.step.Stepper` from θ_0 on a fixed batch of bytes (two
machines with equal probes computed every operation of those steps identically), and the numeric
mode the process computes in (:func:`numeric_mode`: MKL's reproducibility mode and instruction set
as MKL reads them, torch's CPU kernels, the torch build, the device). The probe is evidence, not
proof: a kernel that only other shapes reach could still differ (it uses the run's sequence length
and at most :data:`PROBE_ROWS` rows) — an MKL mode that is not strict made 1 and 2 threads differ on
one CPU while the probe agreed, which is why the mode is hashed too. A run pins the fingerprint in
``spec.verification.compute_fingerprint``; nodes compute their own at start and refuse to run in
another profile, or in a pinned run with an MKL mode that is not strict (:func:`check_fingerprint`).
"""

from __future__ import annotations

import torch

import trainer
from protocol.errors import VerilocoError
from protocol.rules.encoding import canonical_json
from protocol.rules.hashing import tagged_hash
from protocol.rules.spec import RunSpec
from trainer.checkpoint import Checkpoint
from trainer.model import build_model
from trainer.step import Stepper, TrainState

PROBE_STEPS = 2
"""Inner steps of the probe: the second one runs AdamW with non-zero moments."""

PROBE_ROWS = 4
"""Rows of the probe's batch (at most the run's batch size), so a large model's probe stays cheap."""

PROBE_SEED = 0
"""Seed of the probe's batch of random bytes and its RNG key."""


class ComputeMismatch(VerilocoError, ValueError):
    """This machine's compute fingerprint is not the one the run pins."""


FINGERPRINT_TAG = "compute-fingerprint"
"""Hash domain of the fingerprint (the probe's leaf hash and the numeric mode)."""


def mkl_mode(value: str) -> str:
    """``MKL_CBWR`` as MKL parses it: upper case, no spaces (``"auto, strict"`` is ``AUTO,STRICT``)."""
    return ",".join(part.strip().upper() for part in value.split(",") if part.strip())


def strict_mkl(mode: str) -> bool:
    """Whether an MKL mode makes its products' bits independent of the thread count (``…,STRICT``)."""
    return "STRICT" in mkl_mode(mode).split(",")


def numeric_mode(device: str | torch.device = "cpu") -> dict[str, str]:
    """What decides this process's bits besides the probe: MKL's reproducibility mode and instruction
    set as MKL reads them (:data:`trainer.MKL_ENVIRONMENT`), torch's CPU kernels
    (``ATEN_CPU_CAPABILITY`` or the CPU's best), the torch build and the device kind (a GPU's model
    and CUDA version)."""
    dev = torch.device(device)
    mode = {"mkl_cbwr": mkl_mode(trainer.MKL_ENVIRONMENT["MKL_CBWR"]),
            "mkl_enable_instructions": trainer.MKL_ENVIRONMENT["MKL_ENABLE_INSTRUCTIONS"].strip().upper(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
            "device": dev.type}
    if dev.type == "cuda":
        mode["gpu"] = f"{torch.cuda.get_device_name(dev)} (CUDA {torch.version.cuda})"
    return mode


def compute_fingerprint(spec: RunSpec, device: str | torch.device = "cpu") -> str:
    """This machine's fingerprint for ``spec``'s step on ``device``, as 64 hex characters:
    ``H(probe leaf hash, canonical JSON of numeric_mode(device))``.

    Args:
        spec: the run spec (its model and ``train`` section; its pinned fingerprint is ignored).
        device: where the step computes, as the node will train or replay.
    """
    stepper = Stepper(spec, device=device)
    theta = {n: p.detach() for n, p in build_model(spec).named_parameters()}
    stepper.load(TrainState.fresh(theta, PROBE_SEED))
    gen = torch.Generator().manual_seed(PROBE_SEED)
    rows = min(spec.train.batch_size, PROBE_ROWS)
    losses = []
    for _ in range(PROBE_STEPS):
        x = torch.randint(0, 256, (rows, spec.data.seq_len), generator=gen)
        losses.append(stepper.step(x, torch.roll(x, -1, dims=1)))
    probe = Checkpoint(stepper.export(), torch.tensor(losses, dtype=torch.float32), 1).leaf_hash()
    return tagged_hash(FINGERPRINT_TAG, probe, canonical_json(numeric_mode(device))).hex()


def check_fingerprint(spec: RunSpec, device: str | torch.device = "cpu") -> str | None:
    """Refuse to compute for a run that pins another compute profile than this machine's.

    Returns:
        ``None`` when the run pins no profile (``compute_fingerprint`` is ""; nothing is computed),
        else this machine's fingerprint, which is then the pinned one.

    Raises:
        ComputeMismatch: ``spec.verification.compute_fingerprint`` is set and differs: a replay
            between this machine and the run's nodes would not be bitwise, and at the run's τ an
            honest host on it could fail (and a validator on it post wrong verdicts); or it is set
            and MKL is not in a strict mode (on CPU).
    """
    pinned = spec.verification.compute_fingerprint
    if not pinned:
        return None
    mode = trainer.MKL_ENVIRONMENT["MKL_CBWR"]
    if torch.device(device).type == "cpu" and not strict_mkl(mode):
        raise ComputeMismatch(
            f"MKL_CBWR={mode or '(unset)'} is not a strict mode, and this run pins its compute profile: on some "
            "CPUs this node's bits would then follow its thread count, which no fingerprint shows; unset "
            f"MKL_CBWR (the trainer sets {trainer.MKL_CBWR}) or name a strict mode (e.g. AVX2,STRICT)")
    local = compute_fingerprint(spec, device)
    if pinned != local:
        raise ComputeMismatch(
            f"this machine computes the run's step differently from the profile the run pins (fingerprint "
            f"{local[:16]}… on {torch.device(device).type}, the run's {pinned[:16]}…): its replays would not "
            "be bitwise equal to the other nodes', so at the run's τ an honest host here could be slashed; "
            "use a machine of the run's profile (docs/verification.md, 'Compute profiles and calibration')")
    return local
