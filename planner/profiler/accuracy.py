"""Score the analytical model against a measurement file (profiles/measurements format)."""

from __future__ import annotations

import json
from pathlib import Path

from planner.catalog import data_dir, load_hardware
from planner.errors import UserError, not_utf8
from planner.perf import roofline
from planner.perf.model import ModelSpec

PREFILL_MIN_MS = 20.0  # below this a prefill is launch-bound noise; the accuracy bar applies above it


def default_measurements() -> Path | None:
    """The shipped H200 measurement file (profiles/measurements/h200/qwen3-8b.json), if present."""
    candidate = data_dir() / "measurements" / "h200" / "qwen3-8b.json"
    return candidate if candidate.exists() else None


def measured_model(data: dict) -> ModelSpec:
    """The decoder the measurement ran: model shapes, no embeddings or LM head (vocab 0)."""
    c = data["config"]
    return ModelSpec(name=str(data.get("model", "measured")), layers=c["layers"], hidden=c["hidden"], heads=c["heads"],
                     kv_heads=c["kv_heads"], head_dim=c["head_dim"], intermediate=c["inter"], vocab=0)


def gpu_key(gpu_name: str) -> str:
    name = gpu_name.lower()
    for key in ("h200", "h100", "b200", "a100", "l40s", "mi300x"):
        if key in name:
            return key
    raise UserError(f"measurement gpu {gpu_name!r} is not in profiles/hardware.yaml")


def point_errors(path: Path, eff: roofline.Efficiency = roofline.CALIBRATED) -> list[tuple[str, dict, float, float]]:
    """(stage, point, measured_ms, modelled_ms) for every point of a measurement file."""
    try:
        data = json.loads(path.read_text())
    except UnicodeDecodeError as exc:
        raise not_utf8(path, exc) from None
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"{path}: cannot read measurements ({exc})") from None
    spec = measured_model(data)
    hw = load_hardware(gpu_key(str(data.get("gpu", "h200"))))
    tp = int(data.get("tp", 1))
    rows = []
    for p in data.get("prefill", []):
        rows.append(("prefill", p, float(p["ms"]), roofline.prefill_ms(spec, hw, tp, p["isl"], eff)))
    for p in data.get("decode", []):
        rows.append(("decode", p, float(p["ms"]), roofline.decode_step_ms(spec, hw, tp, p["batch"], p["ctx"], eff)))
    return rows


def score_measurements(path: Path, eff: roofline.Efficiency = roofline.CALIBRATED) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"prefill": [], "decode": []}
    for stage, _p, measured, modelled in point_errors(path, eff):
        if stage == "prefill" and measured <= PREFILL_MIN_MS:
            continue
        out[stage].append(abs(modelled / measured - 1.0))
    return {k: v for k, v in out.items() if v}
