"""The fixture of the tests that run pods under Redis Sentinel (test_sentinel.py,
test_sentinel_producers.py, test_truncation.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.sentinels import SentinelDeployment


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[SentinelDeployment]:
    """A primary, its replica and three sentinels of the test's own."""
    started = SentinelDeployment.start(tmp_path)
    yield started
    started.stop()
