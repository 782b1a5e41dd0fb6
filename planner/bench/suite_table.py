"""The suite's terminal view: policy x scenario (attainment, GPU-hours, x offline, x lower bound) and targets."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from planner.bench.scenarios import PERFECT_GPU_RATIO, PLANNER_GPU_RATIO, YESTERDAY_GPU_RATIO, policy_label

TARGET_COLUMNS = (("planner", f"planner >= SLA, <= {PLANNER_GPU_RATIO:.2f}x"),
                  ("perfect_forecast", f"perfect forecast <= {PERFECT_GPU_RATIO:.2f}x"),
                  ("static", "planner <= static"), ("static_yesterday", f"<= {YESTERDAY_GPU_RATIO:g}x static-yesterday"),
                  ("frontier", "frontier above Dynamo"))


def render(console: Console, doc: dict) -> None:
    if doc["scenarios"]:
        console.print(results_table(doc))
        console.print(targets_table(doc))
    for name, sc in doc["scenarios"].items():
        for t in sc["targets"]:
            if not t["met"]:
                console.print(f"[yellow]{name}[/] {t['target']} missed: {t['detail']}", soft_wrap=True)
                if t.get("why"):
                    console.print(f"  why: {t['why']}", soft_wrap=True, highlight=False)
        checks = sc["report"].get("checks", {})
        if not checks.get("lower_bound_le_offline", True) or checks.get("policies_dominating_offline"):
            console.print(f"[bold red]{name}: BROKEN YARDSTICK[/] {checks}")
        for d in sc.get("frontier", {}).get("points_dominating_offline", []):
            console.print(f"[bold red]{name}: BROKEN YARDSTICK[/] frontier point {d['policy']} {d['knob']} "
                          f"{d['value']:g}: {d['attainment_joint']:.2%} on {d['gpu_hours']:.2f} GPU-h beats the "
                          "offline schedule on both axes", soft_wrap=True, highlight=False)
    for name, fl in doc.get("fleets", {}).items():
        console.print(fleet_table(name, fl))
        for t in fl["targets"]:
            mark = "[green]met[/]" if t["met"] else "[red]missed[/]"
            console.print(f"[bold]{name}[/] {FLEET_TARGETS[t['target']]}: {mark} ({t['detail']})", soft_wrap=True,
                          highlight=False)
    cpu = doc.get("cpu_s", {})
    console.print(f"wall time: {_min_s(doc['wall_s'])} on {doc['workers']} worker processes ({doc['cpu_count']} cores)"
                  f"{' (quick)' if doc['quick'] else ''}; CPU {_min_s(cpu.get('total', 0.0))} in all, "
                  f"{_min_s(cpu.get('idle_cores_wall_estimate', 0.0))} on {doc['workers']} idle cores")


FLEET_TARGETS = {"high_priority": "every top-priority SLA met while the budget binds",
                 "no_failures": "no request failed", "static_peak": "<= 0.5x static pools at their peaks"}


def fleet_table(name: str, fleet: dict) -> Table:
    """One fleet scenario: per model its priority, attainment and GPU-hours beside its static pool at peak, then
    the fleet against the same planners without the budget and the static pools."""
    r = fleet["report"]
    f, comp = r["fleet"], r.get("comparisons", {})
    table = Table(title=f"{name}: {f['budget_gpus']} GPUs shared, peak {f['max_gpus_used']:g}, budget bound on "
                        f"{f['binding_ticks']} ticks, {f['cold_starts']} cold starts")
    for col in ("model", "priority", "joint", "GPU-h", "static at peak GPU-h", "clamped ticks", "wakes",
                "cold TTFT p95 s"):
        table.add_column(col, justify="left" if col == "model" else "right")
    static = comp.get("static_peak", {}).get("policies", {})
    for model, p in r["policies"].items():
        s_h, cold = static.get(model, {}).get("gpu_hours"), p["cold_starts"]
        table.add_row(model, str(p["priority"]), _joint(p["attainment_joint"]), f"{p['gpu_hours']:.2f}",
                      "-" if s_h is None else f"{s_h:.2f}", str(p["clamped_ticks"]), str(cold["wakes"]),
                      "-" if cold["ttft_ms_p95"] is None else f"{cold['ttft_ms_p95'] / 1e3:.1f}")
    table.add_row("[bold]fleet[/]", "", "", f"{f['gpu_hours']:.2f}", "", "", "", "", end_section=True)
    for key, label in (("unshared", "no shared budget"), ("static_peak", "static at each peak"),
                       ("static_min", "cheapest static (oracle)")):
        if key in comp:
            table.add_row(f"[dim]{label}[/]", "", "", f"{comp[key]['gpu_hours']:.2f}", "", "", "", "")
    return table


def _min_s(seconds: float) -> str:
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)} min {rest:.0f} s"


def results_table(doc: dict) -> Table:
    table = Table(title="Suite: joint SLA attainment and GPU-hours, per scenario and policy")
    for col in ("scenario", "policy", "joint", "GPU-h", "x offline", "x lower bound", "model bias TTFT/ITL",
                "at the load that came", "target"):
        table.add_column(col, justify="left" if col in ("scenario", "policy", "target") else "right")
    for name, sc in doc["scenarios"].items():
        marks = {t["target"]: t["met"] for t in sc["targets"]}
        rows = [r for r in doc["entries"] if r["scenario"] == name]
        lb = sc["report"]["references"]["lower_bound"]
        for i, r in enumerate(rows):
            key = {"planner": "planner", "planner+perfect-forecast": "perfect_forecast"}.get(r["policy"])
            mark = "" if key is None else ("[green]met[/]" if marks.get(key) else "[red]missed[/]")
            table.add_row(name if i == 0 else "", _dim(r["policy"]), _joint(r["attainment_joint"]),
                          f"{r['gpu_hours']:.2f}", _x(r["gpu_hours_vs_offline"]), _x(r["gpu_hours_vs_lower_bound"]),
                          _bias(r.get("model_bias")), _bias(r.get("model_bias_at_load")), mark)
        off_h = sc["report"]["references"]["offline"]["gpu_hours"]
        table.add_row("", "[dim]lower bound[/]", "", f"{lb['gpu_hours']:.2f}",
                      _x(lb["gpu_hours"] / off_h if off_h else None), "1.00", "", "", "", end_section=True)
    return table


def targets_table(doc: dict) -> Table:
    example = policy_label(None)  # how suite.json names the example as shipped
    shipped = doc.get("policy", example) == example
    table = Table(title="Targets (example policy as shipped)" if shipped else f"Targets (policy {doc['policy']})")
    table.add_column("scenario")
    for _, title in TARGET_COLUMNS:
        table.add_column(title)
    for name, sc in doc["scenarios"].items():
        marks = {t["target"]: t["met"] for t in sc["targets"]}
        table.add_row(name, *("" if k not in marks else "[green]met[/]" if marks[k] else "[red]missed[/]"
                              for k, _ in TARGET_COLUMNS))
    return table


def _bias(bias: dict | None) -> str:
    """Medians of realised / predicted latency (model_bias.py); 1.00 is a model that spends the SLA it sizes for
    (at the forecast's load), or that predicts what the ready replicas deliver (at the load that came)."""
    if not bias:
        return ""
    return " / ".join(f"{bias[s]['median']:.2f}" if s in bias else "-" for s in ("ttft", "itl"))


def _dim(policy: str) -> str:
    return f"[dim]{policy}[/]" if policy == "offline schedule" else policy


def _joint(a: float | None) -> str:
    if a is None:
        return "-"
    colour = "green" if a >= 0.99 else "yellow" if a >= 0.95 else "red"
    return f"[{colour}]{a:.2%}[/]"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"
