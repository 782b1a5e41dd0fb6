"""The SLA's error budget: how much of it is left, how fast it burns, and the headroom that follows.

The SLA's percentile p is a budget: over ``sla.window_s`` a share 1 - p of requests may miss. Sizing every
interval as if it were the worst spends none of it, and pays GPUs for every point of attainment above p. With
``sla.budget_control`` on, the decision sizes at ``sla.lean_quantile`` of the forecast while the budget is
healthy and goes back to ``forecast.quantile`` (the conservative headroom) when it burns fast, as SRE
burn-rate alerting reads budgets: a short and a long window, burn rate = miss share / (1 - p); the long
window's slow burn counts only while the short window burns too (the workbook's multiwindow alert: once the
misses stop, the alert resets within the short window instead of holding for the long one). Once the
window's budget is spent or nearly (remaining <= ``sla.recover_below``, 0.1: its attainment so far is under p
plus a tenth of the allowed misses) on bursty load, it sizes at ``sla.recover_quantile`` (never below
``forecast.quantile``) until the attainment is back above that: the conservative headroom is what let it fall
there, so holding it would end the window below the SLA. (``decide/behavior.py`` then holds capacity through
lulls for ``sla.recover_hold_s``.) With ``sla.recover_miss_share`` below 1 (off by default; 0.5 for a promise at
p90 or p99), a spent budget on any load, steady or bursty, also sizes each interval at a stricter latency
percentile (``sizing_percentile``): that share of the SLA's allowed misses, p97.5 for a p95 SLA at 0.5, while that
can still bring the window back. More forecast headroom does not buy attainment
back on steady load (the forecast already covers it), but a window sized at p itself realises about p per
interval and can never climb back above p; the stricter percentile can.

A promise that began less than a window ago (a replay's scored window) has a budget of the whole window's
requests, not only of those counted so far: a burst of misses in its first minutes spends a share of the
hour's budget, and ``window_remaining`` says how much is left of it (the window's requests projected at the
pace so far). "Nearly spent" (under LOW_REMAINING) reads that share; "spent" (recovery) still reads the
attainment so far, so a window that fell below p climbs back before it leans.

Worked example (p95, one hour): 36,000 requests allow 1,800 misses. 300 misses in the last 5 minutes out of
3,000 requests is a 10 % miss share, a burn rate of 2 over the short window: at that pace the hour's budget is
gone in 30 minutes, so the next decisions size conservatively until the short window cools.

Pure: the controller measures (counts from the engines' histograms or the simulator's request log), this
module only reads the samples it is given, and time comes in as ``now_s``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planner.config import Policy
from planner.types import Observation, Pool, Reason, SlaBudget

SHORT_WINDOW_S = 300.0  # the fast-burn window (SRE workbook's 5 min / 1 h pair)
LONG_WINDOW_S = 3600.0  # capped at sla.window_s
FAST_BURN = 2.0  # short-window burn above this: at this pace the window's budget is gone in half the window
# Long-window burn above this, while the short window burns above it too: the budget will not last the window.
SLOW_BURN = 1.0
LOW_REMAINING = 0.25  # under a quarter of the window's budget left: no more leaning
MIN_REQUESTS = 50.0  # fewer requests in a window than this say nothing about a 1-5 % miss share


@dataclass(frozen=True)
class BudgetSample:
    """One interval's measure: requests counted and an estimate of how many missed the SLA."""

    at_s: float
    counted: float
    missed: float


def sample_of(obs: Observation, ttft_pool: Pool, itl_pool: Pool, interval_s: float) -> BudgetSample | None:
    """The interval's share of the observation's counts; None when either signal is unmeasured.

    Reads overlap (a 60 s window read every 30 s counts each request twice), so counts are scaled by
    interval / window. A request meets the SLA when it meets both targets; the histograms give each share on
    its own, so the joint miss share is taken as their sum (an upper bound: a request that misses both is
    counted twice), never as their maximum, which would under-count misses.
    """
    t, i = obs.pools.get(ttft_pool), obs.pools.get(itl_pool)
    if t is None or i is None or None in (t.ttft_counted, t.ttft_met, i.itl_counted, i.itl_met):
        return None
    assert t.ttft_counted is not None and t.ttft_met is not None and i.itl_counted is not None
    assert i.itl_met is not None
    share = min(1.0, interval_s / obs.window_s) if obs.window_s > 0 else 1.0
    miss_ttft = 1.0 - t.ttft_met / t.ttft_counted if t.ttft_counted > 0 else 0.0
    miss_itl = 1.0 - i.itl_met / i.itl_counted if i.itl_counted > 0 else 0.0
    counted = t.ttft_counted * share
    return BudgetSample(obs.at_s, counted, counted * min(1.0, max(0.0, miss_ttft) + max(0.0, miss_itl)))


def _burn(samples: Sequence[BudgetSample], since_s: float, allowed: float) -> float | None:
    counted = sum(s.counted for s in samples if s.at_s > since_s)
    if counted < MIN_REQUESTS:
        return None
    return sum(s.missed for s in samples if s.at_s > since_s) / counted / allowed


