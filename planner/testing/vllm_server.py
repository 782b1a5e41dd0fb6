"""A handle on one real vLLM OpenAI-compatible server process (``python -m vllm.entrypoints.openai.api_server``).

The server runs in its own process group (it forks an engine-core process, and on the CPU build OpenMP
workers), so ``stop`` signals the whole group: SIGTERM, a grace period, then SIGKILL - nothing outlives
the handle. The server also gets SIGTERM if the thread that started it dies (PR_SET_PDEATHSIG), so a
test run that is killed does not leave an engine spinning on the machine's cores.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from planner.procfs import die_with_parent, group_members
from planner.testing.ports import free_port

ROLES = ("aggregated", "kv_producer", "kv_consumer")
# Small enough for a 2-core machine, big enough for 16 concurrent requests of a few hundred tokens of the
# tiny model. --enforce-eager skips torch.compile, which more than doubles a first start
# (docs/engines/vllm-cpu.md, "Serving", has the start-up times).
# The model runs in the engine-core process (the uniprocess executor; vLLM's CPU platform turns it back into
# a multiprocess one unless VLLM_ENABLE_V1_MULTIPROCESSING=0, which the API server's AsyncLLM ignores: it
# still runs the engine core in its own process). One spawned process fewer, each importing torch and vLLM:
# a shorter start-up (docs/engines/vllm-cpu.md, "Serving").
DEFAULT_ARGS = ("--load-format", "dummy", "--dtype", "bfloat16", "--max-model-len", "4096",
                "--max-num-seqs", "16", "--kv-cache-memory-bytes", "64M", "--enforce-eager",
                "--distributed-executor-backend", "uni")
# PYTHONDONTWRITEBYTECODE empty (Python reads only a non-empty value): the first server writes the bytecode of the
# ~5,000 modules it imports (torch, vLLM, transformers) into the engine's environment, which its installer leaves
# without any; every later start reads it instead of compiling them again: ~20 s of CPU less for each of the two
# processes that import them. A shell or image that sets the variable (this Dockerfile does) would otherwise make
# every start compile everything.
SERVER_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
              "DO_NOT_TRACK": "1", "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false",
              "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "PYTHONDONTWRITEBYTECODE": ""}


class EngineStartError(RuntimeError):
    """The server exited or did not answer in time; the message ends with the tail of its log."""



def kv_transfer_config(role: str, kv_path: Path | None) -> str | None:
    """The ``--kv-transfer-config`` JSON of a disaggregated role (ExampleConnector: KV through files)."""
    if role not in ROLES:
        raise ValueError(f"role {role!r}: allowed {', '.join(ROLES)}")
    if role == "aggregated":
        return None
    if kv_path is None:
        raise ValueError(f"role {role!r} needs kv_path: the directory the producer writes KV into")
    return json.dumps({"kv_connector": "ExampleConnector", "kv_role": role,
                       "kv_connector_extra_config": {"shared_storage_path": str(kv_path)}})


class VllmServer:
    """One vLLM server: ``start()`` blocks until it answers, ``stop()`` ends its whole process group.

    ``role`` is aggregated, kv_producer or kv_consumer (the two disaggregated roles share ``kv_path``).
    ``cpus`` is the cores its model runs on ("0", "1", "0-1"; VLLM_CPU_OMP_THREADS_BIND, and "nobind" or "auto"
    as vLLM reads them). vLLM applies that variable only in its multiprocess executor (when it spawns the
    worker), so under DEFAULT_ARGS' uniprocess executor the server gets ``OMP_NUM_THREADS`` = the number of
    cores listed, and once it is ready its engine-core process's model thread is pinned to them here
    (``pin_engine_core``). Without that, each engine runs two OpenMP threads spinning on both cores, and a
    busy decode server slows an idle-looking prefill server's prompts 20x (docs/engines/vllm-cpu.md,
    "Serving").
    ``args`` replaces DEFAULT_ARGS; ``extra_args`` is appended after it.
    """

    def __init__(self, python: Path | str, model_dir: Path | str, *, port: int | None = None,
                 role: str = "aggregated", kv_path: Path | None = None, cpus: str = "0",
                 served_model_name: str = "tiny", args: Sequence[str] = DEFAULT_ARGS,
                 extra_args: Sequence[str] = (), env: Mapping[str, str] | None = None,
                 log_dir: Path | None = None) -> None:
        self.python = str(python)
        self.model_dir = Path(model_dir)
        self.port = port or free_port()
        self.role = role
        self.kv_config = kv_transfer_config(role, kv_path)
        self.cpus = cpus
        self.cores = cpu_list(cpus)  # [] for "auto" / "nobind": nothing pinned here
        self.served_model_name = served_model_name
        self.args = [*args, *extra_args]
        self.extra_env = dict(env or {})
        self.log_path = Path(log_dir or tempfile.mkdtemp(prefix="planner-vllm-")) / f"vllm-{role}-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready_s: float | None = None  # seconds from launch to the first good answer
        self.pinned: dict[int, int] = {}  # engine-core pid -> threads pinned to ``cpus`` once ready
        self._launched = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [self.python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.model_dir),
               "--served-model-name", self.served_model_name, "--host", "127.0.0.1", "--port", str(self.port),
               *self.args]
        if self.kv_config is not None:
            cmd += ["--kv-transfer-config", self.kv_config]
        return cmd

    def start(self, timeout_s: float = 300.0) -> VllmServer:
        """Launch and wait until it answers (EngineStartError with the log's tail otherwise)."""
        return self.launch().wait_ready(timeout_s)

    def launch(self) -> VllmServer:
        """Start the process without waiting: launch several, then ``wait_ready`` each (they load in parallel)."""
        if self.proc is not None:
            raise RuntimeError(f"vLLM server on port {self.port} already started")
        env = {**os.environ, **SERVER_ENV, "VLLM_CPU_OMP_THREADS_BIND": self.cpus, **self.extra_env}
        if self.cores and "OMP_NUM_THREADS" not in self.extra_env:
            env["OMP_NUM_THREADS"] = str(len(self.cores))
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._launched = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                                         preexec_fn=die_with_parent)
        return self

    def wait_ready(self, timeout_s: float = 300.0) -> VllmServer:
        """Block until /health and /v1/models answer; on failure stop the server and raise."""
        if self.proc is None:
            raise RuntimeError("wait_ready() before launch()")
        try:
            self._wait_ready(self._launched + timeout_s, timeout_s)
        except BaseException:
            self.stop()
            raise
        self.ready_s = time.monotonic() - self._launched
        if self.cores:
            self.pinned = pin_engine_core(self.proc.pid, self.cores)
        return self

    def _wait_ready(self, deadline: float, timeout_s: float) -> None:
        assert self.proc is not None
        while True:
            code = self.proc.poll()
            if code is not None:
                raise EngineStartError(f"vLLM ({self.role}, port {self.port}) exited with {code} before it was "
                                       f"ready; last lines of {self.log_path}:\n{self.log_tail()}")
            if self._answers():
                return
            if time.monotonic() > deadline:
                raise EngineStartError(f"vLLM ({self.role}, port {self.port}) not ready after {timeout_s:g}s; "
                                       f"last lines of {self.log_path}:\n{self.log_tail()}")
            time.sleep(0.5)

    def _answers(self) -> bool:
        """/health is 200 and /v1/models lists the served model (the HTTP server and the engine are up)."""
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                if r.status != 200:
                    return False
            with urllib.request.urlopen(f"{self.url}/v1/models", timeout=2) as r:
                models = json.loads(r.read())
        except (OSError, urllib.error.URLError, ValueError):
            return False
        return any(m.get("id") == self.served_model_name for m in models.get("data", []))

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM to the process group, wait up to ``grace_s`` for every member, then SIGKILL."""
        if self.proc is None:
            return
        pgid = self.proc.pid  # start_new_session: the server leads its own group
        _signal_group(pgid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        if not _group_gone(pgid, time.monotonic() + max(1.0, grace_s / 4)):
            _signal_group(pgid, signal.SIGKILL)
            _group_gone(pgid, time.monotonic() + 10.0)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.proc = None

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _group_gone(pgid: int, deadline: float) -> bool:
    """True once no process is left in the group (the leader must have been reaped by then)."""
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


ENGINE_CORE_COMM = "VLLM::EngineCor"  # the process title vLLM sets, as /proc/PID/comm cuts it (15 bytes)


def cpu_list(spec: str) -> list[int]:
    """The cores of a VLLM_CPU_OMP_THREADS_BIND value ("0", "1", "0-1", "0,2"); [] for "auto" and "nobind"
    (vLLM decides, or nothing is pinned) and for anything else that names no core."""
    cores: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            return []
        cores.extend(range(int(lo), int(hi or lo) + 1))
    return sorted(set(cores))


def pin_engine_core(pgid: int, cores: list[int]) -> dict[int, int]:
    """Pin the model's threads in the group's engine-core process(es) to ``cores``; {pid: threads pinned}.

    On one core that is the main thread alone: with one OpenMP thread it runs the model (the uniprocess
    executor's busy loop), while the engine core's request and output threads float, as the engine-core
    process did beside vLLM's pinned worker in the multiprocess executor. On several cores every thread is
    pinned to them (OpenMP's workers cannot be told from the rest by name). Per thread, because
    sched_setaffinity on a pid moves only its main thread; threads started later inherit the mask of the
    thread that starts them. A thread that ends meanwhile is skipped."""
    pinned: dict[int, int] = {}
    for pid, comm, _state in group_members(pgid):
        if not comm.startswith(ENGINE_CORE_COMM):
            continue
        count = 0
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            continue  # the process ended
        if len(cores) == 1:  # one OpenMP thread: the main thread runs the model; its I/O threads float
            tasks = [t for t in tasks if t.name == str(pid)]
        for task in tasks:
            try:
                os.sched_setaffinity(int(task.name), cores)
                count += 1
            except (OSError, ValueError):
                continue
        pinned[pid] = count
    return pinned
