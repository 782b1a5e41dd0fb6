"""`planner run` processes against a real kube-apiserver: restarts, failovers, a stopped API server and a
partitioned leader, read back from the API server's audit log.

Each test scales two Deployments at 5 replicas under light load (a real Prometheus scrapes an exporter):
every decision wants the floor, so what the targets receive is decided by the scale-down window (6 s) and
rate limit (one pod per 3 s) alone, on a 1 s interval. The controllers run as their own ServiceAccounts,
bound to deploy/overlays/direct's Roles, so the audit log says who wrote which replicas when, and who
renewed the Lease when.
- restart (SIGKILL, start again) and failover (two replicas with --leader-elect, the leader SIGKILLed): the
  next controller starts from spec.replicas with a full window: nothing written before the window has passed
  since its first read, then one pod per period;
- the API server SIGSTOPped past the lease and resumed; the leader partitioned by a stalling proxy: no
  write accepted from a controller that did not hold the Lease, or after its last renewal ran out; the
  partitioned leader's planner_leader drops to 0 by its renew deadline.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from planner.testing.kube_apiserver import KubeAPIServer
from tests.support.kube_objects import apply, deployment
from tests.support.kube_planner import (
    LightLoad,
    Planner,
    StallingProxy,
    bind_scale_role,
    first_read_after,
    lease_writes,
    scale_writes,
    unsafe_writes,
    write_policy,
)
from tests.support.process_fixtures import wait_until
from tests.support.prom_fixtures import FakeHTTP, PromEnv, prom_env  # noqa: F401

pytestmark = [pytest.mark.kube, pytest.mark.prometheus]
WINDOW_S, PERIOD_S = 6, 3
LEASE = ["--leader-elect", "--lease-duration-s", "4", "--renew-deadline-s", "3", "--retry-period-s", "0.5"]
LEASE_S, RENEW_DEADLINE_S = 4.0, 3.0
START = 5


class Scene:
    def __init__(self, kube: KubeAPIServer, ns: str, env: PromEnv, tmp_path: Path) -> None:
        self.kube, self.ns, self.tmp = kube, ns, tmp_path
        slots = env.take(2)
        self.exporters = [FakeHTTP(s.port) for s in slots]
        self.loads = [LightLoad(e).start() for e in self.exporters]
        self.policy = write_policy(tmp_path / "policy.yaml", ns, env.url,
                                   {"prefill": slots[0].selector, "decode": slots[1].selector}, WINDOW_S, PERIOD_S)
        env.wait_for(f"vllm:request_success_total{slots[1].selector}", bool)
        bind_scale_role(kube, ns, ["planner-a", "planner-b"])
        apply(kube, [deployment(ns, "pre", START), deployment(ns, "dec", START)])
        self.planners: list[Planner] = []

    def planner(self, identity: str, extra: list[str] = (), server: str | None = None) -> Planner:  # type: ignore[assignment]
        p = Planner(self.kube, self.ns, identity, self.policy, self.tmp, list(extra), server).start()
        self.planners.append(p)
        return p

    def writes(self, user: str | None = None, after_s: float = 0.0) -> list:  # list[Write]
        return [w for w in scale_writes(self.kube, self.ns)
                if w.code == 200 and w.at_s > after_s and (user is None or w.user == user)]

    def wait_writes(self, n: int, user: str | None = None, after_s: float = 0.0, timeout_s: float = 40.0) -> list:
        wait_until(lambda: len(self.writes(user, after_s)) >= n, timeout_s, f"{n} scale writes by {user}")
        return self.writes(user, after_s)

    def logs(self) -> str:
        return "\n".join(f"--- {p.identity}\n{p.log.read_text()[-3000:]}" for p in self.planners if p.log.exists())

    def close(self) -> None:
        for p in self.planners:
            p.kill()
        for load in self.loads:
            load.stop()
        for e in self.exporters:
            e.stop()


@pytest.fixture
def scene(kube: KubeAPIServer, kube_namespace: str, prom_env: PromEnv,  # noqa: F811
          tmp_path: Path) -> Iterator[Scene]:
    s = Scene(kube, kube_namespace, prom_env, tmp_path)
    try:
        yield s
    finally:
        s.close()


def follows_the_rules(scene: Scene, user: str, seeded_s: float, writes: list) -> None:
    """``writes`` (by ``user``, the controller that started reading at ``seeded_s``) follow the scale-down
    window from its first tick and then the rate limit: per target, nothing before the window, one pod less
    each time, each step a period after the last."""
    for name in ("pre", "dec"):
        mine = [w for w in writes if w.name == name]
        assert mine, (name, writes)
        # The seeding read comes a few hundred ms after the tick's time, which the window counts from.
        assert mine[0].at_s - seeded_s >= WINDOW_S - 1.5, (name, mine[0].at_s - seeded_s, scene.logs())
        assert mine[0].at_s - seeded_s <= WINDOW_S + 3.0, (name, mine[0].at_s - seeded_s)  # on its first tick after
        for a, b in zip(mine, mine[1:], strict=False):
            assert b.replicas == a.replicas - 1 and b.at_s - a.at_s >= PERIOD_S - 0.6, (a, b)


def test_a_restart_starts_from_spec_replicas_with_a_full_window(scene: Scene) -> None:
    a = scene.planner("planner-a")
    first = scene.wait_writes(2, a.user)  # 5 -> 4 on both targets
    assert {(w.name, w.replicas) for w in first} == {("pre", START - 1), ("dec", START - 1)}, scene.logs()
    a.kill()
    killed_s = time.time()
    b = scene.planner("planner-b")  # the restarted controller, as its own identity
    writes = scene.wait_writes(4, b.user, killed_s)
    assert not scene.writes(a.user, killed_s)
    assert writes[0].replicas == START - 2  # from what the target holds, one pod per period
    follows_the_rules(scene, b.user, first_read_after(scene.kube, scene.ns, b.user, killed_s), writes)


def test_failover_the_standby_takes_over_from_spec_replicas_with_a_full_window(scene: Scene) -> None:
    a = scene.planner("planner-a", LEASE)
    wait_until(lambda: any(r.holder == "planner-a" and r.code in (200, 201)
                           for r in lease_writes(scene.kube, scene.ns)), 30, "planner-a to take the Lease")
    b = scene.planner("planner-b", LEASE)
    scene.wait_writes(2, a.user)
    assert b.metric("planner_leader") in (0.0, None)
    a.kill()
    killed_s = time.time()
    writes = scene.wait_writes(4, b.user, killed_s)
    follows_the_rules(scene, b.user, first_read_after(scene.kube, scene.ns, b.user, killed_s), writes)
    assert unsafe_writes(scene.kube, scene.ns, LEASE_S) == []


def test_a_stopped_api_server_never_lets_a_write_through_outside_the_lease(scene: Scene) -> None:
    scene.planner("planner-a", LEASE)
    wait_until(lambda: any(r.code in (200, 201) for r in lease_writes(scene.kube, scene.ns)), 30, "a leader")
    scene.planner("planner-b", LEASE)
    scene.wait_writes(2)
    scene.kube.pause()
    time.sleep(LEASE_S + 2)  # past the lease: both candidates' calls hang and time out
    scene.kube.resume()
    resumed_s = time.time()
    scene.wait_writes(2, after_s=resumed_s)  # someone leads and scales again
    assert unsafe_writes(scene.kube, scene.ns, LEASE_S) == [], scene.logs()


def test_a_partitioned_leader_stops_writing_and_says_so_by_its_deadline(scene: Scene) -> None:
    proxy = StallingProxy(scene.kube.port)
    try:
        a = scene.planner("planner-a", LEASE, server=proxy.url)
        wait_until(lambda: any(r.holder == "planner-a" and r.code in (200, 201)
                               for r in lease_writes(scene.kube, scene.ns)), 30, "planner-a to take the Lease")
        b = scene.planner("planner-b", LEASE)
        scene.wait_writes(2, a.user)
        wait_until(lambda: a.metric("planner_leader") == 1.0, 10, "planner-a to say it leads")
        proxy.stalled.set()
        cut_s = time.time()
        wait_until(lambda: a.metric("planner_leader") == 0.0, RENEW_DEADLINE_S + 2, "planner-a to say it lost the lead")
        scene.wait_writes(2, b.user, cut_s)  # the standby took over and scales
        assert b.metric("planner_leader") == 1.0
        assert not scene.writes(a.user, cut_s + 1.0)  # nothing from the cut-off leader got through
        assert unsafe_writes(scene.kube, scene.ns, LEASE_S) == [], scene.logs()
    finally:
        proxy.close()
