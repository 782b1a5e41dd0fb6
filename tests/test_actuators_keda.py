"""KEDA surfaces: the metrics-api JSON endpoint (HTTP) and the external scaler, called with a real gRPC client."""

from __future__ import annotations

import asyncio

import grpc
import httpx
import pytest
from fastapi import FastAPI

from planner.actuators import externalscaler_pb2 as pb
from planner.actuators import externalscaler_pb2_grpc as pb_grpc
from planner.actuators.desired import DesiredStore, PublishActuator
from planner.actuators.keda_grpc import start_grpc_server
from planner.actuators.keda_http import desired_router
from planner.telemetry import PlannerMetrics
from planner.types import Applied

POOLS = ("prefill", "decode")


def store_with(**replicas: int) -> DesiredStore:
    store = DesiredStore("chat", POOLS)
    if replicas:
        store.publish(replicas)
    return store


# ------------------------------------------------------------------------------------------ metrics-api
@pytest.mark.parametrize("query,published,status,body", [
    ("?pool=decode", {"decode": 3, "prefill": 1}, 200, {"desired": 3, "pool": "decode", "policy": "chat",
                                                          "published": True}),
    ("?pool=prefill", {"decode": 3, "prefill": 0}, 200, {"desired": 0, "pool": "prefill", "policy": "chat",
                                                          "published": True}),
    ("?pool=decode", {}, 503, {"error": "no decision yet", "pool": "decode", "policy": "chat"}),
    ("?pool=gpu", {"decode": 3}, 404, {"error": "unknown pool 'gpu'; allowed: prefill, decode", "policy": "chat"}),
], ids=["decode", "zero-is-a-value", "before-first-decision", "unknown-pool"])
def test_metrics_api(query: str, published: dict, status: int, body: dict) -> None:
    app = FastAPI()
    app.include_router(desired_router(store_with(**published)))
    transport = httpx.ASGITransport(app=app)

    async def get() -> httpx.Response:
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.get(f"/v1/desired{query}")

    r = asyncio.run(get())
    assert (r.status_code, r.json()) == (status, body)


def test_metrics_api_needs_pool() -> None:
    app = FastAPI()
    app.include_router(desired_router(store_with()))

    async def get() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            return await client.get("/v1/desired")

    assert asyncio.run(get()).status_code == 422


def test_publish_actuator_is_idempotent_and_the_only_writer_of_the_store() -> None:
    metrics = PlannerMetrics()
    store = store_with()
    act = PublishActuator(store, "hpa")
    assert act.apply({"decode": 4, "prefill": 2}) == Applied(
        before={"decode": None, "prefill": None}, after={"decode": 4, "prefill": 2}, changed=True,
        detail="published for hpa")
    version = store.snapshot().version
    assert act.apply({"decode": 4, "prefill": 2}).changed is False
    assert store.snapshot().version == version
    assert store.get("decode") == 4
    # The gauge the HPA reads has one writer, the loop's telemetry; the actuator leaves it alone.
    assert metrics.registry.get_sample_value("planner_desired_replicas", {"policy": "chat", "pool": "decode"}) is None


# ------------------------------------------------------------------------------------------ gRPC
def ref(pool: str | None) -> pb.ScaledObjectRef:
    meta = {"scalerAddress": "planner:9090"} | ({"pool": pool} if pool else {})
    return pb.ScaledObjectRef(name=f"so-{pool}", namespace="llm", scalerMetadata=meta)


async def with_client(store: DesiredStore, body):  # noqa: ANN001, ANN201
    server, port = await start_grpc_server(store, "127.0.0.1", 0, stream_poll_s=0.01)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            return await body(pb_grpc.ExternalScalerStub(channel))
    finally:
        await server.stop(None)


def test_get_metric_spec() -> None:
    async def body(stub: pb_grpc.ExternalScalerStub) -> pb.GetMetricSpecResponse:
        return await stub.GetMetricSpec(ref("decode"))

    spec = asyncio.run(with_client(store_with(decode=3), body))
    assert [(s.metricName, s.targetSize, s.targetSizeFloat) for s in spec.metricSpecs] == [("desired", 1, 1.0)]


