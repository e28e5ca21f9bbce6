"""A host's side of veriloco: model, data, the one training step, the DiLoCo inner and outer loops.

Importing any part of it pins MKL's reproducibility mode (:data:`MKL_CBWR`) unless the environment
already names one (``trainer.determinism`` says why).
"""

import os

MKL_CBWR = "AUTO,STRICT"
"""MKL's Conditional Numerical Reproducibility mode on every host and validator: the CPU's own code
branch (``AUTO``), with products whose bits do not depend on the thread count (``STRICT``).

MKL's own choice of mode can make the bits depend on the thread count on some CPUs; this mode
(like ``COMPATIBLE``) does not (``bench/thread_invariance.py``; measured:
docs/training.md#determinism-measured, docs/benchmarks.md#gpu-one-h100). MKL reads ``MKL_CBWR`` at
its first call, so it is set here, when the trainer is first imported, and not in
:func:`trainer.determinism.configure`, which may run after the process's first product."""

os.environ.setdefault("MKL_CBWR", MKL_CBWR)

MKL_ENVIRONMENT = {name: os.environ.get(name, "") for name in ("MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS")}
"""What MKL reads at its first call, as the trainer's import left it (``MKL_CBWR`` is never empty
after the default above): part of the compute fingerprint (:func:`trainer.fingerprint.numeric_mode`),
since a node whose environment names another mode or instruction set computes other bits."""
