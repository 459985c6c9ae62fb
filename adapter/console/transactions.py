"""Kafka transactions: every transactional id's coordinator state (open ones first), and a
topic's open transactions per partition (mapping/txn/txn_inspection.py, as ``adapter inspect
transactions`` and ``open-transactions`` read them)."""

from __future__ import annotations

import time

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response

from adapter.console import web
from mapping.core.keys import is_valid_name
from mapping.security.acls import Operation, ResourceType
from mapping.txn.txn_inspection import partition_views, transaction_states
from mapping.txn.txn_state import OPEN_STATES


async def transactions(request: Request) -> Response:
    console = web.console(request)
    pod = console.pod
    who, host = await web.principal(request), web.host_of(request)
    client = console.sync_client
    states = await anyio.to_thread.run_sync(transaction_states, client, pod.keys)
    states = [
        s
        for s in states
        if pod.authorizer.allows(
            who, host, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, s.transactional_id
        )
    ]
    states.sort(key=lambda s: (s.state not in OPEN_STATES, s.transactional_id))
    topic = request.query_params.get("topic", "").strip()
    views = []
    if topic:
        if not is_valid_name(topic):
            raise web.Refusal(400, f"{topic!r} is not a topic name")
        await web.require(request, Operation.DESCRIBE, ResourceType.TOPIC, topic)
        if await pod.topics.read(topic) is None:
            raise web.Refusal(404, f"no topic {topic}")
        views = await partition_views(pod.partitions, pod.partition_txns, topic)
    context = {
        "states": states, "open_states": OPEN_STATES, "now": int(time.time() * 1000),
        "topic": topic, "views": views,
    }  # fmt: skip
    return web.render(request, "transactions.html", context)
