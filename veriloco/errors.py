"""The CLI's own error: what a command refuses (bad arguments, a missing key, a stuck run)."""

from __future__ import annotations

from protocol.errors import VerilocoError


class CommandError(VerilocoError):
    """A user-facing error raised by the CLI's own code. Printed as one line, like every VerilocoError."""
