"""Write a rendered set of files so that readers see all of it or none of it.

Everything is written into a staging folder beside the destination first; only then are the entries moved
into place with renames (atomic on one filesystem). A failure while staging removes the staging folder and
leaves the destination as it was. Top-level folders (``manifests/``) are swapped whole, so no file of an
earlier rendering lingers in them.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path, PurePosixPath


def _safe(name: str) -> PurePosixPath:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise ValueError(f"artifact name {name!r} must be a relative path inside the folder")
    return path


def _stage(stage: Path, files: dict[str, bytes]) -> None:
    for name, content in files.items():
        target = stage / _safe(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)


def _swap_in(stage: Path, entry: str, dest: Path) -> None:
    src, dst = stage / entry, dest / entry
    if src.is_dir() and dst.exists():
        old = dest / f".{entry}.old-{uuid.uuid4().hex[:8]}"
        os.rename(dst, old)
        os.rename(src, dst)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(src, dst)


def commit(dest: Path, files: dict[str, bytes]) -> None:
    """Write ``files`` (relative path -> bytes) under ``dest``, all of them or none."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    stage = dest.parent / f".{dest.name}.staging-{uuid.uuid4().hex[:8]}"
    try:
        _stage(stage, files)
        if not dest.exists():
            os.rename(stage, dest)
            return
        for entry in sorted({_safe(n).parts[0] for n in files}):
            _swap_in(stage, entry, dest)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def remove_staging(parent: Path) -> list[Path]:
    """Staging folders left by a process that stopped mid-commit (they never became visible)."""
    leftovers = [p for p in parent.glob(".*.staging-*") if p.is_dir()]
    for p in leftovers:
        shutil.rmtree(p, ignore_errors=True)
    return leftovers


def names(root: Path) -> list[str]:
    if not root.is_dir():
        return []
    return sorted(str(p.relative_to(root).as_posix()) for p in root.rglob("*")
                  if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts))
