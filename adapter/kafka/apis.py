"""The handler of each implemented API (versions.IMPLEMENTED): ``await handler(context,
request)`` -> the response message, or None for no response (Produce with acks=0). The
connection's SASL gate (sasl.SaslGate) answers SaslHandshake and SaslAuthenticate."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from adapter.kafka import (
    admin,
    api_versions,
    configs,
    consumer_groups,
    coordinator,
    fetch,
    group_admin,
    groups,
    init_producer_id,
    list_offsets,
    metadata,
    offsets,
    produce,
    transactions,
)
from adapter.kafka.sasl import SASL_APIS
from adapter.kafka.versions import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    ALTER_CONFIGS,
    API_VERSIONS,
    CONSUMER_GROUP_DESCRIBE,
    CONSUMER_GROUP_HEARTBEAT,
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_GROUPS,
    DELETE_RECORDS,
    DELETE_TOPICS,
    DESCRIBE_CLUSTER,
    DESCRIBE_CONFIGS,
    DESCRIBE_GROUPS,
    DESCRIBE_TRANSACTIONS,
    END_TXN,
    FETCH,
    FIND_COORDINATOR,
    HEARTBEAT,
    IMPLEMENTED,
    INCREMENTAL_ALTER_CONFIGS,
    INIT_PRODUCER_ID,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    LIST_OFFSETS,
    LIST_TRANSACTIONS,
    METADATA,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    PRODUCE,
    SYNC_GROUP,
)

Handler = Callable[[Any, Any], Awaitable[Any]]

HANDLERS: dict[int, Handler] = {
    PRODUCE.key: produce.handle,
    FETCH.key: fetch.handle,
    LIST_OFFSETS.key: list_offsets.handle,
    METADATA.key: metadata.handle,
    API_VERSIONS.key: api_versions.handle,
    INIT_PRODUCER_ID.key: init_producer_id.handle,
    CREATE_TOPICS.key: admin.create_topics,
    DESCRIBE_CONFIGS.key: configs.describe_configs,
    ALTER_CONFIGS.key: configs.alter_configs,
    DESCRIBE_CLUSTER.key: admin.describe_cluster,
    DELETE_RECORDS.key: admin.delete_records,
    INCREMENTAL_ALTER_CONFIGS.key: configs.incremental_alter_configs,
    DELETE_TOPICS.key: admin.delete_topics,
    CREATE_PARTITIONS.key: admin.create_partitions,
    FIND_COORDINATOR.key: coordinator.handle,
    JOIN_GROUP.key: groups.join_group,
    SYNC_GROUP.key: groups.sync_group,
    HEARTBEAT.key: groups.heartbeat,
    LEAVE_GROUP.key: groups.leave_group,
    OFFSET_COMMIT.key: offsets.offset_commit,
    OFFSET_FETCH.key: offsets.offset_fetch,
    OFFSET_DELETE.key: offsets.offset_delete,
    LIST_GROUPS.key: group_admin.list_groups,
    DESCRIBE_GROUPS.key: group_admin.describe_groups,
    DELETE_GROUPS.key: group_admin.delete_groups,
    CONSUMER_GROUP_HEARTBEAT.key: consumer_groups.consumer_group_heartbeat,
    CONSUMER_GROUP_DESCRIBE.key: consumer_groups.consumer_group_describe,
    ADD_PARTITIONS_TO_TXN.key: transactions.add_partitions_to_txn,
    ADD_OFFSETS_TO_TXN.key: transactions.add_offsets_to_txn,
    END_TXN.key: transactions.end_txn,
    DESCRIBE_TRANSACTIONS.key: transactions.describe_transactions,
    LIST_TRANSACTIONS.key: transactions.list_transactions,
}
assert set(HANDLERS) == set(IMPLEMENTED) - SASL_APIS
