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

from planner.config import Policy
from planner.sources.auth import CredentialsError, PromAuth
from planner.sources.dialects import Dialect, get_dialect
from planner.sources.parse import parse_read
from planner.sources.promql import build_read_query, duration
from planner.sources.settings import MetricsSettings, pool_selectors
from planner.types import NoData, NoDataReason, Observation


class PrometheusSource:
    def __init__(self, url: str, dialect: Dialect | str, selectors: Mapping[str, str], *,
                 timeout_s: float = 5.0, retries: int = 1, stale_after_s: float = 60.0,
                 lookback_s: float = 300.0, headers: Mapping[str, str] | None = None,
                 targets_ms: Mapping[str, float] | None = None, auth: PromAuth | None = None,
                 sla_percentile: float = 95.0) -> None:
        """``targets_ms``: SLA targets by signal ({"ttft": ms, "itl": ms}); each pool of a read then reports
        how finely its histogram buckets resolve them (PoolObservation.*_p95_resolved, resolution.py) and
        how many of the window's observations met them (*_counted, *_met, attainment.py).
        ``auth``: credentials, TLS and headers (auth.py); ``headers`` are added to its own.
        ``sla_percentile``: the policy's; each pool's TTFT and ITL are also read at it (``*_at_sla``)."""
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
        if not 0 < sla_percentile < 100:
            raise ValueError(f"sla_percentile must be in (0, 100), got {sla_percentile!r}")
        self.sla_quantile = sla_percentile / 100.0
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
        self.auth = auth or PromAuth()
        self.auth.headers.update(headers or {})
        self.auth.check()
        self._session = requests.Session()
        self._session.verify = self.auth.verify
        self._prom = PrometheusConnect(url=self.url, headers=dict(self.auth.headers) or None, retry=retry,
                                       session=self._session, timeout=timeout_s, method="POST")

    @property
    def client(self) -> Any:
        """The prometheus-api-client connection (for ad-hoc queries: check_prometheus_connection, ...), with
        the credentials as they are now (raises CredentialsError when a secret cannot be read)."""
        self._prom.headers, self._prom.auth = self.auth.request_headers(), self.auth.basic()
        return self._prom

    @classmethod
    def from_policy(cls, policy: Policy, m: MetricsSettings, **overrides: Any) -> PrometheusSource:
        """The source for a policy's pools and SLA, as its ``metrics`` settings ``m`` say to ask."""
        url = overrides.pop("url", m.url)
        selectors = pool_selectors(policy, m)  # an absent selector must not silently select every engine
        # A signal older than the planner's own staleness budget is stale for the source as well.
        kwargs: dict[str, Any] = {"timeout_s": m.timeout_s, "stale_after_s": m.stale_after_s(policy.interval_s),
                  "targets_ms": {"ttft": policy.sla.ttft_ms, "itl": policy.sla.itl_ms},
                  "auth": PromAuth.from_metrics(m), "sla_percentile": policy.sla.percentile}
        kwargs.update(overrides)
        try:
            return cls(url, m.dialect, selectors, **kwargs)
        except CredentialsError as exc:
            from planner.errors import UserError

            raise UserError(f"policy {policy.name}: {exc}") from None

    def query(self, window_s: float, now_s: float) -> str:
        return build_read_query(self.dialect, self.selectors, window_s, now_s, self.stale_after_s,
                                self.lookback_s, self.sla_quantile).promql

    def read(self, window_s: float, now_s: float) -> Observation | NoData:
        import requests

        promql = self.query(window_s, now_s)
        try:
            self._prom.headers, self._prom.auth = self.auth.request_headers(), self.auth.basic()
        except CredentialsError as exc:  # a secret gone or empty: hold, and say which key
            return NoData(NoDataReason.BAD_RESPONSE, f"{self.url}: {exc}", now_s)
        try:
            resp = self._session.post(
                f"{self.url}/api/v1/query",
                data={"query": promql, "time": f"{now_s:.3f}", "timeout": duration(self.timeout_s)},
                headers=self._prom.headers, auth=self._prom.auth, timeout=self.timeout_s,
                verify=self.auth.verify)  # per request: REQUESTS_CA_BUNDLE would override the session's
        except requests.exceptions.SSLError as exc:
            return NoData(NoDataReason.UNREACHABLE, f"{self.url}: TLS: {_short(exc)}; set metrics.tls.ca_file to "
                                                    "the CA that signed Prometheus' certificate", now_s)
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
        if resp.status_code in (401, 403):
            refused = "unauthorized" if resp.status_code == 401 else "forbidden"
            return NoData(NoDataReason.BAD_RESPONSE, f"{self.url}: HTTP {resp.status_code} {refused}: Prometheus "
                                                     f"refused {self.auth.describe()}", now_s)
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
    for marker in ("Connection refused", "Name or service not known", "timed out", "Connection reset",
                   "CERTIFICATE_VERIFY_FAILED", "WRONG_VERSION_NUMBER"):
        if marker in text:
            return marker.lower()
    return text[:200]
