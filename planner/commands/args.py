"""Parsing helpers for CLI arguments: every failure names the flag and what is allowed."""

from __future__ import annotations

import math

from planner.errors import UserError
from planner.types import MAX_TOKENS


def int_list(flag: str, text: str | None, positive: bool = True, most: int = MAX_TOKENS) -> tuple[int, ...] | None:
    """``1,2,4`` -> (1, 2, 4); each at most ``most`` (default MAX_TOKENS: token, batch and TP grids alike)."""
    if text is None:
        return None
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise UserError(f"{flag} {text!r}: expected a comma-separated list of integers")
    out = []
    for item in items:
        try:
            value = int(item)
        except ValueError:
            raise UserError(f"{flag}: {item!r} is not an integer; expected e.g. 1,2,4,8") from None
        if positive and value <= 0:
            raise UserError(f"{flag}: {value} must be > 0")
        if value > most:
            raise UserError(f"{flag}: {value} must be <= {most}")
        out.append(value)
    if len(set(out)) != len(out):
        raise UserError(f"{flag}: duplicate values in {text!r}")
    return tuple(out)


def positive(flag: str, value: float | None) -> float | None:
    if value is None:
        return None
    if not math.isfinite(value) or value <= 0:
        raise UserError(f"{flag}: {value:g} must be a finite number > 0")
    return value


def seed(flag: str, value: int) -> int:
    """A random seed: numpy takes none below 0."""
    return at_least(flag, value, 0)


def at_least(flag: str, value: int, low: int) -> int:
    if value < low:
        raise UserError(f"{flag}: {value} must be >= {low}")
    return value


def seconds(flag: str, value: float | None, *, zero: bool = False, most: float = 30 * 86_400.0,
            least: float = 0.0) -> float | None:
    """A span in seconds: finite, > 0 (>= 0 with ``zero``), at least ``least`` and at most ``most`` (30 days)."""
    if value is None:
        return None
    low_ok = value >= 0 if zero else value > 0
    if not (math.isfinite(value) and low_ok and least <= value <= most):
        low = f">= {least:g}" if least > 0 else ">= 0" if zero else "> 0"
        days = f" ({most / 86_400:g} day{'s' if most > 86_400 else ''})" if most >= 86_400 else ""
        raise UserError(f"{flag}: {value:g} must be a finite number of seconds {low} and <= {most:.0f}{days}")
    return value


def parse_models(text: str | None) -> list[str]:
    """``--models a,b`` -> forecaster names (as given, duplicates dropped); None: ``forecast eval``'s default."""
    from planner.forecast.registry import DEFAULT_EVAL_MODELS, names

    if text is None:
        return list(DEFAULT_EVAL_MODELS)
    models = [m.strip() for m in text.split(",") if m.strip()]
    if not models:
        raise UserError(f"--models {text!r}: expected a comma-separated list of model names")
    for name in models:
        if name not in names():
            raise UserError(f"--models: unknown model {name!r}; allowed: {', '.join(names())}")
    return list(dict.fromkeys(models))


def parse_columns(text: str | None) -> dict[str, str] | None:
    """``--columns arrival=ts,isl=in,osl=out[,time_unit=ms][,model=name]`` -> dict (model: with --fleet only)."""
    if not text:
        return None
    out: dict[str, str] = {}
    for item in text.split(","):
        if "=" not in item:
            raise UserError(f"--columns: {item!r} is not key=value (keys: arrival, isl, osl, time_unit, model)")
        k, v = item.split("=", 1)
        if k.strip() not in ("arrival", "isl", "osl", "time_unit", "model"):
            raise UserError(f"--columns: unknown key {k.strip()!r}; allowed: arrival, isl, osl, time_unit, model")
        out[k.strip()] = v.strip()
    return out
