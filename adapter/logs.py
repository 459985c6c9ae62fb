"""Structured logs: one JSON object per line (python-json-logger), or plain text."""

from __future__ import annotations

import logging
import os
import socket

from pythonjsonlogger.json import JsonFormatter

FORMATS = ("json", "text")


def configure(level: str, fmt: str = "json") -> None:
    """Log to stderr at ``level``; ``json`` adds the pod (host and pid) to every line so
    logs of many pods can be told apart after collection."""
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(
            JsonFormatter(
                "{asctime}{levelname}{name}{message}",
                style="{",
                rename_fields={"asctime": "ts", "levelname": "level", "name": "logger"},
                static_fields={"pod": f"{socket.gethostname()}-{os.getpid()}"},
                timestamp=False,
            )
        )
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
