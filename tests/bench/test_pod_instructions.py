"""``bench.pod_instructions`` counts a pod's instructions under callgrind while it answers
PRODUCEs: a few thousand instructions each at least, more for more requests (no exact figure
asserted: it moves a little with how the pod's calls batch)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench.pod_instructions import pod_instructions


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_the_count_is_the_requests(redis_url: str, tmp_path: Path) -> None:
    fewer = pod_instructions(redis_url, 256, 128, 4, False, tmp_path)
    more = pod_instructions(redis_url, 1024, 128, 4, False, tmp_path)
    assert fewer / 256 > 5_000, fewer
    assert (more - fewer) / (1024 - 256) > 5_000, (fewer, more)
