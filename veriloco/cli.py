"""The ``veriloco`` command. Each command group lives in ``veriloco/commands/``.

Every anticipated error prints as ONE line on stderr (``error: ...``) with a non-zero exit status:
the project's own errors (everything derived from :class:`protocol.errors.VerilocoError`: a
contract refusal, a bad amount, a missing key or network file, ...), invalid files (pydantic),
``ValueError`` and ``OSError``, and Typer's usage errors (exit status 2). The global ``--debug``
option (or ``VERILOCO_DEBUG=1``) shows the traceback of a non-usage error instead. Anything else is
a bug and always shows its traceback.

Startup stays light: the command modules import torch, cosmpy, wasmtime, FastAPI and matplotlib
only inside the commands that use them, so ``--help``, ``keys``, ``report`` and the other commands
that do not train start in well under a second (``bench/cli_startup.py``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Annotated, Any

# Idle OpenMP threads spin by default; with several nodes (or daemons) on a few cores that spinning
# starves the threads doing work (measured: up to 40x slower steps). Set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import typer
from pydantic import ValidationError
from typer.core import TyperGroup

from chain.errors import LedgerError, NodeUnreachable
from protocol.coins import KNOWN, annotate
from protocol.errors import VerilocoError
from veriloco import __version__
from veriloco.commands import (
    dashboard,
    devnet,
    epoch,
    join,
    keys,
    keys_import,
    member,
    model,
    run,
    simulate,
    standby,
    train,
    tx_flags,
    watch,
)
from veriloco.connect import TIMEOUTS
from veriloco.output import err_console, print_json

# What a user can cause and needs to read as one line; anything else is a bug (traceback).
EXPECTED_ERRORS = (VerilocoError, ValidationError, ValueError, OSError)
EXIT_ERROR, EXIT_ABORTED = 1, 130


def one_line(exc: BaseException) -> str:
    """The message of ``exc`` as a single line (a validation error: its first error and where)."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or exc.title
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        text = f"{where}: {first['msg']}{more}"
    elif isinstance(exc, typer.TyperException):
        text = exc.format_message()
        if "unexpected extra argument" in text and any(f"({d.display})" in text or f"({d.base})" in text
                                                       for d in KNOWN.values()):
            text += "; write an amount as one word, e.g. 20INJ"
        ctx = getattr(exc, "ctx", None)  # usage errors name the command they belong to
        if ctx is not None:
            text += f" (see '{ctx.command_path} --help')"
    else:
        text = str(exc) or type(exc).__name__
        if isinstance(exc, LedgerError):  # the contract and chain write base units; a person reads the display form
            for denom in KNOWN:
                text = annotate(text, denom)
        if isinstance(exc, NodeUnreachable):
            text += " — is the node running? (veriloco devnet status; --timeout SECONDS waits longer)"
    return " ".join(text.split())


class _Debug:
    """Whether ``--debug`` was given in the current invocation (set by the root callback)."""

    on = False


class VerilocoGroup(TyperGroup):
    """The root command: runs a command and turns every anticipated error into one line and an exit code.

    Error handling lives here rather than in :func:`main`, so Typer's ``CliRunner`` (the tests)
    sees exactly what a user sees.
    """

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True, windows_expand_args: bool = True,
             **extra: Any) -> Any:
        _Debug.on = False
        try:
            # Not standalone: errors come back to us instead of being printed as Typer's boxes;
            # ``typer.Exit(n)`` (and Ctrl-C, as 130) come back as the return value.
            returned = super().main(args, prog_name, complete_var, standalone_mode=False,
                                    windows_expand_args=windows_expand_args, **extra)
            code = returned if isinstance(returned, int) and not isinstance(returned, bool) else 0
        except typer.TyperException as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # a bare group: its help is what was asked for
                err_console.print(exc.format_message(), highlight=False, markup=False)
            else:
                err_console.print(f"[red]error:[/] {one_line(exc)}", highlight=False, soft_wrap=True)
            code = int(getattr(exc, "exit_code", EXIT_ERROR))
        except typer.Abort:
            err_console.print("aborted")
            code = EXIT_ABORTED
        except EXPECTED_ERRORS as exc:
            if _Debug.on:
                raise
            err_console.print(f"[red]error:[/] {one_line(exc)}", highlight=False, soft_wrap=True)
            code = EXIT_ERROR
        if standalone_mode:
            sys.exit(code)
        return code


def _show_version(value: bool) -> None:
    if value:
        print(__version__)
        raise typer.Exit()


app = typer.Typer(
    name="veriloco",
    help="Verifiable, blockchain-settled DiLoCo training.\n\n"
         "Results go to stdout (with --json: one JSON object with a schema_version); progress, prompts and logs "
         "to stderr. Amounts are Cosmos coins: 20INJ (whole INJ) or 20000000000000000000inj (base units). "
         "docs/operators.md walks through every role.",
    cls=VerilocoGroup,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
)


@app.callback()
@tx_flags.root  # --node, --gas, --gas-adjustment, --gas-prices, --fees (also after the command)
def _root(
    debug: Annotated[bool, typer.Option("--debug", envvar="VERILOCO_DEBUG",
                                        help="show the traceback of an error instead of one line")] = False,
    timeout: Annotated[float, typer.Option(
        "--timeout", envvar="VERILOCO_TIMEOUT", min=0.1,
        help="seconds to wait for the chain's node to answer before giving up")] = TIMEOUTS.node,
    tx_timeout: Annotated[float, typer.Option(
        "--tx-timeout", envvar="VERILOCO_TX_TIMEOUT", min=1,
        help="seconds to wait for a transaction to be included in a block")] = TIMEOUTS.tx,
    version: Annotated[bool, typer.Option("--version", callback=_show_version, is_eager=True,
                                          help="print the version and exit")] = False,
) -> None:
    """Verifiable, blockchain-settled DiLoCo training (the options every command shares)."""
    _Debug.on = debug
    TIMEOUTS.node, TIMEOUTS.tx = timeout, tx_timeout


keys.app.command("import-injectived")(keys_import.import_injectived)
app.add_typer(keys.app, name="keys")
app.add_typer(devnet.app, name="devnet")
app.add_typer(train.app, name="train")
run.app.command("join")(join.join)
app.add_typer(run.app, name="run")
epoch.app.command("watch")(watch.watch)
app.add_typer(epoch.app, name="epoch")
app.command("report")(epoch.report)
app.command("simulate")(simulate.simulate)
app.add_typer(member.host_app, name="host")
app.add_typer(member.validator_app, name="validator")
app.add_typer(standby.app, name="standby")
app.add_typer(model.app, name="model")
app.command("metrics")(epoch.metrics)
app.command("dashboard")(dashboard.dashboard)


@app.command("version")
def version(json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False) -> None:
    """Print the version."""
    if json:
        print_json({"version": __version__})
    else:
        print(__version__)


def main() -> None:
    """Console entry point (``veriloco``); exits with the command's status. The name is fixed, so
    shell completion (``_VERILOCO_COMPLETE``) works however the program was started."""
    app(prog_name="veriloco")


if __name__ == "__main__":
    main()
