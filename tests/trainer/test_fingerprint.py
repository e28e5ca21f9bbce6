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



def _elsewhere(**env_changes: str | None) -> tuple[str, dict]:
    """The fingerprint and numeric mode of small_spec() in a fresh process with ``env_changes``
    (``None`` removes a variable)."""
    code = ("import json, sys, trainer; from suite_env import small_spec; "
            "from trainer.fingerprint import compute_fingerprint, numeric_mode; "
            "print(json.dumps([compute_fingerprint(small_spec()), numeric_mode()]))")
    env = {k: v for k, v in os.environ.items() if k not in env_changes}
    env.update({k: v for k, v in env_changes.items() if v is not None})
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(__file__)), *sys.path])
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    fingerprint, mode = json.loads(done.stdout)
    return fingerprint, mode


def test_the_numeric_mode_is_part_of_the_fingerprint() -> None:
    # MKL_CBWR=AUTO computes other bits than the trainer's AUTO,STRICT (and follows the thread count
    # on some CPUs) while the probe alone may agree: the mode is hashed, so the fingerprints differ.
    default, mode = _elsewhere(MKL_CBWR=None, MKL_ENABLE_INSTRUCTIONS=None)
    assert mode["mkl_cbwr"] == "AUTO,STRICT" and mode["device"] == "cpu" and mode["torch"] == torch.__version__
    assert _elsewhere(MKL_CBWR="AUTO,STRICT", MKL_ENABLE_INSTRUCTIONS=None)[0] == default
    assert _elsewhere(MKL_CBWR=" auto , strict", MKL_ENABLE_INSTRUCTIONS=None)[0] == default  # as MKL parses it
    others = {"MKL_CBWR=AUTO": _elsewhere(MKL_CBWR="AUTO", MKL_ENABLE_INSTRUCTIONS=None),
              "MKL_CBWR=COMPATIBLE": _elsewhere(MKL_CBWR="COMPATIBLE", MKL_ENABLE_INSTRUCTIONS=None),
              "MKL_ENABLE_INSTRUCTIONS=AVX2": _elsewhere(MKL_CBWR=None, MKL_ENABLE_INSTRUCTIONS="AVX2")}
    if torch.backends.cpu.get_cpu_capability().lower() != "default":
        others["ATEN_CPU_CAPABILITY=default"] = _elsewhere(MKL_CBWR=None, MKL_ENABLE_INSTRUCTIONS=None,
                                                           ATEN_CPU_CAPABILITY="default")
    prints = {name: found[0] for name, found in others.items()}
    assert default not in prints.values() and len(set(prints.values())) == len(prints), prints
    assert others["MKL_CBWR=AUTO"][1]["mkl_cbwr"] == "AUTO"
    assert others["MKL_ENABLE_INSTRUCTIONS=AVX2"][1]["mkl_enable_instructions"] == "AVX2"


def test_a_pinned_run_refuses_an_mkl_mode_that_is_not_strict(monkeypatch) -> None:
    import trainer
    from trainer.fingerprint import strict_mkl

    assert strict_mkl("AUTO,STRICT") and strict_mkl("avx2, strict") and not strict_mkl("AUTO")
    assert not strict_mkl("COMPATIBLE") and not strict_mkl("")
    spec = small_spec()
    local = compute_fingerprint(spec)
    pinned = spec.with_changes(verification={"compute_fingerprint": local})
    monkeypatch.setitem(trainer.MKL_ENVIRONMENT, "MKL_CBWR", "AUTO")
    with pytest.raises(ComputeMismatch, match="MKL_CBWR=AUTO is not a strict mode"):
        check_fingerprint(pinned)
    assert check_fingerprint(spec) is None  # a run that pins nothing is warned about, not refused
