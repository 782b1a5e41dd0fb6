"""Waiting time of an M/G/c queue: Erlang C with the Allen-Cunneen correction for general service times.

Why not ``rate x ISL / throughput``: at 90 % utilisation a pool of 10 prefill replicas serving 150 ms prompts
makes the unlucky 5 % of requests wait about 0.3 s, and a pool of 2 replicas at the same utilisation makes
them wait about 1.3 s; throughput alone sees no difference. The waiting-time tail of M/M/c is
``P(W > t) = C(c, a) * exp(-(c*mu - lambda) * t)``; for general service times Allen-Cunneen scales the
waiting time by ``(1 + cs^2) / 2`` (cs^2: squared coefficient of variation of the service time).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

# Utilisation above which the model is not trusted (heavy-traffic waits explode and the trace's burstiness
# dominates): a pool is never sized hotter than this.
MAX_UTILISATION = 0.95
# Sizing for a hotter pool than this when the SLA cannot be met at all only builds unbounded queues.
INFEASIBLE_UTILISATION = 0.8


@dataclass(frozen=True)
class Wait:
    servers: int
    utilisation: float
    p_wait: float  # Erlang C: probability an arrival queues
    quantile_s: float  # waiting time at the requested percentile (inf when unstable)


def wait_quantile_s(p_wait: float, servers: int, rate_rps: float, service_s: float, scv: float,
                    percentile: float) -> float:
    if p_wait <= 1.0 - percentile:
        return 0.0
    drain = servers / service_s - rate_rps  # c*mu - lambda
    if drain <= 0:
        return math.inf
    theta = 2.0 * drain / (1.0 + scv)
    return math.log(p_wait / (1.0 - percentile)) / theta


def smallest_pool(rate_rps: float, service_s: float, scv: float, percentile: float,
                  fits: Callable[[Wait], bool], floor: int = 1, ceiling: int = 100_000) -> Wait | None:
    """Smallest ``c`` in ``[floor, ceiling]`` whose wait satisfies ``fits`` (None if none does).

    Erlang B is built by its stable recurrence ``B(k) = a B(k-1) / (k + a B(k-1))`` while ``c`` grows, so the
    whole search costs O(c) float operations (about 30 us for c = 100 in CPython).
    """
    if rate_rps <= 0 or service_s <= 0:
        w = Wait(max(1, floor), 0.0, 0.0, 0.0)
        return w if fits(w) else None
    a = rate_rps * service_s  # offered load in servers (Erlangs)
    b = 1.0
    for k in range(1, ceiling + 1):
        b = a * b / (k + a * b)
        if k < floor:
            continue
        rho = a / k
        if rho >= MAX_UTILISATION:
            continue
        c_prob = b / (1.0 - rho * (1.0 - b))
        w = Wait(k, rho, c_prob, wait_quantile_s(c_prob, k, rate_rps, service_s, scv, percentile))
        if fits(w):
            return w
    return None


def wait_at(servers: int, rate_rps: float, service_s: float, scv: float, percentile: float) -> Wait:
    """The wait of a given pool size (for predictions at the chosen or the observed size)."""
    if servers <= 0:
        return Wait(0, math.inf, 1.0, math.inf)
    if rate_rps <= 0 or service_s <= 0:
        return Wait(servers, 0.0, 0.0, 0.0)
    a = rate_rps * service_s
    rho = a / servers
    if rho >= 1.0:
        return Wait(servers, rho, 1.0, math.inf)
    b = 1.0
    for k in range(1, servers + 1):
        b = a * b / (k + a * b)
    c_prob = b / (1.0 - rho * (1.0 - b))
    return Wait(servers, rho, c_prob, wait_quantile_s(c_prob, servers, rate_rps, service_s, scv, percentile))


def waits(max_servers: int, rate_rps: float, service_s: float, scv: float, percentile: float) -> list[Wait]:
    """``wait_at`` for every pool size 0..max_servers in one O(max_servers) pass (the budget split's table)."""
    out = [wait_at(0, rate_rps, service_s, scv, percentile)]
    if rate_rps <= 0 or service_s <= 0:
        return out + [wait_at(k, rate_rps, service_s, scv, percentile) for k in range(1, max_servers + 1)]
    a = rate_rps * service_s
    b = 1.0
    for k in range(1, max_servers + 1):
        b = a * b / (k + a * b)  # the recurrence wait_at runs up to k, so each entry is wait_at(k) exactly
        rho = a / k
        if rho >= 1.0:
            out.append(Wait(k, rho, 1.0, math.inf))
            continue
        c_prob = b / (1.0 - rho * (1.0 - b))
        out.append(Wait(k, rho, c_prob, wait_quantile_s(c_prob, k, rate_rps, service_s, scv, percentile)))
    return out


def smallest_meeting(meets: Callable[[int], bool], lower: int, ceiling: int) -> int | None:
    """Smallest ``c`` in ``[lower, ceiling]`` with ``meets(c)`` (None if none does), for a predicate monotone in
    ``c`` (once a size meets it, every larger one does).

    The bracket comes from doubling up from ``lower`` and bisection closes it: O(log c) calls of ``meets``
    where a scan makes O(c) calls. Example: an answer of 700 above a lower bound of 10 takes the bound, 7
    doublings (20 ... 1,280) and 10 bisection steps: 18 calls where a scan makes 691.
    """
    if lower > ceiling:
        return None
    if meets(lower):
        return lower
    fails = lower
    while True:  # bracket: double until a size meets it
        if fails >= ceiling:
            return None
        hi = min(max(2 * fails, fails + 1), ceiling)
        if meets(hi):
            break
        fails = hi
    while hi - fails > 1:  # meets(fails) is False, meets(hi) is True
        mid = (fails + hi) // 2
        fails, hi = (fails, mid) if meets(mid) else (mid, hi)
    return hi
