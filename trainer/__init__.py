"""A host's side of veriloco: model, data, the one training step, the DiLoCo inner and outer loops.

Importing any part of it pins MKL's reproducibility mode (:data:`MKL_CBWR`) unless the environment
already names one (``trainer.determinism`` says why).
"""

import os

MKL_CBWR = "AUTO,STRICT"
"""MKL's Conditional Numerical Reproducibility mode on every host and validator: the CPU's own code
branch (``AUTO``), with products whose bits do not depend on the thread count (``STRICT``).

Without it, MKL on an Intel AVX-512 machine (an H100 host's, torch 2.11) split some of the step's
products by thread: 1 and 2 threads trained different bits (``bench/thread_invariance.py``). On the
AMD development machine the mode changes no bit and no step time. MKL reads ``MKL_CBWR`` at its
first call, so it is set here, when the trainer is first imported, and not in
:func:`trainer.determinism.configure`, which may run after the process's first product."""

os.environ.setdefault("MKL_CBWR", MKL_CBWR)
