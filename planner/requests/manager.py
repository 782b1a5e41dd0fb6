"""Queue and run profile requests on worker threads; keep each status on disk; cancel; recover on restart.

Work never runs in a request handler: ``submit`` checks the spec (raising RequestInvalid at once), stores
it Pending and hands it to a thread pool. A worker reports each step through the pure transitions of
planner.requests.status, with times from the injected clock, and persists every change.

Restart (``recover``): a request that was Profiling when the server stopped is marked Failed with reason
Interrupted (its sweep may have left a half-measured state; resubmit it); one still Pending is queued again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from planner.clock import Clock, SystemClock
from planner.requests import pipeline
from planner.requests.checks import Resolved, check
from planner.requests.spec import ProfileRequestSpec, RequestInvalid
from planner.requests.status import (
    FailReason,
    Phase,
    Status,
    Step,
    enter_step,
    failed,
    pending,
    ready,
    step_progress,
)
from planner.requests.store import ResultsStore, new_id
from planner.requests.sweep import Cancelled, RequestFailed

log = logging.getLogger("planner.requests")


class Applied(Protocol):
    """What an apply hook did: the objects it created (kind/name) and how to remove them again."""

    names: list[str]

    def undo(self) -> None: ...


# Called with the outcome before the request is declared Ready (auto_apply); raises RequestFailed after
# removing whatever it created, or returns what it applied.
ApplyHook = Callable[[pipeline.Outcome, Callable[[], bool]], Applied]


@dataclass
class _Entry:
    spec: ProfileRequestSpec
    status: Status
    resolved: Resolved | None = None
    hook: ApplyHook | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    future: Future | None = None


@dataclass(frozen=True)
class View:
    id: str
    spec: ProfileRequestSpec
    status: Status


def iso(now_s: float) -> str:
    return datetime.fromtimestamp(now_s, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _Reporter:
    def __init__(self, manager: RequestManager, request_id: str) -> None:
        self.manager, self.id = manager, request_id

    def step(self, step: Step, message: str) -> None:
        self.manager._update(self.id, lambda s, now: enter_step(s, step, now, message))

    def progress(self, fraction: float, message: str) -> None:
        self.manager._update(self.id, lambda s, now: step_progress(s, fraction, message))


class RequestManager:
    def __init__(self, store: ResultsStore, clock: Clock | None = None, workers: int = 1,
                 default_namespace: str = "default") -> None:
        self.store = store
        self.clock = clock or SystemClock()
        self.default_namespace = default_namespace
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="profile-request")
        self._lock = threading.RLock()
        self._entries: dict[str, _Entry] = {}
        self._done: dict[str, threading.Event] = {}

    # ------------------------------------------------------------------------------------------ queries
    def get(self, request_id: str) -> View | None:
        with self._lock:
            e = self._entries.get(request_id)
            return None if e is None else View(request_id, e.spec, e.status)

    def views(self) -> list[View]:
        with self._lock:
            return [View(i, e.spec, e.status) for i, e in self._entries.items()]

    def wait(self, request_id: str, timeout_s: float | None = None) -> Status:
        """Block until the request is Ready or Failed (tests, and callers that want the answer)."""
        with self._lock:
            done = self._done[request_id]
        done.wait(timeout_s)
        view = self.get(request_id)
        assert view is not None
        return view.status

    # ------------------------------------------------------------------------------------------ commands
    def submit(self, spec: ProfileRequestSpec, request_id: str | None = None, hook: ApplyHook | None = None,
               namespace: str | None = None) -> View:
        """Check, store Pending, queue. Raises RequestInvalid (nothing stored) for a malformed request."""
        resolved = check(spec, namespace or self.default_namespace)
        rid = request_id or new_id()
        status = pending(iso(self.clock.now_s()))
        with self._lock:
            if rid in self._entries:
                raise ValueError(f"request {rid} exists")
            self.store.create(rid, spec, status)
            entry = _Entry(spec, status, resolved, hook)
            self._entries[rid] = entry
            self._done[rid] = threading.Event()
            entry.future = self._pool.submit(self._run, rid)
        return View(rid, spec, status)

    def cancel(self, request_id: str) -> Status | None:
        """Stop a Pending or Profiling request (it ends Failed/Cancelled, with no artifacts). None if unknown."""
        with self._lock:
            entry = self._entries.get(request_id)
            if entry is None or entry.status.phase.terminal:
                return None if entry is None else entry.status
            entry.cancel.set()
            if entry.future is not None and entry.future.cancel():  # never started
                self._finish(request_id, FailReason.CANCELLED, "cancelled before it started")
            return entry.status

    def delete(self, request_id: str) -> bool:
        """Forget a finished request and its artifacts. False if unknown or still running."""
        with self._lock:
            entry = self._entries.get(request_id)
            if entry is None or not entry.status.phase.terminal:
                return False
            del self._entries[request_id]
            self.store.delete(request_id)
            return True

    def recover(self) -> list[str]:
        """Load the results dir: fail what was running (Interrupted), queue again what was Pending."""
        requeued = []
        for rid, spec, status in self.store.load():
            with self._lock:
                self._entries[rid] = _Entry(spec, status)
                self._done[rid] = threading.Event()
                if status.phase.terminal:
                    self._done[rid].set()
                elif status.phase is Phase.PROFILING:
                    where = f" in step {status.step.value}" if status.step else ""
                    self._finish(rid, FailReason.INTERRUPTED, f"the server stopped while this request was "
                                 f"profiling{where}; submit it again")
                else:
                    requeued.append(rid)
        for rid in requeued:
            self._requeue(rid)
        return requeued

    def shutdown(self, wait: bool = True) -> None:
        with self._lock:
            for entry in self._entries.values():
                entry.cancel.set()
        self._pool.shutdown(wait=wait, cancel_futures=True)

    # ------------------------------------------------------------------------------------------ worker
    def _requeue(self, rid: str) -> None:
        with self._lock:
            entry = self._entries[rid]
            try:
                entry.resolved = check(entry.spec, self.default_namespace)
            except RequestInvalid as exc:
                self._finish(rid, FailReason.INVALID_SPEC, str(exc))
                return
            entry.future = self._pool.submit(self._run, rid)

    def _update(self, rid: str, change: Callable[[Status, str], Status]) -> None:
        with self._lock:
            entry = self._entries[rid]
            entry.status = change(entry.status, iso(self.clock.now_s()))
            self.store.save_status(rid, entry.status)

    def _finish(self, rid: str, reason: FailReason, message: str, closest: dict | None = None) -> None:
        self._update(rid, lambda s, now: failed(s, reason, message, now, closest))
        self._done[rid].set()

    def _run(self, rid: str) -> None:
        with self._lock:
            entry = self._entries[rid]
        assert entry.resolved is not None
        try:
            outcome = pipeline.run(entry.resolved, _Reporter(self, rid), entry.cancel.is_set)
            applied = entry.hook(outcome, entry.cancel.is_set) if entry.hook is not None else None
            self._ready(rid, outcome, applied)
        except Cancelled:
            self._finish(rid, FailReason.CANCELLED, "cancelled")
        except RequestFailed as exc:
            self._finish(rid, exc.reason, exc.message, exc.closest)
        except Exception as exc:  # noqa: BLE001 - a worker never dies; the request says what happened
            log.exception("profile request %s failed", rid)
            self._finish(rid, FailReason.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")

    def _ready(self, rid: str, outcome: pipeline.Outcome, applied: Applied | None) -> None:
        with self._lock:
            entry = self._entries[rid]
            if entry.cancel.is_set():  # a cancel that came during the last step or the apply wins
                if applied is not None:
                    applied.undo()
                self._finish(rid, FailReason.CANCELLED, "cancelled")
                return
            try:
                self.store.commit(rid, outcome.rendered.files)
            except OSError as exc:
                if applied is not None:
                    applied.undo()
                self._finish(rid, FailReason.INTERNAL_ERROR, f"cannot write the artifacts ({exc})")
                return
            result = outcome.result.model_copy(update={"applied": list(applied.names) if applied else []})
            self._update(rid, lambda s, now: ready(s, result, now))
            self._done[rid].set()
