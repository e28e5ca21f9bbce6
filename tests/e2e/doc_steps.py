"""The steps of docs/operators.md, as the walkthrough test and the export test run them.

* Every ``$ …`` line of a ```` ```console ```` block is a command; the lines after it, up to the
  next command, are the output the doc shows.
* ``<!-- walkthrough: wait for the daemons -->`` (on a line of its own) waits for the daemons.
* Every ```` ```python ```` block is a program. ```` ```bash ```` blocks are examples, not steps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "operators.md"
WAIT = "<!-- walkthrough: wait for the daemons -->"
DAEMON = re.compile(r"^veriloco (host|validator) run\b")


@dataclass
class Step:
    """One thing the doc does: a command (with the output it shows), a Python block, or a wait."""

    kind: str  # "command", "python" or "wait"
    text: str
    shown: list[str] = field(default_factory=list)


def walkthrough(doc: str) -> list[Step]:
    """The steps of ``doc`` in order (see the module docstring)."""
    steps: list[Step] = []
    fence: str | None = None
    python: list[str] = []
    command: Step | None = None  # the last command of the current console block
    for line in doc.splitlines():
        if fence is None:
            if line.strip() == WAIT:
                steps.append(Step("wait", ""))
            elif line.startswith("```"):
                fence, command = line[3:].strip(), None
            continue
        if line.startswith("```"):
            if fence == "python":
                steps.append(Step("python", "\n".join(python) + "\n"))
                python = []
            fence = None
        elif fence == "console":
            if line.startswith("$ "):
                command = Step("command", line[2:].strip())
                steps.append(command)
            elif command is not None:
                command.shown.append(line)
        elif fence == "python":
            python.append(line)
    return steps
