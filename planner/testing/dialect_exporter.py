"""An engine's metrics under another dialect's names, for tests of what reads each dialect.

``translate`` takes a vLLM-dialect exposition (the emulator's /metrics) and writes the same values under
the series names another dialect in planner/sources/dialects.py declares, mapping field by field: the
TTFT/ITL histograms, the completed counter, the running and queued gauges, the ISL/OSL numerators and
denominators, and KV usage rescaled to the target's ``kv_usage_scale``. Where the target keeps every
admitted request in one gauge (Dynamo's frontend inflight), that gauge is the sum of the source's
in-system gauges. It checks names and query shapes per dialect; it does not make the values behave like
that engine (what its own families would add, or how it counts).
"""

from __future__ import annotations

from collections import defaultdict

from prometheus_client.parser import text_string_to_metric_families

from planner.sources.dialects import VLLM, Dialect

Samples = dict[str, list[tuple[dict[str, str], float]]]


def parse_samples(text: str) -> Samples:
    out: Samples = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name].append((dict(s.labels), float(s.value)))
    return out


def _pairs(src: Dialect, dst: Dialect) -> list[tuple[str, str, float]]:
    """(target name, source name, factor) in priority order: a target name is filled once."""
    pairs = [(dst.completed_counter, src.completed_counter, 1.0)]
    for s_hist, d_hist in ((src.ttft_histogram, dst.ttft_histogram), (src.itl_histogram, dst.itl_histogram)):
        pairs += [(f"{d_hist}_{part}", f"{s_hist}_{part}", 1.0) for part in ("bucket", "sum", "count")]
    pairs += [(dst.queue_gauge, src.queue_gauge, 1.0), (dst.running_gauge, src.running_gauge, 1.0),
              (dst.presence_gauge, src.presence_gauge, 1.0)]
    for s_ratio, d_ratio in ((src.isl, dst.isl), (src.osl, dst.osl)):
        pairs += [(d_ratio.numerator, s_ratio.numerator, 1.0), (d_ratio.denominator, s_ratio.denominator, 1.0)]
    if dst.kv_usage_gauge and src.kv_usage_gauge:
        pairs.append((dst.kv_usage_gauge, src.kv_usage_gauge, src.kv_usage_scale / dst.kv_usage_scale))
    return pairs


def _summed(samples: Samples, names: tuple[str, ...]) -> list[tuple[dict[str, str], float]]:
    total: dict[tuple[tuple[str, str], ...], float] = defaultdict(float)
    for name in names:
        for labels, value in samples.get(name, []):
            total[tuple(sorted(labels.items()))] += value
    return [(dict(k), v) for k, v in total.items()]


def translate_samples(samples: Samples, dst: Dialect, src: Dialect = VLLM) -> Samples:
    out: Samples = {}
    if len(dst.in_system_gauges) == 1:  # one gauge holds running and queued alike
        out[dst.in_system_gauges[0]] = _summed(samples, src.in_system_gauges)
    for target, source, factor in _pairs(src, dst):
        if target not in out and source in samples:
            out[target] = [(labels, value * factor) for labels, value in samples[source]]
    return out


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def exposition(samples: Samples) -> str:
    """Prometheus text format, untyped (what matters to a query is the name, labels and value)."""
    lines = []
    for name in sorted(samples):
        for labels, value in samples[name]:
            body = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
            lines.append(f"{name}{{{body}}} {value!r}")
    return "\n".join(lines) + "\n"


def translate(text: str, dst: Dialect, src: Dialect = VLLM) -> str:
    return exposition(translate_samples(parse_samples(text), dst, src))
