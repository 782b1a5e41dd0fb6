"""`planner bench fidelity`: the simulator held to a real engine.

For each mode (aggregated: one vLLM server; disaggregated: a prefill server and a decode server joined by
vLLM's ExampleConnector, requests through the project's router) the harness starts the server(s) of vLLM's
CPU build with the tiny random-weight model (planner/testing/vllm_cpu.py), measures a profile of them with
the endpoint profiler backend (the same one `planner profile --backend endpoint` runs), replays a slice of a
public trace against them, simulates the same slice with that profile through planner/sim's cluster (the
engine model `planner backtest` uses), and compares TTFT and ITL p50/p95 (client-side, as the simulator
defines them: planner/bench/fidelity_load.py). docs/fidelity.md has the results and what they taught.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from planner.bench.fidelity_background import DecodeBackground
from planner.bench.fidelity_load import (
    SliceSpec,
    handoff_config,
    measure_handoff,
    percentiles,
    probe_speed,
    probe_speed_after,
    replay_trace,
    speed_drift,
    trace_slice,
)
from planner.bench.fidelity_sim import simulate
from planner.bench.machine_share import OthersCpu
from planner.profile import Profile
from planner.sim.traces.records import RequestTrace
from planner.types import Mode

MODES = (Mode.AGGREGATED.value, Mode.DISAGGREGATED.value)
METRICS = ("ttft_p50_ms", "ttft_p95_ms", "itl_p50_ms", "itl_p95_ms")
# Reported beside the goal's figures, the ITL tail that disaggregation lowers (fidelity_load.py): each
# request's longest gap between tokens (its stall), and every token's gap.
TAIL_METRICS = ("stall_p50_ms", "stall_p95_ms", "itl_token_p95_ms", "itl_token_p99_ms")
TOLERANCE = {"p50": 0.25, "p95": 0.40}  # the goal: p50s within 25 %, p95s within 40 %
# vLLM's scheduler budget per step; the simulator's chunk_tokens is set to the same value.
MAX_NUM_BATCHED_TOKENS = 2048
MAX_NUM_SEQS = 16  # VllmServer's DEFAULT_ARGS
# What the harness adds to VllmServer's DEFAULT_ARGS; a server given to run_with(aggregated_url=...) must
# have been started with them.
ENGINE_ARGS = ("--max-num-batched-tokens", str(MAX_NUM_BATCHED_TOKENS))
# Tokens each stream of a decode point must produce with all of them running: a long window keeps the
# measured step time steady when the API process falls behind and merges tokens into one chunk.
DECODE_TOKENS = 96
# The engine's speed (fidelity_load.probe_speed) moving more than this between its profile and the replay is
# said in the notes: the simulator, fed the profile, cannot follow it (docs/fidelity.md, the runs' table).
DRIFT_NOTED = 0.15


@dataclass(frozen=True)
class FidelityOptions:
    slice: SliceSpec
    modes: tuple[str, ...] = MODES
    out: Path | None = None
    isl_grid: tuple[int, ...] = (16, 128, 512, 1024, 2048)
    batch_grid: tuple[int, ...] = (1, 2, 4, 8, 16)
    context_grid: tuple[int, ...] = (256, 1024, 2048)
    iters: int = 4
    decode_tokens: int = DECODE_TOKENS
    seed: int = 0
    cache_dir: Path | None = None


@dataclass
class ModeResult:
    mode: str
    real: dict[str, float]
    sim: dict[str, float]
    failed: int
    load_avg: list[float]  # 1-minute load average before and after the replay
    wall_s: float
    servers_ready_s: list[float]
    notes: list[str] = field(default_factory=list)
    server: list[dict[str, float]] = field(default_factory=list)  # per engine: vLLM's own means over the run
    profile: dict[str, Any] = field(default_factory=dict)  # the measured points the simulator used
    per_request: dict[str, list[Any]] = field(default_factory=dict)
    sim_config: dict[str, float] = field(default_factory=dict)  # SimConfig fields measured here (kv_handoff_s, decode_admit_s, link_bytes_per_s)
    # Other jobs' share of the machine's CPU while the profile and the replay ran (machine_share.py; None off
    # Linux): the harness's own processes are left out, unlike in the load average.
    others_cpu: dict[str, float | None] = field(default_factory=dict)
    replay_steal: float | None = None  # the hypervisor's share of it during the replay (inside others_cpu)
    # The measured figures over the requests whose wait for the first token no client pause reached
    # (fidelity_load.PAUSE_S), and how many were reached.
    real_unpaused: dict[str, float] = field(default_factory=dict)
    paused_requests: int = 0
    # probe_speed before the profile and after the replay, and their ratio per figure (``drift``)
    speed: dict[str, dict[str, float]] = field(default_factory=dict)

    def ratios(self) -> dict[str, float]:
        return {m: round(self.sim[m] / self.real[m], 3) if self.real[m] else float("nan") for m in METRICS}

    def within(self) -> dict[str, bool]:
        return {m: abs(r - 1.0) <= TOLERANCE[m.split("_")[1]] for m, r in self.ratios().items()}


Progress = Callable[[str, float, float], None]


def run(console: Console, options: FidelityOptions, progress: Progress) -> list[ModeResult]:
    """Make (or reuse) the vLLM environment and the tiny model, then ``run_with`` them."""
    from planner.testing.vllm_cpu import ensure_env, make_tiny_model

    trace_slice(options.slice)  # bad input fails here, before minutes go into the engine
    python = ensure_env(options.cache_dir)
    with tempfile.TemporaryDirectory(prefix="planner-fidelity-model-") as model_tmp:
        model_dir = make_tiny_model(Path(model_tmp) / "model", python)
        console.print(f"trace: {options.slice.trace}; engine: {python}")
        return run_with(python, model_dir, options, progress)


def run_with(python: Path, model_dir: Path, options: FidelityOptions, progress: Progress,
             aggregated_url: str | None = None) -> list[ModeResult]:
    """Every mode in turn (never two at once: the machine has two cores); the JSON is written as it goes.

    ``aggregated_url``: the aggregated mode measures this running server (DEFAULT_ARGS + ENGINE_ARGS, the same
    model) instead of starting one (the tests' shared server: a vLLM start is a minute of CI)."""
    trace = trace_slice(options.slice)
    work = Path(tempfile.mkdtemp(prefix="planner-fidelity-"))
    try:
        results: list[ModeResult] = []
        for mode in options.modes:
            if mode == Mode.AGGREGATED.value and aggregated_url is not None:
                results.append(_measure_aggregated(aggregated_url, model_dir, trace, options, progress, 0.0))
            else:
                runner = _aggregated if mode == Mode.AGGREGATED.value else _disaggregated
                results.append(runner(python, model_dir, trace, options, work, progress))
            if options.out is not None:
                write_json(options.out, options, trace, results)
        return results
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _aggregated(python: Path, model_dir: Path, trace: RequestTrace, options: FidelityOptions, work: Path,
                progress: Progress) -> ModeResult:
    from planner.testing.vllm_cpu import VllmServer

    name = Mode.AGGREGATED.value
    server = VllmServer(python, model_dir, cpus="0", log_dir=work / "logs", extra_args=_engine_args())
    progress(f"{name}: start", 0, 1)
    with server:
        progress(f"{name}: start", 1, 1)
        return _measure_aggregated(server.url, model_dir, trace, options, progress, server.ready_s or 0.0)


def _measure_aggregated(url: str, model_dir: Path, trace: RequestTrace, options: FidelityOptions,
                        progress: Progress, ready_s: float) -> ModeResult:
    name = Mode.AGGREGATED.value
    speed_before = probe_speed(url, url)
    with OthersCpu() as cpu:
        profile = _profile(model_dir, url, options, options.isl_grid, options.batch_grid, options.context_grid)
    progress(f"{name}: profile", 1, 1)
    return _replay_and_simulate(name, url, trace, profile, options, progress, [ready_s], [url],
                                profile_others_cpu=cpu.share, speed=(url, url, speed_before))


def _disaggregated(python: Path, model_dir: Path, trace: RequestTrace, options: FidelityOptions, work: Path,
                   progress: Progress) -> ModeResult:
    from planner.actuators.file_sd import Target, write_targets
    from planner.router.app import create_router_app
    from planner.service.background import BackgroundServer
    from planner.testing.vllm_cpu import VllmServer

    name = Mode.DISAGGREGATED.value
    kv = work / "kv"
    shutil.rmtree(kv, ignore_errors=True)
    kv.mkdir(parents=True)
    # One prompt at a time on the prefill server: ExampleConnector saves the KV of a prompt prefilled in
    # chunks incompletely, and the decode server then dies loading it ("shape mismatch: value tensor of
    # shape [1152, 2, 128] cannot be broadcast to ... [1920, 2, 128]", vLLM 0.32.0, a 2,048-token prompt
    # chunked behind another). A prompt of at most max_num_batched_tokens alone in a step is never chunked.
    pre = VllmServer(python, model_dir, role="kv_producer", kv_path=kv, cpus="0", log_dir=work / "logs",
                     extra_args=[*_engine_args(), "--max-num-seqs", "1"])
    dec = VllmServer(python, model_dir, role="kv_consumer", kv_path=kv, cpus="1", log_dir=work / "logs",
                     extra_args=_engine_args())
    progress(f"{name}: start", 0, 1)
    with _both(pre, dec):
        progress(f"{name}: start", 1, 1)
        # The prefill server's curve from the prefill server, the decode server's from the decode server
        # (first, while no KV files exist for it to load); the prefill curve with the slice's decode load
        # running on the decode server, as in the replay (fidelity_background.py: the engines share the machine).
        speed_before = probe_speed(pre.url, dec.url)
        with OthersCpu() as cpu:
            decode_profile = _profile(model_dir, dec.url, options, options.isl_grid[:2], options.batch_grid,
                                      options.context_grid)
            with DecodeBackground(dec.url, trace) as background:
                prefill_profile = _profile(model_dir, pre.url, options, options.isl_grid, (1,),
                                           options.context_grid[:1])
        progress(f"{name}: profile", 1, 1)
        profile = prefill_profile.model_copy(update={"decode": decode_profile.decode})
        shutil.rmtree(kv, ignore_errors=True)
        kv.mkdir()
        targets = work / "targets.json"
        write_targets(targets, [Target(f"127.0.0.1:{pre.port}", "prefill"), Target(f"127.0.0.1:{dec.port}",
                                                                                   "decode")])
        with BackgroundServer(create_router_app(targets, Mode.DISAGGREGATED), port=0) as router:
            first_step_s = profile.decode_curve(1).itl_ms(1, 1024).value / 1e3
            handoff = _handoff_parts(router.url, pre.url, dec.url, first_step_s,
                                     float(profile.model.kv_bytes_per_token))
            shutil.rmtree(kv, ignore_errors=True)
            kv.mkdir()
            result = _replay_and_simulate(name, router.url, trace, profile, options, progress,
                                          [pre.ready_s or 0.0, dec.ready_s or 0.0], [pre.url, dec.url],
                                          profile_others_cpu=cpu.share, speed=(pre.url, dec.url, speed_before),
                                          **handoff)
            result.notes.append(f"prefill profiled beside the slice's decode load on the decode server: "
                                f"{background.sent} requests finished, {background.failed} failed")
            return result


def _handoff_parts(router_url: str, prefill_url: str, decode_url: str, first_step_s: float,
                   kv_bytes_per_token: float) -> dict[str, float]:
    """The hand-over probed alone at several prompt lengths, as the simulator's SimConfig fields.

    - ``decode_admit_s``: the decode engine's own work on the arriving request (vLLM's prefill time there: the
      KV load and the last partial block, less the one decode step the simulator times itself), which stalls
      its batch.
    - ``link_bytes_per_s``: the part that grows with the prompt (ExampleConnector writes the KV to files and the
      decode server reads them back; the router sends the prompt twice), as the KV link's bandwidth, from the
      slope of the hand-over against prompt length; left at the simulator's default when the slope is 0.
    - ``kv_handoff_s``: the rest of the intercept (the decode request's front end, the router), which occupies
      no engine."""
    before = server_means([decode_url])
    gaps = measure_handoff(router_url, prefill_url)
    decode_prefill_ms = server_deltas(before, server_means([decode_url]))[0]["request_prefill_time_seconds_mean_ms"]
    engine_s = decode_prefill_ms / 1e3 if decode_prefill_ms == decode_prefill_ms else first_step_s
    return handoff_config(gaps, first_step_s, max(0.0, engine_s - first_step_s), kv_bytes_per_token)


@contextmanager
def _both(*servers: Any) -> Iterator[None]:
    try:
        for s in servers:
            s.launch()
        for s in servers:
            s.wait_ready(600.0)
        yield
    finally:
        for s in servers:
            s.stop()


def _engine_args() -> list[str]:
    return list(ENGINE_ARGS)


def _profile(model_dir: Path, url: str, options: FidelityOptions, isl_grid: tuple[int, ...],
             batch_grid: tuple[int, ...], context_grid: tuple[int, ...]) -> Profile:
    from planner.catalog import load_hardware, load_model
    from planner.profiler.backends import get_backend
    from planner.profiler.grids import SweepRequest

    model = str(model_dir / "config.json")
    req = SweepRequest(model=model, gpu="h200", tp=(1,), isl=512, osl=64, ttft_ms=5000, itl_ms=500,
                       isl_grid=isl_grid, batch_grid=batch_grid, context_grid=context_grid, url=url,
                       served_model="tiny", warmup=1, iters=options.iters, decode_tokens=options.decode_tokens)
    profile = get_backend("endpoint")(load_model(model), load_hardware("h200"), req)
    # The endpoint backend's max_batch is the largest batch it saw decode at once, a lower bound (on a busy
    # machine it may be 2); the server's slots are --max-num-seqs, known here because this harness set it.
    decode = [d.model_copy(update={"max_batch": MAX_NUM_SEQS}) for d in profile.decode]
    return profile.model_copy(update={"decode": decode})


def _replay_and_simulate(name: str, url: str, trace: RequestTrace, profile: Profile, options: FidelityOptions,
                         progress: Progress, ready_s: list[float], engine_urls: list[str],
                         profile_others_cpu: float | None, speed: tuple[str, str, dict[str, float]],
                         **sim_config: float) -> ModeResult:
    load_before = os.getloadavg()[0]
    before = server_means(engine_urls)
    with OthersCpu() as cpu:
        measured = replay_trace(url, trace, seed=options.seed,
                                on_done=lambda n: progress(f"{name}: replay", n, len(trace)))
    after = server_means(engine_urls)
    load_after = os.getloadavg()[0]
    speed_after, probe_failed = probe_speed_after(speed[0], speed[1])  # after the means: not the replay's requests
    drift = speed_drift(speed[2], speed_after)
    if options.out is not None:  # kept, so the replay can be simulated again (resimulate) as the model changes
        options.out.parent.mkdir(parents=True, exist_ok=True)
        profile_path(options.out, name).write_text(profile.model_dump_json(by_alias=True, indent=1))
    simulated = simulate(trace, profile, Mode(name), MAX_NUM_BATCHED_TOKENS, **sim_config)
    progress(f"{name}: simulate", 1, 1)
    sim = percentiles(simulated["ttft_s"], simulated["itl_mean_s"], simulated["itl_max_s"], simulated["token_gaps_s"])
    per_request = {"arrival_s": trace.arrival_s.tolist(), "isl": trace.isl.tolist(), "osl": trace.osl.tolist(),
                   "paused": measured.paused.tolist() if measured.paused is not None else [],
                   "real_ttft_ms": _ms(measured.ttft_s), "real_itl_ms": _ms(measured.itl_mean_s),
                   "sim_ttft_ms": _ms(simulated["ttft_s"]), "sim_itl_ms": _ms(simulated["itl_mean_s"]),
                   "real_stall_ms": _ms(measured.itl_max_s if measured.itl_max_s is not None else []),
                   "sim_stall_ms": _ms(simulated["itl_max_s"])}
    moved = {k: v for k, v in drift.items() if v == v and abs(v - 1.0) > DRIFT_NOTED}
    notes = measured.errors[:5] + ([f"the engine's own speed moved between its profile and the replay "
                                    f"(after / before, alone): {moved}; the simulator uses the profile"]
                                   if moved else []) + ([probe_failed] if probe_failed else [])
    return ModeResult(name, measured.summary(), sim, int(measured.failed.sum()),
                      [round(load_before, 2), round(load_after, 2)], round(measured.wall_s, 1),
                      [round(r, 1) for r in ready_s], notes,
                      server=server_deltas(before, after), profile=_profile_points(profile),
                      per_request=per_request, sim_config=dict(sim_config),
                      others_cpu={"profile": profile_others_cpu, "replay": cpu.share}, replay_steal=cpu.steal,
                      real_unpaused=measured.unpaused_summary(),
                      paused_requests=int(measured.paused.sum()) if measured.paused is not None else 0,
                      speed={"before": speed[2], "after": speed_after, "drift": drift})


def profile_path(out: Path, mode: str) -> Path:
    return out.with_name(f"{out.stem}.{mode}.profile.json")


def _ms(values: Any) -> list[float | None]:
    return [round(float(v) * 1e3, 2) if v == v else None for v in values]


SERVER_MEANS = ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                "vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds")


