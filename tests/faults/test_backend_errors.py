"""Redis-side trouble that is not an outage: a flushed script cache, a key of the wrong
type. The pod answers (never hangs, never drops the connection)."""

from __future__ import annotations

import time

import redis

from mapping.topic.partitioner import partition_for
from tests.support.pods import Pod
from tests.support.v1 import KEYS


def test_script_cache_flushed_is_reloaded(pod: Pod, topic: str, redis_client: redis.Redis) -> None:
    with pod.client() as client:
        first = client.produce(topic, "user1", "before")
        redis_client.script_flush()
        # NOSCRIPT is answered by loading the scripts and sending the calls again, once
        replies = client.produce_many(topic, [("user1", f"after{i}") for i in range(50)])
        assert [r.offset for r in replies] == sorted({r.offset for r in replies})
        values = [v for _, v in client.consume(topic, 2, first.offset).records]
        assert values == [b"before"] + [f"after{i}".encode() for i in range(50)]


def test_key_of_the_wrong_type(pod: Pod, topic: str, redis_client: redis.Redis) -> None:
    with pod.client() as client:
        client.produce(topic, "user1", "x")
        log = KEYS.partition(topic, 2).log
        redis_client.delete(log)
        redis_client.set(log, "not a stream")
        reply = client.request("PRODUCE", f"{topic} user1:y")
        assert (reply.ok, reply.code) == (False, "UNAVAILABLE"), reply
        assert "WRONGTYPE" in reply.message
        assert client.request("CONSUME", f"{topic} 2 0").code == "UNAVAILABLE"
        assert client.ping() == "pong"
        # other partitions of the topic are unaffected
        other = next(k for k in ("a", "b", "c", "d") if partition_for(k.encode(), 3) != 2)
        assert client.produce(topic, other, "z").partition != 2
        redis_client.delete(log)


def test_tiny_writes_with_pauses(pod: Pod, topic: str) -> None:
    """Bytes trickling in (each write its own TCP segment) still frame correctly."""
    data = f"V1|1|PRODUCE|{topic} user1:slow\r\nV1|2|CONSUME|{topic} 2 0\nV1|3|PING|\n".encode()
    with pod.client() as client:
        for i in range(0, len(data), 2):
            client.send_raw(data[i : i + 2])
            time.sleep(0.001)  # paces the writes (separate segments), not a synchronisation
        replies = [client.read_response() for _ in range(3)]
    assert [r.correlation_id for r in replies] == ["1", "2", "3"]
    assert replies[1].fields()["messages"] == f"{replies[0].fields()['offset']}:slow"
