"""``python -m bench.compaction`` with small numbers: it runs, removes every superseded
record and prints its row (no timings asserted)."""

from __future__ import annotations

import shutil

import pytest

from bench.compaction import run


def test_compaction_row_removes_every_superseded_record() -> None:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    row = run(records=3000, keys=100, duration=0.2)
    assert row.removed == 2900
    assert "compaction  removed=2900" in row.line()
