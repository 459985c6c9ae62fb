"""Share groups (KIP-932) in tests: group configs set as Kafka's clients set them
(IncrementalAlterConfigs on the GROUP resource) and confluent-kafka ShareConsumers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from confluent_kafka import ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

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
