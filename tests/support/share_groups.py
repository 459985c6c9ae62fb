"""Share groups (KIP-932) in tests: group configs set as Kafka's clients set them
(IncrementalAlterConfigs on the GROUP resource) and confluent-kafka ShareConsumers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from tests.support import ROOT
from tests.support.waiting import wait_until

if TYPE_CHECKING:
    from tests.support.pods import Pod


def group_configs(pod: Pod, group: str, **configs: str) -> None:
    """Set ``group``'s configs, their dots as underscores (``share_auto_offset_reset``)."""
    admin = AdminClient({"bootstrap.servers": pod.bootstrap})
    entries = [
        ConfigEntry(name.replace("_", "."), value, incremental_operation=AlterConfigOpType.SET)
        for name, value in configs.items()
    ]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)


def earliest(pod: Pod, group: str, **more: str) -> None:
    """The group starts at the log's start (share.auto.offset.reset=earliest); ``more``:
    other group configs, as group_configs takes them."""
    group_configs(pod, group, share_auto_offset_reset="earliest", **more)


def share_consumer(
    pod: Pod, group: str, topics: list[str] | None = None, **config: Any
) -> ShareConsumer:
    """A ShareConsumer of ``group`` through ``pod`` (``config``: more of librdkafka's
    settings, as written), subscribed to ``topics`` when given."""
    consumer = ShareConsumer(
        {"bootstrap.servers": pod.bootstrap, "group.id": group, "socket.timeout.ms": 5000,
         **config}
    )  # fmt: skip
    if topics is not None:
        consumer.subscribe(topics)
    return consumer


def killed_holder(pod: Pod, group: str, topic: str, status: Path) -> dict[tuple[int, int], int]:
    """A ShareConsumer in a child process (tests/kafka/share_member.py) that polled once and
    was SIGKILLed holding what it got (no acknowledgement, no leave): (partition, offset) ->
    delivery count of each record it held."""
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.kafka.share_member", pod.bootstrap, group, topic,
         str(status)],
        cwd=ROOT,
    )  # fmt: skip
    try:
        wait_until(status.exists, timeout=60)
    finally:
        child.kill()
        child.wait(timeout=10)
    lines = status.read_text().splitlines()
    return {(int(p), int(o)): int(c) for p, o, c in map(str.split, lines)}
