"""Requests on disk under ``--results-dir``: one folder per request, surviving a restart.

    <results-dir>/<id>/request.json   the spec as accepted (immutable)
    <results-dir>/<id>/status.json    the latest status (replaced atomically on every change)
    <results-dir>/<id>/artifacts/     only once Ready: profile.json, policy.yaml, result.json, manifests/
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

from planner.requests import artifacts
from planner.requests.spec import ProfileRequestSpec
from planner.requests.status import Status

log = logging.getLogger("planner.requests")
ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,79}$")


def new_id() -> str:
    return f"pr-{uuid.uuid4().hex[:12]}"


def valid_id(request_id: str) -> bool:
    return bool(ID.match(request_id))


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


class ResultsStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def folder(self, request_id: str) -> Path:
        if not valid_id(request_id):
            raise ValueError(f"request id {request_id!r}: expected lower-case letters, digits and '-'")
        return self.root / request_id

    def create(self, request_id: str, spec: ProfileRequestSpec, status: Status) -> None:
        folder = self.folder(request_id)
        folder.mkdir(parents=True, exist_ok=False)
        _write_json(folder / "request.json", spec.model_dump(mode="json", exclude_none=True))
        self.save_status(request_id, status)

    def save_status(self, request_id: str, status: Status) -> None:
        _write_json(self.folder(request_id) / "status.json", status.model_dump(mode="json"))

    def commit(self, request_id: str, files: dict[str, bytes]) -> None:
        artifacts.commit(self.folder(request_id) / "artifacts", files)

    def artifact_names(self, request_id: str) -> list[str]:
        return artifacts.names(self.folder(request_id) / "artifacts")

    def read_artifact(self, request_id: str, name: str) -> bytes | None:
        if name not in self.artifact_names(request_id):  # only listed names: no path tricks
            return None
        return (self.folder(request_id) / "artifacts" / name).read_bytes()

    def delete(self, request_id: str) -> None:
        shutil.rmtree(self.folder(request_id), ignore_errors=True)

    def load(self) -> list[tuple[str, ProfileRequestSpec, Status]]:
        """Every readable request; unreadable folders are logged and skipped, never deleted."""
        out = []
        for folder in sorted(p for p in self.root.iterdir() if p.is_dir() and valid_id(p.name)):
            artifacts.remove_staging(folder)
            try:
                spec = ProfileRequestSpec.model_validate_json((folder / "request.json").read_text())
                status = Status.model_validate_json((folder / "status.json").read_text())
            except (OSError, ValueError) as exc:
                log.warning("results dir %s: skipping unreadable request (%s)", folder, exc)
                continue
            out.append((folder.name, spec, status))
        return out