def budget_status(samples: Sequence[BudgetSample], now_s: float, window_s: float,
                  percentile: float, since_s: float | None = None) -> SlaBudget | None:
    """The budget over the last ``window_s``, or since ``since_s`` where the promise began later (a replay's
    scored window: its warm-up is not part of the SLA); None: fewer than MIN_REQUESTS requests measured."""
    allowed = 1.0 - percentile / 100.0
    start_s = now_s - window_s if since_s is None else max(now_s - window_s, since_s)
    recent = [s for s in samples if start_s < s.at_s <= now_s]
    counted = sum(s.counted for s in recent)
    if counted < MIN_REQUESTS:
        return None
    missed = sum(s.missed for s in recent)
    # A short window not yet covered by measurements is unknown: a restarted controller does not lean on a
    # minute of good luck.
    covered = now_s - min(s.at_s for s in recent) >= SHORT_WINDOW_S
    # A young promise's budget is its whole window's: the requests still to come, at the pace so far, may
    # miss too (never projected from less than the short window: a minute's pace says little of an hour's).
    young_s = now_s - since_s if since_s is not None and now_s - since_s < window_s else None
    window_remaining = (1.0 - missed / (allowed * counted * window_s / max(young_s, SHORT_WINDOW_S))
                        if young_s is not None else None)
    return SlaBudget(remaining=1.0 - missed / (allowed * counted), attainment=1.0 - missed / counted,
                     burn_short=_burn(recent, now_s - SHORT_WINDOW_S, allowed) if covered else None,
                     burn_long=_burn(recent, now_s - min(LONG_WINDOW_S, window_s), allowed), requests=counted,
                     window_remaining=window_remaining)


def headroom_quantile(policy: Policy, budget: SlaBudget | None,
                      rate_cv: float | None = None) -> tuple[float, Reason | None]:
    """The forecast quantile to size at, and why (None: budget control off, the policy's quantile as ever).

    Unknown budget (no measure yet, too few requests) is never read as healthy: conservative. A spent budget
    on bursty or unknown load (``rate_cv`` not steady by ``behavior.steady``; no steady rules: always) sizes
    at the recovery quantile; on steady load it stays conservative: there the forecast's quantile already
    covers the load, and what misses (ramps seen late, prompts no size serves in time) more headroom does not
    buy back (five seeds per suite scenario: on steady scenarios +4-10 % GPU-hours on the seeds it touched for
    0.1-0.3 points; on Azure code +1.7 % for a point, 93.9 -> 94.9 %).
    """
    if not policy.sla.budget_control:
        return policy.forecast.quantile, None
    conservative = (policy.forecast.quantile, Reason.BUDGET_BURNING)
    if budget is None or budget.burn_short is None:
        return policy.forecast.quantile, Reason.BUDGET_UNMEASURED
    if budget.remaining <= policy.sla.recover_below and not policy.behavior.is_steady(rate_cv):
        return max(policy.sla.recover_quantile, policy.forecast.quantile), Reason.BUDGET_OVERSPENT
    left = budget.remaining if budget.window_remaining is None else budget.window_remaining
    if left < LOW_REMAINING or budget.burn_short > FAST_BURN:
        return conservative
    if budget.burn_long is not None and budget.burn_long > SLOW_BURN and budget.burn_short > SLOW_BURN:
        return conservative
    return policy.sla.lean_quantile, Reason.BUDGET_LEAN


def sizing_percentile(policy: Policy, budget: SlaBudget | None) -> float | None:
    """The latency percentile (0..1) the pools are sized at while the window's budget is spent or nearly (the
    recovery's trigger, ``sla.recover_below``), on any load, and the window can still be brought back
    (``recoverable``); None: the SLA's own percentile.

    Why: a window that fell below p is climbed back only by intervals that miss less than 1 - p. Sized at p,
    an interval realises about p, so the window ends where the miss left it; a policy promising p90 on
    ServeGen's hour (its opening and its +46 % step 20 minutes in meet pools sized for the load before) ended
    two seeds of five at 87.6 and 88.2 %, and one at p99 at 95.0 % (README, "A promise at p90 or p99").
    """
    share = policy.sla.recover_miss_share
    if not policy.sla.budget_control or share >= 1.0:
        return None
    if budget is None or budget.burn_short is None or budget.remaining > policy.sla.recover_below:
        return None
    if not recoverable(budget, share):
        return None
    return 1.0 - (1.0 - policy.sla.percentile / 100.0) * share


def recoverable(budget: SlaBudget, share: float) -> bool:
    """Whether intervals that miss ``share`` of the allowance can bring the window back to the percentile.

    The misses beyond the allowance so far (``-remaining`` allowances of the requests counted) must be no more
    than what the rest of the window saves, ``1 - share`` allowances of its requests: the rest of a young window
    (its requests projected at the pace so far, ``window_remaining``), the next half of a rolling one (as many
    requests as counted). A window past that, a sleeping model's cold starts or a p99 hour that a step took 4 %
    of, is not sized up for a promise it can no longer keep: the stricter percentile buys GPUs, not the SLA.
    """
    if budget.remaining >= 0.0:
        return True
    if budget.window_remaining is None:
        rest = 1.0  # a rolling window: over its next half, the oldest half rolls out
    elif budget.window_remaining >= 1.0:
        return True
    else:  # the window's requests over those counted: (1 - remaining) / (1 - window_remaining); the rest of them
        rest = (1.0 - budget.remaining) / (1.0 - budget.window_remaining) - 1.0
    return -budget.remaining <= (1.0 - share) * rest
