"""Parsing helpers for CLI arguments: every failure names the flag and what is allowed."""

from __future__ import annotations

import math

from planner.errors import UserError


def int_list(flag: str, text: str | None, positive: bool = True) -> tuple[int, ...] | None:
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
