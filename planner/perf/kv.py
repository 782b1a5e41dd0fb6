"""KV-cache transfer between prefill and decode, and the aggregated-vs-disaggregated advice.

Disaggregation adds ``ISL x KV bytes/token / link bandwidth`` to TTFT and removes prefill interference
from decode. Worked examples (public measurements): Qwen3-0.6B (114,688 B/token), 3,000-token prompt,
~104 MB/s link -> 344 MB -> 3.3 s added; Qwen3-32B (262,144 B/token), 8,000 tokens over 100 GbE
(12.5 GB/s) -> 2.1 GB -> 0.17 s. Concurrent transfers share the link: four at once each take ~4x.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.types import Mode

# Named links in bytes per second (one direction). "1gbe-measured" is the 104 MB/s seen in practice on a
# 1 GbE-class link, the figure behind the 0.6B example above.
LINKS_BYTES_PER_S: dict[str, float] = {
    "1gbe-measured": 104e6,
    "1gbe": 125e6,
    "10gbe": 1.25e9,
    "25gbe": 3.125e9,
    "100gbe": 12.5e9,
    "200gbe": 25e9,
    "400gbe": 50e9,
    "ib-ndr": 50e9,
    "pcie4": 32e9,
    "nvlink4": 450e9,
}


def gbps_to_bytes_per_s(gbps: float) -> float:
    return gbps * 1e9 / 8.0


def transfer_s(isl: float, kv_bytes_per_token: float, link_bytes_per_s: float, concurrent: int = 1) -> float:
    """Seconds to move one prompt's KV when ``concurrent`` transfers share the link fairly."""
    return isl * kv_bytes_per_token * max(1, concurrent) / link_bytes_per_s


@dataclass(frozen=True)
class DisaggAdvice:
    mode: Mode
    kv_bytes: float
    transfer_ms: float
    prefill_ms: float
    ttft_budget_ms: float
    interference_steps: float  # prefill time in units of the ITL target
    reason: str


# Disaggregation pays when one prefill would stall decode for at least this many ITL budgets; below it
# chunked prefill in an aggregated engine hides the interference. Matches the published break-even
# (Llama-3.1-8B, H100: ~0 % gain at 1k tokens, +3 % at 2k, +14 % at 4k, +22 % at 8k): an 8B prefill
# takes ~30 ms per 1k tokens on this class of GPU, so 2k tokens ~= 2 ITL budgets of 30 ms.
INTERFERENCE_BREAK_EVEN = 2.0
# The transfer may use at most this share of the TTFT budget left after prefill.
TRANSFER_BUDGET_SHARE = 0.5


def advise(isl: float, kv_bytes_per_token: float, link_bytes_per_s: float, prefill_ms: float,
           ttft_target_ms: float, itl_target_ms: float) -> DisaggAdvice:
    kv_bytes = isl * kv_bytes_per_token
    t_ms = 1e3 * transfer_s(isl, kv_bytes_per_token, link_bytes_per_s)
    budget = max(0.0, ttft_target_ms - prefill_ms)
    steps = prefill_ms / itl_target_ms
    if t_ms > TRANSFER_BUDGET_SHARE * budget:
        mode = Mode.AGGREGATED
        reason = (f"KV transfer {t_ms:.1f} ms exceeds {TRANSFER_BUDGET_SHARE:.0%} of the {budget:.0f} ms TTFT "
                  f"budget left after prefill: the link is too slow for disaggregation")
    elif steps < INTERFERENCE_BREAK_EVEN:
        mode = Mode.AGGREGATED
        reason = (f"one prefill ({prefill_ms:.1f} ms) stalls decode for only {steps:.1f} ITL budgets "
                  f"(< {INTERFERENCE_BREAK_EVEN:g}): chunked prefill in one pool is as good and simpler")
    else:
        mode = Mode.DISAGGREGATED
        reason = (f"one prefill ({prefill_ms:.1f} ms) would stall decode for {steps:.1f} ITL budgets, and the "
                  f"KV transfer adds only {t_ms:.1f} ms of TTFT")
    return DisaggAdvice(mode, kv_bytes, t_ms, prefill_ms, ttft_target_ms, steps, reason)