def server_means(urls: list[str]) -> list[dict[str, float]]:
    """Each engine's histogram sums and counts (exact means over a run come from their deltas)."""
    import httpx

    out = []
    for u in urls:
        text = httpx.get(f"{u}/metrics", timeout=10).text
        got: dict[str, float] = {}
        for line in text.splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            for family in SERVER_MEANS:
                if name in (f"{family}_sum", f"{family}_count"):
                    got[name] = got.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
        out.append(got)
    return out


def server_deltas(before: list[dict[str, float]], after: list[dict[str, float]]) -> list[dict[str, float]]:
    """Per engine, the mean of each family over the run (ms): what vLLM itself saw."""
    res = []
    for b, a in zip(before, after, strict=True):
        means = {}
        for family in SERVER_MEANS:
            n = a.get(f"{family}_count", 0.0) - b.get(f"{family}_count", 0.0)
            total = a.get(f"{family}_sum", 0.0) - b.get(f"{family}_sum", 0.0)
            means[family.split(":")[1] + "_mean_ms"] = round(total / n * 1e3, 2) if n else float("nan")
        res.append(means)
    return res


def _profile_points(profile: Profile) -> dict[str, Any]:
    return {"prefill_ttft_ms": [(p.isl, round(p.ttft_ms, 2)) for p in profile.prefill[0].points],
            "decode_itl_ms": [(p.batch, p.context_tokens, round(p.itl_ms, 2)) for p in profile.decode[0].points]}


