"""The strict base of every policy model, shared by the decision policy and each adapter's settings."""

from __future__ import annotations

from typing import Any, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


def _takes_bool(annotation: Any) -> bool:
    if annotation in (bool, Any, object) or isinstance(annotation, bool):  # bool, or a Literal's True/False
        return True
    return any(_takes_bool(a) for a in get_args(annotation))


class NoBoolNumbers(BaseModel):
    """``true`` is not a number: pydantic's lax mode reads it as 1 for an int or float field, so
    ``sla.ttft_ms: true`` would become a 1 ms target and ``min_replicas: true`` a floor of one."""

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name) if info.field_name is not None else None
        if field is None:
            return value
        if isinstance(value, bool) and not _takes_bool(field.annotation):
            raise ValueError(f"{str(value).lower()} is a boolean, not a {_kind(field.annotation)}")
        # a mapping or a list of numbers (gpu_cost_per_hour: {h200: 3.5}; tp: [1, 2])
        items = (value.items() if isinstance(value, dict) else
                 ((f"item {i}", v) for i, v in enumerate(value)) if isinstance(value, list) else ())
        kind = _item_type(field.annotation, dict if isinstance(value, dict) else list)
        if kind is not None and not _takes_bool(kind):
            for key, item in items:
                if isinstance(item, bool):
                    raise ValueError(f"{key}: {str(item).lower()} is a boolean, not a {_kind(kind)}")
        return value


def _item_type(annotation: Any, container: type) -> Any:
    """The value type of a ``dict[K, V]`` (``container`` dict) or the item type of a ``list[T]`` or
    ``tuple[T, ...]`` (``container`` list: YAML and JSON give both as lists) in ``annotation`` or its union;
    None: no such container."""
    for a in (annotation, *get_args(annotation)):
        origin, args = get_origin(a), get_args(a)
        if container is dict and origin is dict and len(args) == 2:
            return args[1]
        if container is list and origin in (list, tuple, set, frozenset) and args:
            return args[0]
    return None


def _kind(annotation: Any) -> str:
    kinds = {a for a in (annotation, *get_args(annotation)) if a in (int, float, str)}
    return "number" if kinds & {int, float} else "string" if str in kinds else "value of this field"


class StrictModel(NoBoolNumbers):
    """Unknown keys are errors (a typo must not become a silent default); records are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def one_of(field: str, value: str, allowed: tuple[str, ...]) -> str:
    """``value`` if it is in ``allowed``, else a ValueError naming both (pydantic adds the key)."""
    if value not in allowed:
        raise ValueError(f"unknown {field} {value!r}; allowed: {', '.join(allowed)}")
    return value
