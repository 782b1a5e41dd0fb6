"""`planner ...` entry point. Each command group lives in planner/commands/<group>.py with ``register``."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup, TyperOption

from planner.commands import (
    bench,
    decide,
    demo,
    emulate,
    forecast,
    init,
    observe,
    profile,
    route,
    serve,
    service,
    sim,
    up,
)
from planner.commands.guards import check_writable, within
from planner.errors import InfeasibleError, UserError, not_utf8


# Typer builds its commands on its own copy of click (typer._click), so commands and options are recognised
# by what they have, not by click's classes.
def flag_table(command: Any) -> dict[str, str]:
    """Library key -> this command's flag: by parameter name and by the flag's own spelling."""
    table: dict[str, str] = {}
    for param in command.params:
        long = [o for o in param.opts if o.startswith("--")] if param.param_type_name == "option" else []
        if long and param.name:
            table[long[0][2:].replace("-", "_")] = long[0]
            table[param.name] = long[0]
    return table


def _no_type_for_flags() -> None:
    """typer (0.2x) shows each option's type in --help, a flag's as ``<bool>`` although it takes no value
    (``--quick``, ``--help``): a flag shows none. Older typer (no ``display_type_rich``) is left as it is."""
    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None or getattr(shown, "flags_untyped", False):
        return

    def display_type_rich(self: Any, ctx: Any) -> str | None:
        return None if getattr(self, "is_flag", False) else shown(self, ctx)

    display_type_rich.flags_untyped = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_no_type_for_flags()


# Parameters that name something a command writes: checked before the command starts (a backtest must not
# fail at its end), and an OSError on a path under them is the user's (exit 2), not a traceback.
OUTPUT_PARAMS = ("out", "plots")


def _outputs(kwargs: dict[str, Any], flags: dict[str, str]) -> dict[str, Path]:
    return {flags.get(name, f"--{name}"): Path(kwargs[name]) for name in OUTPUT_PARAMS
            if isinstance(kwargs.get(name), str | Path)}


def _flags_on_error(callback: Callable[..., Any], flags: dict[str, str]) -> Callable[..., Any]:
    @functools.wraps(callback)
    def run_command(*args: Any, **kwargs: Any) -> Any:
        outputs = _outputs(kwargs, flags)
        try:
            for flag, path in outputs.items():
                check_writable(flag, path)
            return callback(*args, **kwargs)
        except UserError as exc:
            raise exc.for_flags(flags) from exc
        except UnicodeDecodeError as exc:  # a reader that does not name its file (they should: errors.not_utf8)
            raise not_utf8("an input file", exc, whole_file=False) from None
        except OSError as exc:
            names = [n for n in (exc.filename2, exc.filename) if n is not None]  # a rename's target first
            hit = next(((f, p, n) for n in names for f, p in outputs.items() if within(p, n)), None)
            if hit is None:
                raise
            raise UserError(f"{hit[0]} {hit[1]}: cannot write {hit[2]} ({exc.strerror or exc})") from None

    run_command.names_flags = True  # type: ignore[attr-defined]
    return run_command


def _name_flags(command: Any) -> None:
    """Library errors name keys (planner/errors.py); show the user the flags of the command they ran."""
    if hasattr(command, "commands"):
        for sub in command.commands.values():
            _name_flags(sub)
    elif command.callback is not None and not getattr(command.callback, "names_flags", False):
        command.callback = _flags_on_error(command.callback, flag_table(command))


class PlannerGroup(TyperGroup):
    """The `planner` group: every way in (``run``, ``main``, typer's CliRunner) gets the same exits and
    one-line errors, with library keys shown as the command's flags."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, windows_expand_args: bool = True, **extra: Any) -> Any:
        _name_flags(self)
        err = Console(stderr=True, highlight=False)
        try:
            result = super().main(args=args, prog_name=prog_name, complete_var=complete_var,
                                  standalone_mode=False, windows_expand_args=windows_expand_args, **extra)
            code = int(result) if isinstance(result, int) else 0
        except UserError as exc:
            err.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
            code = UserError.exit_code
        except InfeasibleError as exc:
            err.print(f"[bold yellow]infeasible:[/] {escape(str(exc))}", soft_wrap=True)
            code = InfeasibleError.exit_code
        except KeyboardInterrupt:
            code = 130
        except Exception as exc:
            kind = click_kind(exc)
            if kind is None:
                raise
            code = _show_click(kind, exc, err)
        if standalone_mode:
            sys.exit(code)
        return code


app = typer.Typer(cls=PlannerGroup, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="SLA-driven autoscaling planner for prefill/decode-disaggregated LLM inference.")
bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks: print measured figures.")
app.add_typer(bench_app, name="bench")

# Registration order is the order `planner --help` lists the commands in.
init.register(app)
profile.register(app)
sim.register(app)
decide.register(app)
forecast.register(app)
observe.register(app)
emulate.register(app)
service.register(app)
route.register(app)
serve.register(app)
demo.register(app)
up.register(app)
bench.register(bench_app)


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code (used by tests and by ``main``)."""
    return int(typer.main.get_command(app).main(args=argv, prog_name="planner", standalone_mode=False))


# Click's exceptions come from typer's bundled copy (typer._click, typer >= 0.2x), from typer.exceptions
# (Exit, Abort) or from a standalone click (older typer): recognised by class name and home package, so
# whichever typer is installed, a usage error is one line and never a traceback.
_CLICK_HOMES = ("click", "typer")
_CLICK_KINDS = ("NoArgsIsHelpError", "Exit", "Abort", "ClickException")


def click_kind(exc: BaseException) -> str | None:
    """The click exception ``exc`` is (one of _CLICK_KINDS, most specific first), or None."""
    names = {cls.__name__ for cls in type(exc).__mro__ if cls.__module__.split(".")[0] in _CLICK_HOMES}
    return next((kind for kind in _CLICK_KINDS if kind in names), None)


def _show_click(kind: str, exc: Any, err: Console) -> int:
    if kind == "NoArgsIsHelpError":  # `planner` or `planner bench` alone: the help, as --help shows it
        print(exc.format_message())
        return 0
    if kind == "Exit":  # --help, --version, typer.Exit(n)
        return int(getattr(exc, "exit_code", 0) or 0)
    if kind == "Abort":
        err.print("aborted")
        return 130
    ctx = getattr(exc, "ctx", None)
    hint = f" (see: {ctx.command_path} --help)" if ctx is not None else ""
    message = " ".join(str(exc.format_message()).split())  # one line, whatever click wrapped
    err.print(f"[bold red]error:[/] {escape(message + hint)}", soft_wrap=True)
    return UserError.exit_code  # every click error is the user's input (usage, bad value, unreadable file)


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
