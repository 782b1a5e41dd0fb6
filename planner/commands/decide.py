"""`planner plan`: what-if sizing for a given load."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer

from planner.commands.console import out_console
from planner.errors import InfeasibleError, UserError
from planner.types import Reason


def _check(flag: str, value: float, allow_zero: bool = False) -> None:
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise UserError(f"{flag}: {value:g} must be a finite number {'>= 0' if allow_zero else '> 0'}")


def register(app: typer.Typer) -> None:
    @app.command("plan")
    def plan_cmd(
        policy: Annotated[Path, typer.Option(help="policy YAML (policies/example.yaml documents every field)")],
        rate_rps: Annotated[float, typer.Option("--rate-rps", help="request rate (req/s)")],
        isl: Annotated[float, typer.Option(help="mean input length (tokens)")],
        osl: Annotated[float, typer.Option(help="mean output length (tokens)")],
        json_out: Annotated[bool, typer.Option("--json", help="print the Decision as JSON")] = False,
    ) -> None:
        """What-if: the Decision for a given load (no state, no side effects)."""
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
