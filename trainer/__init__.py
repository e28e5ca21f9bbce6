"""A host's side of veriloco: model, data, the one training step, the DiLoCo inner and outer loops.

Importing any part of it pins MKL's reproducibility mode (:data:`MKL_CBWR`) unless the environment
already names one (``trainer.determinism`` says why).
"""

import os

MKL_CBWR = "AUTO,STRICT"
"""MKL's Conditional Numerical Reproducibility mode on every host and validator: the CPU's own code
branch (``AUTO``), with products whose bits do not depend on the thread count (``STRICT``).

Without it, on the AVX-512 CPU of a lent H100 machine (torch 2.11; the CPU model was not recorded)
1 and 2 threads trained different bits, and with it (or with ``COMPATIBLE``) the same
(``bench/thread_invariance.py``; which operation MKL split was not isolated). On the AMD development
machine the mode changes no bit. MKL reads ``MKL_CBWR`` at its first call, so it is set here, when
the trainer is first imported, and not in :func:`trainer.determinism.configure`, which may run
after the process's first product."""

os.environ.setdefault("MKL_CBWR", MKL_CBWR)
