"""Render one profiling worker (Deployment + Service) from a user's Deployment template, at one TP size.

The template is an ordinary ``apps/v1`` Deployment running vLLM or SGLang. For each TP size the copy gets:
- the engine's TP flag, replaced where the template has it and appended where it does not
  (vLLM ``--tensor-parallel-size N`` (also ``-tp``), SGLang ``--tp N`` (also ``--tp-size``,
  ``--tensor-parallel-size``));
- ``nvidia.com/gpu: N`` in the container's limits and requests;
- one replica, a unique name (``<template name>-tp<N>-<random>``) and a label that selects exactly its pods;
- a ClusterIP Service in front of it on the engine's port (the first containerPort, else ``--port``,
  else the engine's default).
Both carry ``app.kubernetes.io/managed-by: planner-profiler`` so leftovers can be found by label.
"""

from __future__ import annotations

import copy
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from planner.errors import UserError, not_utf8

ENGINES = ("vllm", "sglang")
TP_FLAGS = {"vllm": ("--tensor-parallel-size", "-tp"), "sglang": ("--tp", "--tp-size", "--tensor-parallel-size")}
DEFAULT_PORTS = {"vllm": 8000, "sglang": 30000}
GPU_RESOURCE = "nvidia.com/gpu"
MANAGED_BY = {"app.kubernetes.io/managed-by": "planner-profiler"}
WORKER_LABEL = "planner.profile/worker"


@dataclass(frozen=True)
class Worker:
    name: str
    namespace: str
    tp: int
    port: int
    deployment: dict[str, Any]
    service: dict[str, Any]


def is_inline(template: str) -> bool:
    """A manifest given as YAML text (a profile request carries it inline) rather than a file's path."""
    return "\n" in template or template.lstrip().startswith(("{", "apiVersion:", "kind:"))


def _as_yaml(template: str) -> str:
    """For a template taken for a path that is no file: what it is wrong with it as one line of YAML, if it
    reads as YAML at all (``a: [1,`` is a broken manifest, not a missing file)."""
    if ":" not in template and not template.lstrip().startswith(("[", "{")):
        return ""
    try:
        yaml.safe_load(template)
    except yaml.YAMLError as exc:
        return f"; read as inline YAML it is not valid either ({str(exc).splitlines()[0]})"
    return ""


