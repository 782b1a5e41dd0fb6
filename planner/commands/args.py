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
