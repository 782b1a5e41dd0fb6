"""Steady-state decode from one batch of concurrent streams: the window in which every stream decodes.

B requests sent at once do not start decoding together: their prompts are prefilled over several engine
iterations (chunked prefill), and an aggregated engine piggy-backs those chunks on the decode steps of the
streams that already started, which makes those steps slower. Only once the last stream has its first
token is every step a pure decode step of batch B; and once the first stream has its last token the batch
shrinks. So the window is [latest first token, earliest last token], and a stream's inter-token latency
is the slope of its arrival times against its token count inside the window (token counts from the
server's usage, so merged chunks count right). The point's ITL is the median over streams.

Why a robust slope rather than (last - first) / tokens: a timestamp is taken when the client gets to the
chunk, so a client that was busy at the window's edge (hundreds of streams, a loaded machine) makes that
edge late, and the two-point estimate carries the whole delay. The median of half-window slopes does not.

Worked example: 3 streams; first tokens at 0.10, 0.12, 0.15 s; last tokens at 0.95, 0.97, 1.00 s; the
window is [0.15, 0.95]. A stream that got tokens 4..44 evenly between 0.151 and 0.949 s decoded at
0.798 / 40 = 19.95 ms per token; had its first five timestamps in the window come at once 100 ms late, the
two-point estimate would say 17.45 ms; the median of half-window slopes still says 19.95 ms.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from planner.profiler.loadgen import StreamResult


@dataclass(frozen=True)
class Window:
    start_s: float
    end_s: float
    itl_s: float  # median over streams of the time per token inside the window
    steps: int  # the fewest tokens any stream received inside the window
    tokens_before: int  # the most tokens any stream received before the window (prefill of the others)
    mean_context_tokens: float  # prompt + generated tokens, averaged over streams and over the window


def steady_window(streams: Sequence[StreamResult], prompt_tokens: Sequence[int]) -> Window | None:
    """The steady-state window of one batch, or None when the streams never all decoded at once (the
    server queued some of them: fewer slots or less KV than the batch needs)."""
    if not streams or any(not s.events_s for s in streams):
        return None
    start = max(s.events_s[0] for s in streams)
    end = min(s.events_s[-1] for s in streams)
    if end <= start:
        return None
    per_token: list[float] = []
    steps: list[int] = []
    before = 0
    contexts: list[float] = []
    for stream, prompt in zip(streams, prompt_tokens, strict=True):
        inside = [i for i, t in enumerate(stream.events_s) if start <= t <= end]
        first_inside = inside[0] if inside else len(stream.events_s)
        before = max(before, stream.tokens[first_inside - 1] if first_inside > 0 else 0)
        if len(inside) < 2:
            steps.append(0)
            continue
        i0, i1 = inside[0], inside[-1]
        tokens = stream.tokens[i1] - stream.tokens[i0]
        steps.append(tokens)
        if tokens > 0:
            per_token.append(_slope_s([stream.tokens[i] for i in inside], [stream.events_s[i] for i in inside]))
            contexts.append(prompt + (stream.tokens[i0] + stream.tokens[i1]) / 2)
    if not per_token:
        return None
    return Window(start, end, statistics.median(per_token), min(steps), before, statistics.fmean(contexts))


def _slope_s(tokens: list[int], times_s: list[float]) -> float:
    """Seconds per token: the median of the slopes between each token and the one half the window later.
    Each slope spans half the window (bursts of chunks read at once average out), and a lag at either
    edge touches fewer than half of them, so the median does not see it."""
    n = len(tokens)
    half = n // 2
    slopes = [(times_s[i + half] - times_s[i]) / (tokens[i + half] - tokens[i])
              for i in range(n - half) if tokens[i + half] > tokens[i]] if n >= 4 else []
    if not slopes:
        return (times_s[-1] - times_s[0]) / (tokens[-1] - tokens[0])
    return statistics.median(slopes)
