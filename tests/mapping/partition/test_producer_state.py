"""An idempotent producer's state in a partition taken back by a Redis failover
(kafka/produce.lua, mapping/partition/sequence_fence.py), straight against Redis: a batch ahead of
the state is UNKNOWN_PRODUCER_ID, except the first batch the pod failed, which is appended
after the gap, once."""

from __future__ import annotations

import asyncio
import uuid

from mapping.connection.batcher import RedisBatcher
from mapping.connection.client import connect
from mapping.connection.startup import pin_sequence_bits
from mapping.core.kafka_errors import UNKNOWN_PRODUCER_ID
from mapping.core.keys import Keys
from mapping.partition.kafka import KafkaStore
from mapping.partition.partitions import Partitions
from mapping.topic.topic_config import TopicDefaults
from mapping.topic.topics import Topics

BITS = 10
TOPIC = "rewound"
PID, EPOCH = 11, 0
APPENDED, STORED_BEFORE = 0, 1  # kafka/produce.lua's statuses


def test_the_first_failed_batch_is_appended_after_a_lost_gap(redis_url: str) -> None:
    async def scenario() -> None:
        client = connect(redis_url, 5.0)
        keys = Keys(f"rewound-{uuid.uuid4().hex[:8]}")
        await pin_sequence_bits(client, keys, BITS)
        batcher = RedisBatcher(client)
        runner = asyncio.create_task(batcher.run())
        try:
            topics = Topics(batcher, keys, topic_defaults=TopicDefaults(1, 1, 1))
            store = KafkaStore(Partitions(batcher, keys, topics, sequence_bits=BITS))
            config = await topics.topic(TOPIC)
            producers = keys.partition(TOPIC, 0).producers

            async def write(seq: int) -> tuple[int, int]:
                records = [(None, f"seq {seq}".encode(), 0, [])]
                result = await store.append_batch(config, 0, records, PID, EPOCH, seq)
                return result.status, result.base_offset

            assert (await write(0))[0] == APPENDED
            after_first = await batcher.call("HGET", producers, PID)
            assert (await write(1))[0] == APPENDED
            assert (await write(2))[0] == APPENDED
            await batcher.call("HSET", producers, PID, after_first)  # the failover's rollback
            # a batch ahead of the state, the pod having failed none: the client decides
            assert (await write(3))[0] == UNKNOWN_PRODUCER_ID
            # batch 3 failed here (Redis unreachable: what the produce path records), so a
            # gap before it is not the pod's: appended after the gap
            store.fence.failed((TOPIC, 0, PID, EPOCH), 3)
            status, offset = await write(3)
            assert status == APPENDED
            assert await write(3) == (STORED_BEFORE, offset)  # a retry: stored once
            assert (await write(4))[0] == APPENDED  # in sequence again
            # the fence forgot batch 3 once it was stored: a new gap is a gap again
            assert (await write(6))[0] == UNKNOWN_PRODUCER_ID
        finally:
            runner.cancel()
            await client.aclose()

    asyncio.run(scenario())
