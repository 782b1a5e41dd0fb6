"""Logging for ``planner run``: text or one JSON object per line (``--log-format json``), set up by the CLI
(never at import).

Client-library retry chatter is silenced: urllib3 logs a WARNING for every retry of a failed connection
(the Prometheus source retries connection errors once), and the kubernetes client's urllib3 pool does the
same, so one outage read as a burst of lines before the planner's own one line ("Prometheus unreachable
...; holding"), which says everything they say. Errors from those libraries still come through. httpx
logs every request at INFO (readiness probes, drains and the router make several a second); its warnings
still come through.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

FORMATS = ("text", "json")
TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
QUIET = ("urllib3.connectionpool", "urllib3.util.retry", "kubernetes.client.rest")
PER_REQUEST = ("httpx",)


def setup_logging(level: int, fmt: str = "text", stream: TextIO | None = None) -> logging.Handler:
    """Configure the root logger; returns the handler installed (tests read what it writes)."""
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r}; allowed: {', '.join(FORMATS)}")
    handler = logging.StreamHandler(stream or sys.stderr)
    if fmt == "json":
        from pythonjsonlogger.json import JsonFormatter

        handler.setFormatter(JsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s",
                                           rename_fields={"asctime": "time", "levelname": "level",
                                                          "name": "logger"}))
    else:
        handler.setFormatter(logging.Formatter(TEXT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name in QUIET:
        logging.getLogger(name).setLevel(max(level, logging.ERROR))
    for name in PER_REQUEST:
        logging.getLogger(name).setLevel(max(level, logging.WARNING))
    return handler
