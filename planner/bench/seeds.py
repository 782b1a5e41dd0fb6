"""`planner bench seeds`: is a policy change a gain, or the luck of one seed?

The suite's scenarios draw their arrival times (and, for the synthetic mixes, their lengths) from a seed;
the headline runs seed 0. One replica more or less at the moment a rate step arrives moves a scenario's
attainment by several points (docs/benchmark-studies.md, "What the scale-down hedge costs"), so a comparison
of two policies on one seed can say more about that moment than about the policies. This replays the planner
alone under each policy, on every scenario, for several seeds, and compares the policies pairwise on the same traces:
attainment (mean, worst, runs below the SLA percentile) and GPU-hours (mean, and the per-seed ratio to the
first policy). No baselines, no offline search: a run is seconds, the whole study a minute or two.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

from planner.bench import scenarios
from planner.policy_file import PolicyFile
from planner.policy_variant import PolicySource
from planner.sim.evaluate.backtest import planner_run, score_run, sim_setup
from planner.sim.evaluate.workers import process_context


@dataclass(frozen=True)
class Run:
    policy: str  # the label the table shows (the file's path as given)
    scenario: str
    seed: int
    attainment_joint: float
    gpu_hours: float
    # Over the scored window's decisions, when the policy has steady scale-down rules (None otherwise): the
    # share of ticks they were in force, and the median burstiness (forecast rate_cv) they were chosen by.
    steady_share: float | None = None
    rate_cv_median: float | None = None


_POLICIES: dict[str, PolicySource] = {}  # label -> policy, set in the parent and inherited or sent to the workers
_TRACES: Path | None = None


def _init(policies: dict[str, PolicySource], traces: Path | None) -> None:
    global _TRACES
    _POLICIES.update(policies)
    _TRACES = traces


def _one(task: tuple[str, str, int]) -> Run:
    label, name, seed = task
    scenario = scenarios.pick([name])[0]
    policy = scenarios.policy_for(scenario, load(label, _POLICIES[label]))
    trace = scenarios.scenario_trace(scenario, _TRACES, seed=seed)
    ctx, config = sim_setup(trace, scenarios.scenario_profile(scenario, policy), policy,
                            warmup_s=scenarios.warmup_s(scenario, False))
    summary, rep = score_run(planner_run(ctx, None, policy), ctx, config)
    scored = [d for d in rep.decisions if d.at_s >= rep.score_from_s]
    cvs = [float(d.detail["rate_cv"]) for d in scored if isinstance(d.detail.get("rate_cv"), float)]
    share = (sum(d.detail.get("scale_down_rules") == "steady" for d in scored) / len(scored)
             if policy.behavior.steady is not None and scored else None)
    return Run(label, name, seed, float(summary["attainment_joint"]), float(summary["gpu_hours"]), share,
               statistics.median(cvs) if cvs else None)


def load(label: str, source: PolicySource) -> PolicyFile:
    """The policy a label stands for: its file, with any ``--vary`` fields set."""
    return source.load(scenarios.EXAMPLE_POLICY, label)


def run(console: Console, policies: dict[str, PolicySource], scenario_names: list[str] | None, seeds: list[int],
        traces: Path | None, workers: int) -> list[Run]:
    """Every (policy, scenario, seed) replayed, over ``workers`` processes, with a progress bar."""
    chosen = scenarios.pick(scenario_names)
    for label, source in policies.items():
        load(label, source)  # a bad file or --vary is one line and exit 2 before anything runs
    scenarios.check_traces(chosen, traces)
    tasks = [(label, s.name, seed) for s in chosen for seed in seeds for label in policies]
    _init(policies, traces)
    out: list[Run] = []
    ctx = process_context()
    with ctx.Pool(max(1, min(workers, len(tasks))), initializer=_init, initargs=(dict(policies), traces)) as pool, \
            Progress(console=console, transient=True) as bar:
        job = bar.add_task(f"{len(tasks)} planner replays", total=len(tasks))
        for r in pool.imap_unordered(_one, tasks):
            out.append(r)
            bar.advance(job)
    order = {task: i for i, task in enumerate(tasks)}
    return sorted(out, key=lambda r: order[(r.policy, r.scenario, r.seed)])


SEED_SLACK = 0.005  # a seed may land this far (half a point) below the SLA's percentile, no further


def summary(runs: list[Run], sla_share: float, shares: Mapping[str, float] | None = None) -> list[dict]:
    """Per (scenario, policy): attainment mean and worst, runs below the policy's SLA share (``shares``, by
    policy label; ``sla_share`` for any other), GPU-hours mean, and the per-seed GPU-hours ratio to the first
    policy on the same trace (min, median, max). A variant promising p90 is held to 89.5 %, not the first's."""
    first = runs[0].policy if runs else ""
    base = {(r.scenario, r.seed): r.gpu_hours for r in runs if r.policy == first}
    rows = []
    for scenario in dict.fromkeys(r.scenario for r in runs):
        for policy in dict.fromkeys(r.policy for r in runs):
            mine = [r for r in runs if r.scenario == scenario and r.policy == policy]
            ratios = [r.gpu_hours / base[(scenario, r.seed)] for r in mine if base.get((scenario, r.seed), 0) > 0]
            att = [r.attainment_joint for r in mine]
            share = (shares or {}).get(policy, sla_share)
            rows.append({
                "scenario": scenario, "policy": policy, "seeds": [r.seed for r in mine],
                "attainment_joint": att, "gpu_hours": [r.gpu_hours for r in mine],
                "attainment_mean": statistics.fmean(att), "attainment_min": min(att),
                "below_sla": sum(a < share for a in att),
                # Issue 27's target: no seed more than SEED_SLACK below the SLA's percentile.
                "target": {"floor": round(share - SEED_SLACK, 6), "met": min(att) >= share - SEED_SLACK - 1e-12},
                "gpu_hours_mean": statistics.fmean(r.gpu_hours for r in mine),
                "gpu_hours_ratio": {"min": min(ratios), "median": statistics.median(ratios), "max": max(ratios)}
                if ratios else None,
                "steady_share_mean": _mean_of(r.steady_share for r in mine),
                "rate_cv_median": _mean_of(r.rate_cv_median for r in mine),
            })
    return rows


