"""`planner plan`: what-if sizing for a given load (one policy, or a fleet on one GPU budget)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from planner.commands.console import out_console
from planner.errors import InfeasibleError, UserError
from planner.types import MAX_TOKENS, Reason

if TYPE_CHECKING:
    from planner.fleet_file import Fleet

LOAD_HELP = ("with --fleet: one policy's load, NAME=RATE_RPS,ISL,OSL (repeat per policy; policies without one take "
             "--rate-rps/--isl/--osl)")


# Past these a load is a typo, not a workload (and its arithmetic overflows to infinity).
MOST_RATE_RPS = 1e6


def _check(flag: str, value: float, allow_zero: bool = False) -> None:
    """A rate (``allow_zero``: req/s, at most 1e6) or a mean length (tokens, at most 1e7)."""
    most, unit = (MOST_RATE_RPS, "req/s") if allow_zero else (MAX_TOKENS, "tokens")
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero) or value > most:
        raise UserError(f"{flag}: {value:g} must be a finite number {'>= 0' if allow_zero else '> 0'} and "
                        f"<= {most:g} {unit}")


def register(app: typer.Typer) -> None:
    @app.command("plan")
    def plan_cmd(
        policy: Annotated[Path | None, typer.Option(help="policy YAML (policies/example.yaml documents every "
                                                    "field)")] = None,
        rate_rps: Annotated[float | None, typer.Option("--rate-rps", help="request rate (req/s)")] = None,
        isl: Annotated[float | None, typer.Option(help="mean input length (tokens)")] = None,
        osl: Annotated[float | None, typer.Option(help="mean output length (tokens)")] = None,
        fleet: Annotated[Path | None, typer.Option(help="fleet YAML (many policies on one GPU budget) instead "
                                                   "of --policy")] = None,
        load: Annotated[list[str] | None, typer.Option(help=LOAD_HELP)] = None,
        json_out: Annotated[bool, typer.Option("--json", help="print the Decision as JSON")] = False,
    ) -> None:
        """What-if: the Decision for a given load (no state, no side effects)."""
        if fleet is not None:
            if policy is not None:
                raise UserError("--fleet and --policy: give one (the fleet file names its policies)")
            _plan_fleet(fleet, load or [], rate_rps, isl, osl, json_out)
            return
        if load:
            raise UserError("--load: only with --fleet (one policy takes --rate-rps, --isl and --osl)")
        missing = [f for f, v in (("--policy", policy), ("--rate-rps", rate_rps), ("--isl", isl), ("--osl", osl))
                   if v is None]
        if missing:
            raise UserError(f"{missing[0]}: required (or --fleet)")
        assert policy is not None and rate_rps is not None and isl is not None and osl is not None
        _plan_one(policy, rate_rps, isl, osl, json_out)


def _plan_one(policy: Path, rate_rps: float, isl: float, osl: float, json_out: bool) -> None:
    from planner.commands.render import render_plan
    from planner.decide.serialize import decision_dict
    from planner.decide.whatif import plan, sla_misses
    from planner.policy_file import load_policy
    from planner.profile import load_profile

    _check("--rate-rps", rate_rps, allow_zero=True)
    _check("--isl", isl)
    _check("--osl", osl)
    pol = load_policy(policy)
    decision = plan(pol, load_profile(pol.profile), rate_rps, isl, osl)
    if json_out:
        print(json.dumps(decision_dict(decision), indent=1))
    else:
        render_plan(decision, pol, out_console())
    if Reason.SLA_INFEASIBLE in decision.reasons:
        pools = [n for n, p in decision.pools.items() if Reason.SLA_INFEASIBLE in p.reasons]
        raise InfeasibleError(f"the SLA cannot be met for {', '.join(pools)} at this load with this profile "
                              f"(TTFT {pol.sla.ttft_ms:g} ms, ITL {pol.sla.itl_ms:g} ms)")
    misses = sla_misses(pol, decision)
    if misses:  # a plan that cannot meet the SLA within the policy's limits is not a success
        raise InfeasibleError("the SLA is missed within the policy's limits: "
                              + "; ".join(m.describe(pol) for m in misses))


def fleet_loads(fleet: Fleet, given: list[str], rate_rps: float | None, isl: float | None,
                osl: float | None) -> dict[str, tuple[float, float, float]]:
    """Each policy's (rate, isl, osl): its --load, else the common --rate-rps/--isl/--osl."""
    names = fleet.names()
    loads: dict[str, tuple[float, float, float]] = {}
    for item in given:
        name, sep, values = item.partition("=")
        parts = values.split(",")
        if not sep or len(parts) != 3:
            raise UserError(f"--load {item!r}: expected NAME=RATE_RPS,ISL,OSL (e.g. chat=12.5,1024,256)")
        if name not in names:
            raise UserError(f"--load {item!r}: no policy {name!r} in the fleet; allowed: {', '.join(names)}")
        try:
            rate, i, o = (float(p) for p in parts)
        except ValueError:
            raise UserError(f"--load {item!r}: RATE_RPS, ISL and OSL must be numbers") from None
        _check(f"--load {name} rate", rate, allow_zero=True)
        _check(f"--load {name} ISL", i)
        _check(f"--load {name} OSL", o)
        loads[name] = (rate, i, o)
    rest = [n for n in names if n not in loads]
    if rest and None in (rate_rps, isl, osl):
        raise UserError(f"--load: no load for {', '.join(rest)} (give --load NAME=RATE_RPS,ISL,OSL, or --rate-rps, "
                        "--isl and --osl for every policy without one)")
    if rest:
        assert rate_rps is not None and isl is not None and osl is not None
        _check("--rate-rps", rate_rps, allow_zero=True)
        _check("--isl", isl)
        _check("--osl", osl)
        loads.update({n: (rate_rps, isl, osl) for n in rest})
    return loads


def _plan_fleet(path: Path, given: list[str], rate_rps: float | None, isl: float | None, osl: float | None,
                json_out: bool) -> None:
    from planner.commands.render import render_fleet
    from planner.decide.serialize import decision_dict
    from planner.decide.whatif import sla_misses
    from planner.fleet import plan_fleet
    from planner.fleet_file import load_fleet

    fleet = load_fleet(path)
    tick = plan_fleet(fleet, fleet_loads(fleet, given, rate_rps, isl, osl))
    if json_out:
        print(json.dumps({**tick.summary(), "decisions": {n: decision_dict(d) for n, d in tick.granted.items()}},
                         indent=1))
    else:
        render_fleet(tick, fleet, out_console())
    misses = [f"{m.name}: {miss.describe(m.policy)}" for m in fleet.members
              for miss in sla_misses(m.policy, tick.granted[m.name])]
    infeasible = [m.name for m in fleet.members if Reason.SLA_INFEASIBLE in tick.wanted[m.name].reasons]
    if infeasible:
        raise InfeasibleError(f"the SLA cannot be met at this load with this profile for {', '.join(infeasible)}")
    if misses:
        raise InfeasibleError("the SLA is missed within the fleet's limits: " + "; ".join(misses))
