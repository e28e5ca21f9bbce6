"""Test helpers shared by tests/trainer (imported by name; conftest.py holds only fixtures)."""

from __future__ import annotations

from protocol.rules.spec import RunSpec
from trainer.presets import tiny

HOST = "inj1qypqxpq9qcrsszg2pvxq6rs0zqg3yyc5lzv7xu"


def small_spec(**changes) -> RunSpec:
    """The tiny preset with a short epoch (16 steps, 4 segments of 4) and batch 8."""
    spec = tiny().with_changes(train={"inner_steps": 16, "segment_steps": 4, "batch_size": 8})
    return spec.with_changes(**changes) if changes else spec
