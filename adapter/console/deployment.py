"""The deployment: live pods (the Kafka brokers), the Redis it runs on and its health,
records and bytes stored, topics and groups, and produce / fetch rates over the last minutes
(drawn from the sampler's samples, never read per request)."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from adapter.console import web
from adapter.console.charts import line_chart
from mapping.operations.console_topics import brokers
from mapping.security.acls import Operation, ResourceType

# What the page shows of Redis' INFO (never anything secret)
INFO_FIELDS = (
    "redis_version", "redis_mode", "role", "connected_slaves", "connected_clients",
    "uptime_in_seconds", "used_memory", "used_memory_human", "maxmemory_human",
    "maxmemory_policy", "aof_enabled", "rdb_last_bgsave_status", "aof_last_write_status",
    "instantaneous_ops_per_sec",
)  # fmt: skip


def info_rows(info: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """(node, field, value) rows; a cluster client answers per node."""
    if "redis_version" in info:
        return [("", f, info[f]) for f in INFO_FIELDS if f in info]
    return [
        (str(node), f, found[f])
        for node, found in sorted(info.items())
        if isinstance(found, dict)
        for f in INFO_FIELDS
        if f in found
    ]


async def deployment(request: Request) -> Response:
    await web.require(request, Operation.DESCRIBE, ResourceType.CLUSTER, web.CLUSTER)
    console = web.console(request)
    pod = console.pod
    live, info, topic_count, group_count = await asyncio.gather(
        brokers(pod.batcher, pod.keys),
        pod.client.info(),
        pod.batcher.call("SCARD", pod.keys.topics),
        pod.batcher.call("SCARD", pod.keys.groups),
    )
    rows = info_rows(info)
    used = next((int(v) for _, f, v in rows if f == "used_memory"), None)

    def draw() -> str:
        times, produced, consumed = console.sampler.rate_series()
        series = {"produced": produced, "fetched (committed by groups)": consumed}
        return line_chart("records per second", times, series)

    chart = console.sampler.drawn("rates", draw)
    context = {
        "brokers": live, "info": rows, "redis_at": console.redis_at,
        "topics": int(topic_count), "group_pairs": int(group_count),
        "stored": console.sampler.stored, "used_memory": used,
        "chart": chart, "interval": console.sampler.interval_s,
    }  # fmt: skip
    return web.render(request, "deployment.html", context)
