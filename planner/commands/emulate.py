"""`planner emulate`: an OpenAI-compatible engine whose timing comes from a profile, with vLLM metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from planner.commands.guards import check_port_free
from planner.errors import UserError
from planner.types import Pool


def served_names(profile_model: str, given: str | None) -> tuple[str, tuple[str, ...]]:
    """(the name served, more names accepted): --model-name alone where given; else the Hugging Face name
    `planner init` writes in the engines' --served-model-name, with the profile's model name accepted too."""
    from planner.requests.engines import SERVED_NAMES

    if given is not None:
        return given, ()
    served = SERVED_NAMES.get(profile_model.lower(), profile_model)
    return served, (profile_model,) if served != profile_model else ()


def register(app: typer.Typer) -> None:
    @app.command("emulate")
    def emulate_cmd(
        profile: Annotated[Path, typer.Option(help="profile JSON (planner profile)")],
        role: Annotated[str, typer.Option(help=" | ".join(Pool))] = Pool.AGGREGATED.value,
        port: Annotated[int, typer.Option(help="TCP port")] = 8000,
        host: Annotated[str, typer.Option(help="bind address")] = "127.0.0.1",
        time_scale: Annotated[float, typer.Option("--time-scale", help="wall seconds per profile second "
                                                  "(0.1 = ten times faster)")] = 1.0,
        model_name: Annotated[str | None, typer.Option("--model-name", help="served model name "
                                                       "(default: the model's Hugging Face name, as `planner init` "
                                                       "writes it, e.g. Qwen/Qwen3-32B; the profile's model name "
                                                       "is accepted too)")] = None,
        max_model_len: Annotated[int, typer.Option("--max-model-len", help="context limit (token "
                                                   "histogram buckets)")] = 32768,
    ) -> None:
        """Serve an OpenAI-compatible engine whose timing comes from a profile, with vLLM metrics."""
        import uvicorn

        from planner.emulator.app import ROLES, create_app, engine_model_for
        from planner.profile import load_profile

        if role not in ROLES:
            raise UserError(f"--role {role!r}: allowed {', '.join(ROLES)}")
        if not 0 < port < 65536:
            raise UserError(f"--port {port}: must be in 1..65535")
        if not 0 < time_scale <= 100:
            raise UserError(f"--time-scale {time_scale:g}: must be in (0, 100]")
        if max_model_len < 1:
            raise UserError(f"--max-model-len {max_model_len}: must be >= 1")
        prof = load_profile(profile)
        check_port_free("--port", host, port)
        try:
            model = engine_model_for(prof, role)
        except KeyError as exc:
            raise UserError(f"{profile}: {exc.args[0]}") from None
        served, aliases = served_names(prof.model.name, model_name)
        # A decode replica gets its prompts' KV from prefill (the router's two-step route), as vLLM with a KV connector.
        app_ = create_app(model, served, time_scale, max_model_len, aliases, kv_from_prefill=role == Pool.DECODE.value)
        Console(stderr=True).print(f"emulating {prof.model.name} ({role}) on http://{host}:{port} "
                                   f"(time scale {time_scale:g})")
        uvicorn.run(app_, host=host, port=port, log_level="warning", access_log=False)
