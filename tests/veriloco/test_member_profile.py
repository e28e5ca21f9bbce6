"""A daemon says which compute profile it computes in, and warns when MKL's mode lets the thread
count change its bits (what no fingerprint probe showed on the AVX-512 CPU where it happened)."""

from __future__ import annotations

import pytest
from suite_env import small_spec

from veriloco.commands.member import report_profile

PINNED = small_spec(verification={"compute_fingerprint": "ab" * 32})  # pinned: nothing is computed


@pytest.mark.parametrize("mode", ["", "AUTO", "AVX2", "COMPATIBLE"])
def test_a_daemon_warns_when_mkl_is_not_in_a_strict_mode(monkeypatch, capsys, mode) -> None:
    if mode:
        monkeypatch.setenv("MKL_CBWR", mode)
    else:
        monkeypatch.delenv("MKL_CBWR", raising=False)
    report_profile(PINNED, "cpu", "host alice")
    err = " ".join(capsys.readouterr().err.split())
    assert f"MKL_CBWR={mode or '(unset)'} is not a strict mode" in err
    assert "thread count" in err and "the run pins compute profile abababab" in err


@pytest.mark.parametrize("mode", ["AUTO,STRICT", "avx2,strict"])
def test_a_strict_mode_is_not_warned_about(monkeypatch, capsys, mode) -> None:
    monkeypatch.setenv("MKL_CBWR", mode)
    report_profile(PINNED, "cpu", "host alice")
    err = " ".join(capsys.readouterr().err.split())
    assert "not a strict mode" not in err and "the run pins compute profile abababab" in err
