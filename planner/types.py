"""Frozen records shared by every part of the planner.

The same records flow through the controller, the simulator and backtests, so a policy written against
them runs unchanged in all three harnesses. Times are seconds since the epoch (``*_s``) passed in by the
caller; nothing here reads a clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol


class Pool(StrEnum):
    """A pool of replicas. A StrEnum, so it is also the plain string used as label, key and JSON value."""

    PREFILL = "prefill"
    DECODE = "decode"
    AGGREGATED = "aggregated"  # one pool serving both stages (no disaggregation)

    def __repr__(self) -> str:  # messages quote pools as the user wrote them: 'decode', not <Pool.DECODE: ...>
        return repr(self.value)


class Mode(StrEnum):
    DISAGGREGATED = "disaggregated"  # prefill and decode pools
    AGGREGATED = "aggregated"  # one pool

    def __repr__(self) -> str:
        return repr(self.value)

    @property
    def pools(self) -> tuple[Pool, ...]:
        return (Pool.PREFILL, Pool.DECODE) if self is Mode.DISAGGREGATED else (Pool.AGGREGATED,)

    @property
    def ttft_pool(self) -> Pool:
        """The pool whose replicas set TTFT (every request starts there)."""
        return Pool.PREFILL if self is Mode.DISAGGREGATED else Pool.AGGREGATED

    @property
    def itl_pool(self) -> Pool:
        return Pool.DECODE if self is Mode.DISAGGREGATED else Pool.AGGREGATED


# ----------------------------------------------------------------------------------------------- observe
@dataclass(frozen=True)
class Completions:
    """Requests that *finished* in a window, as a serving frontend counts them (NVIDIA Dynamo's planner sizes
    from these: ``increase(requests_total)`` and the request-duration / sequence-length histograms). ``None``
    means are "nothing finished", never zero."""

    requests: float
    isl_mean: float | None = None
    osl_mean: float | None = None
    duration_s_mean: float | None = None  # arrival to last token, over the finished requests


@dataclass(frozen=True)
class PoolObservation:
    """What the serving system did in one pool over one window.

    Latency fields are ``None`` when no request finished the relevant phase in the window: "nothing to
    measure" is not "zero milliseconds".
    """

    requests: float  # requests *started* in the window (counting completions under-scales)
    rate_rps: float
    isl_mean: float | None = None
    osl_mean: float | None = None
    ttft_ms_p50: float | None = None
    ttft_ms_p95: float | None = None
    ttft_ms_mean: float | None = None
    itl_ms_p50: float | None = None
    itl_ms_p95: float | None = None
    # The latency at the SLA's own percentile (the policy's ``sla.percentile``; at 95 the p95 above): what
    # calibration compares with the model's prediction at that percentile.
    ttft_ms_at_sla: float | None = None
    itl_ms_at_sla: float | None = None
    itl_ms_mean: float | None = None
    queue: float = 0.0
    running: float = 0.0
    kv_usage: float | None = None  # 0..1
    ready_replicas: int | None = None
    # Requests that finished in the window (frontend view, the same on every pool); None: the source can't tell.
    completed: Completions | None = None
    # Prompt lengths of the requests started in the window as histogram buckets: (upper bound in tokens,
    # requests in that bucket, not cumulative; the last bound may be inf), as engines export them
    # (vllm:request_prompt_tokens). Empty: the source can't tell.
    isl_buckets: tuple[tuple[float, float], ...] = ()
    # The error budget's measure (decide/error_budget.py): requests whose TTFT (on the pool that sets TTFT) or
    # ITL (on the pool that sets ITL) was counted in the window, and how many of them met the SLA target.
    # None: not measured (a source that cannot tell), which is never read as all met or all missed.
    ttft_counted: float | None = None
    ttft_met: float | None = None
    itl_counted: float | None = None
    itl_met: float | None = None
    # How finely the latency histograms resolve the SLA targets (planner/sources/resolution.py): the bucket
    # (lower, upper] in ms that holds the target (upper inf past the last bound), its width over the target
    # (the relative error a p95 read there can have), and whether that width is within 25 % of the target.
    # Unresolved: use the exact mean rather than the p95. None: not assessed (no target or no bucket series
    # given to the source, or a source whose quantiles are exact, like the simulator).
    ttft_p95_bracket_ms: tuple[float, float] | None = None
    ttft_p95_resolution: float | None = None
    ttft_p95_resolved: bool | None = None
    itl_p95_bracket_ms: tuple[float, float] | None = None
    itl_p95_resolution: float | None = None
    itl_p95_resolved: bool | None = None

    def __post_init__(self) -> None:
        for name in ("requests", "rate_rps", "queue", "running"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"PoolObservation.{name} must be finite and >= 0, got {value!r}")


@dataclass(frozen=True)
class Observation:
    at_s: float
    window_s: float
    pools: Mapping[str, PoolObservation]
    # Requests held at the router for want of a ready replica (`planner route`'s wake signal): traffic the
    # engines' metrics cannot show while a policy is at zero (no replica, no series). 0: none known.
    waiting: int = 0


class NoDataReason(StrEnum):
    UNREACHABLE = "unreachable"
    TIMEOUT = "timeout"
    EMPTY = "empty"
    NAN = "nan"
    STALE = "stale"
    MISSING_POOL = "missing_pool"
    BAD_RESPONSE = "bad_response"


@dataclass(frozen=True)
class NoData:
    """A read that produced nothing trustworthy. Never to be treated as zero load."""

    reason: NoDataReason
    detail: str
    at_s: float


# ---------------------------------------------------------------------------------------------- forecast
QUANTILES = (0.5, 0.9, 0.95, 0.99)
# The most tokens one request's prompt or answer may have (a trace row, a mean length, a grid point): far above any
# model's context, so past it a number is a typo, not a workload, and it stays within int64 and float64 arithmetic.
MAX_TOKENS = 10_000_000


@dataclass(frozen=True)
class Forecast:
    """Forecast of one series at ``horizon_s`` after the last observation.

    ``ok`` is False when there was nothing to forecast from (empty, all-NaN history); ``mean`` then holds
    the best available fallback (the last finite value, or NaN when there is none) and ``reason`` says why.
    """

    mean: float
    quantiles: Mapping[float, float]
    horizon_s: float
    model: str
    ok: bool = True
    reason: str = ""

    def at(self, q: float | None) -> float:
        """The value at quantile ``q``: a computed quantile, else linear between the two around it (a policy's
        0.8 lies between the 0.5 and 0.9 forecasts, never silently at 0.5); ``None``, or ``q`` outside the
        computed range, falls back to the mean below it and to the top quantile above it."""
        if q is None:
            return self.mean
        if q in self.quantiles:
            return self.quantiles[q]
        below = [k for k in self.quantiles if k < q]
        above = [k for k in self.quantiles if k > q]
        if not below:
            return self.mean
        lo = max(below)
        if not above:
            return self.quantiles[lo]
        hi = min(above)
        w = (q - lo) / (hi - lo)
        return self.quantiles[lo] + w * (self.quantiles[hi] - self.quantiles[lo])


def buckets_1_2_5(max_value: float) -> tuple[float, ...]:
    """Histogram bounds 1, 2, 5, 10, 20, 50, ... up to ``max_value``: vLLM's build_1_2_5_buckets, which its
    prompt- and generation-length histograms use."""
    out: list[float] = []
    exponent = 0
    while True:
        for m in (1, 2, 5):
            value = m * 10**exponent
            if value > max_value:
                return tuple(float(v) for v in out)
            out.append(value)
        exponent += 1


@dataclass(frozen=True)
class LengthMix:
    """A distribution of prompt lengths: representative lengths (tokens) with weights summing to 1.

    Built from histogram buckets (``from_buckets``, log-uniform inside each bucket: the 1-2-5 buckets engines
    use are evenly spaced on a log scale); ``scaled_to`` then moves the whole mix to an exact mean (engines
    export the exact sum/count), so only the shape comes from the coarse buckets.
    """

    tokens: tuple[float, ...]
    weights: tuple[float, ...]

    @classmethod
    def from_buckets(cls, buckets: tuple[tuple[float, float], ...], points: int = 4) -> LengthMix | None:
        """Each bucket (lo, hi] as ``points`` lengths spread evenly on a log scale inside it (a 1-2-5 bucket
        spans 2-2.5x: one middle point would put a whole (20k, 50k] bucket on either side of a TTFT target);
        the +inf bucket as ``points`` lengths from its lower bound to twice it."""
        total = sum(n for _, n in buckets if n > 0)
        if total <= 0:
            return None
        tokens, weights, lo = [], [], 0.0
        for hi, n in sorted(buckets):
            if n > 0:
                low = max(lo, 1.0) if lo > 0 else max(hi / 2.0, 1.0)
                high = 2.0 * low if math.isinf(hi) else hi
                for i in range(points):
                    tokens.append(low * (high / low) ** ((i + 0.5) / points))
                    weights.append(n / total / points)
            lo = hi
        return cls(tuple(tokens), tuple(weights))

    @property
    def mean(self) -> float:
        return sum(t * w for t, w in zip(self.tokens, self.weights, strict=True))

    def scaled_to(self, mean: float) -> LengthMix:
        k = mean / self.mean if self.mean > 0 else 1.0
        return LengthMix(tuple(t * k for t in self.tokens), self.weights)


@dataclass(frozen=True)
class LoadForecast:
    rate_rps: Forecast
    isl_tokens: Forecast
    osl_tokens: Forecast
    # The work each pool does: prompt tokens/s (rate x ISL) and output tokens/s (rate x OSL). Rate and length
    # move together (a surge of long prompts), so the work's own quantile is the prefill/decode headroom;
    # rate quantile x mean length misses the length's share of a surge. None: size from the rate quantile.
    prefill_tokens_per_s: Forecast | None = None
    decode_tokens_per_s: Forecast | None = None
    # The shape of the prompt-length distribution over the horizon (its mean is ``isl_tokens``); None: unknown,
    # and the decision assumes exponential lengths around the mean.
    isl_mix: LengthMix | None = None
    # How bursty the arrival rate was over the recent history: its coefficient of variation with Poisson's
    # counting noise taken out (planner/forecast/burst.py). It picks the scale-down rules (config.Steady);
    # None: unknown, and the hedge applies.
    rate_cv: float | None = None
    # How far the latest read of the arrival rate rose over the read before it (a share: 0.5 is half again; 0.0
    # falling or within counting noise; planner/forecast/burst.py rate_rise). Above behavior.rise_hold no pool
    # gives capacity back this tick. None: unknown, and nothing is held for it.
    rate_rise: float | None = None
    # The SLA's error budget as the controller measured it (sla.budget_control); None: not measured, and the
    # decision sizes at forecast.quantile as it always did.
    sla_budget: SlaBudget | None = None


@dataclass(frozen=True)
class SlaBudget:
    """How much of the window's allowed misses is left, and how fast it burns (SRE multi-window burn rates).

    The SLA's percentile p allows a share 1 - p of requests to miss over ``sla.window_s``. Burn rate: the miss
    share over a recent window divided by 1 - p (1: the budget lasts exactly the window; 10: a tenth of it).
    """

    remaining: float  # share of the allowed misses of the requests counted so far left (1: none spent; < 0: overspent)
    burn_short: float | None  # over the short window (None: too few requests to tell)
    burn_long: float | None  # over the long window
    attainment: float  # share of the window's requests that met the SLA
    requests: float  # requests counted over the window
    # Share of the whole window's allowed misses left, while a promise that began less than a window ago (a
    # replay's scored window) is still young: its requests projected over the window at the pace so far. None:
    # the window is covered (a rolling one), and it equals ``remaining``.
    window_remaining: float | None = None


# ---------------------------------------------------------------------------------------------- decision
class Reason(StrEnum):
    """Closed set of reasons; used as log field, API field and bounded Prometheus label."""

    SLA_CAPACITY = "sla_capacity"  # sized from the SLA model
    ZERO_TRAFFIC = "zero_traffic"
    NO_DATA_HOLD = "no_data_hold"
    FORECAST_FALLBACK = "forecast_fallback"
    CALIBRATED_UP = "calibrated_up"
    CALIBRATED_DOWN = "calibrated_down"
    WITHIN_TOLERANCE = "within_tolerance"
    SCALE_UP_STABILIZED = "scale_up_stabilized"
    SCALE_DOWN_STABILIZED = "scale_down_stabilized"
    SCALE_UP_LIMIT = "scale_up_limit"
    SCALE_DOWN_LIMIT = "scale_down_limit"
    FLOOR = "floor"
    CEILING = "ceiling"
    BUDGET = "budget"
    SLA_INFEASIBLE = "sla_infeasible"
    KV_BOUND = "kv_bound"
    # Decode runs more sequences than its ready replicas hold at the ITL target: the excess counted as a backlog
    # (an output length read from finished requests cannot see an overloaded pool's demand).
    DECODE_OVER_BATCH = "decode_over_batch"
    EXTRAPOLATED = "extrapolated"
    BASELINE = "baseline"
    BUDGET_LEAN = "budget_lean"  # error budget healthy: sized at the lean quantile
    BUDGET_BURNING = "budget_burning"  # error budget burning fast or nearly spent: sized at forecast.quantile
    # The window's budget is spent, or all but sla.recover_below of it: sized at sla.recover_quantile (at least
    # forecast.quantile) with the hedge, its scale-down held sla.recover_hold_s, until the attainment is back above.
    BUDGET_OVERSPENT = "budget_overspent"
    # No error budget measured yet (a start, a what-if, too few requests in the window, the short window not yet
    # covered): sized at forecast.quantile with the hedge, as while it burns (unknown is never read as healthy).
    BUDGET_UNMEASURED = "budget_unmeasured"
    # The window's budget is spent or nearly (sla.recover_below), on any load: the pools sized at a stricter latency
    # percentile than the SLA's, sla.recover_miss_share of its allowed misses (p97.5 for p95 at 0.5).
    BUDGET_TIGHTENED = "budget_tightened"
    # The pools lean (budget_lean), and the decode pool was raised to what its KV needs for forecast.quantile's
    # load: short of KV it admits nothing and stalls every request (sla.lean_decode: no guard).
    DECODE_KV_GUARD = "decode_kv_guard"
    FLEET_PRIORITY = "fleet_priority"  # the fleet's budget went to a higher-priority policy first
    FLEET_SHARE = "fleet_share"  # the fleet's budget was shared with policies of equal priority
    FLEET_WAKE = "fleet_wake"  # the fleet's budget went first to a lower priority's wake (requests held for it)
    IDLE_WINDOW = "idle_window"  # min_replicas 0: one replica kept until idle for scale_to_zero_after_s
    WAKE_TOGETHER = "wake_together"  # min_replicas 0: traffic seen, every pool has at least one replica
    # The arrival rate rose past behavior.rise_hold since the last read (beyond counting noise): no pool is
    # scaled down this tick, as the start of a burst still recommends the lull's size.
    RATE_RISING = "rate_rising"


@dataclass(frozen=True)
class PoolDecision:
    replicas: int
    gpus_per_replica: int
    desired_unclamped: float  # replicas the SLA model asked for before behaviour and limits
    reasons: tuple[Reason, ...] = ()
    predicted_ttft_ms: float | None = None
    predicted_itl_ms: float | None = None

    @property
    def gpus(self) -> int:
        return self.replicas * self.gpus_per_replica


@dataclass(frozen=True)
class Decision:
    at_s: float
    pools: Mapping[str, PoolDecision]
    reasons: tuple[Reason, ...] = ()
    predicted_ttft_ms: float | None = None
    predicted_itl_ms: float | None = None
    detail: Mapping[str, float | str] = field(default_factory=dict)

    def targets(self) -> dict[str, int]:
        return {pool: d.replicas for pool, d in self.pools.items()}

    @property
    def gpus(self) -> int:
        return sum(d.gpus for d in self.pools.values())


# --------------------------------------------------------------------------------------------- protocols
@dataclass(frozen=True)
class Applied:
    """Result of an actuation: what each pool was at before and is asked to be now."""

    before: Mapping[str, int | None]
    after: Mapping[str, int]
    changed: bool
    detail: str = ""


class MetricSource(Protocol):
    def read(self, window_s: float, now_s: float) -> Observation | NoData: ...


class Actuator(Protocol):
    def apply(self, targets: Mapping[str, int]) -> Applied: ...


class Controller(Protocol):
    """Anything that turns observations into replica decisions at a fixed interval.

    The planner and every baseline implement this, so the simulator, backtests and the live control
    loop drive them identically.
    """

    name: str
    interval_s: float

    def tick(self, observation: Observation | NoData, now_s: float) -> Decision: ...
