"""Several policies in one controller process: `planner run --policy A --policy B` runs one loop each (its
own thread and grid), one HTTP server, one gRPC external scaler, one metrics registry labelled by policy."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import grpc
import httpx
import pytest
import yaml

from planner.actuators import externalscaler_pb2 as pb
from planner.actuators import externalscaler_pb2_grpc as pb_grpc
from planner.errors import UserError
from planner.service.runner import RunOptions, Service

REPO = Path(__file__).resolve().parent.parent


def policy_file(tmp_path: Path, name: str, kind: str = "keda") -> Path:
    data = yaml.safe_load((REPO / "policies" / "example.yaml").read_text())
    data.update(name=name, profile=str(REPO / "profiles" / "h200" / "qwen3-8b.json"), interval_s=1,
                actuator={"kind": kind})
    data["metrics"].update(url="http://127.0.0.1:9", timeout_s=0.2)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_two_policies_one_process(tmp_path: Path) -> None:
    opts = RunOptions(policy_file(tmp_path, "chat"), more_policies=(policy_file(tmp_path, "code", "dry-run"),),
                      host="127.0.0.1", port=0, grpc_port=0)
    service = Service(opts).start()
    runner = threading.Thread(target=service.run, daemon=True)
    runner.start()
    try:
        base = service.http.url
        deadline = time.monotonic() + 20
        while min(loop.ticks for loop in service.loops) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [p["name"] for p in httpx.get(f"{base}/v1/policies", timeout=5).json()] == ["chat", "code"]
        records = httpx.get(f"{base}/v1/decisions", timeout=5).json()["decisions"]
        assert {r["policy"] for r in records} == {"chat", "code"}
        text = httpx.get(f"{base}/metrics", timeout=5).text
        assert 'planner_tick_duration_seconds_count{policy="chat"}' in text
        assert 'planner_tick_duration_seconds_count{policy="code"}' in text
        assert httpx.get(f"{base}/readyz", timeout=5).status_code == 503  # Prometheus is unreachable
    finally:
        service.stop_event.set()
        runner.join(10)
    assert not runner.is_alive() and service.http is None


def test_policy_names_must_differ(tmp_path: Path) -> None:
    a = policy_file(tmp_path, "chat")
    b = tmp_path / "other" / "chat.yaml"
    b.parent.mkdir()
    b.write_text(a.read_text())
    with pytest.raises(UserError, match="policy name 'chat' is already run by another policy file"):
        Service(RunOptions(a, more_policies=(b,), port=0, grpc_port=0))


def test_external_scaler_picks_the_policy_from_the_trigger_metadata(tmp_path: Path) -> None:
    opts = RunOptions(policy_file(tmp_path, "chat"), more_policies=(policy_file(tmp_path, "code"),),
                      host="127.0.0.1", port=0, grpc_port=0)
    service = Service(opts)
    service.loops[0].store.publish({"prefill": 2, "decode": 3})
    service.loops[1].store.publish({"prefill": 4, "decode": 7})
    from planner.actuators.desired import DesiredStores
    from planner.actuators.keda_grpc import start_grpc_server

    async def ask(meta: dict[str, str]) -> int | grpc.StatusCode:
        server, port = await start_grpc_server(DesiredStores([lp.store for lp in service.loops]), "127.0.0.1", 0)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                ref = pb.ScaledObjectRef(name="so", namespace="llm", scalerMetadata=meta)
                try:
                    r = await pb_grpc.ExternalScalerStub(channel).GetMetrics(
                        pb.GetMetricsRequest(scaledObjectRef=ref, metricName="desired"))
                except grpc.aio.AioRpcError as exc:
                    return exc.code()
                return int(r.metricValues[0].metricValue)
        finally:
            await server.stop(None)

    assert asyncio.run(ask({"pool": "decode", "policy": "code"})) == 7
    assert asyncio.run(ask({"pool": "decode", "policy": "chat"})) == 3
    assert asyncio.run(ask({"pool": "decode"})) == grpc.StatusCode.INVALID_ARGUMENT  # which one?
