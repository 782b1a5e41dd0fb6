"""KEDA external scaler (``externalscaler.ExternalScaler`` gRPC service) serving the desired replicas.

One server handles every pool: the ScaledObject's trigger metadata arrives whole as
``ScaledObjectRef.scalerMetadata``, and ``pool`` selects. The metric is "desired" with target 1, so the
HPA's AverageValue path yields exactly N. Both the deprecated int64 and the float fields are set: KEDA
uses the float when > 0 and the integer otherwise (INTEGRATION.md §2.4).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc

from planner.actuators import externalscaler_pb2 as pb
from planner.actuators import externalscaler_pb2_grpc as pb_grpc
from planner.actuators.desired import DesiredStore, DesiredStores

METRIC_NAME = "desired"


class DesiredScaler(pb_grpc.ExternalScalerServicer):
    def __init__(self, store: DesiredStore | DesiredStores, stream_poll_s: float = 1.0) -> None:
        self.stores = DesiredStores.of(store)
        self.stream_poll_s = stream_poll_s

    async def _desired(self, ref: pb.ScaledObjectRef, context: grpc.aio.ServicerContext) -> int:
        pool = ref.scalerMetadata.get("pool", "")
        picked = self.stores.pick(ref.scalerMetadata.get("policy") or None)
        if isinstance(picked, str):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"ScaledObject {ref.namespace}/{ref.name}: trigger metadata 'policy': {picked}")
        store: DesiredStore = picked  # type: ignore[assignment]
        if pool not in store.pools:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"ScaledObject {ref.namespace}/{ref.name}: trigger metadata 'pool' = {pool!r}; "
                                f"allowed: {', '.join(store.pools)}")
        n = store.get(pool)
        if n is None:
            # An error (not 0) lets KEDA's fallback act instead of scaling down on no information.
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"pool {pool}: no decision yet")
        return int(n)  # type: ignore[arg-type]

    async def IsActive(self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext  # noqa: N802
                       ) -> pb.IsActiveResponse:
        return pb.IsActiveResponse(result=await self._desired(request, context) > 0)

    async def StreamIsActive(self, request: pb.ScaledObjectRef,  # noqa: N802
                             context: grpc.aio.ServicerContext) -> AsyncIterator[pb.IsActiveResponse]:
        last: bool | None = None
        while True:
            active = await self._desired(request, context) > 0
            if active != last:
                yield pb.IsActiveResponse(result=active)
                last = active
            await asyncio.sleep(self.stream_poll_s)

    async def GetMetricSpec(self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext  # noqa: N802
                            ) -> pb.GetMetricSpecResponse:
        return pb.GetMetricSpecResponse(metricSpecs=[pb.MetricSpec(metricName=METRIC_NAME, targetSize=1,
                                                                   targetSizeFloat=1.0)])

    async def GetMetrics(self, request: pb.GetMetricsRequest, context: grpc.aio.ServicerContext  # noqa: N802
                         ) -> pb.GetMetricsResponse:
        n = await self._desired(request.scaledObjectRef, context)
        name = request.metricName or METRIC_NAME
        return pb.GetMetricsResponse(metricValues=[pb.MetricValue(metricName=name, metricValue=n,
                                                                  metricValueFloat=float(n))])


async def start_grpc_server(store: DesiredStore | DesiredStores, host: str = "0.0.0.0", port: int = 9090,
                            stream_poll_s: float = 1.0) -> tuple[grpc.aio.Server, int]:
    """Start the external scaler on the running event loop; returns (server, bound port)."""
    server = grpc.aio.server()
    pb_grpc.add_ExternalScalerServicer_to_server(DesiredScaler(store, stream_poll_s), server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot bind the gRPC external scaler to {host}:{port}")
    await server.start()
    return server, bound
