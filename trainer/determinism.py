"""Every setting that makes training replayable, in one place (measured: docs/training.md#determinism-measured).

A validator replays a host's segment and compares end states, so what the step computes must not
depend on anything but its inputs. What decides the bits on CPU, and what this module pins:

* **Thread count: it does not matter.** torch splits matrix products and reductions across intra-op
  threads; torch's column sums split their outputs, not the sums, and so do MKL's products in its
  strict reproducibility mode (:data:`trainer.MKL_CBWR`, set when the trainer is imported: MKL's
  own choice can make the bits depend on the thread count), so they compute the
  same bits at any thread count. The one operation of the step that split a sum by thread was torch's fused
  LayerNorm backward (gain and bias gradients); the model's own :class:`trainer.model.LayerNorm`
  avoids it, so replays are bitwise equal at any thread count and for a gloo island of any size
  (``tests/verifier/test_tolerance.py``, ``bench/thread_invariance.py``). :func:`configure` sets the
  count only for speed.
* **The compute profile: it does.** The torch build, the CPU kernels torch dispatches to (AVX2,
  AVX-512, …; ``ATEN_CPU_CAPABILITY`` forces them), MKL's code branch (``MKL_CBWR``) and the device
  decide the rounding. A run pins one profile by its fingerprint (:mod:`trainer.fingerprint`).
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
  one GPU model are then bitwise repeatable (measured: docs/benchmarks.md#gpu-one-h100); a CPU and a
  GPU are two compute profiles, which differ by rounding (``docs/verification.md``).
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
            bitwise equal at any thread count within one compute profile.
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
