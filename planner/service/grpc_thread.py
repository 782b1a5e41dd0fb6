"""The KEDA external scaler on its own event loop thread (the control loops are synchronous)."""

from __future__ import annotations

import asyncio
import threading

from planner.actuators.desired import DesiredStore, DesiredStores
from planner.errors import UserError


class GrpcThread:
    def __init__(self, store: DesiredStore | DesiredStores, host: str, port: int) -> None:
        self.store, self.host, self.port = store, host, port
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="grpc-external-scaler", daemon=True)

    def _run(self) -> None:
        from planner.actuators.keda_grpc import start_grpc_server

        asyncio.set_event_loop(self._loop)
        try:
            self._server, self.port = self._loop.run_until_complete(
                start_grpc_server(self.store, self.host, self.port))
        except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._server.stop(1.0))
        self._loop.close()

    def start(self) -> GrpcThread:
        self._thread.start()
        self._ready.wait(20)
        if self._error is not None:
            raise UserError(f"grpc_port {self.port}: cannot start the external scaler ({self._error})", key="grpc_port")
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
