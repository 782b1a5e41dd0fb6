"""Run an ASGI app with uvicorn in a background thread (tests, benches, `planner demo`)."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn


class BackgroundServer:
    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host, self.port = host, port
        self._server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                                     lifespan="on", access_log=False,
                                                     timeout_graceful_shutdown=2))
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout_s: float = 20.0) -> BackgroundServer:
        self._thread = threading.Thread(target=self._server.run, name=f"uvicorn-{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"server on {self.host}:{self.port} did not start")
            time.sleep(0.01)
        if self.port == 0:
            sockets = self._server.servers[0].sockets
            self.port = int(sockets[0].getsockname()[1])
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
