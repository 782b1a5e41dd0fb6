"""`planner ...` entry point. Each command group lives in planner/commands/<group>.py with ``register``."""

from __future__ import annotations

import importlib
import sys

import click
import typer
from rich.console import Console

from planner.errors import InfeasibleError, UserError

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="SLA-driven autoscaling planner for prefill/decode-disaggregated LLM inference.")
bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks: print measured figures.")
app.add_typer(bench_app, name="bench")

# Command modules register themselves; a module that is not there yet is simply not offered.
COMMAND_MODULES = (
    "planner.commands.profile",
    "planner.commands.sim",
    "planner.commands.decide",
    "planner.commands.forecast",
    "planner.commands.observe",
    "planner.commands.service",
    "planner.commands.demo",
)

_registered = False


def _register() -> None:
    global _registered
    if _registered:
        return
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.register(app, bench_app)
    _registered = True


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code (used by tests and by ``main``)."""
    _register()
    err = Console(stderr=True, highlight=False)
    command = typer.main.get_command(app)
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
