"""What the simulator records per request (indexed by request id = position in the trace) and per token gap.

Plain lists, not arrays: the stages write one element at a time, which is faster on a list.
"""

from __future__ import annotations

import math

import numpy as np

from planner.sim.traces.records import RequestTrace


class RequestLog:
    def __init__(self, trace: RequestTrace) -> None:
        self.arrival_s: list[float] = trace.arrival_s.tolist()
        self.isl: list[int] = trace.isl.tolist()
        self.osl: list[int] = trace.osl.tolist()
        self.count = len(self.arrival_s)
        # When an engine received the request: its arrival, or later for one the router held while the pool it
        # starts in had no READY replica (scale to zero). An engine's TTFT histogram counts from here; the
        # client's TTFT (results(), the scores) from the arrival.
        self.dispatched_s: list[float] = list(self.arrival_s)
        self.first_token_s = [math.nan] * self.count
        self.finish_s = [math.nan] * self.count
        self.itl_max_s = [math.nan] * self.count
        self.failed = [False] * self.count
        self.admitted_segment = [0] * self.count  # the decode segment at admission (for its largest token gap)
        self.completed_count = 0
        self.failed_count = 0
        # For the metric source: requests entering the decode pool (KV transfer done), in time order...
        self.decode_arrival_s: list[float] = []
        self.decode_arrival_request: list[int] = []
        # ...and every token gap as (segment end time, step seconds, tokens), what an ITL histogram counts.
        self.token_gaps: list[tuple[float, float, int]] = []

    def fail(self, req: int) -> None:
        if self.failed[req] or not math.isnan(self.finish_s[req]):
            return
        self.failed[req] = True
        self.failed_count += 1

    def fail_unfinished(self) -> int:
        """End of the run: every request not finished counts as failed; returns how many were."""
        before = self.failed_count
        for req in range(self.count):
            if math.isnan(self.finish_s[req]):
                self.fail(req)
        return self.failed_count - before

    def token_gaps_s(self) -> np.ndarray:
        """Every token gap of the run, one value per token (what a client timing each token sees)."""
        if not self.token_gaps:
            return np.zeros(0)
        gaps = np.asarray(self.token_gaps, dtype=np.float64)
        return np.repeat(gaps[:, 1], gaps[:, 2].astype(np.int64))

    def results(self) -> dict[str, np.ndarray]:
        arrival = np.asarray(self.arrival_s)
        first = np.asarray(self.first_token_s)
        finish = np.asarray(self.finish_s)
        osl = np.asarray(self.osl, dtype=np.float64)
        ttft = first - arrival
        with np.errstate(invalid="ignore", divide="ignore"):
            itl_mean = np.where(osl > 1, (finish - first) / np.maximum(osl - 1, 1), 0.0)
        return {"arrival_s": arrival, "ttft_s": ttft, "itl_mean_s": itl_mean,
                "itl_max_s": np.asarray(self.itl_max_s), "e2e_s": finish - arrival, "failed": np.asarray(self.failed),
                "first_s": first, "finish_s": finish}
