"""KV-cache transfers from prefill to decode over each prefill replica's egress link.

A request's KV is ``isl * kv_bytes_per_token`` bytes. Concurrent transfers on one link share it equally
(processor sharing): four at once each take about four times as long as one alone. The link keeps the
bytes each transfer has received so far (``link_served_bytes``); a transfer started when that was ``v``
completes when it reaches ``v + size``, so only the next completion needs an event, re-planned whenever a
transfer starts or ends. A completed request enters the decode pool (after ``hop_s``: the decode request's
front end, when the profile holds one).
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush

from planner.sim.cluster.events import EventQueue
from planner.sim.cluster.replicas import DRAINING, PrefillReplica, Replica
from planner.sim.cluster.request_log import RequestLog


class KvTransfers:
    def __init__(self, events: EventQueue, log: RequestLog, kv_bytes_per_token: float, link_bytes_per_s: float,
                 route_to_decode: Callable[[int, float], None],
                 retire_if_drained: Callable[[Replica, float], None], hop_s: float = 0.0) -> None:
        self._heap = events.heap
        self._counter = events.counter
        self._isl = log.isl
        self._failed = log.failed
        self._decode_arrival_s = log.decode_arrival_s
        self._decode_arrival_request = log.decode_arrival_request
        self._kv_bytes_per_token = kv_bytes_per_token
        self._link_bytes_per_s = link_bytes_per_s
        self._route_to_decode = route_to_decode
        self._retire_if_drained = retire_if_drained
        self._hop_s = hop_s  # the decode request's own front end (a second HTTP request) after the KV is there
        self._events = events

    def start(self, replica: PrefillReplica, requests: list[int], now_s: float) -> None:
        """Transfers of ``requests``' KV start on ``replica``'s link."""
        served = self._served_bytes(replica, now_s)
        transfers, isl, kv_bytes_per_token = replica.link_transfers, self._isl, self._kv_bytes_per_token
        for req in requests:
            heappush(transfers, (served + isl[req] * kv_bytes_per_token, req))
        self._plan_next_completion(replica, served, now_s)

    def _served_bytes(self, replica: PrefillReplica, now_s: float) -> float:
        """Bring the link's served bytes up to ``now_s``: each transfer got 1/n of the bandwidth since the last
        update (n did not change in between: every start and completion updates it)."""
        n = len(replica.link_transfers)
        if n:
            replica.link_served_bytes += (now_s - replica.link_updated_s) * self._link_bytes_per_s / n
        replica.link_updated_s = now_s
        return replica.link_served_bytes

    def _plan_next_completion(self, replica: PrefillReplica, served: float, now_s: float) -> None:
        transfers = replica.link_transfers
        replica.link_version += 1
        at_s = now_s + max(0.0, transfers[0][0] - served) * len(transfers) / self._link_bytes_per_s
        heappush(self._heap, (at_s, next(self._counter), self._on_completion, replica, replica.link_version))

    def _on_hop(self, req: int, _version: int, now_s: float) -> None:
        """The decode request passed the decode server's front end: it enters the decode pool."""
        if not self._failed[req]:
            self._decode_arrival_s.append(now_s)
            self._decode_arrival_request.append(req)
            self._route_to_decode(req, now_s)

    def _on_completion(self, replica: PrefillReplica, version: int, now_s: float) -> None:
        """Transfers on this link finished: their requests go to decode."""
        if version != replica.link_version:
            return
        served = self._served_bytes(replica, now_s)
        transfers = replica.link_transfers
        tolerance = 1e-6 * (served if served > 1.0 else 1.0)  # rounding in the served-bytes sums
        failed, arrival_s, arrival_request = self._failed, self._decode_arrival_s, self._decode_arrival_request
        while transfers and transfers[0][0] <= served + tolerance:
            req = heappop(transfers)[1]
            if self._hop_s:
                self._events.push(now_s + self._hop_s, self._on_hop, req, 0)
            elif not failed[req]:
                arrival_s.append(now_s)
                arrival_request.append(req)
                self._route_to_decode(req, now_s)
        if transfers:
            self._plan_next_completion(replica, served, now_s)
        elif replica.state == DRAINING:
            self._retire_if_drained(replica, now_s)
