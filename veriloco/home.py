"""Where veriloco keeps local state: ``$VERILOCO_HOME`` or ``~/.veriloco``."""

from __future__ import annotations

import os
from pathlib import Path


def home_dir(override: str | Path | None = None) -> Path:
    """The veriloco home directory (created on first use, private to the user)."""
    path = Path(override or os.environ.get("VERILOCO_HOME") or Path.home() / ".veriloco").expanduser()
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path
