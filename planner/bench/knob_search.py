"""`planner bench seeds --search N --grid FILE`: is there a cheaper policy among the knobs a user can set?

A lever study moves one knob at a time; whether some combination of them meets more of a target is a search.
This draws ``N`` distinct variants of the reference policy at random from a grid (a YAML mapping of dotted
policy keys to the values to try), each one a ``--vary`` (planner/policy_variant.py), and ranks them after
the seeds study replayed them: the variants that keep the seeds target first, cheapest first, by their
GPU-hours relative to the reference averaged over the scenarios.

Draws are reproducible: the same grid file, ``N`` and ``--search-seed`` give the same variants on any machine
(Python's Mersenne Twister, one ``choice`` per key in the file's order), so a figure read from a search can be
re-run from the command printed beside it. A draw the policy rejects (``sla.lean_quantile`` above
``forecast.quantile``, say) is drawn again, as is one already drawn.
"""

from __future__ import annotations

import json
import random
import statistics
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from rich.markup import escape
from rich.table import Table

from planner.errors import UserError, not_utf8
from planner.policy_variant import PolicySource, vary_assignments
from planner.yaml_unique import duplicate, load_unique

MAX_SEARCH = 500  # variants per study: each is a planner replay per scenario and seed
TRIES_PER_VARIANT = 100  # draws spent per variant wanted before the grid is called too small


def check(n: int, seed: int) -> None:
    """``--search`` and ``--search-seed``, before anything runs."""
    if not 0 <= n <= MAX_SEARCH:
        raise UserError(f"{n} must be in 0..{MAX_SEARCH} (each variant is a replay per scenario and seed)",
                        key="search")
    if seed < 0:
        raise UserError(f"{seed} must be >= 0", key="search_seed")


def grid_path(given: Path | None) -> Path:
    """``--grid`` as given, or the shipped knobs.yaml (found wherever the command runs from)."""
    from planner.catalog import policies_dir

    return given if given is not None else policies_dir() / "search" / "knobs.yaml"


def variants(reference: PolicySource, label: str, grid: Path | None, n: int, seed: int) -> list[str]:
    """``n`` variants of ``reference`` (``--vary`` texts) drawn from the grid file, each one a policy that loads."""
    from planner.bench.seeds import load

    def load_with(text: str) -> None:
        load(label, replace(reference, assignments=(*reference.assignments, *vary_assignments(text))))

    def loads(text: str) -> bool:
        try:
            load_with(text)
        except UserError:
            return False
        return True

    load(label, reference)  # the reference's own error, not "no variant loads"
    path = grid_path(grid)
    values = load_grid(path)
    for key, options in values.items():  # a key the policy does not have, or a value out of range, named here
        for v in options:
            try:
                load_with(f"{key}={value_text(v)}")
            except UserError as exc:
                raise UserError(f"{path}: {key}={value_text(v)}: {exc}", key="grid") from None
    return draw(values, n, seed, loads)


def load_grid(path: Path) -> dict[str, list[Any]]:
    """The grid file: a mapping of dotted policy keys to non-empty lists of values; one line naming what is wrong."""
    try:
        data = load_unique(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: no such file", key="grid") from None
    except UnicodeDecodeError as exc:
        raise not_utf8(path, exc, key="grid") from None
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML{duplicate(exc)}", key="grid") from None
    if not isinstance(data, dict) or not data:
        raise UserError(f"{path}: expected a mapping of dotted policy keys to lists of values, e.g. "
                        "'sla.lean_quantile: [0.7, 0.75]'", key="grid")
    for key, values in data.items():
        if not isinstance(key, str) or not all(key.split(".")):
            raise UserError(f"{path}: {key!r} is not a dotted policy key (e.g. forecast.quantile)", key="grid")
        if not isinstance(values, list) or not values:
            raise UserError(f"{path}: {key}: expected a non-empty list of values, got {values!r}", key="grid")
    return data


def value_text(value: Any) -> str:
    """A grid value as ``--vary`` text: a string as written (YAML text: a list or a boolean may be quoted), a
    boolean as YAML's, a number as Python prints it, a list or mapping as JSON (which YAML reads)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value)


def draw(grid: dict[str, list[Any]], n: int, seed: int, valid: Callable[[str], bool]) -> list[str]:
    """``n`` distinct variants (``--vary`` texts) drawn from ``grid``, each one ``valid`` says the policy takes."""
    rng = random.Random(seed)
    out: set[str] = set()
    for _ in range(TRIES_PER_VARIANT * n):
        if len(out) == n:
            break
        text = ";".join(f"{key}={value_text(rng.choice(values))}" for key, values in grid.items())
        if text not in out and valid(text):
            out.add(text)
    if len(out) < n:
        raise UserError(f"the grid holds only {len(out)} distinct variants the policy takes, fewer than {n}",
                        key="search")
    return sorted(out)


def ranking(rows: list[dict], reference: str) -> list[dict]:
    """Every policy but ``reference``, from the seeds study's rows: its GPU-hours over the reference's per scenario
    (means over the seeds) and their mean, its worst seed, and whether it kept the seeds target everywhere;
    those that kept it first, cheapest first."""
    base = {r["scenario"]: r["gpu_hours_mean"] for r in rows if r["policy"] == reference}
    out = []
    for policy in dict.fromkeys(r["policy"] for r in rows):
        mine = [r for r in rows if r["policy"] == policy]
        ratios = {r["scenario"]: r["gpu_hours_mean"] / base[r["scenario"]] for r in mine if base.get(r["scenario"])}
        out.append({"policy": policy, "reference": policy == reference, "gpu_hours_ratio": ratios,
                    "gpu_hours_ratio_mean": statistics.fmean(ratios.values()) if ratios else None,
                    "worst_seed": min(r["attainment_min"] for r in mine),
                    "seeds_target_met": all(r["target"]["met"] for r in mine)})
    return sorted(out, key=lambda e: (not e["seeds_target_met"], e["gpu_hours_ratio_mean"] or 0.0))


def ranking_table(ranked: list[dict], top: int) -> Table:
    """The ``top`` policies of the ranking (the reference among them wherever it ranks)."""
    scenarios = list(dict.fromkeys(s for e in ranked for s in e["gpu_hours_ratio"]))
    met = sum(e["seeds_target_met"] for e in ranked)
    t = Table(title=f"Search: {len(ranked)} policies, {met} keep the seeds target; GPU-hours over the reference's, "
                    "cheapest first among those that keep it")
    for col in ("rank", "seeds target", "worst seed", "GPU-h ratio, mean", *scenarios, "policy"):
        t.add_column(col, justify="left" if col in ("seeds target", "policy") else "right")
    for i, e in enumerate(ranked[:top], 1):
        t.add_row(str(i), "met" if e["seeds_target_met"] else "missed", f"{e['worst_seed']:.2%}",
                  f"{e['gpu_hours_ratio_mean']:.3f}", *(f"{e['gpu_hours_ratio'].get(s, float('nan')):.3f}"
                                                       for s in scenarios),
                  "(the reference)" if e["reference"] else escape(e["policy"].split(" [", 1)[-1].rstrip("]")))
    return t
