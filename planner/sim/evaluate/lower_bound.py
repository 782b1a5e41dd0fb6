"""A strict lower bound on the GPU-hours any policy (causal or clairvoyant) spends at the SLA.

Per pool, a linear program over fractional replica counts ``c_k`` in slots of ``slot_s`` seconds of the
scored window: every kept request's *work* (replica-seconds no schedule can avoid) must be served inside
its *window* (the times the simulator could do it and still meet the SLA), and capacity that grows pays
the part of the start-up that falls inside the scored window. Up to ``floor((1 - q) N)`` requests may be
missed (the infeasible ones first); each pool drops its own, which only loosens the bound.

Why it is a bound (against ``planner.sim.cluster.cluster``, whose timing this module reads from the same
``EngineModel``): take any replay that meets the SLA and let R(t) be its READY + DRAINING replicas.
1. Work. A prefill iteration takes ``overhead + sum of its pieces``, each piece timed ttft(end) -
   ttft(start) (the first one from the overhead), so one prompt's pieces telescope to ttft(isl) -
   overhead, whatever the batching. A decode step of batch b at mean context m takes itl(b, q(m)) >=
   L_b(m - 16) (q is the simulator's 32-token quantisation; L_b an affine minorant of itl(b, .)), and
   L_b(mean) = sum of L_b(c_i)/b: each member's share is L_b(its context - 16)/b >= L_b(isl - 16)/b,
   whatever the other members' contexts (mixed batches are safe by linearity, not by assumption).
2. Mean ITL. A request's o - 1 gaps have mean <= T and each gap of batch b lasts >= tau_b = itl(b, 0)
   (the least any context allows), so its decode share is at least (o - 1) times the cheapest per-token
   cost of a *mixture* of batches with mean step time <= T (a lower convex envelope, evaluated exactly),
   plus the first step at the cheapest batch of all. The cost is concave in context, so interpolating it
   on a context grid under-estimates it.
3. Windows. Prefill runs in [a, a + TTFT - KV transfer - one decode step] (transfer alone on the link,
   the fastest step), decode in [a + earliest prefill + transfer, a + TTFT + (o - 1) T]; windows are
   widened to slot edges, so slot k's work share fits in the replay's busy time, <= its integral of R.
   With c_k the slot average of R (0 after the billed end), the transportation LP (work of each window
   group spread over its slots) is feasible: it is exactly the interval covering condition
   "capacity over any run of slots >= work whose windows lie inside it".
4. Start-up. Each increase of R at time tau was billed min(startup, tau - warmup) of STARTING time in
   the window; the slot-average increase c_k - c_(k-1) spreads each such event over slots k, k+1 with
   weights summing to one, so charging min(startup, k slot_s) per unit (a chord of that concave cost)
   never exceeds it. R at the window start is free (started in the warm-up).
5. Dropping. The replay's missed set M has |M| <= floor((1 - q) N) and contains every infeasible
   request; relaxing "drop whole requests" to "drop any fractional count per (window group), removing
   at most the group's top-k work (tangents of a concave curve over-estimate it)" keeps the replay's
   own choice feasible.
So the replay's billed GPU-seconds >= sum c_k slot_s + start-up charges >= the LP optimum. Times carry
a 1 ms slack (float error in the simulator's event times), which only widens windows.
What it leaves out (each makes it looser, never wrong): KV capacity, that one request's work runs on
one replica in sequence, queueing inside a slot, replica floors and ceilings, the warm-up's leftover
work, whole replicas (c_k is fractional).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix, vstack

from planner.config import Policy
from planner.perf.curves import DecodeCurve
from planner.perf.engine import EngineModel
from planner.profile import Profile
from planner.sim.cluster.cluster import SimConfig
from planner.sim.traces.records import RequestTrace

CTX_QUANTUM_SLACK_TOKENS = 16  # the simulator times a step at (mean // 32 + 0.5) * 32 >= mean - 16 tokens
ROUNDING_SLACK = 5e-6  # reports round attainment to 5 decimals: a policy that rounds up to q counts as meeting it
TIME_SLACK_S = 1e-3  # the simulator's event times carry float error (and a 1e-6 relative link tolerance)
CONTEXT_GRID = 257  # contexts at which the decode cost is computed exactly (interpolated between: below it)
DENSE_CUTS = 8  # per window group, tangents of the top-k work curve at k = 0..7, then at doubling k
LP_METHOD = "highs-ds"  # HiGHS dual simplex: measured 1.5-10x faster than its interior point on these LPs


@dataclass(frozen=True)
class BoundOptions:
    # Finer slots only tighten the bound (windows widen less); measured on Azure conv x10, an hour: the
    # prefill bound moves 0.1 % from 5 s to 2 s slots while the LP takes 5x longer.
    prefill_slot_s: float = 5.0
    decode_slot_s: float = 10.0  # decode windows span tens of seconds
    aggregated_slot_s: float = 10.0

    def slot_s(self, pool: str) -> float:
        return {"prefill": self.prefill_slot_s, "decode": self.decode_slot_s}.get(pool, self.aggregated_slot_s)


@dataclass(frozen=True)
class PoolBound:
    pool: str
    gpu_hours: float
    startup_gpu_hours: float  # of gpu_hours, the start-up lead charged on increases
    slot_s: float
    slots: int
    groups: int  # (kind, arrival slot, deadline slot) groups of kept requests
    variables: int
    constraints: int
    work_replica_s: float  # total work of the feasible requests, before dropping
    dropped_work_replica_s: float
    solve_s: float


@dataclass(frozen=True)
class LowerBound:
    gpu_hours: float
    pools: dict[str, PoolBound]
    requests: int  # scored requests
    infeasible_requests: int  # no schedule meets them (they count against the allowance)
    drop_allowance: int  # requests a policy at the SLA may miss: floor((1 - q) N)
    attainable: bool  # False: more requests are infeasible than the SLA lets any policy miss
    solve_s: float
    method: str = field(repr=False)

    def to_report(self) -> dict:
        return {"gpu_hours": round(self.gpu_hours, 4), "requests": self.requests,
                "infeasible_requests": self.infeasible_requests, "drop_allowance": self.drop_allowance,
                "attainable": self.attainable, "solve_s": round(self.solve_s, 3), "method": self.method,
                "pools": {p: {"gpu_hours": round(b.gpu_hours, 4), "startup_gpu_hours": round(b.startup_gpu_hours, 4),
                              "slot_s": b.slot_s, "slots": b.slots, "groups": b.groups, "variables": b.variables,
                              "constraints": b.constraints, "work_replica_s": round(b.work_replica_s, 2),
                              "dropped_work_replica_s": round(b.dropped_work_replica_s, 2),
                              "solve_s": round(b.solve_s, 3)} for p, b in self.pools.items()}}


@dataclass(frozen=True)
class _Work:
    """Work items of one pool: replica-seconds, window [lo, hi] in seconds from the warm-up's end, and kind
    (0 prefill, 1 decode: each kind has its own drop allowance when one pool does both)."""

    work_s: np.ndarray
    lo_s: np.ndarray
    hi_s: np.ndarray
    kind: np.ndarray


# ------------------------------------------------------------------------------------------ cost model
def _lower_hull(xs: np.ndarray, ys: np.ndarray) -> list[int]:
    """Indices of the lower convex hull of points sorted by x (monotone chain)."""
    hull: list[int] = []
    for i in range(len(xs)):
        while len(hull) >= 2:
            o, a = hull[-2], hull[-1]
            cross = (xs[a] - xs[o]) * (ys[i] - ys[o]) - (ys[a] - ys[o]) * (xs[i] - xs[o])
            if cross > 0:
                break
            hull.pop()
        hull.append(i)
    return hull


def _affine_minorants(dc: DecodeCurve, c_ref: float, c_max: float) -> tuple[np.ndarray, np.ndarray]:
    """Per batch 1..max_batch, (intercept_ms, slope_ms_per_token) of a line below itl(b, .) on [0, c_max].

    itl(b, .) is piecewise linear between the profile's context levels, so the hull of its values there is
    its convex envelope, and the hull's edge under ``c_ref`` extended is a supporting line."""
    xs = np.array(sorted({0.0, c_max, *(c for c in dc.contexts if 0.0 < c < c_max)}))
    batches = range(1, dc.max_batch + 1)
    icpt, slope = np.empty(dc.max_batch), np.empty(dc.max_batch)
    for b in batches:
        ys = np.array([dc.itl_ms(b, x).value for x in xs])
        hull = _lower_hull(xs, ys)
        k = next((j for j in range(len(hull) - 2) if xs[hull[j + 1]] >= c_ref), len(hull) - 2)
        i0, i1 = hull[k], hull[k + 1]
        s = (ys[i1] - ys[i0]) / (xs[i1] - xs[i0])
        icpt[b - 1], slope[b - 1] = ys[i0] - s * xs[i0], s
    return icpt, slope