@pytest.mark.parametrize("pool,n,active", [("decode", 5, True), ("prefill", 0, False)], ids=["five", "zero"])
def test_get_metrics_and_is_active(pool: str, n: int, active: bool) -> None:
    async def body(stub: pb_grpc.ExternalScalerStub) -> tuple:
        metrics = await stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref(pool), metricName="desired"))
        return metrics, (await stub.IsActive(ref(pool))).result

    metrics, is_active = asyncio.run(with_client(store_with(**{pool: n}), body))
    assert [(v.metricName, v.metricValue, v.metricValueFloat) for v in metrics.metricValues] == [
        ("desired", n, float(n))]
    assert is_active is active


@pytest.mark.parametrize("pool,published,code", [
    ("decode", {}, grpc.StatusCode.UNAVAILABLE),
    (None, {"decode": 2}, grpc.StatusCode.INVALID_ARGUMENT),
    ("gpu", {"decode": 2}, grpc.StatusCode.INVALID_ARGUMENT),
], ids=["no-decision", "no-pool-metadata", "unknown-pool"])
def test_get_metrics_errors(pool: str | None, published: dict, code: grpc.StatusCode) -> None:
    async def body(stub: pb_grpc.ExternalScalerStub) -> grpc.StatusCode:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref(pool), metricName="desired"))
        return info.value.code()

    assert asyncio.run(with_client(store_with(**published), body)) == code


def test_stream_is_active_pushes_changes() -> None:
    store = store_with(decode=0)

    async def body(stub: pb_grpc.ExternalScalerStub) -> list[bool]:
        seen: list[bool] = []
        call = stub.StreamIsActive(ref("decode"))
        async for msg in call:
            seen.append(msg.result)
            if len(seen) == 1:
                store.publish({"decode": 2})
            elif len(seen) == 2:
                store.publish({"decode": 0})
            else:
                call.cancel()
                break
        return seen

    assert asyncio.run(with_client(store, body)) == [False, True, False]


def test_stream_metric_spec_is_unimplemented() -> None:
    async def body(stub: pb_grpc.ExternalScalerStub) -> grpc.StatusCode:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            async for _ in stub.StreamMetricSpec(ref("decode")):
                pass
        return info.value.code()

    assert asyncio.run(with_client(store_with(decode=1), body)) == grpc.StatusCode.UNIMPLEMENTED


# ------------------------------------------------------------------------------------------ wire contract
CONTRACT = {  # INTEGRATION.md §2.4: message -> {field number: (name, type)}
    "ScaledObjectRef": {1: ("name", "string"), 2: ("namespace", "string"), 3: ("scalerMetadata", "map")},
    "IsActiveResponse": {1: ("result", "bool")},
    "GetMetricSpecResponse": {1: ("metricSpecs", "repeated MetricSpec")},
    "MetricSpec": {1: ("metricName", "string"), 2: ("targetSize", "int64"), 3: ("targetSizeFloat", "double")},
    "GetMetricsRequest": {1: ("scaledObjectRef", "ScaledObjectRef"), 2: ("metricName", "string")},
    "GetMetricsResponse": {1: ("metricValues", "repeated MetricValue")},
    "MetricValue": {1: ("metricName", "string"), 2: ("metricValue", "int64"), 3: ("metricValueFloat", "double")},
}
TYPES = {9: "string", 8: "bool", 3: "int64", 1: "double"}


def describe(field) -> str:  # noqa: ANN001
    if field.message_type is not None:
        if field.message_type.GetOptions().map_entry:
            return "map"
        name = field.message_type.name
        return f"repeated {name}" if field.is_repeated else name
    return TYPES[field.type]


def test_generated_code_matches_the_wire_contract() -> None:
    d = pb.DESCRIPTOR
    assert d.package == "externalscaler"
    got = {name: {f.number: (f.name, describe(f)) for f in d.message_types_by_name[name].fields} for name in CONTRACT}
    assert got == CONTRACT
    service = d.services_by_name["ExternalScaler"]
    assert service.full_name == "externalscaler.ExternalScaler"
    methods = {m.name: (m.input_type.name, m.output_type.name) for m in service.methods}
    assert methods == {"IsActive": ("ScaledObjectRef", "IsActiveResponse"),
                       "StreamIsActive": ("ScaledObjectRef", "IsActiveResponse"),
                       "GetMetricSpec": ("ScaledObjectRef", "GetMetricSpecResponse"),
                       "GetMetrics": ("GetMetricsRequest", "GetMetricsResponse"),
                       "StreamMetricSpec": ("ScaledObjectRef", "GetMetricSpecResponse")}
