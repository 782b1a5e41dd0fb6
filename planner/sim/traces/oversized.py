"""Requests longer than the model serves: what a replay does with them (``planner backtest --oversized``).

Public traces were recorded on other models: Azure's and Mooncake's carry prompts past a 32k or 40k context,
and a request whose prompt and output do not fit the profile's context (or one decode replica's KV cache) cannot
be simulated. An engine does not serve it either: vLLM answers 400 to a prompt past ``max_model_len``, and a
client that sets ``truncate_prompt_tokens`` has the prompt's head cut instead. So a replay may:

- ``error`` (the default): stop and name the first such request, as every replay did before the flag;
- ``drop``: leave them out, as the engine's 400 would (they reach neither pool, so they neither cost GPUs nor
  count in the attainment);
- ``truncate``: cut each prompt to what fits beside its output (a request whose output alone does not fit is
  dropped: no prompt is short enough).

Pure: arrays in, arrays out; the caller says how many tokens fit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.sim.traces.records import RequestTrace

MODES = ("error", "drop", "truncate")


@dataclass(frozen=True)
class Fitted:
    trace: RequestTrace
    oversized: int  # requests that did not fit as recorded
    dropped: int  # of those, left out
    truncated: int  # of those, kept with a shorter prompt

    def summary(self, mode: str, limit_tokens: int) -> dict[str, int | str]:
        return {"mode": mode, "limit_tokens": int(limit_tokens), "requests": self.oversized,
                "dropped": self.dropped, "truncated": self.truncated}


def oversized_mask(trace: RequestTrace, limit_tokens: int) -> np.ndarray:
    """True for each request whose prompt plus output exceeds ``limit_tokens``."""
    return (trace.isl.astype(np.int64) + trace.osl.astype(np.int64)) > int(limit_tokens)


def fit_requests(trace: RequestTrace, limit_tokens: int, mode: str) -> Fitted:
    """``trace`` with its oversized requests dropped or truncated (``mode``: drop | truncate); ``error`` and a trace
    that fits come back unchanged (the caller raises for ``error``)."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}; allowed: {', '.join(MODES)}")
    over = oversized_mask(trace, limit_tokens)
    n = int(np.count_nonzero(over))
    if n == 0 or mode == "error":
        return Fitted(trace, n, 0, 0)
    isl = trace.isl.copy()
    keep = ~over
    truncated = 0
    if mode == "truncate":
        room = int(limit_tokens) - trace.osl.astype(np.int64)  # the prompt's share of the context, per request
        cut = over & (room >= 1)
        isl[cut] = room[cut]
        keep = keep | cut
        truncated = int(np.count_nonzero(cut))
    dropped = n - truncated
    how = [f"{dropped:,} dropped"] if dropped else []
    how += [f"{truncated:,} prompts truncated"] if truncated else []
    note = f"{n:,} request{'s' if n != 1 else ''} longer than {int(limit_tokens):,} tokens: {', '.join(how)}"
    fitted = RequestTrace(trace.arrival_s[keep], isl[keep], trace.osl[keep], trace.source,
                          f"{trace.notes}; {note}" if trace.notes else note)
    return Fitted(fitted, n, dropped, truncated)
