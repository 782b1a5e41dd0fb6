"""A policy with some of its fields set from the command line: `planner bench seeds --vary KEY=VALUE`.

A lever study compares the shipped policy with copies that differ in a line or two. Written as files, those
copies live outside the repository and the README's figures cannot be re-run from the command printed beside
them; written as ``--vary 'behavior.tolerance=0.1'`` the command is the whole study. A variant is the
reference file's YAML with each dotted key set (``KEY=VALUE``, several joined by ``;``), the value read as
YAML (``0.1`` a number, ``ewma`` a string, ``null``, ``[{type: pods, value: 2, period_s: 60}]`` a list),
then checked like any policy file: an unknown key or a value out of range is one line naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from planner.errors import UserError
from planner.policy_file import PolicyFile, load_policy, parse_policy, read_policy_data

SEPARATOR = ";"
Assignment = tuple[tuple[str, ...], Any]  # (the dotted key's parts, the value)


@dataclass(frozen=True)
class PolicySource:
    """Where a compared policy comes from: a file (None: the example as shipped) and the fields set on it."""

    path: Path | None
    assignments: tuple[Assignment, ...] = ()

    def load(self, default: Path, label: str) -> PolicyFile:
        path = self.path or default
        if not self.assignments:
            return load_policy(path)
        data = read_policy_data(path)
        if not isinstance(data, dict):
            return parse_policy(data, str(path))  # the policy file's own error: not a mapping
        for keys, value in self.assignments:
            try:
                set_dotted(data, keys, value)
            except UserError as exc:
                raise UserError(f"{label}: {exc}") from None
        return parse_policy(data, label, path.resolve().parent)


def parse_assignments(text: str) -> tuple[Assignment, ...]:
    """``KEY=VALUE[;KEY=VALUE...]`` as (key parts, YAML value) pairs; one line naming what is wrong."""
    parts = _parts(text)
    if not parts:
        raise UserError(f"{text!r} sets nothing; give KEY=VALUE, e.g. behavior.tolerance=0.1 "
                        f"(several joined by '{SEPARATOR}')")
    out: list[Assignment] = []
    for part in parts:
        key, sep, raw = part.partition("=")
        keys = tuple(k.strip() for k in key.split("."))
        if not sep or not all(keys):
            raise UserError(f"{part!r} is not KEY=VALUE with KEY a dotted field of the policy file "
                            "(e.g. forecast.quantile=0.9)")
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            raise UserError(f"{raw.strip()!r} is not a YAML value", key=".".join(keys)) from None
        if any(k == keys for k, _ in out):
            raise UserError(f"{'.'.join(keys)} is set twice in {text!r}")
        out.append((keys, value))
    return tuple(out)


def set_dotted(data: dict, keys: tuple[str, ...], value: Any) -> None:
    """Set ``data[k0][k1]...`` to ``value``, creating the mappings on the way that the file left out."""
    node = data
    for depth, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            where = ".".join(keys[: depth + 1])
            raise UserError(f"{where} is {child!r} in the policy, not a mapping", key=".".join(keys))
        node = child
    node[keys[-1]] = value


def vary_assignments(text: str) -> tuple[Assignment, ...]:
    """A ``--vary`` flag's text as assignments; its errors name the flag (one line, exit 2)."""
    try:
        return parse_assignments(text)
    except UserError as exc:
        raise UserError(str(exc), key="vary") from None


def load_variant(path: Path, label: str, vary: str | None) -> tuple[PolicyFile, str]:
    """The policy file at ``path`` with ``--vary``'s fields set (None: as it is), and the label that names it
    (``label``, with what was set)."""
    if vary is None:
        return PolicySource(path).load(path, label), label
    named = variant_label(label, vary)
    return PolicySource(path, vary_assignments(vary)).load(path, named), named


def variant_label(reference: str, text: str) -> str:
    """How tables and seeds.json name a variant: the reference file and what was set on it."""
    return f"{reference} [{'; '.join(_parts(text))}]"


def _parts(text: str) -> list[str]:
    return [p.strip() for p in text.split(SEPARATOR) if p.strip()]