def load_template(template: str) -> dict[str, Any]:
    """The template's one Deployment (other documents are ignored): ``template`` is a path or YAML text."""
    p = "the inline template" if is_inline(template) else Path(template)
    try:
        text = template if isinstance(p, str) else p.read_text()
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except FileNotFoundError:
        raise UserError(f"template: {p}: file not found{_as_yaml(template)}", key="template") from None
    except OSError as exc:
        raise UserError(f"template: {p}: cannot read ({exc.strerror})", key="template") from None
    except UnicodeDecodeError as exc:
        raise not_utf8(f"template: {p}", exc, key="template") from None
    except yaml.YAMLError as exc:
        raise UserError(f"template: {p}: not valid YAML ({str(exc).splitlines()[0]})", key="template") from None
    deployments = [d for d in docs if isinstance(d, dict) and d.get("kind") == "Deployment"]
    if len(deployments) != 1:
        raise UserError(f"template: {p}: expected one Deployment (kind: Deployment), found {len(deployments)}",
                        key="template")
    dep = deployments[0]
    containers = (((dep.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")
    if not isinstance(containers, list) or not containers or not all(isinstance(c, dict) for c in containers):
        raise UserError(f"template: {p}: spec.template.spec.containers must list the engine's container",
                        key="template")
    if not (dep.get("metadata") or {}).get("name"):
        raise UserError(f"template: {p}: metadata.name is required (workers are named after it)", key="template")
    return dep


def _command_line(container: dict[str, Any]) -> list[str]:
    return [str(x) for x in (container.get("command") or []) + (container.get("args") or [])]


def engine_container(dep: dict[str, Any], engine: str | None) -> tuple[int, str]:
    """(index of the engine's container, engine): the first container whose command names vLLM or SGLang."""
    if engine is not None and engine not in ENGINES:
        raise UserError(f"engine: {engine!r}: allowed {', '.join(ENGINES)}", key="engine")
    containers = dep["spec"]["template"]["spec"]["containers"]
    for i, c in enumerate(containers):
        text = " ".join(_command_line(c) + [str(c.get("image", ""))]).lower()
        found = "sglang" if "sglang" in text else "vllm" if "vllm" in text else None
        if found and (engine is None or engine == found):
            return i, found
    if engine is not None:
        return 0, engine
    raise UserError("engine: cannot tell vLLM from SGLang in the template's containers (no 'vllm' or 'sglang' in "
                    "their command, args or image); set engine", key="engine")


def set_flag(argv: list[str], names: tuple[str, ...], value: str) -> list[str]:
    """``argv`` with the first of ``names`` set to ``value`` (``--x v`` or ``--x=v``), others of ``names``
    removed, and ``names[0] value`` appended when none was there."""
    out: list[str] = []
    done = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        key = arg.split("=", 1)[0]
        if key in names:
            takes_next = "=" not in arg and i + 1 < len(argv)
            if not done:
                out += [key, value] if "=" not in arg else [f"{key}={value}"]
                done = True
            i += 2 if takes_next else 1
            continue
        out.append(arg)
        i += 1
    return out if done else [*out, names[0], value]


def _set_tp(container: dict[str, Any], names: tuple[str, ...], tp: int) -> None:
    """The TP flag where the template has it (command or args; any other copy removed), else in args
    (or the command when the container has no args)."""
    command = [str(x) for x in container.get("command") or []]
    args = [str(x) for x in container.get("args") or []]
    in_command = any(a.split("=", 1)[0] in names for a in command)
    in_args = any(a.split("=", 1)[0] in names for a in args)
    if in_command and not in_args:
        container["command"] = set_flag(command, names, str(tp))
    elif args or in_args:
        if in_command:
            container["command"] = _drop(command, names)
        container["args"] = set_flag(args, names, str(tp))
    else:
        container["command"] = set_flag(command, names, str(tp))


def _drop(argv: list[str], names: tuple[str, ...]) -> list[str]:
    out, i = [], 0
    while i < len(argv):
        if argv[i].split("=", 1)[0] in names:
            i += 1 if "=" in argv[i] else 2
            continue
        out.append(argv[i])
        i += 1
    return out


def _engine_port(container: dict[str, Any], engine: str) -> int:
    for port in container.get("ports") or []:
        if isinstance(port, dict) and port.get("containerPort"):
            return int(port["containerPort"])
    argv = _command_line(container)
    for i, arg in enumerate(argv):
        if arg == "--port" and i + 1 < len(argv) and argv[i + 1].isdigit():
            return int(argv[i + 1])
        if arg.startswith("--port=") and arg[7:].isdigit():
            return int(arg[7:])
    return DEFAULT_PORTS[engine]


def _dns_name(base: str, tp: int) -> str:
    stem = re.sub(r"[^a-z0-9-]", "-", base.lower()).strip("-")[:40].strip("-") or "worker"
    return f"{stem}-tp{tp}-{secrets.token_hex(3)}"


def render_worker(template: dict[str, Any], tp: int, namespace: str, engine: str | None = None) -> Worker:
    dep = copy.deepcopy(template)
    index, engine_name = engine_container(dep, engine)
    name = _dns_name(dep["metadata"]["name"], tp)
    container = dep["spec"]["template"]["spec"]["containers"][index]
    _set_tp(container, TP_FLAGS[engine_name], tp)
    resources = container.setdefault("resources", {})
    for kind in ("limits", "requests"):
        resources.setdefault(kind, {})[GPU_RESOURCE] = str(tp)
    select = {WORKER_LABEL: name}
    dep["metadata"] = {**dep["metadata"], "name": name, "namespace": namespace,
                       "labels": {**(dep["metadata"].get("labels") or {}), **MANAGED_BY, **select}}
    pod_meta = dep["spec"]["template"].setdefault("metadata", {})
    pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **select}
    dep["spec"]["replicas"] = 1
    dep["spec"]["selector"] = {"matchLabels": dict(select)}
    port = _engine_port(container, engine_name)
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name, "namespace": namespace, "labels": {**MANAGED_BY, **select}},
               "spec": {"type": "ClusterIP", "selector": select,
                        "ports": [{"name": "http", "port": port, "targetPort": port, "protocol": "TCP"}]}}
    return Worker(name, namespace, tp, port, dep, service)
