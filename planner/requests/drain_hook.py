"""The engines' drain before SIGTERM, as `planner init` renders it into their pods (docs/drain.md).

When a pod is deleted (a scale-down, a rollout) Kubernetes at once takes it out of its Services' endpoints
and runs the container's preStop hook; SIGTERM comes only when the hook returns, and SIGKILL
``terminationGracePeriodSeconds`` after the deletion, hook included. The hook below makes that window the
drain the process actuator does through its router (planner/actuators/drain.py):

1. wait ``ENDPOINTS_DELAY_S``: kube-proxy, gateways and routers learn of the removal asynchronously and
   may still send a request or two meanwhile;
2. poll the engine's own /metrics until its in-system gauges (the metrics dialect's: requests running and
   queued) read 0 twice in a row, at most ``DRAIN_S``;
3. return: SIGTERM then finds nothing to abort, whatever the engine does on it.

It is a ``python3 -c`` program because every engine image of planner/requests/engines.py ships Python; it
needs nothing else (no curl in some images). An engine whose port refuses connections has exited: done.
What cannot be read (no answer, none of the gauges) is waited out, up to ``DRAIN_S``, as drain.py does.
A LeaderWorkerSet's worker pods run the same hook against their leader (``LWS_LEADER_ADDRESS``, set by the
LWS controller), so a multi-node replica keeps its workers until the leader has drained.
"""

from __future__ import annotations

from typing import Any

ENDPOINTS_DELAY_S = 5
DRAIN_S = 180  # long generations: thousands of tokens at tens of ms each
ENGINE_STOP_S = 30  # what the engine then takes to exit on SIGTERM (free GPU memory, stop workers)
GRACE_S = ENDPOINTS_DELAY_S + DRAIN_S + ENGINE_STOP_S  # terminationGracePeriodSeconds: the hook and the stop

# argv: port, drain_s, delay_s, the env var naming the host ("" = this pod), then the gauge names.
HOOK = """\
import os, sys, time, urllib.request
port, limit, delay, host_env, names = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5:]
host = (os.environ.get(host_env) if host_env else None) or "127.0.0.1"
time.sleep(delay)
end, idle = time.monotonic() + limit, 0
while time.monotonic() < end:
    try:
        text = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=2).read().decode()
        found = [float(line.rsplit(None, 1)[1]) for line in text.splitlines()
                 if line.split("{")[0].split(" ")[0] in names]
        n = sum(found) if found else -1  # none of the gauges: unknown, waited out as a busy engine
    except Exception as exc:  # refused: the engine has exited, nothing is in flight; else unknown
        n = 0 if "refused" in str(exc) else -1
    idle = idle + 1 if n == 0 else 0
    if idle >= 2:
        break
    time.sleep(1)
"""


def pre_stop(port: int, gauges: tuple[str, ...], host_env: str = "", drain_s: float = DRAIN_S,
             delay_s: float = ENDPOINTS_DELAY_S, python: str = "python3") -> dict[str, Any]:
    """The container's ``lifecycle`` with the drain hook."""
    return {"preStop": {"exec": {"command": [python, "-c", HOOK, str(port), f"{drain_s:g}", f"{delay_s:g}",
                                             host_env, *gauges]}}}
