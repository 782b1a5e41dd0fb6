"""Shipped data: model configs by name, the hardware table. The only place that reads those files."""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from planner.errors import UserError, not_utf8
from planner.perf.hardware import HardwareSpec
from planner.perf.model import ModelConfigError, ModelSpec, model_from_hf_config

PACKAGE_DIR = Path(__file__).resolve().parent


@cache
def shipped_root() -> Path:
    """The folder that holds ``profiles/`` and ``policies/``: the repository's root when the planner runs from a
    checkout (``pip install -e``, PYTHONPATH), else the copies an installed wheel carries in ``planner/shipped/``
    (two links to those folders in the checkout, followed by the build: pyproject.toml's package-data)."""
    checkout = PACKAGE_DIR.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "profiles").is_dir():
        return checkout
    return PACKAGE_DIR / "shipped"


def data_dir() -> Path:
    """The shipped ``profiles/`` folder (override with PLANNER_DATA_DIR)."""
    env = os.environ.get("PLANNER_DATA_DIR")
    if env:
        return Path(env)
    return shipped_root() / "profiles"


def policies_dir() -> Path:
    """The shipped ``policies/`` folder (the example policy, the knob-search grids)."""
    return shipped_root() / "policies"


def example_policy() -> Path:
    """``policies/example.yaml``: every field and its default, the policy the demo and the benches run."""
    return policies_dir() / "example.yaml"


def shipped_profile(name: str) -> Path:
    """A profile shipped under ``profiles/`` (``h200/qwen3-32b.json``), the benches' default (not PLANNER_DATA_DIR's:
    a bench's figures are the shipped profile's)."""
    return shipped_root() / "profiles" / name


def traces_dir() -> Path:
    """The shipped public traces (``profiles/traces``: azure2023/, servegen/), the default of every --traces."""
    return data_dir() / "traces"


def model_names() -> list[str]:
    return sorted(p.stem for p in (data_dir() / "models").glob("*.json"))


def load_model(name_or_path: str) -> ModelSpec:
    """A shipped model by name (``qwen3-32b``) or a Hugging Face config.json by path."""
    path = Path(name_or_path)
    looks_like_path = path.suffix == ".json" or os.sep in name_or_path or path.is_dir()
    if looks_like_path:
        if path.is_dir():
            path = path / "config.json"
        name = path.parent.name if path.name == "config.json" else path.stem
    else:
        key = name_or_path.lower()
        path = data_dir() / "models" / f"{key}.json"
        name = key
        if not path.exists():
            raise UserError(f"model {name_or_path!r}: unknown model; shipped models: "
                            f"{', '.join(model_names())} (or pass a path to a config.json)", key="model")
    try:
        cfg: Any = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"model {name_or_path!r}: file {path} not found", key="model") from None
    except UnicodeDecodeError as exc:
        raise not_utf8(path, exc) from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        return model_from_hf_config(cfg, name)
    except ModelConfigError as exc:
        raise UserError(f"{path}: {exc}") from None


@cache
def _hardware_table() -> dict[str, dict[str, Any]]:
    path = data_dir() / "hardware.yaml"
    table = yaml.safe_load(path.read_text())
    if not isinstance(table, dict):
        raise UserError(f"{path}: expected a mapping of GPU name to specs")
    return table


def gpu_names() -> list[str]:
    return sorted(_hardware_table())


ALIASES = {"h100": "h100-sxm", "a100": "a100-80gb", "h200-sxm": "h200"}


def load_hardware(name: str) -> HardwareSpec:
    key = ALIASES.get(name.lower(), name.lower())
    row = _hardware_table().get(key)
    if row is None:
        raise UserError(f"gpu {name!r}: unknown GPU; known: {', '.join(gpu_names())}", key="gpu")
    return HardwareSpec(
        name=key,
        memory_bytes=float(row["memory_gb"]) * 1e9,
        hbm_bytes_per_s=float(row["hbm_tb_s"]) * 1e12,
        bf16_flops=float(row["bf16_tflops"]) * 1e12,
        fp8_flops=float(row["fp8_tflops"]) * 1e12 if row.get("fp8_tflops") else None,
        link_bytes_per_s=float(row["link_gb_s"]) * 1e9,
        nic_gbps=float(row["nic_gbps"]),
        vendor=str(row.get("vendor", "")),
        source=str(row.get("source", "")),
    )
