"""The ready replicas as a Prometheus file_sd JSON: what Prometheus scrapes and what the router routes to.

One file, one truth: the process actuator writes it (atomically: a complete new file renamed over the old,
so a reader never sees half of one), Prometheus' ``file_sd_configs`` and `planner route` read it::

    [{"targets": ["127.0.0.1:8101"], "labels": {"pool": "decode"}}, ...]

A replica is listed from the moment it answers /health and /v1/models until the moment the actuator
decides to stop it; draining replicas are not listed, so neither new requests nor new scrapes reach them.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from planner.actuators.settings import ActuatorSettings

TARGETS_FILE = "targets.json"


@dataclass(frozen=True)
class Target:
    address: str  # host:port
    pool: str

    @property
    def url(self) -> str:
        return f"http://{self.address}"


def render(targets: Iterable[Target]) -> str:
    groups = [{"targets": [t.address], "labels": {"pool": t.pool}}
              for t in sorted(targets, key=lambda t: (t.pool, t.address))]
    return json.dumps(groups, indent=1) + "\n"


def write_targets(path: Path, targets: Iterable[Target]) -> bool:
    """Replace ``path`` atomically with ``targets``; False when it already said exactly that (no write)."""
    text = render(targets)
    try:
        if path.read_text() == text:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".targets-", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


class TargetsError(ValueError):
    """The file is not a file_sd list of groups with targets and a pool label."""


def parse_targets(text: str, source: str = "targets") -> list[Target]:
    try:
        groups = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TargetsError(f"{source}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(groups, list):
        raise TargetsError(f"{source}: expected a list of target groups, got {type(groups).__name__}")
    out: list[Target] = []
    for i, group in enumerate(groups):
        labels = group.get("labels") if isinstance(group, dict) else None
        addresses = group.get("targets") if isinstance(group, dict) else None
        pool = labels.get("pool") if isinstance(labels, dict) else None
        if not isinstance(addresses, list) or not isinstance(pool, str):
            raise TargetsError(f"{source}: group {i} needs \"targets\" (a list) and labels.pool (a string)")
        for address in addresses:
            if not isinstance(address, str) or ":" not in address:
                raise TargetsError(f"{source}: group {i}: target {address!r} is not host:port")
            out.append(Target(address, pool))
    return out


def targets_path(state_dir: Path) -> Path:
    return state_dir / TARGETS_FILE


def default_state_dir(policy_name: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in policy_name)
    return Path(tempfile.gettempdir()) / f"planner-{safe}"


def state_dir_of(policy_name: str, actuator: ActuatorSettings) -> Path:
    """Where a policy's process actuator keeps engine logs and targets.json (`planner route` reads it too)."""
    configured = actuator.state_dir
    return Path(configured) if configured else default_state_dir(policy_name)
