"""Checks a command makes before it starts work: an output path it can write, a port it can bind.

Both fail fast with one line naming the flag and the value (exit 2), instead of a traceback minutes later
when a backtest writes its report or a server binds its port.
"""

from __future__ import annotations

import errno
import os
import socket
import tempfile
from pathlib import Path

from planner.errors import UserError


def check_writable(flag: str, path: Path) -> None:
    """``path`` (a file or a folder a command creates) can be made: its nearest existing ancestor is a folder
    that takes a new entry, and the path itself, when it exists, takes a write. Probed by doing it (a temporary
    entry, removed at once) rather than by ``os.access``, which says yes to root everywhere, even in /proc or on
    a read-only mount."""
    path = Path(path)
    if path.is_dir():
        _probe_folder(flag, path, path)
        return
    if path.exists():
        try:
            with path.open("ab"):  # appends nothing: the file is left as it was
                pass
        except OSError as exc:
            raise UserError(f"{flag} {path}: cannot write: {exc.strerror or exc}") from None
        return
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"{flag} {path}: cannot write: {parent} is not a directory")
    _probe_folder(flag, path, parent)


def _probe_folder(flag: str, path: Path, folder: Path) -> None:
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".planner-probe-", dir=folder))
    except OSError as exc:
        where = "" if folder == path else f"{folder} "
        raise UserError(f"{flag} {path}: cannot write: {where}is not writable ({exc.strerror or exc})") from None


def within(path: Path, filename: object) -> bool:
    """Whether an OSError's ``filename`` is ``path`` or lies under it."""
    if not isinstance(filename, str | os.PathLike):
        return False
    try:
        Path(os.fspath(filename)).absolute().relative_to(Path(path).absolute())
    except ValueError:
        return False
    return True


def check_port_free(flag: str, host: str, port: int) -> None:
    """``host:port`` can be bound now (port 0: any free port, nothing to check). Binds as uvicorn and gRPC do
    (SO_REUSEADDR), so a port left in TIME_WAIT passes and one another process listens on does not."""
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UserError(f"--host {host!r}: cannot resolve it ({exc.strerror})") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UserError(f"{flag} {port}: already in use on {host} (another process listens on it); "
                                "choose another port") from None
            if exc.errno == errno.EADDRNOTAVAIL:
                raise UserError(f"--host {host!r}: not an address of this machine") from None
            if exc.errno == errno.EACCES:
                raise UserError(f"{flag} {port}: permission denied (ports below 1024 need privileges)") from None
            raise UserError(f"{flag} {port}: cannot bind on {host} ({exc.strerror})") from None
