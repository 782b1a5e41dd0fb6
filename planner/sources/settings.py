"""The metrics source's settings (the policy's ``metrics`` section): where Prometheus is, how to ask it, which
series belong to which pool, and when a signal is too old. Owned here, beside the code that reads them, as
KEDA's scalers each parse their own typed metadata; planner/policy_file.py composes them into a policy file."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from planner.config import Policy
from planner.errors import UserError
from planner.schema import StrictModel
from planner.types import Mode


class BasicAuth(StrictModel):
    """HTTP basic auth. The password is never inline (it would end up in the ConfigMap and in logs): from a
    file (a mounted Secret) or from an environment variable."""

    username: str = Field(min_length=1)
    password_file: str | None = None
    password_env: str | None = None

    @model_validator(mode="after")
    def _one_password(self) -> BasicAuth:
        if (self.password_file is None) == (self.password_env is None):
            raise ValueError("give exactly one of password_file and password_env (never the password inline)")
        return self


class MetricsTLS(StrictModel):
    ca_file: str | None = None  # PEM CA bundle that signed Prometheus' certificate; None: the system's
    insecure_skip_verify: bool = False  # no certificate check at all (testing only)

    @model_validator(mode="after")
    def _not_both(self) -> MetricsTLS:
        if self.ca_file is not None and self.insecure_skip_verify:
            raise ValueError("ca_file and insecure_skip_verify exclude each other")
        return self


class MetricsSettings(StrictModel):
    source: Literal["prometheus", "sim"] = "prometheus"
    url: str = "http://prometheus:9090"  # a path is kept: https://thanos.example/prometheus, managed services
    # How Prometheus as users run it wants to be asked (planner/sources/auth.py): at most one of a bearer
    # token (from a file, re-read when it changes: a rotated Secret) and basic auth, a CA or no verification
    # for https, and extra headers (e.g. X-Scope-OrgID for Mimir, Cortex and Loki-style tenancy).
    bearer_token_file: str | None = None
    basic_auth: BasicAuth | None = None
    tls: MetricsTLS = Field(default_factory=MetricsTLS)
    headers: dict[str, str] = Field(default_factory=dict)
    dialect: str = "vllm"  # one of planner/sources/dialects.py (checked by planner/policy_file.py)
    # Per pool PromQL label matchers. Engines export no pool label of their own (real vLLM has no `role`),
    # so there is no default that would find a pool: see pool_selectors().
    selectors: dict[str, str] = Field(default_factory=dict)
    window_s: float = Field(60.0, gt=0, le=2_592_000)  # 30 days: past it a PromQL range is a typo
    timeout_s: float = Field(5.0, gt=0, le=120)
    stale_after_intervals: int = Field(3, ge=1)

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        return http_url(url)

    @field_validator("headers")
    @classmethod
    def _no_credentials_in_headers(cls, headers: dict[str, str]) -> dict[str, str]:
        if any(name.lower() == "authorization" for name in headers):
            raise ValueError("no Authorization header inline (it would be logged with the policy): use "
                             "bearer_token_file or basic_auth")
        return headers

    @model_validator(mode="after")
    def _one_auth(self) -> MetricsSettings:
        if self.bearer_token_file is not None and self.basic_auth is not None:
            raise ValueError("metrics.bearer_token_file and metrics.basic_auth exclude each other")
        return self

    def stale_after_s(self, interval_s: float) -> float:
        """How old a signal may be before it is no data: ``stale_after_intervals`` control intervals."""
        return self.stale_after_intervals * interval_s


def http_url(url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise ValueError("expected an http:// or https:// URL (a path after the host is kept)")
    return url


SELECTORS_EXAMPLE = ("selectors: {prefill: '{pool=\"prefill\"}', decode: '{pool=\"decode\"}'} with the pool "
                     "label set from the engine pods' labels by relabelling (deploy/engines/*-podmonitor.yaml)")


def pool_selectors(policy: Policy, metrics: MetricsSettings) -> dict[str, str]:
    """Each pool's selector. An aggregated pool without one reads every engine of the dialect ("");
    a disaggregated pool must say which series are its own: no label every engine has tells them apart."""
    out: dict[str, str] = {}
    for pool in policy.pool_names():
        if pool in metrics.selectors:
            out[pool] = metrics.selectors[pool]
        elif policy.mode is Mode.AGGREGATED:
            out[pool] = ""
        else:
            raise UserError(f"policy {policy.name}: key 'metrics.selectors.{pool}' is required for a disaggregated "
                            f"policy (engine metrics carry no pool label), e.g. {SELECTORS_EXAMPLE}")
    return out
