"""Which Kafka APIs the pod implements, in which versions, with the message classes that
parse and build them.

The schemas are kafka-python's (``kafka.protocol``, generated from Kafka's own JSON message
definitions, flexible versions and tagged fields included). kafka-python keeps the fields of
the versions Kafka 4 removed (KIP-896) and reads every version from 0, so its schemas serve
Kafka 3.9's whole range: field for field the same as Kafka 3.9's message definitions for
every version below (checked against the 3.9 tag's
``clients/src/main/resources/common/message/*.json``; Fetch 13-17 and ListOffsets 8-9
too: its Fetch v18 and ListOffsets v10-11 fields, which Kafka 4 added, are outside these
versions, and ``tests/kafka/test_codec_versions.py`` pins frames of each against bytes
built from 3.9's definitions).

The floors are Kafka 3.9's (every API here from v0: old clients such as Sarama, kafka-go,
Burrow and librdkafka 2.0 send Produce v2, Fetch v2, ListOffsets v0, OffsetCommit v1,
CreateTopics v0, SaslHandshake v0); the ceilings are Kafka 3.9's where the pod implements
what the versions mean (Fetch 13-17 by topic id, fetch.py; ListOffsets 8-9's tiered-storage
timestamps, answered as Kafka without tiered storage answers them, list_offsets.py) and
stop before versions whose meaning it does not (InitProducerId 6+ is KIP-939's two-phase
commit, EndTxn 5+ KIP-890's epoch bump per transaction). A version outside the table
closes the connection (protocol.py); ApiVersions answers exactly this table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from adapter.kafka.schemas import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)


@dataclass(frozen=True, slots=True)
class Api:
    key: int
    name: str
    request: Any  # the kafka-python request class (index it with a version)
    response: Any
    min_version: int
    max_version: int

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def flexible(self, version: int) -> bool:
        """Flexible versions (KIP-482): compact strings, tagged fields, request header v2."""
        return bool(self.request.flexible_version_q(version))


# Produce v0-2 carry magic 0/1 MessageSets, Fetch v0-3 answer them (message_sets.py);
# Fetch 13+ names topics by id
PRODUCE = Api(0, "Produce", ProduceRequest, ProduceResponse, 0, 11)
FETCH = Api(1, "Fetch", FetchRequest, FetchResponse, 0, 17)
LIST_OFFSETS = Api(2, "ListOffsets", ListOffsetsRequest, ListOffsetsResponse, 0, 9)
METADATA = Api(3, "Metadata", MetadataRequest, MetadataResponse, 0, 12)
# KIP-320's position validation (offset_for_leader_epoch.py); Kafka 3.9's versions, schemas
# from adapter/kafka/schemas/ (kafka-python's start at Kafka 4's v2)
OFFSET_FOR_LEADER_EPOCH = Api(
    23, "OffsetForLeaderEpoch", OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, 0, 4
)
API_VERSIONS = Api(18, "ApiVersions", ApiVersionsRequest, ApiVersionsResponse, 0, 4)
INIT_PRODUCER_ID = Api(22, "InitProducerId", InitProducerIdRequest, InitProducerIdResponse, 0, 5)
CREATE_TOPICS = Api(19, "CreateTopics", CreateTopicsRequest, CreateTopicsResponse, 0, 7)
DESCRIBE_CONFIGS = Api(32, "DescribeConfigs", DescribeConfigsRequest, DescribeConfigsResponse, 0, 4)
DELETE_RECORDS = Api(21, "DeleteRecords", DeleteRecordsRequest, DeleteRecordsResponse, 0, 2)
INCREMENTAL_ALTER_CONFIGS = Api(
    44, "IncrementalAlterConfigs", IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse, 0, 1,
)  # fmt: skip
ALTER_CONFIGS = Api(33, "AlterConfigs", AlterConfigsRequest, AlterConfigsResponse, 0, 2)
DESCRIBE_CLUSTER = Api(60, "DescribeCluster", DescribeClusterRequest, DescribeClusterResponse, 0, 1)
DELETE_TOPICS = Api(20, "DeleteTopics", DeleteTopicsRequest, DeleteTopicsResponse, 0, 6)
CREATE_PARTITIONS = Api(
    37, "CreatePartitions", CreatePartitionsRequest, CreatePartitionsResponse, 0, 3
)
# What operators' tools read (adapter/kafka/cluster_views.py): topics' partitions page by page
# (KIP-966), each broker's share of the logs, each partition's producers; DescribeLogDirs'
# schemas from adapter/kafka/schemas/ (kafka-python's start at Kafka 4's v1)
DESCRIBE_TOPIC_PARTITIONS = Api(
    75, "DescribeTopicPartitions", DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse, 0, 0,
)  # fmt: skip
DESCRIBE_LOG_DIRS = Api(
    35, "DescribeLogDirs", DescribeLogDirsRequest, DescribeLogDirsResponse, 0, 4
)
DESCRIBE_PRODUCERS = Api(
    61, "DescribeProducers", DescribeProducersRequest, DescribeProducersResponse, 0, 0
)

# SaslHandshake v0: the SASL tokens follow as raw frames, without SaslAuthenticate (sasl.py)
SASL_HANDSHAKE = Api(17, "SaslHandshake", SaslHandshakeRequest, SaslHandshakeResponse, 0, 1)
SASL_AUTHENTICATE = Api(
    36, "SaslAuthenticate", SaslAuthenticateRequest, SaslAuthenticateResponse, 0, 2
)

# Consumer groups (adapter/kafka/coordinator.py, groups.py, offsets.py, group_admin.py).
# OffsetCommit 10+ / OffsetFetch 10+ name topics by id.
OFFSET_COMMIT = Api(8, "OffsetCommit", OffsetCommitRequest, OffsetCommitResponse, 0, 9)
OFFSET_FETCH = Api(9, "OffsetFetch", OffsetFetchRequest, OffsetFetchResponse, 0, 9)
FIND_COORDINATOR = Api(
    10, "FindCoordinator", FindCoordinatorRequest, FindCoordinatorResponse, 0, 6
)  # fmt: skip
JOIN_GROUP = Api(11, "JoinGroup", JoinGroupRequest, JoinGroupResponse, 0, 9)
HEARTBEAT = Api(12, "Heartbeat", HeartbeatRequest, HeartbeatResponse, 0, 4)
LEAVE_GROUP = Api(13, "LeaveGroup", LeaveGroupRequest, LeaveGroupResponse, 0, 5)
SYNC_GROUP = Api(14, "SyncGroup", SyncGroupRequest, SyncGroupResponse, 0, 5)
DESCRIBE_GROUPS = Api(15, "DescribeGroups", DescribeGroupsRequest, DescribeGroupsResponse, 0, 6)
LIST_GROUPS = Api(16, "ListGroups", ListGroupsRequest, ListGroupsResponse, 0, 5)
DELETE_GROUPS = Api(42, "DeleteGroups", DeleteGroupsRequest, DeleteGroupsResponse, 0, 2)
OFFSET_DELETE = Api(47, "OffsetDelete", OffsetDeleteRequest, OffsetDeleteResponse, 0, 0)
# Transactions' group half (adapter/kafka/txn_offsets.py); v5 is transactions V2 (KIP-890)
TXN_OFFSET_COMMIT = Api(
    28, "TxnOffsetCommit", TxnOffsetCommitRequest, TxnOffsetCommitResponse, 0, 4
)  # fmt: skip
# KIP-848 (adapter/kafka/consumer_groups.py); schemas from adapter/kafka/schemas/
CONSUMER_GROUP_HEARTBEAT = Api(
    68, "ConsumerGroupHeartbeat", ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse, 0, 1,
)  # fmt: skip
CONSUMER_GROUP_DESCRIBE = Api(
    69, "ConsumerGroupDescribe", ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse, 0, 1,
)  # fmt: skip
# KIP-932 share groups (adapter/kafka/share_groups.py, share_fetch.py): v1, the stable
# version (v0 was Kafka 4.0's early access); schemas from adapter/kafka/schemas/
SHARE_GROUP_HEARTBEAT = Api(
    76, "ShareGroupHeartbeat", ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse, 1, 1
)
SHARE_FETCH = Api(78, "ShareFetch", ShareFetchRequest, ShareFetchResponse, 1, 2)
SHARE_ACKNOWLEDGE = Api(
    79, "ShareAcknowledge", ShareAcknowledgeRequest, ShareAcknowledgeResponse, 1, 2
)
# KIP-932's admin APIs (adapter/kafka/share_admin.py), Kafka 4.2's versions: ShareGroupDescribe
# v1 (v0 was 4.0's early access); DescribeShareGroupOffsets v1 adds the lag (KIP-1226)
SHARE_GROUP_DESCRIBE = Api(
    77, "ShareGroupDescribe", ShareGroupDescribeRequest, ShareGroupDescribeResponse, 1, 1
)
DESCRIBE_SHARE_GROUP_OFFSETS = Api(
    90, "DescribeShareGroupOffsets", DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse, 0, 1,
)  # fmt: skip
ALTER_SHARE_GROUP_OFFSETS = Api(
    91, "AlterShareGroupOffsets", AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse, 0, 0,
)  # fmt: skip
DELETE_SHARE_GROUP_OFFSETS = Api(
    92, "DeleteShareGroupOffsets", DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse, 0, 0,
)  # fmt: skip

# Transactions (adapter/kafka/transactions.py): Kafka 3.9's versions. AddPartitionsToTxn 4+
# (batched, verify-only) is what brokers send each other for KIP-890's verification; clients
# send 0-3. EndTxn 5 would mean a new epoch per transaction (KIP-890 part 2, not offered).
ADD_PARTITIONS_TO_TXN = Api(
    24, "AddPartitionsToTxn", AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, 0, 5
)
ADD_OFFSETS_TO_TXN = Api(
    25, "AddOffsetsToTxn", AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, 0, 4
)
END_TXN = Api(26, "EndTxn", EndTxnRequest, EndTxnResponse, 0, 4)
DESCRIBE_TRANSACTIONS = Api(
    65, "DescribeTransactions", DescribeTransactionsRequest, DescribeTransactionsResponse, 0, 0
)
LIST_TRANSACTIONS = Api(
    66, "ListTransactions", ListTransactionsRequest, ListTransactionsResponse, 0, 1
)

# Users' SCRAM credentials (adapter/kafka/scram_admin.py)
DESCRIBE_USER_SCRAM_CREDENTIALS = Api(
    50, "DescribeUserScramCredentials", DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse, 0, 0,
)  # fmt: skip
ALTER_USER_SCRAM_CREDENTIALS = Api(
    51, "AlterUserScramCredentials", AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse, 0, 0,
)  # fmt: skip

# Kafka's ACL admin APIs (adapter/kafka/acls.py); v0 has no pattern type (LITERAL only)
DESCRIBE_ACLS = Api(29, "DescribeAcls", DescribeAclsRequest, DescribeAclsResponse, 0, 3)
CREATE_ACLS = Api(30, "CreateAcls", CreateAclsRequest, CreateAclsResponse, 0, 3)
DELETE_ACLS = Api(31, "DeleteAcls", DeleteAclsRequest, DeleteAclsResponse, 0, 3)
# Client quotas (adapter/kafka/client_quotas.py): Kafka 3.9's versions
DESCRIBE_CLIENT_QUOTAS = Api(
    48, "DescribeClientQuotas", DescribeClientQuotasRequest, DescribeClientQuotasResponse, 0, 1
)
ALTER_CLIENT_QUOTAS = Api(
    49, "AlterClientQuotas", AlterClientQuotasRequest, AlterClientQuotasResponse, 0, 1
)

IMPLEMENTED: dict[int, Api] = {
    api.key: api
    for api in (
        DESCRIBE_ACLS,
        CREATE_ACLS,
        DELETE_ACLS,
        PRODUCE,
        FETCH,
        LIST_OFFSETS,
        METADATA,
        OFFSET_FOR_LEADER_EPOCH,
        API_VERSIONS,
        INIT_PRODUCER_ID,
        CREATE_TOPICS,
        DESCRIBE_CONFIGS,
        DESCRIBE_CLUSTER,
        DELETE_RECORDS,
        INCREMENTAL_ALTER_CONFIGS,
        ALTER_CONFIGS,
        SASL_HANDSHAKE,
        SASL_AUTHENTICATE,
        DELETE_TOPICS,
        CREATE_PARTITIONS,
        DESCRIBE_TOPIC_PARTITIONS,
        DESCRIBE_LOG_DIRS,
        DESCRIBE_PRODUCERS,
        OFFSET_COMMIT,
        OFFSET_FETCH,
        FIND_COORDINATOR,
        JOIN_GROUP,
        HEARTBEAT,
        LEAVE_GROUP,
        SYNC_GROUP,
        DESCRIBE_GROUPS,
        LIST_GROUPS,
        DELETE_GROUPS,
        OFFSET_DELETE,
        TXN_OFFSET_COMMIT,
        CONSUMER_GROUP_HEARTBEAT,
        CONSUMER_GROUP_DESCRIBE,
        SHARE_GROUP_HEARTBEAT,
        SHARE_FETCH,
        SHARE_ACKNOWLEDGE,
        SHARE_GROUP_DESCRIBE,
        DESCRIBE_SHARE_GROUP_OFFSETS,
        ALTER_SHARE_GROUP_OFFSETS,
        DELETE_SHARE_GROUP_OFFSETS,
        ADD_PARTITIONS_TO_TXN,
        ADD_OFFSETS_TO_TXN,
        END_TXN,
        DESCRIBE_TRANSACTIONS,
        LIST_TRANSACTIONS,
        DESCRIBE_CLIENT_QUOTAS,
        ALTER_CLIENT_QUOTAS,
        DESCRIBE_USER_SCRAM_CREDENTIALS,
        ALTER_USER_SCRAM_CREDENTIALS,
    )
}


def supported_versions() -> list[Any]:
    """ApiVersions' list of APIs: exactly IMPLEMENTED (also in its v0 error reply,
    protocol.error_response)."""
    entry = API_VERSIONS.response.ApiVersion
    return [
        entry(api_key=api.key, min_version=api.min_version, max_version=api.max_version)
        for api in sorted(IMPLEMENTED.values(), key=lambda api: api.key)
    ]
