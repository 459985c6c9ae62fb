"""The project's optional C extensions (setup.py): a function of one, or None where the
install did not build it (no C compiler) or ADAPTER_PURE_PYTHON asks for the pure-Python
paths (the tests run both)."""

from __future__ import annotations

import importlib
import os
from typing import Any


def compiled(module: str, name: str) -> Any | None:
    """``module.name`` when that extension is built and the pure paths are not asked for;
    None else (an extension built before it had ``name`` included)."""
    if os.environ.get("ADAPTER_PURE_PYTHON"):
        return None
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