def _mixture_min(xs: np.ndarray, ys: np.ndarray, limit: float) -> float:
    """min E[y] over distributions on the points with E[x] <= limit (inf when none): the lower convex
    envelope at ``limit``, or its minimum when that lies further left."""
    order = np.lexsort((ys, xs))
    x, y = xs[order], ys[order]
    if x[0] > limit:
        return math.inf
    hull = _lower_hull(x, y)
    hx, hy = x[hull], y[hull]
    best = int(np.argmin(hy))
    if hx[best] <= limit:
        return float(hy[best])
    return float(np.interp(limit, hx[: best + 1], hy[: best + 1]))


@dataclass(frozen=True)
class _DecodeCost:
    """Decode replica-seconds per token as a function of a request's starting context (concave, tabulated)."""

    grid_tokens: np.ndarray
    first_s: np.ndarray  # the first step: the cheapest batch of all
    gap_s: np.ndarray  # each later step, at mean ITL <= target (inf: no batch meets it)
    step_min_s: float  # the fastest step any batch takes

    def at(self, context_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        c = context_tokens - CTX_QUANTUM_SLACK_TOKENS
        return np.interp(c, self.grid_tokens, self.first_s), np.interp(c, self.grid_tokens, self.gap_s)


def _decode_cost(dc: DecodeCurve, itl_target_ms: float, c_ref: float, c_max: float) -> _DecodeCost:
    icpt, slope = _affine_minorants(dc, c_ref, c_max)
    batch = np.arange(1, dc.max_batch + 1, dtype=np.float64)
    tau_ms = np.array([dc.itl_ms(b, 0.0).value for b in range(1, dc.max_batch + 1)])
    grid = np.linspace(-float(CTX_QUANTUM_SLACK_TOKENS), c_max, CONTEXT_GRID)
    first, gap = np.empty(len(grid)), np.empty(len(grid))
    for i, c in enumerate(grid):
        per_token_ms = (icpt + slope * c) / batch
        first[i] = per_token_ms.min() / 1e3
        gap[i] = _mixture_min(tau_ms, per_token_ms, itl_target_ms) / 1e3
    return _DecodeCost(grid, first, gap, float(tau_ms.min()) / 1e3)


def _prefill_times(engine: EngineModel, isl: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per request: marginal prefill work (ttft(isl) - overhead: what its pieces cost in any batching) and
    the earliest its prefill can end (its work plus one overhead per chunk it needs)."""
    over = engine.prefill_overhead_s()
    uniq, inv = np.unique(isl, return_inverse=True)
    ttft = np.array([engine.prefill_batch_s([(0.0, float(n))]) for n in uniq])[inv]
    work = np.maximum(0.0, ttft - over)
    chunks = np.ceil(np.maximum(isl, 1) / engine.chunk_tokens)
    return work, work + chunks * over


# ---------------------------------------------------------------------------------------------- work
def _pool_work(trace: RequestTrace, profile: Profile, policy: Policy, config: SimConfig,
               warmup_s: float) -> tuple[dict[str, tuple[_Work, int]], np.ndarray]:
    """Each pool's work items (and GPUs per replica), and which scored requests no schedule can meet."""
    pc = profile.prefill_curve(config.prefill_tp or profile.selected_tp("prefill"))
    dc = profile.decode_curve(config.decode_tp or profile.selected_tp("decode"))
    engine = EngineModel(pc, dc, config.chunk_tokens)
    keep = trace.arrival_s >= warmup_s
    a = trace.arrival_s[keep] - warmup_s
    isl, osl = trace.isl[keep].astype(np.float64), trace.osl[keep].astype(np.float64)
    ttft_s, itl_s = policy.sla.ttft_ms / 1e3, policy.sla.itl_ms / 1e3
    # Batches mix in warm-up requests too: the context range must cover the whole trace's.
    ctx_max = float(np.max(trace.isl + trace.osl)) + 2 * CTX_QUANTUM_SLACK_TOKENS if len(trace) else 64.0
    cost = _decode_cost(dc, policy.sla.itl_ms, float(np.median(isl)) if len(isl) else 1.0, ctx_max)
    pre_work, pre_end = _prefill_times(engine, isl)
    first, gap = cost.at(isl)
    agg = config.mode == "aggregated"
    xfer = np.zeros_like(isl) if agg else isl * profile.model.kv_bytes_per_token / config.link_bytes_per_s
    step = 0.0 if agg else cost.step_min_s  # the first token's decode step (aggregated: the prompt's own)
    pre_end = np.maximum(0.0, pre_end - TIME_SLACK_S)
    gaps = np.maximum(osl - 1.0, 0.0)
    infeasible = (pre_end + xfer + step > ttft_s) | ((gaps > 0) & ~np.isfinite(gap))
    ok = ~infeasible
    deadline = a + ttft_s + gaps * itl_s + TIME_SLACK_S
    prefill_end = a + ttft_s - xfer - step + TIME_SLACK_S
    prefill = _Work(pre_work[ok], a[ok], prefill_end[ok], np.zeros(int(ok.sum()), np.int8))
    # Disaggregated, the first token costs one decode step (none for an OSL-0 request: it never steps).
    dec_work = gaps * np.where(np.isfinite(gap), gap, 0.0) + (0.0 if agg else first * (osl >= 1))
    decode = _Work(dec_work[ok], (a + pre_end + xfer)[ok], deadline[ok], np.ones(int(ok.sum()), np.int8))
    if agg:
        both = _Work(*(np.concatenate((getattr(prefill, f), getattr(decode, f)))
                       for f in ("work_s", "lo_s", "hi_s", "kind")))
        return {"aggregated": (both, dc.gpus)}, infeasible
    return {"prefill": (prefill, pc.gpus), "decode": (decode, dc.gpus)}, infeasible


# ------------------------------------------------------------------------------------------------ LP
@dataclass(frozen=True)
class _Groups:
    """Work items grouped by (kind, first slot, end slot); items sorted by work, largest first."""

    first: np.ndarray  # first slot of the window
    end: np.ndarray  # one past its last slot
    kind: np.ndarray
    total_s: np.ndarray
    sorted_work_s: list[np.ndarray]


def _groups(work: _Work, slot_s: float) -> _Groups:
    # Arrivals round down and deadlines up to slot edges: every window only widens (a relaxation).
    lo = np.floor(work.lo_s / slot_s).astype(np.int64)
    hi = np.maximum(np.ceil(work.hi_s / slot_s).astype(np.int64), lo + 1)
    order = np.lexsort((-work.work_s, hi, lo, work.kind))
    lo, hi, kind, w = lo[order], hi[order], work.kind[order], work.work_s[order]
    new = np.ones(len(w), dtype=bool)
    new[1:] = (lo[1:] != lo[:-1]) | (hi[1:] != hi[:-1]) | (kind[1:] != kind[:-1])
    starts = np.flatnonzero(new)
    parts = np.split(w, starts[1:]) if len(w) else []
    return _Groups(lo[starts], hi[starts], kind[starts], np.add.reduceat(w, starts) if len(w) else np.empty(0),
                   parts)


def _cut_points(n: int) -> np.ndarray:
    dense = np.arange(min(n, DENSE_CUTS))
    sparse = [m for m in (DENSE_CUTS << np.arange(0, 40)) if m < n]
    return np.concatenate((dense, np.asarray(sparse, dtype=np.int64)))


def _drop_rows(g: _Groups, y0: int, n0: int, nv: int, allowance: dict[int, int]) -> tuple[coo_matrix, np.ndarray]:
    """Dropped work y_g <= top-n_g work of group g (tangents at the cut points over-estimate the concave
    top-k curve), and per kind sum n_g <= the allowance."""
    rows, cols, vals, rhs = [], [], [], []
    r = 0
    for i, w in enumerate(g.sorted_work_s):
        prefix = np.concatenate(([0.0], np.cumsum(w)))
        for m in _cut_points(len(w)):
            rows += [r, r]
            cols += [y0 + i, n0 + i]
            vals += [1.0, -float(w[m])]
            rhs.append(float(prefix[m] - w[m] * m))
            r += 1
    for kind, allowed in sorted(allowance.items()):
        members = np.flatnonzero(g.kind == kind)
        rows += [r] * len(members)
        cols += (n0 + members).tolist()
        vals += [1.0] * len(members)
        rhs.append(float(allowed))
        r += 1
    return coo_matrix((vals, (rows, cols)), shape=(r, nv)), np.asarray(rhs)


def _solve_pool(pool: str, work: _Work, gpus: int, slot_s: float, startup_s: float,
                allowance: dict[int, int]) -> PoolBound:
    """min GPU-seconds of sum c_k slot_s + start-up on increases, work of each group spread over its slots."""
    t0 = time.perf_counter()
    g = _groups(work, slot_s)
    n_g = len(g.total_s)
    k_slots = int(g.end.max()) if n_g else 0
    if k_slots == 0:
        return PoolBound(pool, 0.0, 0.0, slot_s, 0, 0, 0, 0, 0.0, 0.0, time.perf_counter() - t0)
    span = g.end - g.first
    z_group = np.repeat(np.arange(n_g), span)
    z_slot = np.arange(len(z_group)) - np.repeat(np.cumsum(span) - span, span) + g.first[z_group]
    nz = len(z_group)
    u0, z0, y0, n0 = k_slots, 2 * k_slots - 1, 2 * k_slots - 1 + nz, 2 * k_slots - 1 + nz + n_g
    nv = n0 + n_g
    eq = coo_matrix((np.ones(nz + n_g), (np.concatenate((z_group, np.arange(n_g))),
                                         np.concatenate((z0 + np.arange(nz), y0 + np.arange(n_g))))), shape=(n_g, nv))
    k = np.arange(1, k_slots)
    cap = coo_matrix((np.concatenate((np.ones(nz), np.full(k_slots, -slot_s))),
                      (np.concatenate((z_slot, np.arange(k_slots))), np.concatenate((z0 + np.arange(nz),
                                                                                      np.arange(k_slots))))),
                     shape=(k_slots, nv))
    ups = coo_matrix((np.concatenate((np.ones(len(k)), -np.ones(len(k)), -np.ones(len(k)))),
                      (np.tile(np.arange(len(k)), 3), np.concatenate((k, k - 1, u0 + k - 1)))), shape=(len(k), nv))
    drops, drop_rhs = _drop_rows(g, y0, n0, nv, allowance)
    a_ub = vstack([cap, ups, drops]).tocsr()
    b_ub = np.concatenate((np.zeros(k_slots + len(k)), drop_rhs))
    startup_cost = gpus * np.minimum(startup_s, k * slot_s)  # a chord of min(startup, t): never above it
    cost = np.concatenate((np.full(k_slots, gpus * slot_s), startup_cost, np.zeros(nz + 2 * n_g)))
    counts = np.array([len(w) for w in g.sorted_work_s], dtype=np.float64)
    bounds = np.zeros((nv, 2))
    bounds[:, 1] = np.inf
    bounds[n0:, 1] = counts
    res = linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=eq.tocsr(), b_eq=g.total_s, bounds=bounds, method=LP_METHOD)
    if res.status != 0:
        raise RuntimeError(f"lower bound LP for pool {pool} did not solve: {res.message}")
    x = res.x
    return PoolBound(pool, res.fun / 3600.0, float(startup_cost @ x[u0:z0]) / 3600.0, slot_s, k_slots, n_g, nv,
                     a_ub.shape[0] + n_g, float(g.total_s.sum()), float(x[y0:n0].sum()), time.perf_counter() - t0)


# ---------------------------------------------------------------------------------------------- entry
METHOD = ("LP lower bound (HiGHS), per pool: fractional replicas per slot covering each kept request's "
          "unavoidable work (marginal prefill time; decode tokens at the cheapest batch mix meeting mean ITL) "
          "inside its SLA window, start-up charged on increases, the (1 - q) share of requests dropped "
          "(infeasible ones first; each pool its own, fractional); no policy meeting the SLA spends less")


def drop_allowance(requests: int, percentile: float) -> int:
    """Requests a policy may miss and still meet ``percentile``; attainment is reported to 5 decimals,
    so a policy that rounds up to the target is allowed its extra misses too."""
    return int(math.floor(requests * (1.0 - percentile / 100.0 + ROUNDING_SLACK) + 1e-9))


def lower_bound(trace: RequestTrace, profile: Profile, policy: Policy, *, startup_s: float | None = None,
                warmup_s: float = 0.0, config: SimConfig | None = None,
                options: BoundOptions = BoundOptions()) -> LowerBound:
    """The least GPU-hours any policy can spend on the scored window [warmup_s, end) and meet the SLA."""
    from planner.perf.kv import gbps_to_bytes_per_s

    startup = float(policy.startup_s if startup_s is None else startup_s)
    cfg = config or SimConfig(mode=policy.mode, link_bytes_per_s=gbps_to_bytes_per_s(policy.kv_link.gbps),
                              startup_s=startup)
    t0 = time.perf_counter()
    pools, infeasible = _pool_work(trace, profile, policy, cfg, warmup_s)
    n = len(infeasible)
    allowed = drop_allowance(n, policy.sla.percentile)
    n_bad = int(infeasible.sum())
    left = max(0, allowed - n_bad)
    bounds = {}
    for pool, (work, gpus) in pools.items():
        slot = options.slot_s(pool)
        nonzero = work.work_s > 0
        kept = _Work(work.work_s[nonzero], work.lo_s[nonzero], work.hi_s[nonzero], work.kind[nonzero])
        bounds[pool] = _solve_pool(pool, kept, gpus, slot, startup, {0: left, 1: left})
    total = sum(b.gpu_hours for b in bounds.values())
    return LowerBound(total, bounds, n, n_bad, allowed, n_bad <= allowed, time.perf_counter() - t0, METHOD)
