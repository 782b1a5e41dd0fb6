"""``--oversized``: what `planner backtest` (one policy or a fleet) does with requests the profile cannot serve."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

from planner.errors import UserError

if TYPE_CHECKING:
    from planner.profile import Profile
    from planner.sim.traces.records import RequestTrace

OVERSIZED_HELP = ("requests longer than the profile serves (prompt + output past its context or one decode "
                  "replica's KV): error | drop (left out, as an engine's 400 would) | truncate (prompt cut to fit)")
HINT = " (--oversized drop leaves them out, as an engine's 400 would; --oversized truncate cuts their prompts to fit)"


def check_oversized(oversized: str, scenario: bool) -> None:
    """The flag's value, before any trace is read."""
    from planner.sim.traces.oversized import MODES

    if oversized not in MODES:
        raise UserError(f"--oversized: {oversized!r}; allowed: {', '.join(MODES)}")
    if oversized != "error" and scenario:
        raise UserError("--oversized: not with --scenario (a scenario's requests all fit its profile)")


def fit_oversized(console: Console, tr: RequestTrace, prof: Profile, oversized: str, meta: dict,
                  model: str = "") -> RequestTrace:
    """``tr`` with the requests ``prof`` cannot serve dropped or truncated, said on the console and recorded in
    ``meta["oversized"]``; with ``error`` the first of them stops the run, naming the flag (``model``: the fleet's
    model the trace is for, named in both)."""
    from planner.sim.cluster.cluster import SimConfig
    from planner.sim.evaluate.backtest import check_trace, request_token_limit
    from planner.sim.traces.oversized import fit_requests

    # A trace split from one file by its model column names the model already ("FILE (model chat)").
    where = f"{model}: " if model and f"(model {model})" not in tr.source else ""
    if len(tr) == 0:
        return tr  # nothing to fit; the caller says what an empty trace means
    if oversized == "error":
        try:
            check_trace(tr, prof, SimConfig(), hint=HINT)
        except UserError as exc:
            raise UserError(f"{where}{exc}") from None
        return tr
    limit = request_token_limit(prof)
    fitted = fit_requests(tr, limit, oversized)
    if fitted.oversized:
        console.print(f"note: {where}{tr.source}: {fitted.oversized:,} of {len(tr):,} requests "
                      f"({fitted.oversized / len(tr):.2%}) longer than {limit:,} tokens (the profile's context or one "
                      f"decode replica's KV): {fitted.dropped:,} dropped, {fitted.truncated:,} truncated "
                      f"(--oversized {oversized})", highlight=False, soft_wrap=True)
    if len(fitted.trace) == 0:
        raise UserError(f"--oversized {oversized}: {where}{tr.source}: every request is longer than {limit:,} tokens "
                        "(the profile's context or one decode replica's KV); nothing is left to replay")
    meta.setdefault("oversized", fitted.summary(oversized, limit))
    return fitted.trace
