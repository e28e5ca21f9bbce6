"""The install path picks the torch build it is asked for: `make … TORCH=cu128` gets the CUDA build of
the pinned release or fails, never the CPU wheel; the default CPU build pulls no CUDA.

Resolution only (`pip install --dry-run --report`): nothing is downloaded beyond index pages and
metadata. Where PyTorch's index cannot be reached, the positive CUDA check skips and says so; the
negative checks run everywhere.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PINNED = "2.13.0"


def requirement(build: str | None = None) -> tuple[str, str]:
    """The (requirement, index) the Makefile installs torch with for ``TORCH=build`` (default: its own)."""
    args = ["make", "-s", "--no-print-directory", "-C", str(ROOT), "torch-requirement"]
    out = subprocess.run([*args, *([f"TORCH={build}"] if build else [])], capture_output=True, text=True,
                         check=True, timeout=30).stdout.split()
    return out[0], out[1]


def resolve(req: str, index: str, tmp_path: Path, deps: bool = False) -> tuple[int, list[dict], str]:
    """pip's dry-run resolution of ``req`` with ``index`` as an extra index, ignoring what is installed."""
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
         "--retries", "0", "--timeout", "10", "--extra-index-url", index, *([] if deps else ["--no-deps"]), req],
        capture_output=True, text=True, timeout=300)
    installs = json.loads(report.read_text())["install"] if done.returncode == 0 else []
    return done.returncode, installs, done.stderr


def reachable(index: str) -> bool:
    """Whether ``index``'s torch page answers at all (within a few seconds)."""
    try:
        with urllib.request.urlopen(f"{index}/torch/", timeout=5):
            return True
    except (urllib.error.URLError, OSError):
        return False


def torch_of(installs: list[dict]) -> dict:
    return next(i for i in installs if i["metadata"]["name"] == "torch")


def test_the_makefile_names_the_build_in_the_requirement() -> None:
    assert requirement() == (f"torch=={PINNED}+cpu", "https://download.pytorch.org/whl/cpu")
    assert requirement("cu128") == (f"torch=={PINNED}+cu128", "https://download.pytorch.org/whl/cu128")


@pytest.mark.slow
def test_a_cuda_install_never_settles_for_the_cpu_wheel(tmp_path: Path) -> None:
    req, index = requirement("cu128")
    code, installs, err = resolve(req, index, tmp_path)
    if code != 0:  # no such build reachable: the install fails, it does not fall back
        assert "torch==2.13.0+cu128" in err
        return
    chosen = torch_of(installs)
    assert chosen["metadata"]["version"] == f"{PINNED}+cu128"
    assert "cpu" not in chosen["download_info"]["url"]


@pytest.mark.slow
def test_the_cuda_build_resolves_from_pytorchs_index(tmp_path: Path) -> None:
    req, index = requirement("cu128")
    if not reachable(index):
        pytest.skip(f"{index} is not reachable from here: the CUDA build's resolution is not checked")
    code, installs, err = resolve(req, index, tmp_path)
    assert code == 0, err
    assert torch_of(installs)["metadata"]["version"] == f"{PINNED}+cu128"


@pytest.mark.slow
def test_a_cpu_install_pulls_no_cuda(tmp_path: Path) -> None:
    req, index = requirement()
    code, installs, err = resolve(req, index, tmp_path, deps=True)
    if code != 0 and not reachable(index):
        pytest.skip(f"neither {index} nor a local torch wheel is reachable from here")
    assert code == 0, err
    assert torch_of(installs)["metadata"]["version"] == f"{PINNED}+cpu"
    names = {i["metadata"]["name"].lower() for i in installs}
    assert not {n for n in names if n.startswith("nvidia") or n == "triton"}, names
