"""The Cosmos-style flags of the commands that talk to a node, accepted before the command
(``veriloco --fees 0.001INJ host bond …``, or from ``$VERILOCO_FEES`` …) and after it, where Cosmos
users type them (``veriloco host bond 20INJ --fees 0.001INJ --gas auto``).

One table (:data:`FLAGS`) declares them; :func:`root`, :func:`sends` and :func:`reads` add them to
a command (``--node`` alone to the read-only ones); :func:`merge` folds one command line's values
into :data:`veriloco.connect.TX`, refusing the same flag given before and after the command with
different values (an environment variable only sets a default, which a flag overrides).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import typer

from veriloco.connect import TX

F = TypeVar("F", bound=Callable[..., Any])
BEFORE, AFTER = "before the command", "after the command"
PANEL = "Chain options (also before the command)"


def _check_gas(value: str | None) -> str | None:
    if value is not None and value != "auto" and not (value.isdigit() and int(value) > 0):
        raise typer.BadParameter(f"{value!r}: expected auto or a positive number of gas units")
    return value


@dataclass(frozen=True)
class Flag:
    """One flag: ``name`` is its field of :class:`veriloco.connect.TxOptions`."""

    name: str
    type: type
    help: str
    min: float | None = None
    check: Callable[[Any], Any] | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def param(self) -> str:
        """The command's parameter name (prefixed: a command may have a ``node`` of its own)."""
        return f"tx_{self.name}"

    def parameter(self, *, root: bool) -> inspect.Parameter:
        option = typer.Option(self.flag, envvar=f"VERILOCO_{self.name.upper()}" if root else None, min=self.min,
                              callback=self.check, help=self.help, rich_help_panel=None if root else PANEL,
                              show_envvar=root)
        return inspect.Parameter(self.param, inspect.Parameter.KEYWORD_ONLY, default=None,
                                 annotation=Annotated[self.type | None, option])


NODE = Flag("node", str, "gRPC URL of the node to use instead of the network file's")
FLAGS = (NODE,
         Flag("gas", str, "gas limit per transaction: auto (simulate; the default) or a number", check=_check_gas),
         Flag("gas_adjustment", float, "with --gas auto: the factor on the simulated gas (default 1.3 on Injective)",
              min=1.0),
         Flag("gas_prices", str, "fee per gas unit, e.g. 160000000inj"),
         Flag("fees", str, "a fixed fee per transaction, e.g. 0.001INJ"))


def merge(values: Mapping[str, Any], where: str, *, from_env: Collection[str] = (),
          ctx: typer.Context | None = None) -> None:
    """Set :data:`TX`'s fields from ``values`` (None: not given), given ``where`` on the command line.

    Args:
        from_env: names whose value came from an environment variable: a default, which a flag overrides.
        ctx: the command's context, named in a usage error.

    Raises:
        typer.BadParameter: a flag already given elsewhere on the command line with another value.
    """
    for name, value in values.items():
        if value is None:
            continue
        earlier, before = TX.given.get(name), getattr(TX, name)
        if earlier is not None and not earlier.startswith("$") and before != value:
            raise typer.BadParameter(f"{value} {where}, but {before} {earlier}: give it once", ctx=ctx,
                                     param_hint=f"'--{name.replace('_', '-')}'")
        setattr(TX, name, value)
        TX.given[name] = f"$VERILOCO_{name.upper()}" if name in from_env else where


def _with(flags: tuple[Flag, ...], *, at_root: bool) -> Callable[[F], F]:
    """A decorator that adds ``flags`` to a Typer command and merges their values before it runs."""
    def decorate(func: F) -> F:
        signature = inspect.signature(func, eval_str=True)
        context = inspect.Parameter("tx_context", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)
        added = [flag.parameter(root=at_root) for flag in flags]
        if clash := {p.name for p in (context, *added)} & set(signature.parameters):
            raise TypeError(f"{func.__name__} has parameters named {sorted(clash)}, which tx_flags adds")

        @functools.wraps(func)
        def command(*args: Any, **kwargs: Any) -> Any:
            ctx: typer.Context = kwargs.pop("tx_context")
            values = {flag.name: kwargs.pop(flag.param) for flag in flags}
            env = {f.name for f in flags if (src := ctx.get_parameter_source(f.param)) and src.name == "ENVIRONMENT"}
            if at_root:
                TX.reset()
            merge(values, BEFORE if at_root else AFTER, from_env=env, ctx=ctx)
            return func(*args, **kwargs)

        parameters = [*signature.parameters.values(), context, *added]
        command.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in parameters}
        return command  # type: ignore[return-value]
    return decorate


root = _with(FLAGS, at_root=True)
"""The root callback's flags (with their environment variables); each invocation starts from the defaults."""
sends = _with(FLAGS, at_root=False)
"""A command that sends transactions: every flag after the command."""
reads = _with((NODE,), at_root=False)
"""A command that only reads the chain: ``--node`` after the command."""


def on_group(app: typer.Typer, *, read_only: Collection[str] = ()) -> typer.Typer:
    """``app`` with :func:`sends` on each of its commands, :func:`reads` on those named in ``read_only``."""
    for info in app.registered_commands:
        if info.callback is not None:
            info.callback = (reads if info.name in read_only else sends)(info.callback)
    return app
