"""Every setting that makes training replayable, in one place (measured in ``docs/training.md``).

A validator replays a host's segment and compares end states, so what the step computes must not
depend on anything but its inputs. What decides the bits on CPU, and what this module pins:

* **Thread count.** torch splits matrix products and reductions across intra-op threads, and the
  split changes the order of floating-point additions. Same thread count, same build: bitwise
  equal replays. Different thread counts: equal only within a small relative distance (the
  verifier's tolerance must cover it). :func:`configure` sets it when asked.
* **Deterministic algorithms.** ``torch.use_deterministic_algorithms(True)`` makes torch refuse an
  op that has no deterministic implementation instead of silently running a racy one.
* **Matmul precision.** ``"highest"`` forbids reduced-precision (bf16/TF32) internal paths that
  some backends take for ``"high"``/``"medium"``.
* **Optimizer implementation.** AdamW's single-tensor, foreach and fused kernels round
  differently; :data:`ADAMW_IMPL` fixes one, and the step (``trainer.step``) always uses it.
* **Randomness.** The step never reads the global RNG state left behind by other code: it seeds a
  forked generator per micro-batch from the committed RNG key (``trainer.step.micro_seed``).
* **CUDA** (when a step runs on a GPU): no TF32 in matrix products or convolutions, cuDNN's
  deterministic kernels, and cuBLAS's fixed workspace (``CUBLAS_WORKSPACE_CONFIG``, read when
  cuBLAS starts, so :func:`configure` must run before the first CUDA matrix product). Replays on
  one GPU model are then repeatable; a CPU and a GPU agree only within the replay tolerance, which
  has not been measured yet (no GPU was available; ``docs/verification.md``).
"""

from __future__ import annotations

import os

import torch

ADAMW_IMPL: dict[str, bool] = {"foreach": False, "fused": False}
"""The AdamW kernel every host and validator uses: the plain per-tensor loop."""


def configure(threads: int | None = None, device: str | torch.device = "cpu") -> None:
    """Apply the determinism settings to this process.

    Args:
        threads: intra-op threads for torch; ``None`` keeps the current count. Replays are
            bitwise equal only at equal thread counts (and equal torch builds).
        device: the device steps will run on; for ``cuda`` the CUDA settings above are applied too.
    """
    if torch.device(device).type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True)
    torch.set_float32_matmul_precision("highest")
    if threads is not None:
        if threads < 1:
            raise ValueError("threads must be >= 1")
        torch.set_num_threads(threads)
