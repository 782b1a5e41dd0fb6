"""A policy file (contract): policies/*.yaml read, composed and checked, with one-line errors.

The file is flat: the decision policy's keys (planner/config.py) beside each adapter's section, ``metrics``
(planner/sources/settings.py) and ``actuator`` (planner/actuators/settings.py). This module sits above all
of them: it composes the parts, checks the names they refer to against the registries (forecast models,
metric dialects, actuator kinds) and the rules that span parts, and turns a validation error into one line
naming the YAML key. Harnesses (the controller, the service, the simulator, the commands) take a
``PolicyFile``; the decision core takes ``PolicyFile.decision()``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from planner.actuators.registry import names as actuator_kinds
from planner.actuators.settings import ActuatorSettings
from planner.config import ForecastConfig, Policy
from planner.errors import UserError, not_utf8
from planner.forecast.registry import names as forecast_models
from planner.schema import one_of
from planner.sources.dialects import dialect_names
from planner.sources.settings import MetricsSettings
from planner.yaml_unique import duplicate, load_unique


class _Forecast(ForecastConfig):
    @field_validator("model")
    @classmethod
    def _known_model(cls, model: str) -> str:
        return one_of("forecast model", model, forecast_models())


class _Metrics(MetricsSettings):
    @field_validator("dialect")
    @classmethod
    def _known_dialect(cls, dialect: str) -> str:
        return one_of("metrics dialect", dialect, dialect_names())


class _Actuator(ActuatorSettings):
    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        return one_of("actuator kind", kind, actuator_kinds())


class PolicyFile(Policy):
    """The decision policy and the adapters' settings, as one file holds them."""

    # The parts' own models, with the names they refer to checked against the registries here: the parts
    # import no registry (config.py is the ground floor).
    forecast: _Forecast = Field(default_factory=_Forecast)
    metrics: _Metrics = Field(default_factory=_Metrics)
    actuator: _Actuator = Field(default_factory=_Actuator)

    @model_validator(mode="after")
    def _process_pools(self) -> PolicyFile:
        a = self.actuator
        pools = [p.value for p in self.mode.pools]
        unknown = [p for p in a.pools if p not in pools]
        if unknown:
            raise ValueError(f"actuator.pools.{unknown[0]}: not a pool of mode {self.mode.value}; allowed: "
                             f"{', '.join(pools)}")
        if a.kind == "process":
            lacking = [p for p in pools if a.pool_command(p)[0] is None]
            if lacking:
                raise ValueError(f"actuator.command is required for kind process (or actuator.pools.{lacking[0]}"
                                 ".command for each pool)")
        return self

    @property
    def stale_after_s(self) -> float:
        """How old an observation may be before the decision holds (``metrics.stale_after_intervals``)."""
        return self.metrics.stale_after_s(self.interval_s)


def _format_error(source: str, exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
    value = err.get("input")
    # A mapping or list is the section a cross-field check judged (pools.prefill: min above max): the message
    # names its fields and values; "= dict" would say nothing.
    shown = "" if isinstance(value, dict | list) else f" = {value!r}"
    msg = err["msg"].removeprefix("Value error, ")
    if isinstance(value, float) and not math.isfinite(value):  # "nan: less than or equal to 600000" misleads
        msg = "must be a finite number"
    ctx = err.get("ctx") or {}
    bounds = ", ".join(f"{k} {v}" for k, v in ctx.items() if k in ("gt", "ge", "lt", "le"))
    allowed = f" (allowed: {bounds})" if bounds else ""
    more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    if err["type"] == "extra_forbidden":
        return f"{source}: unknown key {loc!r}{more}"
    return f"{source}: key {loc!r}{shown}: {msg}{allowed}{more}"


def parse_policy(data: Any, source: str = "<policy>", base_dir: Path | None = None) -> PolicyFile:
    if not isinstance(data, dict):
        raise UserError(f"{source}: a policy must be a YAML mapping")
    try:
        policy = PolicyFile.model_validate(data)
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


def _resolve_state_dir(policy: PolicyFile, base_dir: Path) -> PolicyFile:
    """A relative ``actuator.state_dir`` is the policy folder's: `planner run` and `planner route` read the
    same policy from anywhere and must meet in the same files."""
    state_dir = policy.actuator.state_dir
    if state_dir is None or Path(state_dir).is_absolute():
        return policy
    actuator = policy.actuator.model_copy(update={"state_dir": os.path.normpath(base_dir / state_dir)})
    return policy.model_copy(update={"actuator": actuator})


def load_policy(path: str | Path) -> PolicyFile:
    p = Path(path)
    return parse_policy(read_policy_data(p), str(p), p.resolve().parent)


def read_policy_data(p: Path) -> Any:
    """The policy file's YAML as data, not yet checked (one-line errors for a missing or unreadable file)."""
    try:
        return load_unique(p.read_text())
    except FileNotFoundError:
        raise UserError(f"{p}: policy file not found") from None
    except UnicodeDecodeError as exc:
        raise not_utf8(p, exc) from None
    except OSError as exc:
        raise UserError(f"{p}: cannot read policy ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise UserError(f"{p}: not valid YAML{where}{duplicate(exc)}") from None
