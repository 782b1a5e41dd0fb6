"""The strict base of every policy model, shared by the decision policy and each adapter's settings."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Unknown keys are errors (a typo must not become a silent default); records are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def one_of(field: str, value: str, allowed: tuple[str, ...]) -> str:
    """``value`` if it is in ``allowed``, else a ValueError naming both (pydantic adds the key)."""
    if value not in allowed:
        raise ValueError(f"unknown {field} {value!r}; allowed: {', '.join(allowed)}")
    return value
