"""MetricSource on a real Prometheus, one query per read.

The connection comes from prometheus-api-client (``PrometheusConnect``: retry adapter, TLS and auth
settings), but the query itself is POSTed as a form body on the same session. ``custom_query`` puts even
POST parameters into the URL, and one read's query is ~6 KB per pool - past the 8 KB header limit of
common ingress proxies - and it hides ``status``/``resultType``/``errorType``, which the strict checks need.

Every request carries ``timeout_s`` (the client's default is None: it can hang forever) and the same
value as Prometheus' own query ``timeout``. Retries are bounded: connection errors and 502/503/504 only;
a read that timed out is not retried, or a slow Prometheus would cost a multiple of the timeout per tick.
Callers on an event loop use ``read_async``, which runs the blocking read in a worker thread.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from typing import Any

from planner.sources.dialects import Dialect, get_dialect
from planner.sources.parse import parse_read
from planner.sources.promql import build_read_query, duration
from planner.types import NoData, NoDataReason, Observation


class PrometheusSource:
    def __init__(self, url: str, dialect: Dialect | str, selectors: Mapping[str, str], *,
                 timeout_s: float = 5.0, retries: int = 1, stale_after_s: float = 60.0,
                 lookback_s: float = 300.0, headers: Mapping[str, str] | None = None,
                 targets_ms: Mapping[str, float] | None = None) -> None:
        """``targets_ms``: SLA targets by signal ({"ttft": ms, "itl": ms}); each pool of a read then reports
        how finely its histogram buckets resolve them (PoolObservation.*_p95_resolved, resolution.py)."""
        import requests
        from prometheus_api_client import PrometheusConnect
        from urllib3.util.retry import Retry

        if not selectors:
            raise ValueError("at least one pool selector is needed")
        if not math.isfinite(timeout_s) or timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.url = url.rstrip("/")
        self.dialect = get_dialect(dialect) if isinstance(dialect, str) else dialect
        self.selectors = dict(selectors)
        self.timeout_s = timeout_s
        self.stale_after_s = stale_after_s
        self.lookback_s = lookback_s
        self.targets_ms = dict(targets_ms or {})
        unknown = set(self.targets_ms) - {"ttft", "itl"}
        if unknown:
            raise ValueError(f"targets_ms: unknown signal(s) {', '.join(sorted(unknown))}; allowed: ttft, itl")
        for signal, target in self.targets_ms.items():
            if not math.isfinite(target) or target <= 0:
                raise ValueError(f"targets_ms[{signal!r}] must be a finite number of ms > 0, got {target!r}")
        retry = Retry(total=retries, connect=retries, read=0, status=retries, other=0, backoff_factor=0.05,
                      status_forcelist=(502, 503, 504), allowed_methods=frozenset({"GET", "POST"}),
                      raise_on_status=False)
        self._session = requests.Session()
        self._prom = PrometheusConnect(url=self.url, headers=dict(headers or {}) or None, retry=retry,
                                       session=self._session, timeout=timeout_s, method="POST")

    @property
    def client(self) -> Any:
        """The prometheus-api-client connection (for ad-hoc queries: check_prometheus_connection, ...)."""
        return self._prom

    @classmethod
    def from_policy(cls, policy, **overrides) -> PrometheusSource:  # noqa: ANN001 - planner.config.Policy
        m = policy.metrics
        url = overrides.pop("url", m.url)
        missing = [pool for pool in policy.pool_names() if pool not in m.selectors]
        if missing:  # an absent selector must not silently select every engine
            from planner.errors import UserError

            raise UserError(f"policy {policy.name}: key 'metrics.selectors' has no selector for pool(s) "
                            f"{', '.join(missing)}")
        selectors = {pool: m.selectors[pool] for pool in policy.pool_names()}
        # A signal older than the planner's own staleness budget is stale for the source as well.
        kwargs = {"timeout_s": m.timeout_s, "stale_after_s": m.stale_after_intervals * policy.interval_s,
                  "targets_ms": {"ttft": policy.sla.ttft_ms, "itl": policy.sla.itl_ms}}
        kwargs.update(overrides)
        return cls(url, m.dialect, selectors, **kwargs)

    def query(self, window_s: float, now_s: float) -> str:
        return build_read_query(self.dialect, self.selectors, window_s, now_s, self.stale_after_s,
                                self.lookback_s).promql

    def read(self, window_s: float, now_s: float) -> Observation | NoData:
        import requests

        promql = self.query(window_s, now_s)
        try:
            resp = self._session.post(
                f"{self.url}/api/v1/query",
                data={"query": promql, "time": f"{now_s:.3f}", "timeout": duration(self.timeout_s)},
                headers=self._prom.headers, auth=self._prom.auth, timeout=self.timeout_s)
        except requests.exceptions.Timeout:
            return NoData(NoDataReason.TIMEOUT, f"{self.url}: no answer within {self.timeout_s:g}s", now_s)
        except requests.exceptions.RetryError as exc:
            return NoData(NoDataReason.UNREACHABLE, f"{self.url}: still failing after retries ({exc})", now_s)
        except requests.exceptions.ConnectionError as exc:
            if _timed_out(exc):  # urllib3 wraps a read timeout it may not retry in MaxRetryError
                return NoData(NoDataReason.TIMEOUT, f"{self.url}: no answer within {self.timeout_s:g}s", now_s)
            return NoData(NoDataReason.UNREACHABLE, f"{self.url}: {_short(exc)}", now_s)
        except requests.exceptions.RequestException as exc:
            return NoData(NoDataReason.UNREACHABLE, f"{self.url}: {_short(exc)}", now_s)
        return self._parse_response(resp, window_s, now_s)

    def _parse_response(self, resp: Any, window_s: float, now_s: float) -> Observation | NoData:
        try:
            body = resp.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            reason = NoDataReason.UNREACHABLE if resp.status_code >= 500 else NoDataReason.BAD_RESPONSE
            return NoData(reason, f"{self.url}: HTTP {resp.status_code}, not a Prometheus answer "
                                  f"({resp.text[:120]!r})", now_s)
        if body.get("status") != "success":
            error = f"HTTP {resp.status_code} {body.get('errorType', '?')}: {str(body.get('error', ''))[:300]}"
            if body.get("errorType") == "timeout":
                return NoData(NoDataReason.TIMEOUT, f"{self.url}: {error}", now_s)
            reason = NoDataReason.UNREACHABLE if resp.status_code >= 500 else NoDataReason.BAD_RESPONSE
            return NoData(reason, f"{self.url}: {error}", now_s)
        data = body.get("data")
        if not isinstance(data, dict) or data.get("resultType") != "vector":
            kind = data.get("resultType") if isinstance(data, dict) else type(data).__name__
            return NoData(NoDataReason.BAD_RESPONSE, f"{self.url}: result type {kind!r}, expected 'vector'",
                          now_s)
        return parse_read(data.get("result"), self.dialect, tuple(self.selectors), window_s, now_s,
                          self.stale_after_s, self.targets_ms)

    async def read_async(self, window_s: float, now_s: float) -> Observation | NoData:
        return await asyncio.to_thread(self.read, window_s, now_s)

    def close(self) -> None:
        self._prom.close()

    def __enter__(self) -> PrometheusSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _timed_out(exc: BaseException) -> bool:
    from urllib3.exceptions import MaxRetryError, NewConnectionError, ReadTimeoutError

    for arg in exc.args:
        reason = arg.reason if isinstance(arg, MaxRetryError) else arg
        # NewConnectionError subclasses ConnectTimeoutError in urllib3; a refused connection is not slow.
        if isinstance(reason, ReadTimeoutError) and not isinstance(reason, NewConnectionError):
            return True
    return False


def _short(exc: BaseException) -> str:
    text = str(exc)
    for marker in ("Connection refused", "Name or service not known", "timed out", "Connection reset"):
        if marker in text:
            return marker.lower()
    return text[:200]
