"""After SCRIPT FLUSH (or a Redis restart that lost the script cache) a pod reloads its
scripts and sends the calls again without breaking the order of a connection's calls: a
pipelined COMMIT then OFFSET answers the committed offset."""

from __future__ import annotations

from collections.abc import Callable

import redis

from mapping.connection.embedded import RedisProcess
from tests.support.pods import RF1, Pod

StartPod = Callable[..., Pod]


def test_pipelined_commit_then_offset_after_script_flush(
    start_pod: StartPod, own_redis: RedisProcess, topic: str
) -> None:
    pod = start_pod(own_redis.url, *RF1)
    admin = redis.Redis.from_url(own_redis.url)
    group, member = f"g-{topic}", "m1"
    with pod.client() as client:
        joined = client.join(group, topic, member)
        client.sync(group, topic, member, joined.generation)
        partition = joined.assigned[0]
        for offset in range(1, 6):  # a few times: each must answer in order
            admin.script_flush()
            replies = client.pipeline(
                [
                    ("JOIN", f"{group} {topic} {member}"),  # a member re-joining: no rebalance
                    ("SYNC", f"{group} {topic} {member} {joined.generation}"),
                    (
                        "COMMIT",
                        f"{group} {topic} {member} {joined.generation} {partition} {offset}",
                    ),
                    ("OFFSET", f"{group} {topic} {partition}"),
                ]
            )
            assert all(reply.ok for reply in replies), replies
            assert replies[3].fields()["offset"] == str(offset), (offset, replies)
    admin.close()
