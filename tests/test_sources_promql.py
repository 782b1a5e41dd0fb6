"""PromQL building: selectors, window deltas without extrapolation, one tagged query per read."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.errors import UserError
from planner.sources.dialects import DIALECTS, VLLM, get_dialect
from planner.sources.promql import (
    POOL_LABEL,
    Q_LABEL,
    build_read_query,
    check_selector,
    duration,
    merge_selectors,
    pool_signals,
    window_delta,
)

REPO = Path(__file__).resolve().parents[1]

GOOD = [
    ("empty", "", ""),
    ("braces-only", "{}", ""),
    ("one", '{role="prefill"}', '{role="prefill"}'),
    ("regex-and-neq", '{ns!="x", pod=~"q-.*"}', '{ns!="x", pod=~"q-.*"}'),
    ("escaped-quote", r'{a="x\"y"}', r'{a="x\"y"}'),
    ("trailing-comma", '{a="1",}', '{a="1",}'),
]
BAD = [("no-braces", 'role="prefill"'), ("unquoted", "{role=prefill}"), ("injection", '{a="1"} or up'),
       ("bad-op", '{a=="1"}'), ("bad-name", '{1a="x"}'), ("unclosed", '{a="1"')]


@pytest.mark.parametrize(("text", "want"), [(t, w) for _, t, w in GOOD], ids=[g[0] for g in GOOD])
def test_check_selector_accepts(text: str, want: str) -> None:
    assert check_selector(text) == want


@pytest.mark.parametrize("text", [t for _, t in BAD], ids=[b[0] for b in BAD])
def test_check_selector_rejects_naming_the_input(text: str) -> None:
    with pytest.raises(ValueError, match="^selector "):
        check_selector(text)


def test_merge_selectors() -> None:
    assert merge_selectors('{role="prefill"}', '{ns="llm"}') == '{role="prefill",ns="llm"}'
    assert merge_selectors("", "{}") == ""
    assert merge_selectors('{a="1",}', "") == '{a="1"}'


def test_duration_in_milliseconds() -> None:
    assert (duration(60), duration(0.25), duration(1e-9)) == ("60000ms", "250ms", "1ms")


def test_window_delta_has_no_extrapolating_increase() -> None:
    expr = window_delta("c_total", '{a="1"}', "60000ms")
    assert "increase(" not in expr and "rate(" not in expr
    assert expr == ('((last_over_time(c_total{a="1"}[60000ms]) - c_total{a="1"} offset 60000ms) >= 0 '
                    'or last_over_time(c_total{a="1"}[60000ms]))')


@pytest.mark.parametrize("name", sorted(DIALECTS))
def test_signals_per_dialect(name: str) -> None:
    d = DIALECTS[name]
    sig = pool_signals(d, '{role="decode"}', 60, 1000.0, 30, 300)
    assert {"newest", "fresh", "seen", "completed", "running", "queue", "ttft_p95", "itl_p50"} <= set(sig)
    assert ("kv" in sig) == (d.kv_usage_gauge is not None)
    assert all('{role="decode"}' in expr for expr in sig.values())
    assert "970.000" in sig["fresh"]  # fresh = sampled at or after now - stale_after
    # Ready replicas are distinct scrape targets, not engine series (vLLM DP exports one series per engine).
    assert sig["fresh"].startswith(f"count(count by ({d.replica_label}) (timestamp(")
    assert sig["ttft_le"] == f'group by (le) (last_over_time({d.ttft_histogram}_bucket{{role="decode"}}[60000ms]))'
    assert sig["itl_le"].startswith("group by (le) (")
    # The window's cumulative counts per bound, for SLA attainment: the same expression the quantiles read.
    delta = window_delta(f"{d.ttft_histogram}_bucket", '{role="decode"}', "60000ms")
    assert sig["ttft_buckets"] == f"sum by (le) ({delta})"
    assert sig["ttft_p95"] == f"histogram_quantile(0.95, {sig['ttft_buckets']})"
    assert sig["itl_buckets"].startswith("sum by (le) (")


def test_latency_is_also_read_at_the_policys_percentile() -> None:
    sig = pool_signals(VLLM, "", 60, 1000.0, 30, 300, sla_quantile=0.99)
    assert sig["ttft_sla"].startswith("histogram_quantile(0.99, ") and sig["itl_sla"].startswith("histogram_quantile(0.99, ")
    assert sig["ttft_p95"].startswith("histogram_quantile(0.95, ")  # the p95 stays what its name says


def test_the_prometheus_source_asks_for_its_policys_percentile() -> None:
    from planner.policy_file import load_policy
    from planner.sources.prometheus import PrometheusSource

    pol = load_policy(REPO / "policies" / "example.yaml")
    pol = pol.model_copy(update={"sla": pol.sla.model_copy(update={"percentile": 99.0}),
                                 "metrics": pol.metrics.model_copy(update={"selectors": {
                                     "prefill": '{pool="prefill"}', "decode": '{pool="decode"}'}})})
    with PrometheusSource.from_policy(pol, pol.metrics) as src:
        assert "histogram_quantile(0.99, " in src.query(60.0, 1000.0)


def test_one_query_tags_every_signal_with_pool_and_name() -> None:
    q = build_read_query(VLLM, {"prefill": '{role="prefill"}', "decode": '{role="decode"}'}, 60, 1000.0, 30, 300)
    n = len(pool_signals(VLLM, "", 60, 1000.0, 30, 300))
    assert q.pools == ("prefill", "decode")
    assert q.promql.count(f'"{Q_LABEL}"') == 2 * n and q.promql.count(f'"{POOL_LABEL}"') == 2 * n
    assert q.promql.count(" or label_replace(") == 2 * n - 1


def test_unknown_dialect_is_a_user_error() -> None:
    with pytest.raises(UserError, match="allowed: vllm, sglang, dynamo, trtllm"):
        get_dialect("tgi")
