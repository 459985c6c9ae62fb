"""Every Redis error by its kind (mapping/connection/redis_errors.py), on a Redis Cluster pod: the
cluster batcher's answer to each, and what Kafka Produce and V1 PRODUCE answer with it. A
fake cluster client stands in for redis-py's, raising the error of each kind.

Not run (CLUSTERDOWN, TRYAGAIN, MOVED/ASK left over, LOADING, READONLY, MASTERDOWN, OOM, a
slot no node covers, a failed connect): ``Unavailable``, Kafka KAFKA_STORAGE_ERROR, V1
UNAVAILABLE. Sent, outcome unknown (a connection reset or timeout after the write):
``OutcomeUnknown``, Kafka REQUEST_TIMED_OUT ("possibly written"), V1 UNAVAILABLE. Never a
Produce response without an error code in each partition (an empty one reads as success:
librdkafka then re-sent stored batches under a new epoch, storing them twice)."""

from __future__ import annotations

import asyncio
import socket
from types import SimpleNamespace
from typing import Any

import pytest
from redis.asyncio.connection import Connection
from redis.exceptions import (
    AskError,
    BusyLoadingError,
    ClusterDownError,
    ClusterError,
    MasterDownError,
    MaxConnectionsError,
    MovedError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from adapter.authorizer import Authorizer
from adapter.kafka import errors, produce, protocol
from adapter.kafka.versions import PRODUCE
from adapter.settings import Settings
from adapter.v1.answer import answer
from adapter.v1.handlers import Context
from adapter.v1.handlers.table import build_table
from mapping.connection.cluster_batcher import ClusterBatcher
from mapping.connection.redis_errors import ConnectFailed, _marked
from mapping.core.errors import BrokerError, OutcomeUnknown, Unavailable
from mapping.core.keys import Keys
from mapping.partition.kafka import KafkaStore
from mapping.partition.partitions import Partitions
from mapping.topic.topic_config import TopicConfig
from mapping.topic.topics import Topics
from tests.support.kafka import batch

TOPIC = "kinds"
CONFIG = TopicConfig(TOPIC, partitions=3, replication_factor=1, min_insync_replicas=1)

# (the error redis-py raises, what the batcher answers)
NOT_RUN = [
    ClusterDownError("CLUSTERDOWN The cluster is down"),
    MasterDownError("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is no"),
    TryAgainError("TRYAGAIN Multiple keys request during rehashing of slot"),
    MovedError("3999 127.0.0.1:7002"),
    AskError("3999 127.0.0.1:7002"),
    ClusterError("TTL exhausted."),  # redis-py after MOVED/ASK/TRYAGAIN 16 times
    SlotNotCoveredError('Slot "3999" is not covered by the cluster.'),
    RedisClusterException("Redis Cluster cannot be connected. Please provide at least one..."),
    BusyLoadingError("LOADING Redis is loading the dataset in memory"),
    ReadOnlyError("READONLY You can't write against a read only replica."),
    OutOfMemoryError("OOM command not allowed when used memory > 'maxmemory'."),
    ConnectFailed("Error 111 connecting to 127.0.0.1:7002. Connection refused."),
    MaxConnectionsError("Too many connections"),
]
UNKNOWN = [
    RedisConnectionError("Connection closed by server."),
    RedisConnectionError("Error 104 while writing to socket. Connection reset by peer."),
    RedisTimeoutError("Timeout reading from 127.0.0.1:7002"),
    ConnectionResetError(104, "Connection reset by peer"),
]


def _name(exc: BaseException) -> str:
    return type(exc).__name__


class FakeCluster:
    """Stands in for redis-py's RedisCluster under the batcher: every call is recorded, and
    raises ``errors[slot]`` for its slot's keys (``default`` for the others), or answers."""

    def __init__(self, default: BaseException | None = None, reply: Any = b"OK") -> None:
        self.default = default
        self.reply = reply
        self.errors: dict[bytes, BaseException] = {}
        self.calls: list[tuple] = []
        self.scripted: list[Any] = []  # the next replies (or errors) of script calls

    async def execute_command(self, *command: Any) -> Any:
        self.calls.append(command)
        await asyncio.sleep(0)
        if command[0] == "EVALSHA" and self.scripted:
            reply = self.scripted.pop(0)
            if isinstance(reply, BaseException):
                raise reply
            return reply
        key = command[3] if command[0] == "EVALSHA" else command[1]
        key = key if isinstance(key, bytes) else str(key).encode()
        error = self.errors.get(key, self.default)
        if error is not None:
            raise error
        return self.reply


async def _answers(client: FakeCluster, *commands: tuple) -> list[Any]:
    batcher = ClusterBatcher(client, max_concurrency=4)  # type: ignore[arg-type]
    flusher = asyncio.create_task(batcher.run())
    try:
        futures = [batcher.submit(*command) for command in commands]
        return await asyncio.gather(*futures, return_exceptions=True)
    finally:
        flusher.cancel()


@pytest.mark.parametrize("error", NOT_RUN + UNKNOWN, ids=_name)
def test_the_cluster_batcher_answers_each_kind(error: BaseException) -> None:
    (reply,) = asyncio.run(_answers(FakeCluster(error), ("SET", "{a}", "1")))
    expected = Unavailable if error in NOT_RUN else OutcomeUnknown
    assert type(reply) is expected, f"{_name(error)} answered {reply!r}"
    assert reply.code == "UNAVAILABLE"


def test_error_replies_of_a_call_that_ran_are_kept() -> None:
    """A script's coded error is its BrokerError; any other error reply stays as it is."""
    coded = FakeCluster(ResponseError("NOT_LEADER partition is a follower"))
    (reply,) = asyncio.run(_answers(coded, ("SET", "{a}", "1")))
    assert isinstance(reply, BrokerError) and reply.code == "NOT_LEADER"
    wrong = FakeCluster(ResponseError("WRONGTYPE Operation against a key holding the wrong kind"))
    (reply,) = asyncio.run(_answers(wrong, ("SET", "{a}", "1")))
    assert type(reply) is ResponseError


def test_a_slot_sends_nothing_after_its_first_failure() -> None:
    """The failed slot's later calls are not sent (a retried append must not land behind
    a later one, a dead node is not waited on once per call); other slots go on."""
    client = FakeCluster()
    client.errors[b"{a}"] = ClusterDownError("CLUSTERDOWN The cluster is down")
    replies = asyncio.run(
        _answers(client, ("SET", "{a}", "1"), ("SET", "{b}", "1"), ("SET", "{a}", "2"))
    )
    assert [type(r) for r in replies] == [Unavailable, bytes, Unavailable]
    assert [c[1] for c in client.calls].count("{a}") == 1


def test_the_flusher_goes_on_after_every_kind() -> None:
    """The batcher's own loop never ends for a Redis error: a call after each is answered."""

    async def main() -> list[Any]:
        client = FakeCluster()
        batcher = ClusterBatcher(client, max_concurrency=2)  # type: ignore[arg-type]
        flusher = asyncio.create_task(batcher.run())
        try:
            for error in NOT_RUN + UNKNOWN:
                client.default = error
                with pytest.raises(Unavailable):
                    await batcher.call("SET", "{a}", "1")
            client.default = None
            return [await batcher.call("GET", "{a}"), flusher.done()]
        finally:
            flusher.cancel()

    assert asyncio.run(main()) == [b"OK", False]


def test_a_failed_connect_is_told_apart_from_a_lost_reply() -> None:
    """redis-py raises the same ConnectionError for a refused connect as for a connection
    lost after the write; the cluster client's connections raise ConnectFailed for the
    first (mapping/connection/cluster.py marks them), so the call is known not to have run."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, not listening: connecting is refused

        async def main() -> None:
            connection = _marked(Connection)(host="127.0.0.1", port=port, socket_timeout=1)
            try:
                await connection.send_packed_command(b"*1\r\n$4\r\nPING\r\n")
            finally:
                await connection.disconnect()

        with pytest.raises(ConnectFailed):
            asyncio.run(main())


def _context(client: FakeCluster) -> SimpleNamespace:
    batcher, keys = ClusterBatcher(client, max_concurrency=4), Keys("kinds")
    topics = Topics(batcher, keys)  # type: ignore[arg-type]
    topics.cache.remember(CONFIG)  # a topic the pod knows: no lookup
    partitions = Partitions(batcher, keys, topics)  # type: ignore[arg-type]
    pod = SimpleNamespace(
        settings=Settings(),
        topics=topics,
        partitions=partitions,
        kafka=KafkaStore(partitions, 60_000),
        authorizer=Authorizer(),
    )
    return SimpleNamespace(pod=pod, authorizer=pod.authorizer)


def _produce_request() -> protocol.Request:
    """A Produce (v9, acks=1) with one batch for each of the topic's three partitions."""
    request = PRODUCE.request
    body = request[9](
        transactional_id=None,
        acks=1,
        timeout_ms=5000,
        topic_data=[
            request.TopicProduceData(
                name=TOPIC,
                partition_data=[
                    request.TopicProduceData.PartitionProduceData(
                        index=p, records=batch([b"v"], producer_id=7, producer_epoch=0)
                    )
                    for p in range(3)
                ],
            )
        ],
    )
    frame = protocol.encode_request(PRODUCE, 9, body, 1, "kinds")
    return protocol.parse_request(frame[4:])


async def _kafka_produce(client: FakeCluster) -> list[tuple[int, int, int]]:
    context = _context(client)
    flusher = asyncio.create_task(context.pod.partitions.batcher.run())
    try:
        response = await produce.handle(context, _produce_request())  # type: ignore[arg-type]
    finally:
        flusher.cancel()
    protocol.encode_response(_produce_request(), response)  # a response the client can read
    return [
        (part.index, part.error_code, part.base_offset)
        for topic in response.responses
        for part in topic.partition_responses
    ]


@pytest.mark.parametrize("error", NOT_RUN + UNKNOWN, ids=_name)
def test_kafka_produce_answers_an_error_code_in_every_partition(error: BaseException) -> None:
    answered = asyncio.run(_kafka_produce(FakeCluster(error)))
    # not run: retriable "not written"; maybe run: "possibly written" (retried with the same
    # sequence, so the pod's idempotence answers a stored batch's original offset)
    code = errors.KAFKA_STORAGE_ERROR if error in NOT_RUN else errors.REQUEST_TIMED_OUT
    assert answered == [(0, code, -1), (1, code, -1), (2, code, -1)]


@pytest.mark.parametrize("error", NOT_RUN + UNKNOWN, ids=_name)
def test_v1_produce_answers_unavailable(error: BaseException) -> None:
    async def main() -> bytes:
        context = _context(FakeCluster(error))
        flusher = asyncio.create_task(context.pod.partitions.batcher.run())
        try:
            v1 = Context(context.pod)  # type: ignore[arg-type]
            return await answer(v1, build_table(), f"V1|9|PRODUCE|{TOPIC} user1:x".encode())
        finally:
            flusher.cancel()

    reply = asyncio.run(main())
    assert reply.startswith(b"V1|9|ERR|UNAVAILABLE|"), reply


def _one_batch_request(base_sequence: int) -> protocol.Request:
    """A Produce (v9, acks=1) of one idempotent batch for partition 0."""
    request = PRODUCE.request
    data = batch([b"v"], producer_id=7, producer_epoch=0, base_sequence=base_sequence)
    body = request[9](
        transactional_id=None,
        acks=1,
        timeout_ms=5000,
        topic_data=[
            request.TopicProduceData(
                name=TOPIC,
                partition_data=[
                    request.TopicProduceData.PartitionProduceData(index=0, records=data)
                ],
            )
        ],
    )
    return protocol.parse_request(protocol.encode_request(PRODUCE, 9, body, 1, "kinds")[4:])


def test_a_batch_behind_a_failed_one_is_not_answered_out_of_order() -> None:
    """Batch 0 fails (CLUSTERDOWN), batch 1 reaches Redis once it is back and the script
    finds the gap: answered "not written" (retriable), not the gap's own code, which made
    librdkafka bump its epoch and send batches of other partitions that were stored already
    again (duplicates). Once batch 0 is stored, a gap is a gap again (UNKNOWN_PRODUCER_ID:
    the producer's state is behind it)."""
    ahead_of_state = [errors.UNKNOWN_PRODUCER_ID, -1, 0, -1, -1]
    client = FakeCluster()
    client.scripted = [
        ClusterDownError("CLUSTERDOWN The cluster is down"),  # batch 0
        ahead_of_state,  # batch 1, before batch 0 is sent again
        [0, 5, 1, 1000, 1000],  # batch 0 again: stored
        [0, 5, 1, 1001, 1001],  # batch 1 again: stored
        ahead_of_state,  # batch 3: a real gap (batch 2 never came)
    ]

    async def main() -> list[tuple[int, int]]:
        context = _context(client)
        flusher = asyncio.create_task(context.pod.partitions.batcher.run())
        answers = []
        try:
            for base_sequence in (0, 1, 0, 1, 3):
                response = await produce.handle(context, _one_batch_request(base_sequence))  # type: ignore[arg-type]
                part = response.responses[0].partition_responses[0]
                answers.append((part.error_code, part.base_offset))
        finally:
            flusher.cancel()
        return answers

    assert asyncio.run(main()) == [
        (errors.KAFKA_STORAGE_ERROR, -1),
        (errors.KAFKA_STORAGE_ERROR, -1),  # not UNKNOWN_PRODUCER_ID
        (errors.NONE, 1000),
        (errors.NONE, 1001),
        (errors.UNKNOWN_PRODUCER_ID, -1),
    ]
    # batch 0 sent again is the first batch the pod failed: a gap before it could only be
    # records a failover took back, so the script is told to append it after the gap
    appends = [call for call in client.calls if call[0] == "EVALSHA"]
    lost_gap = [int(call[3 + call[2] + 9]) for call in appends]  # kafka/produce.lua ARGV[10]
    assert lost_gap == [0, 0, 1, 0, 0]
