"""One profile request, start to finish: sweep, select, size, render. Returns what Ready carries, or raises
RequestFailed (with the closest configuration when the SLA cannot be met) or Cancelled.

The caller owns time and persistence: it is told each step (``Reporter``) and asked between units of work
whether to stop (``cancelled``). `planner init` calls this directly; the server runs it on a worker thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from planner.perf.kv import advise
from planner.profile import Profile, StageSelection
from planner.profiler.assemble import link_bytes_per_s
from planner.requests.checks import Resolved
from planner.requests.engines import ENGINES
from planner.requests.manifests import Layout
from planner.requests.render import Rendered, render
from planner.requests.sizing import Sizing, link_gbps, size
from planner.requests.spec import FieldError
from planner.requests.status import Advice, FailReason, LoadResult, Result, StageResult, Step
from planner.requests.sweep import Cancelled, RequestFailed, merge, sweep_request, sweep_stage
from planner.requests.workload import SteadyLoad, steady_load
from planner.types import Mode, Pool


class Reporter(Protocol):
    def step(self, step: Step, message: str) -> None: ...

    def progress(self, fraction: float, message: str) -> None: ...


@dataclass(frozen=True)
class Outcome:
    profile: Profile
    result: Result
    rendered: Rendered


def _closest(stages: dict[str, StageSelection]) -> dict:
    return {name: {"tp": s.tp, "gpus_per_replica": s.gpus,
                   "latency_ms": round(s.latency_ms, 2) if s.latency_ms >= 0 else None,
                   "target_ms": s.target_ms, "miss_pct": round(100 * (s.latency_ms / s.target_ms - 1), 1)
                   if s.latency_ms >= 0 else None, "reason": s.reason} for name, s in stages.items()}


def _check_selection(profile: Profile) -> None:
    sel = profile.selection
    assert sel is not None
    missing = {s: getattr(sel, s) for s in ("prefill", "decode") if not getattr(sel, s).meets_sla}
    if missing:
        detail = "; ".join(f"{s}: {x.reason}" for s, x in missing.items())
        raise RequestFailed(FailReason.SLA_INFEASIBLE, f"the SLA is below what {profile.hardware.gpu} can do for "
                            f"{profile.model.name} at any TP swept ({detail})", _closest(missing))


def _mode(resolved: Resolved, profile: Profile) -> Mode:
    spec = resolved.spec
    sel = profile.selection
    assert sel is not None and sel.disaggregation is not None
    mode = Mode(spec.mode) if spec.mode != "auto" else sel.disaggregation.mode
    if mode is Mode.DISAGGREGATED and not ENGINES[spec.engine].disaggregates and spec.output != "dynamo-graph":
        raise RequestFailed(FailReason.UNSUPPORTED, f"the advice is disaggregated ({sel.disaggregation.reason}); "
                            f"{spec.engine} P/D is rendered through Dynamo: use output dynamo-graph, or mode "
                            "aggregated")
    return mode


def _advice(resolved: Resolved, profile: Profile, load: SteadyLoad, mode: Mode) -> Advice:
    sel = profile.selection
    assert sel is not None
    link = link_bytes_per_s(sweep_request(resolved, load), resolved.hardware)
    adv = advise(load.isl, profile.model.kv_bytes_per_token, link, sel.prefill.latency_ms,
                 resolved.spec.sla.ttft_ms, resolved.spec.sla.itl_ms)
    reason = adv.reason if mode is adv.mode else f"mode {mode.value} as requested (the advice was {adv.mode.value}: " \
                                                 f"{adv.reason})"
    return Advice(mode=adv.mode, kv_bytes=adv.kv_bytes, transfer_ms=round(adv.transfer_ms, 3),
                  prefill_ms=round(adv.prefill_ms, 3), interference_itl_budgets=round(adv.interference_steps, 3),
                  link_gbps=link_gbps(resolved), reason=reason)


def _stage_results(profile: Profile, sizing: Sizing) -> dict[str, StageResult]:
    sel = profile.selection
    assert sel is not None
    out = {}
    for pool, d in sizing.decision.pools.items():
        stage = sel.prefill if pool == Pool.PREFILL else sel.decode
        latency = d.predicted_ttft_ms if pool == Pool.PREFILL else d.predicted_itl_ms
        target = sizing.policy.sla.ttft_ms if pool == Pool.PREFILL else sizing.policy.sla.itl_ms
        out[str(pool)] = StageResult(tp=stage.tp, gpus_per_replica=d.gpus_per_replica, replicas=d.replicas,
                                     gpus=d.gpus, latency_ms=None if latency is None else round(latency, 3),
                                     target_ms=target, tokens_per_s_per_gpu=stage.tokens_per_s_per_gpu,
                                     batch=stage.batch if pool != Pool.PREFILL else None, reason=stage.reason)
    return out


def _result(resolved: Resolved, profile: Profile, load: SteadyLoad, sizing: Sizing, advice: Advice) -> Result:
    d = sizing.decision
    return Result(mode=sizing.policy.mode, backend=profile.provenance.backend,
                  load=LoadResult(isl=load.isl, osl=load.osl, rate_rps=round(load.rate_rps, 6),
                                  peak_rate_rps=round(load.peak_rate_rps, 6), source=load.source),
                  advice=advice, pools=_stage_results(profile, sizing), gpus=d.gpus,
                  predicted_ttft_ms=None if d.predicted_ttft_ms is None else round(d.predicted_ttft_ms, 3),
                  predicted_itl_ms=None if d.predicted_itl_ms is None else round(d.predicted_itl_ms, 3))


def _enter(reporter: Reporter, cancelled: Callable[[], bool], step: Step, message: str) -> None:
    if cancelled():
        raise Cancelled()
    reporter.step(step, message)


def run(resolved: Resolved, reporter: Reporter, cancelled: Callable[[], bool] = lambda: False) -> Outcome:
    _enter(reporter, cancelled, Step.SWEEPING_PREFILL, f"prefill: {resolved.backend} over TP "
           f"{', '.join(map(str, resolved.tp))}")
    try:
        load = steady_load(resolved.spec.workload, resolved.spec.sla)
    except FieldError as exc:
        raise RequestFailed(FailReason.INVALID_SPEC, str(exc)) from None
    req = sweep_request(resolved, load)
    prefill = sweep_stage(resolved, req, Pool.PREFILL, reporter.progress, cancelled)
    _enter(reporter, cancelled, Step.SWEEPING_DECODE, "decode sweep")
    decode = sweep_stage(resolved, req, Pool.DECODE, reporter.progress, cancelled)
    _enter(reporter, cancelled, Step.SELECTING_CONFIG, "TP per stage, aggregated or disaggregated")
    profile = merge(prefill, decode, req, resolved)
    _check_selection(profile)
    mode = _mode(resolved, profile)
    advice = _advice(resolved, profile, load, mode)
    _enter(reporter, cancelled, Step.BUILDING_CURVES, f"replicas for {load.rate_rps:.4g} req/s")
    sizing = size(resolved, profile, load, mode)
    _enter(reporter, cancelled, Step.RENDERING, f"policy and {resolved.spec.output} manifests")
    sel = profile.selection
    assert sel is not None
    tp = {Pool.PREFILL: sel.prefill.tp, Pool.DECODE: sel.decode.tp, Pool.AGGREGATED: sel.decode.tp}
    layout = Layout(resolved, mode, {p: tp[p] for p in mode.pools}, {p: sizing.decision.pools[p].replicas
                                                                        for p in mode.pools})
    result = _result(resolved, profile, load, sizing, advice)
    rendered = render(resolved, profile, layout, sizing, load, result)
    if cancelled():
        raise Cancelled()
    return Outcome(profile, result.model_copy(update={"artifacts": sorted(rendered.files)}), rendered)
