"""`planner ...` entry point. Each command group lives in planner/commands/<group>.py with ``register``."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import click
import typer
from rich.console import Console

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
)
from planner.errors import InfeasibleError, UserError

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
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
bench.register(bench_app)


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


def _flags_on_error(callback: Callable[..., Any], flags: dict[str, str]) -> Callable[..., Any]:
    @functools.wraps(callback)
    def run_command(*args: Any, **kwargs: Any) -> Any:
        try:
            return callback(*args, **kwargs)
        except UserError as exc:
            raise exc.for_flags(flags) from exc

    return run_command


def _name_flags(command: Any) -> None:
    """Library errors name keys (planner/errors.py); show the user the flags of the command they ran."""
    if hasattr(command, "commands"):
        for sub in command.commands.values():
            _name_flags(sub)
    elif command.callback is not None:
        command.callback = _flags_on_error(command.callback, flag_table(command))


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code (used by tests and by ``main``)."""
    err = Console(stderr=True, highlight=False)
    command = typer.main.get_command(app)
    _name_flags(command)
    try:
        result = command.main(args=argv, prog_name="planner", standalone_mode=False)
    except UserError as exc:
        err.print(f"[bold red]error:[/] {exc}", soft_wrap=True)
        return UserError.exit_code
    except InfeasibleError as exc:
        err.print(f"[bold yellow]infeasible:[/] {exc}", soft_wrap=True)
        return InfeasibleError.exit_code
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        return 2 if exc.exit_code == 2 else int(exc.exit_code)
    except click.exceptions.Abort:
        err.print("aborted")
        return 130
    except KeyboardInterrupt:
        return 130
    return int(result) if isinstance(result, int) else 0


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
