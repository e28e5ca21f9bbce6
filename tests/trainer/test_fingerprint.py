"""The compute fingerprint names a compute profile: equal at every thread count, different for
other CPU kernels and for another run's step, and independent of the fingerprint a spec pins."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from suite_env import small_spec

from trainer.fingerprint import ComputeMismatch, check_fingerprint, compute_fingerprint

OTHER = "00" * 32


def test_it_is_a_digest_equal_at_every_thread_count(threads) -> None:
    spec = small_spec()
    found = set()
    for n in (1, 2, 3):
        threads(n)
        found.add(compute_fingerprint(spec))
    (one,) = found
    assert len(one) == 64 and int(one, 16) >= 0


def test_it_follows_the_step_not_the_pin() -> None:
    spec = small_spec()
    pinned = spec.with_changes(verification={"compute_fingerprint": OTHER})
    assert compute_fingerprint(spec) == compute_fingerprint(pinned)
    assert compute_fingerprint(spec) != compute_fingerprint(spec.with_changes(train={"lr": "0.002"}))


def test_other_cpu_kernels_have_another_fingerprint() -> None:
    if torch.backends.cpu.get_cpu_capability().lower() == "default":
        pytest.skip("this CPU has no vector kernels to switch between")
    code = ("import json, torch; from suite_env import small_spec; from trainer.fingerprint import compute_fingerprint;"
            "print(json.dumps([compute_fingerprint(small_spec()), torch.backends.cpu.get_cpu_capability()]))")
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default",
           "PYTHONPATH": os.pathsep.join([os.path.dirname(os.path.dirname(__file__)), *sys.path])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    other, kernels = json.loads(done.stdout)
    assert kernels == "DEFAULT" and other != compute_fingerprint(small_spec())


def test_a_pinned_profile_admits_this_machine_only_when_it_is_its_own() -> None:
    spec = small_spec()
    assert check_fingerprint(spec) is None  # nothing pinned: nothing computed, nothing refused
    local = compute_fingerprint(spec)
    assert check_fingerprint(spec.with_changes(verification={"compute_fingerprint": local})) == local
    with pytest.raises(ComputeMismatch, match="differently from the profile the run pins"):
        check_fingerprint(spec.with_changes(verification={"compute_fingerprint": OTHER}))


def test_importing_the_trainer_pins_mkl_to_thread_invariant_products() -> None:
    # MKL reads MKL_CBWR at its first call; a trainer import must set it before any product runs,
    # and must not override a mode the operator (or the tolerance harness) chose.
    code = "import os, trainer.presets; print(os.environ.get('MKL_CBWR'))"
    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}
    unset = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert unset.stdout.strip() == "AUTO,STRICT"
    chosen = subprocess.run([sys.executable, "-c", code], env={**env, "MKL_CBWR": "COMPATIBLE"},
                            capture_output=True, text=True, check=True)
    assert chosen.stdout.strip() == "COMPATIBLE"

