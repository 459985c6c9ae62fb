"""The pod's allocator setting (adapter/allocator.py): glibc keeps what a Fetch's buffers
free, so the next one does not fault the same pages in again; an operator's own glibc
settings win."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from adapter.allocator import OPERATOR_SETTINGS, _glibc

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not _glibc(), reason="the C library is not glibc")

# A Fetch's pattern: a reply buffer grown a megabyte at a time, a response made of it, both
# freed; prints the page faults of 20 more after the first (and whether the setting took).
FETCH_BUFFERS = """
import resource
from adapter.allocator import keep_freed_memory
kept = keep_freed_memory() if KEEP else False
chunk = b"x" * (1 << 20)
def cycle():
    buffer = bytearray()
    for _ in range(12):
        buffer += chunk
    response = bytes(buffer)
    del buffer, response
cycle()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    cycle()
print(kept, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _run(keep: bool, **env: str) -> tuple[bool, int]:
    clean = {k: v for k, v in os.environ.items() if k not in OPERATOR_SETTINGS}
    result = subprocess.run(
        [sys.executable, "-c", f"KEEP = {keep}\n{FETCH_BUFFERS}"],
        env={**clean, **env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        check=True, timeout=60,
    )  # fmt: skip
    kept, faults = result.stdout.split()
    return kept == "True", int(faults)


def test_freed_buffers_are_reused_without_page_faults() -> None:
    kept, faults = _run(keep=True)
    assert kept
    # A cycle's 12 MiB are 3,072 pages: glibc's defaults (Debian's 2.36) fault thousands of
    # them in again over the 20 cycles; kept, hardly any.
    default = _run(keep=False)[1]
    assert faults < 256, f"{faults} page faults kept, {default} with glibc's defaults"


def test_the_operators_glibc_settings_win() -> None:
    kept, _ = _run(keep=True, MALLOC_TRIM_THRESHOLD_="131072")
    assert not kept
