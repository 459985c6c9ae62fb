"""The stream applications' pods: two on the run's Redis, under a key prefix of their own
with one sequence bit (``--sequence-bits 1``).

Faust's consumer records every offset between two it received as a gap and, at each commit,
lists every offset of those gaps one by one (faust/transport/consumer.py, ``_new_offset``).
Offsets here encode time, ``(ms << B) | seq``: with the default B of 10 a pause of a second
between records is a gap of about a million offsets, and the scenario's pauses made
Faust's commits block its event loop for 2-3 s, long enough to unsettle its recovery (it
then skipped records fetched across its seek to the committed offsets). With one bit a
second is 2,000 offsets (docs/apps.md says this to Faust's users)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.apps.streams import APPS_PREFIX
from tests.support.pods import RF1, Pod, start_all


@pytest.fixture(scope="session")
def app_pods(redis_url: str) -> Iterator[tuple[Pod, Pod]]:
    args = (*RF1, "--key-prefix", APPS_PREFIX, "--sequence-bits", "1")
    pods = [Pod(redis_url, *args) for _ in range(2)]
    start_all(pods)
    yield pods[0], pods[1]
    for pod in pods:
        pod.stop()
