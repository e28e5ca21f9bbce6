"""The ``veriloco`` command. Each command group lives in ``veriloco/commands/``.

Errors a user can cause print as one line (``error: ...``) with exit status 1; set
``VERILOCO_DEBUG=1`` to see the traceback instead.
"""

from __future__ import annotations

import os
import sys

# Idle OpenMP threads spin by default; with several nodes (or daemons) on a few cores that spinning
# starves the threads doing work (measured: up to 40x slower steps). Set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import click
import typer
from pydantic import ValidationError

from veriloco import __version__
from veriloco.commands import devnet, epoch, keys, member, run, simulate, train
from veriloco.errors import VerilocoError
from veriloco.output import err_console

app = typer.Typer(
    name="veriloco",
    help="Verifiable, blockchain-settled DiLoCo training.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(keys.app, name="keys")
app.add_typer(devnet.app, name="devnet")
app.add_typer(train.app, name="train")
app.add_typer(run.app, name="run")
app.add_typer(epoch.app, name="epoch")
app.command("report")(epoch.report)
app.command("simulate")(simulate.simulate)
app.add_typer(member.host_app, name="host")
app.add_typer(member.validator_app, name="validator")


@app.command("version")
def version() -> None:
    """Print the version."""
    print(__version__)


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or exc.title
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        return f"{where}: {first['msg']}{more}"
    return str(exc) or type(exc).__name__


def main() -> None:
    """Console entry point: run the app, turning expected errors into one clear line."""
    try:
        app(standalone_mode=False)
    except click.exceptions.Abort:
        err_console.print("aborted")
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except (VerilocoError, ValidationError, ValueError, OSError) as exc:
        if os.environ.get("VERILOCO_DEBUG"):
            raise
        err_console.print(f"[red]error:[/] {_one_line(exc)}", highlight=False, soft_wrap=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
