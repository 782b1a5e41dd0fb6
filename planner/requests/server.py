"""`planner serve`: the profile-request API on uvicorn, its worker pool, and (in a cluster) the
ProfileRequest watcher on a thread of its own."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.clock import Clock
from planner.requests.api import create_requests_app
from planner.requests.manager import RequestManager
from planner.requests.store import ResultsStore

log = logging.getLogger("planner.serve")


@dataclass(frozen=True)
class ServeOptions:
    results_dir: Path
    host: str = "0.0.0.0"
    port: int = 8080
    workers: int = 1
    watch_namespace: str | None = None
    poll_s: float = 5.0


class ProfileServer:
    """The pieces of `planner serve`, startable in the foreground (CLI) or the background (tests)."""

    def __init__(self, opts: ServeOptions, api_client: Any = None, clock: Clock | None = None) -> None:
        self.opts = opts
        self.manager = RequestManager(ResultsStore(opts.results_dir), clock, opts.workers,
                                      default_namespace=opts.watch_namespace or "default")
        requeued = self.manager.recover()
        if requeued:
            log.info("queued again %d request(s) that were Pending at shutdown", len(requeued))
        self.app = create_requests_app(self.manager)
        self.stop_event = threading.Event()
        self.watcher: Any = None
        self._watch_thread: threading.Thread | None = None
        if opts.watch_namespace:
            from planner.requests.kube import ProfileRequestWatcher

            if api_client is None:
                from planner.actuators.factory import load_api_client

                api_client = load_api_client()
            self.watcher = ProfileRequestWatcher(api_client, opts.watch_namespace, self.manager, clock,
                                                 opts.poll_s)

    def start_watcher(self) -> None:
        if self.watcher is not None and self._watch_thread is None:
            self._watch_thread = threading.Thread(target=self.watcher.run, args=(self.stop_event,),
                                                  name="profile-request-watcher", daemon=True)
            self._watch_thread.start()

    def close(self) -> None:
        self.stop_event.set()
        if self._watch_thread is not None:
            self._watch_thread.join(10)
        self.manager.shutdown(wait=False)

    def serve_forever(self, log_level: str = "info") -> None:
        import uvicorn

        self.start_watcher()
        log.info("profile requests on %s:%d, results in %s%s", self.opts.host, self.opts.port,
                 self.opts.results_dir, f", watching namespace {self.opts.watch_namespace}"
                 if self.opts.watch_namespace else "")
        try:
            uvicorn.run(self.app, host=self.opts.host, port=self.opts.port, log_level=log_level.lower(),
                        access_log=False)
        finally:
            self.close()
