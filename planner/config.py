"""Policy format (contract): pydantic schema for policies/*.yaml and its loader with one-line errors.

Defaults live here and only here; policies/example.yaml restates them and a test keeps the two equal.
Field names follow HPA's behaviour vocabulary so operators need no new concepts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from planner.errors import UserError
from planner.types import Mode, Pool


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class TargetRef(_Strict):
    api_version: str = Field("apps/v1", alias="apiVersion")
    kind: str = "Deployment"
    namespace: str = "default"
    name: str


class PoolSpec(_Strict):
    target: TargetRef | None = None
    min_replicas: int = Field(1, ge=0, le=10_000)
    max_replicas: int = Field(16, ge=1, le=10_000)

    @model_validator(mode="after")
    def _range(self) -> PoolSpec:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas {self.min_replicas} must be <= max_replicas {self.max_replicas}")
        return self


class Pools(_Strict):
    prefill: PoolSpec | None = None
    decode: PoolSpec | None = None
    aggregated: PoolSpec | None = None


class SLA(_Strict):
    ttft_ms: float = Field(1000.0, gt=0, le=600_000)
    itl_ms: float = Field(40.0, gt=0, le=60_000)
    percentile: float = Field(95.0, ge=50.0, le=99.9)


class Budget(_Strict):
    max_gpus: int | None = Field(None, ge=1)


class KVLink(_Strict):
    gbps: float = Field(400.0, gt=0, le=100_000)


def _one_of(field: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"unknown {field} {value!r}; allowed: {', '.join(allowed)}")
    return value


class ForecastConfig(_Strict):
    model: str = "auto"  # one of planner/forecast/registry.py
    # 0.8: on the benchmark suite (planner bench suite) 0.9 bought 3-8 % more GPU-hours for attainment
    # already far above the SLA percentile everywhere; 0.75 fell below the offline schedule on two scenarios.
    quantile: float = Field(0.8, ge=0.5, le=0.99)
    history_s: float = Field(6 * 3600.0, gt=0)

    @field_validator("model")
    @classmethod
    def _known_model(cls, model: str) -> str:
        from planner.forecast.registry import names

        return _one_of("forecast model", model, names())


class ScalingPolicy(_Strict):
    type: Literal["pods", "percent"]
    value: int = Field(gt=0)
    period_s: int = Field(gt=0, le=1800)


class ScalingRules(_Strict):
    stabilization_window_s: int = Field(0, ge=0, le=3600)
    select_policy: Literal["max", "min", "disabled"] = "max"
    policies: list[ScalingPolicy] = Field(default_factory=list)


def _default_up() -> ScalingRules:
    return ScalingRules(stabilization_window_s=0, policies=[ScalingPolicy(type="percent", value=100, period_s=30)])


def _default_down() -> ScalingRules:
    # 240 s, twice the default start-up lead: capacity given back sooner was needed again on bursty traffic
    # (Azure code: 180 s with a 25 %/30 s rate fell to 84 % attainment); 300 s held 4-9 % more GPU-hours.
    return ScalingRules(stabilization_window_s=240, policies=[ScalingPolicy(type="pods", value=1, period_s=60)])


def _free_down() -> ScalingRules:
    return ScalingRules(stabilization_window_s=0, policies=[ScalingPolicy(type="percent", value=100, period_s=30)])


class Steady(_Strict):
    """The scale-down used while the arrival rate is steady; ``Behavior.scale_down`` (the hedge) otherwise.

    The hedge holds capacity after load falls because a causal forecast cannot see the next burst; it is
    needed where the load swings at the scale of a replica's start-up (Azure code: on/off from one minute to
    the next) and costs about 10 % more GPU-hours where it does not (README, "Scale-down rules for steady
    traffic"). Steady: over the last ``over_s`` of history, the coefficient of variation of the arrival rate,
    with the share that Poisson counting noise explains taken out (planner/forecast/burst.py), is at most
    ``max_rate_cv``. On the suite the median of that figure over the scored hour is far below 0.3 on the four
    steady scenarios and far above it on Azure code (``planner bench seeds`` prints it); thresholds from 0.25 to
    0.45 gave the same split. Unknown (under half of ``over_s`` of history) counts as bursty.
    """

    max_rate_cv: float = Field(0.3, gt=0.0, le=10.0)
    over_s: int = Field(600, ge=60, le=86400)
    scale_down: ScalingRules = Field(default_factory=_free_down)


class Behavior(_Strict):
    tolerance: float = Field(0.0, ge=0.0, lt=1.0)
    scale_up: ScalingRules = Field(default_factory=_default_up)
    scale_down: ScalingRules = Field(default_factory=_default_down)
    # null (the default): always ``scale_down``. Otherwise ``steady.scale_down`` replaces it while the arrival
    # rate is steady. Off by default: over five seeds of the suite it saved 4-14 % of GPU-hours on the steady
    # scenarios but fell below a 95 % SLA in 4 of 20 runs where the hedge never did (README, 2026-12-02).
    steady: Steady | None = None

    def is_steady(self, rate_cv: float | None) -> bool:
        """Whether the steady rules apply at this burstiness (``rate_cv`` None: unknown, so the hedge)."""
        return self.steady is not None and rate_cv is not None and rate_cv <= self.steady.max_rate_cv

    def for_rate_cv(self, rate_cv: float | None) -> Behavior:
        """The rules in force at this burstiness: the steady scale-down or the hedge."""
        if self.steady is None or not self.is_steady(rate_cv):
            return self
        return self.model_copy(update={"scale_down": self.steady.scale_down})


class Calibration(_Strict):
    enabled: bool = True
    max_factor: float = Field(2.0, ge=1.0, le=10.0)
    half_life_s: float = Field(600.0, gt=0)


class BasicAuth(_Strict):
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


class MetricsTLS(_Strict):
    ca_file: str | None = None  # PEM CA bundle that signed Prometheus' certificate; None: the system's
    insecure_skip_verify: bool = False  # no certificate check at all (testing only)

    @model_validator(mode="after")
    def _not_both(self) -> MetricsTLS:
        if self.ca_file is not None and self.insecure_skip_verify:
            raise ValueError("ca_file and insecure_skip_verify exclude each other")
        return self


class MetricsConfig(_Strict):
    source: Literal["prometheus", "sim"] = "prometheus"
    url: str = "http://prometheus:9090"  # a path is kept: https://thanos.example/prometheus, managed services
    # How Prometheus as users run it wants to be asked (planner/sources/auth.py): at most one of a bearer
    # token (from a file, re-read when it changes: a rotated Secret) and basic auth, a CA or no verification
    # for https, and extra headers (e.g. X-Scope-OrgID for Mimir, Cortex and Loki-style tenancy).
    bearer_token_file: str | None = None
    basic_auth: BasicAuth | None = None
    tls: MetricsTLS = Field(default_factory=MetricsTLS)
    headers: dict[str, str] = Field(default_factory=dict)
    dialect: str = "vllm"  # one of planner/sources/dialects.py
    # Per pool PromQL label matchers. Engines export no pool label of their own (real vLLM has no `role`),
    # so there is no default that would find a pool: see pool_selectors().
    selectors: dict[str, str] = Field(default_factory=dict)
    window_s: float = Field(60.0, gt=0)
    timeout_s: float = Field(5.0, gt=0, le=120)
    stale_after_intervals: int = Field(3, ge=1)

    @field_validator("dialect")
    @classmethod
    def _known_dialect(cls, dialect: str) -> str:
        from planner.sources.dialects import dialect_names

        return _one_of("metrics dialect", dialect, dialect_names())

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError("expected an http:// or https:// URL (a path after the host is kept)")
        return url

    @field_validator("headers")
    @classmethod
    def _no_credentials_in_headers(cls, headers: dict[str, str]) -> dict[str, str]:
        if any(name.lower() == "authorization" for name in headers):
            raise ValueError("no Authorization header inline (it would be logged with the policy): use "
                             "bearer_token_file or basic_auth")
        return headers

    @model_validator(mode="after")
    def _one_auth(self) -> MetricsConfig:
        if self.bearer_token_file is not None and self.basic_auth is not None:
            raise ValueError("metrics.bearer_token_file and metrics.basic_auth exclude each other")
        return self


PORT_PLACEHOLDER = "{port}"
Port = Annotated[int, Field(ge=1, le=65535)]


def _engine_command(command: list[str] | None) -> list[str] | None:
    if command is None:
        return None
    if not command or not command[0]:
        raise ValueError("must be a non-empty list: the program, then its arguments")
    if not any(PORT_PLACEHOLDER in arg for arg in command):
        raise ValueError(f"no {PORT_PLACEHOLDER} in it: every replica needs its own port; put {PORT_PLACEHOLDER} "
                         "where the engine takes its port")
    return command


class ProcessPoolConfig(_Strict):
    """Kind process, one pool: its own command (e.g. prefill and decode with different KV roles), more env."""

    command: list[str] | None = None  # None: actuator.command
    env: dict[str, str] = Field(default_factory=dict)  # added to actuator.env

    _command = field_validator("command")(_engine_command)


class ActuatorConfig(_Strict):
    kind: str = "kubernetes"  # one of planner/actuators/registry.py
    # Kind process only (planner/actuators/process.py): engine replicas as local processes.
    command: list[str] | None = None  # "{port}" and "{pool}" substituted in every argument
    port_range: tuple[Port, Port] | None = None  # [first, last], inclusive
    env: dict[str, str] = Field(default_factory=dict)
    pools: dict[str, ProcessPoolConfig] = Field(default_factory=dict)
    drain_s: float = Field(30.0, ge=0.0, le=3600.0)
    stop_grace_s: float = Field(10.0, gt=0.0, le=600.0)
    ready_timeout_s: float = Field(600.0, gt=0.0, le=7200.0)
    state_dir: str | None = None  # None: <temp dir>/planner-<policy name>; relative: to the policy's folder
    router_url: str | None = None

    _command = field_validator("command")(_engine_command)

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        from planner.actuators.registry import names  # light: constructors load their modules when called

        return _one_of("actuator kind", kind, names())

    @field_validator("port_range")
    @classmethod
    def _ordered(cls, ports: tuple[int, int] | None) -> tuple[int, int] | None:
        if ports is not None and ports[0] > ports[1]:
            raise ValueError(f"first port {ports[0]} must be <= last port {ports[1]}")
        return ports

    @model_validator(mode="after")
    def _process_fields(self) -> ActuatorConfig:
        if self.kind == "process":
            if self.port_range is None:
                raise ValueError("actuator.port_range is required for kind process: [first, last] ports")
            return self
        defaults = ActuatorConfig.model_construct()
        used = [f for f in PROCESS_FIELDS if getattr(self, f) != getattr(defaults, f)]
        if used:
            raise ValueError(f"actuator.{used[0]} is used only by kind process (kind is {self.kind!r})")
        return self


PROCESS_FIELDS = ("command", "port_range", "env", "pools", "drain_s", "stop_grace_s", "ready_timeout_s",
                  "state_dir", "router_url")


class Policy(_Strict):
    name: str = Field(min_length=1)
    mode: Mode = Mode.DISAGGREGATED
    profile: str
    sla: SLA = Field(default_factory=SLA)
    interval_s: float = Field(30.0, ge=1.0, le=3600.0)
    startup_s: float = Field(120.0, ge=0.0, le=7200.0)
    pools: Pools
    budget: Budget = Field(default_factory=Budget)
    kv_link: KVLink = Field(default_factory=KVLink)
    forecast: ForecastConfig = Field(default_factory=ForecastConfig)
    behavior: Behavior = Field(default_factory=Behavior)
    calibration: Calibration = Field(default_factory=Calibration)
    metrics: MetricsConfig = Field(default_factory=lambda: MetricsConfig())
    actuator: ActuatorConfig = Field(default_factory=ActuatorConfig)

    @model_validator(mode="after")
    def _pools_match_mode(self) -> Policy:
        missing = [p.value for p in self.mode.pools if getattr(self.pools, p) is None]
        if missing:
            raise ValueError(f"mode {self.mode.value} needs pools.{' and pools.'.join(missing)}")
        return self

    @model_validator(mode="after")
    def _process_pools(self) -> Policy:
        a = self.actuator
        pools = [p.value for p in self.mode.pools]
        unknown = [p for p in a.pools if p not in pools]
        if unknown:
            raise ValueError(f"actuator.pools.{unknown[0]}: not a pool of mode {self.mode.value}; allowed: "
                             f"{', '.join(pools)}")
        if a.kind == "process":
            lacking = [p for p in pools if a.command is None and (a.pools.get(p) is None or a.pools[p].command is None)]
            if lacking:
                raise ValueError(f"actuator.command is required for kind process (or actuator.pools.{lacking[0]}"
                                 ".command for each pool)")
        return self

    def pool_names(self) -> tuple[Pool, ...]:
        return self.mode.pools

    def pool(self, name: str) -> PoolSpec:
        spec = getattr(self.pools, name)
        if spec is None:
            raise KeyError(name)
        return spec


SELECTORS_EXAMPLE = ("selectors: {prefill: '{pool=\"prefill\"}', decode: '{pool=\"decode\"}'} with the pool "
                     "label set from the engine pods' labels by relabelling (deploy/engines/*-podmonitor.yaml)")


def pool_selectors(policy: Policy) -> dict[str, str]:
    """Each pool's selector. An aggregated pool without one reads every engine of the dialect ("");
    a disaggregated pool must say which series are its own: no label every engine has tells them apart."""
    out: dict[str, str] = {}
    for pool in policy.pool_names():
        if pool in policy.metrics.selectors:
            out[pool] = policy.metrics.selectors[pool]
        elif policy.mode is Mode.AGGREGATED:
            out[pool] = ""
        else:
            raise UserError(f"policy {policy.name}: key 'metrics.selectors.{pool}' is required for a disaggregated "
                            f"policy (engine metrics carry no pool label), e.g. {SELECTORS_EXAMPLE}")
    return out


def _format_error(source: str, exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
    value = err.get("input")
    shown = repr(value) if not isinstance(value, dict | list) else type(value).__name__
    msg = err["msg"].removeprefix("Value error, ")
    ctx = err.get("ctx") or {}
    bounds = ", ".join(f"{k} {v}" for k, v in ctx.items() if k in ("gt", "ge", "lt", "le"))
    allowed = f" (allowed: {bounds})" if bounds else ""
    more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    if err["type"] == "extra_forbidden":
        return f"{source}: unknown key {loc!r}{more}"
    return f"{source}: key {loc!r} = {shown}: {msg}{allowed}{more}"


def parse_policy(data: Any, source: str = "<policy>", base_dir: Path | None = None) -> Policy:
    if not isinstance(data, dict):
        raise UserError(f"{source}: a policy must be a YAML mapping")
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        raise UserError(_format_error(source, exc)) from None
    if base_dir is not None:
        policy = _resolve_state_dir(policy, base_dir)
    if base_dir is not None and not Path(policy.profile).is_absolute():
        # A relative profile path is resolved against the policy file's folder, then the working dir.
        for candidate in (base_dir / policy.profile, base_dir.parent / policy.profile):
            if candidate.exists():
                return policy.model_copy(update={"profile": str(candidate)})
    return policy


def _resolve_state_dir(policy: Policy, base_dir: Path) -> Policy:
    """A relative ``actuator.state_dir`` is the policy folder's: `planner run` and `planner route` read the
    same policy from anywhere and must meet in the same files."""
    state_dir = policy.actuator.state_dir
    if state_dir is None or Path(state_dir).is_absolute():
        return policy
    actuator = policy.actuator.model_copy(update={"state_dir": os.path.normpath(base_dir / state_dir)})
    return policy.model_copy(update={"actuator": actuator})


def load_policy(path: str | Path) -> Policy:
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except FileNotFoundError:
        raise UserError(f"{p}: policy file not found") from None
    except OSError as exc:
        raise UserError(f"{p}: cannot read policy ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise UserError(f"{p}: not valid YAML{where}") from None
    return parse_policy(data, str(p), p.resolve().parent)