def target_lines(rows: list[dict]) -> list[str]:
    """One line per (scenario, policy) that missed the seeds target (none: every run within it)."""
    return [f"{r['scenario']} {r['policy']}: worst seed {r['attainment_min']:.2%} is below {r['target']['floor']:.2%} "
            f"(the SLA's percentile less {SEED_SLACK:.1%} points)" for r in rows if not r["target"]["met"]]


def _mean_of(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def table(rows: list[dict], sla_share: float) -> Table:
    first = rows[0]["policy"] if rows else ""
    t = Table(title=f"Planner alone over {len(rows[0]['seeds']) if rows else 0} seeds: joint attainment and GPU-hours "
                    f"(GPU-h ratio per seed to {escape(first)})")
    for col in ("scenario", "policy", "attainment mean", "worst", f"runs < {sla_share:.0%}", "GPU-h mean",
                "GPU-h ratio min / median / max", "steady rules (rate cv)", "per seed (attainment, GPU-h)"):
        t.add_column(col, justify="left" if col in ("scenario", "policy", "per seed (attainment, GPU-h)") else "right")
    for row in rows:
        ratio = row["gpu_hours_ratio"]
        t.add_row(row["scenario"], escape(row["policy"]), f"{row['attainment_mean']:.2%}", f"{row['attainment_min']:.2%}",
                  str(row["below_sla"]), f"{row['gpu_hours_mean']:.2f}",
                  "-" if ratio is None else f"{ratio['min']:.3f} / {ratio['median']:.3f} / {ratio['max']:.3f}",
                  "-" if row["steady_share_mean"] is None else
                  f"{row['steady_share_mean']:.0%} ({row['rate_cv_median']:.2f})" if row["rate_cv_median"] is not None
                  else f"{row['steady_share_mean']:.0%}",
                  ", ".join(f"{a:.1%} {g:.1f}" for a, g in zip(row["attainment_joint"], row["gpu_hours"], strict=True)))
    return t


def write(path: Path, runs: list[Run], rows: list[dict], command: str, search: dict | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"command": command, "runs": [r.__dict__ for r in runs], "summary": rows,
           **({"search": search} if search is not None else {})}
    path.write_text(json.dumps(doc, indent=2) + "\n")


def plot(path: Path, runs: list[Run], sla_share: float) -> Path:
    """One panel per scenario: every seed's (GPU-hours, attainment) per policy, seeds labelled, the SLA as a
    line. Where a policy's points lie against another's says more than either mean."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r.scenario for r in runs))
    policies = list(dict.fromkeys(r.policy for r in runs))
    cols = min(3, len(names))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.2 * rows), squeeze=False)
    for ax, scenario in zip(axes.flat, names, strict=False):
        for i, policy in enumerate(policies):
            mine = [r for r in runs if r.scenario == scenario and r.policy == policy]
            ax.scatter([r.gpu_hours for r in mine], [100 * r.attainment_joint for r in mine], color=f"C{i}",
                       label=policy, zorder=3)
            for r in mine:
                ax.annotate(str(r.seed), (r.gpu_hours, 100 * r.attainment_joint), fontsize=7,
                            xytext=(3, 3), textcoords="offset points")
        ax.axhline(100 * sla_share, color="k", ls=":", lw=1)
        ax.set_title(scenario, fontsize=10)
        ax.set_xlabel("GPU-hours (scored window)")
        ax.set_ylabel("joint SLA attainment %")
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=max(1, len(policies)), fontsize=8)
    fig.suptitle(f"The planner alone, per seed (numbers): dotted line the SLA's {sla_share:.0%}", fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 0.97))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