def table(results: list[ModeResult]) -> Table:
    t = Table(title="simulator vs vLLM CPU (client-side; ITL = per-request mean gap; stall = a request's longest "
                    "gap per token; itl_token = every token's gap)")
    for col in ("mode", "metric", "vLLM", "sim", "sim/vLLM", "goal"):
        t.add_column(col, justify="left" if col in ("mode", "metric") else "right")
    for r in results:
        ratios, ok = r.ratios(), r.within()
        for m in METRICS:
            q = m.split("_")[1]
            mark = "[green]ok[/]" if ok[m] else "[red]off[/]"
            t.add_row(r.mode, m, f"{r.real[m]:.1f}", f"{r.sim[m]:.1f}", f"{ratios[m]:.2f}",
                      f"±{TOLERANCE[q]:.0%} {mark}")
        for m in TAIL_METRICS:
            if m in r.real and m in r.sim:
                ratio = r.sim[m] / r.real[m] if r.real[m] else float("nan")
                t.add_row(r.mode, m, f"{r.real[m]:.1f}", f"{r.sim[m]:.1f}", f"{ratio:.2f}", "reported")
    return t


def tradeoff(results: list[ModeResult]) -> dict[str, dict[str, bool]] | None:
    """Disaggregation's trade-off in each source: ITL tail down (the per-request mean's p95 and, where
    measured, the stall's p95), TTFT up (None unless both modes ran)."""
    by = {r.mode: r for r in results}
    if set(by) != set(MODES):
        return None
    agg, dis = by[Mode.AGGREGATED.value], by[Mode.DISAGGREGATED.value]
    out: dict[str, dict[str, bool]] = {}
    for src in ("real", "sim"):
        a, d = getattr(agg, src), getattr(dis, src)
        out[src] = {"itl_p95_down": d["itl_p95_ms"] < a["itl_p95_ms"], "ttft_p50_up": d["ttft_p50_ms"] > a["ttft_p50_ms"]}
        for tail in ("stall_p95_ms", "itl_token_p99_ms"):
            if tail in a and tail in d:
                out[src][tail.replace("_ms", "_down")] = d[tail] < a[tail]
    return out


def write_json(path: Path, options: FidelityOptions, trace: RequestTrace, results: list[ModeResult]) -> None:
    body = {"slice": {**{k: str(v) if isinstance(v, Path) else v for k, v in asdict(options.slice).items()},
                      **trace.summary()},
            "max_num_batched_tokens": MAX_NUM_BATCHED_TOKENS, "tolerance": TOLERANCE,
            "modes": [{**asdict(r), "ratios": r.ratios(), "within": r.within()} for r in results],
            "tradeoff": tradeoff(results), "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body, indent=2, default=float) + "\n")
