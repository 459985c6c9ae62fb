"""Consumer groups of every protocol (classic, KIP-848, V1) and share groups: the list, a
group's members, assignment, committed offsets and lag in records
(mapping/operations/group_overview.py, share_group_overview.py), its lag over time (the
sampler's), and the offset reset with the command line's rules
(mapping/operations/reset_rules.py)."""

from __future__ import annotations

import asyncio
import math

from starlette.requests import Request
from starlette.responses import Response

from adapter.console import web
from adapter.console.charts import line_chart
from adapter.console.messages import time_ms
from mapping.core.keys import is_valid_name
from mapping.operations.group_overview import CLASSIC, group_names, overview
from mapping.operations.offset_reset import (
    EARLIEST,
    LATEST,
    OFFSET,
    SHIFT,
    TIMESTAMP,
    CannotReset,
    ResetTarget,
)
from mapping.operations.reset_rules import reset_group
from mapping.operations.share_group_overview import share_overview
from mapping.security.acls import Operation, ResourceType
from mapping.share_group.state import ShareGroupState

GROUP = ResourceType.GROUP
PAGE_SIZE = 50
TARGETS = (EARLIEST, LATEST, OFFSET, TIMESTAMP, SHIFT)


def shares(request: Request) -> ShareGroupState:
    pod = web.pod(request)
    return ShareGroupState(pod.batcher, pod.keys, pod.partitions.sequence_bits)


async def groups(request: Request) -> Response:
    page = web.integer(request.query_params.get("page", "1") or "1", "page", low=1)
    pod = web.pod(request)
    who, host = await web.principal(request), web.host_of(request)
    share_state = shares(request)
    names = sorted(set(await group_names(pod.kafka_groups)) | set(await share_state.group_names()))
    names = [n for n in names if pod.authorizer.allows(who, host, Operation.DESCRIBE, GROUP, n)]
    pages = max(1, math.ceil(len(names) / PAGE_SIZE))
    page = min(page, pages)
    shown = names[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
    bits = pod.partitions.sequence_bits
    found, share_found = await asyncio.gather(
        asyncio.gather(*(overview(pod.kafka_groups, g, bits, offsets=False) for g in shown)),
        asyncio.gather(*(share_overview(share_state, g, offsets=False) for g in shown)),
    )
    rows = []
    for name, o, s in zip(shown, found, share_found, strict=True):
        if o is not None:
            # (a group with only committed offsets is a classic group to Kafka's clients)
            rows.append((name, o.protocol or CLASSIC, o.state, len(o.members)))
        if s is not None:
            rows.append((name, "share", s.state, len(s.members)))
    context = {"rows": rows, "page": page, "pages": pages, "total": len(names)}
    return web.render(request, "groups.html", context)


async def group(
    request: Request, plan: list | None = None, error: str = "", status: int = 200,
    executed: bool = False,
) -> Response:  # fmt: skip
    name = request.path_params["group"]
    await web.require(request, Operation.DESCRIBE, GROUP, name)
    pod = web.pod(request)
    found, share = await asyncio.gather(
        overview(pod.kafka_groups, name, pod.partitions.sequence_bits),
        share_overview(shares(request), name),
    )
    if found is None and share is None:
        raise web.Refusal(404, f"Consumer group '{name}' does not exist.")
    sampler = web.console(request).sampler

    def draw() -> str:
        times, series = sampler.lag_series(name)
        return line_chart(f"lag of {name} (records)", times, series) if series else ""

    chart = sampler.drawn(f"lag {name}", draw)
    offset_topics = sorted({p.topic for p in found.partitions} if found is not None else set())
    share_topics = sorted({p.topic for p in share.partitions} if share is not None else set())
    if share is not None:  # a member's subscription, before any share-partition exists
        subscribed = (m.subscribed_topics for m in share.members)
        share_topics = sorted(set(share_topics).union(*subscribed))
    context = {
        "name": name, "found": found, "share": share, "chart": chart,
        "offset_topics": offset_topics, "share_topics": share_topics,
        "topics": sorted(set(offset_topics) | set(share_topics)), "targets": TARGETS,
        "plan": plan, "error": error, "executed": executed,
    }  # fmt: skip
    return web.render(request, "group.html", context, status)


def reset_target(kind: str, value: str) -> ResetTarget:
    if kind not in TARGETS:
        raise web.Refusal(400, f"the reset target must be one of {', '.join(TARGETS)}")
    if kind in (EARLIEST, LATEST):
        return ResetTarget(kind)
    if kind == TIMESTAMP:
        return ResetTarget(kind, time_ms(value))
    if kind == OFFSET:
        return ResetTarget(kind, web.integer(value, "the offset"))
    return ResetTarget(kind, web.integer(value, "the shift (records)", low=-(2**62)))


def partition_list(text: str) -> list[int] | None:
    if not text.strip():
        return None
    try:
        found = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        found = []
    if not found or found[0] < 0:
        raise web.Refusal(400, f"partitions must be a comma-separated list like 0,1, not {text!r}")
    return found


async def reset(request: Request) -> Response:
    """Plan (a dry run) or write a reset of the group's committed offsets on one topic."""
    name = request.path_params["group"]
    data = await web.form(request)
    topic = web.field(data, "topic").strip()
    if not is_valid_name(topic):
        return await group(request, error=f"{topic!r} is not a topic name", status=400)
    # Kafka's OffsetCommit / AlterConsumerGroupOffsets: READ on the group and on the topic
    await web.require(request, Operation.READ, GROUP, name)
    await web.require(request, Operation.READ, ResourceType.TOPIC, topic)
    try:
        target = reset_target(web.field(data, "target"), web.field(data, "value"))
        chosen = partition_list(web.field(data, "partitions"))
    except web.Refusal as refusal:
        return await group(request, error=refusal.message, status=refusal.status)
    execute = web.field(data, "execute") == "yes"
    pod = web.pod(request)
    try:
        plan = await reset_group(
            pod.topics, pod.kafka, pod.kafka_groups, shares(request), name, topic, chosen,
            target, execute,
        )  # fmt: skip
    except CannotReset as exc:
        return await group(request, error=str(exc), status=409)
    return await group(request, plan=plan, executed=execute)
