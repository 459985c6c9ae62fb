"""The message browser, its live tail (Server-Sent Events) and the produce form. Records
are read by the reader ``adapter topic tail`` uses (committed records only); a produced
record goes through ``KafkaStore.append_batch``, the path of a Kafka Produce."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from adapter.console import web
from adapter.console.decoding import shown
from adapter.console.topics import find_topic
from mapping.core import codec
from mapping.core.records import Header, StoredRecord
from mapping.operations.console_messages import FROM_CHOICES, TIME, browse, start_offset
from mapping.partition.record_reader import read_committed
from mapping.security.acls import Operation
from mapping.topic.topic_config import TopicConfig

MAX_LIMIT = 500
TAIL_WAIT_S = 5.0  # a tail reads again at least this often (and says it is alive)
TAIL_PAGE = 200


def partition_of(request: Request, config: TopicConfig, text: str | None) -> int:
    return web.integer(
        text if text not in (None, "") else "0", "partition", low=0, high=config.partitions - 1
    )


def time_ms(text: str) -> int:
    """A time as ms since the epoch, or an ISO 8601 date and time (no zone: UTC, as the
    console shows times)."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise web.Refusal(
            400, f"time must be ms since the epoch or ISO 8601 (2026-11-24T09:30:00Z), not {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return round(moment.timestamp() * 1000)


def record_row(record: StoredRecord, bits: int) -> dict:
    """A record as the page and the tail show it; the offset's append time is its high
    bits (offsets are time-encoded)."""
    return {
        "offset": record.offset,
        "timestamp": record.timestamp,
        "append_time": codec.decode(record.offset, bits)[0],
        "key": shown(record.key),
        "value": shown(record.value),
        "headers": [(name, shown(value)) for name, value in record.headers],
    }


async def messages(request: Request) -> Response:
    config = await find_topic(request, Operation.READ)
    params = request.query_params
    partition = partition_of(request, config, params.get("partition"))
    where = params.get("from", "end") or "end"
    if where not in FROM_CHOICES:
        raise web.Refusal(400, f"from must be one of {', '.join(FROM_CHOICES)}, not {where!r}")
    offset = web.integer(params.get("offset", "0") or "0", "offset")
    moment = time_ms(params.get("time", "")) if where == TIME else 0
    limit = web.integer(params.get("limit", "50") or "50", "limit", low=1, high=MAX_LIMIT)
    key_text = params.get("key", "")
    key = key_text.encode() if key_text else None
    pod = web.pod(request)
    start = await start_offset(pod.kafka, config, partition, where, offset, moment, limit)
    page = await browse(pod.kafka, pod.partition_txns, config, partition, start, limit, key)
    bits = pod.kafka.bits
    context = {
        "config": config,
        "partition": partition,
        "where": where,
        "offset": offset,
        "time": params.get("time", ""),
        "limit": limit,
        "key": key_text,
        "page": page,
        "rows": [record_row(r, bits) for r in page.records],
        "choices": FROM_CHOICES,
    }
    return web.render(request, "messages.html", context)


async def tail(request: Request) -> Response:
    """New committed records of one partition as Server-Sent Events, one JSON object each,
    until the page goes away; between records it waits on the partition's hw channel."""
    config = await find_topic(request, Operation.READ)
    partition = partition_of(request, config, request.query_params.get("partition"))
    pod = web.pod(request)
    _, position = await pod.kafka.first_offset(config, partition, committed=True)
    bits = pod.kafka.bits

    async def events() -> AsyncIterator[str]:
        nonlocal position
        channel = pod.keys.partition(config.name, partition).hw_channel
        watch = pod.hw_waits.watch(channel)
        try:
            await watch.subscribed(TAIL_WAIT_S)
            yield ": tailing\n\n"
            while not await request.is_disconnected():
                page = await read_committed(
                    pod.partition_txns, config, partition, position, TAIL_PAGE
                )
                for record in page.records:
                    row = record_row(record, bits)
                    data = {**row, "key": row["key"].text, "value": row["value"].text,
                            "headers": [[n, v.text] for n, v in row["headers"]]}  # fmt: skip
                    yield f"data: {json.dumps(data, ensure_ascii=False)}\n\n"
                if page.next_offset != position:
                    position = page.next_offset
                    continue
                await watch.next(TAIL_WAIT_S)
                yield ": alive\n\n"
        finally:
            watch.close()

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(events(), media_type="text/event-stream", headers=headers)


def header_lines(text: str) -> list[Header]:
    """Headers given as lines ``name: value`` (a line without ``:`` is refused)."""
    headers: list[Header] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise web.Refusal(400, f"header line {number} is not 'name: value': {line!r}")
        headers.append((name.strip(), value.strip().encode()))
    return headers


async def produce_form(request: Request) -> Response:
    config = await find_topic(request, Operation.WRITE)
    return web.render(request, "produce.html", {"config": config, "written": None})


async def produce(request: Request) -> Response:
    config = await find_topic(request, Operation.WRITE)
    data = await web.form(request)
    partition = partition_of(request, config, web.field(data, "partition"))
    key_text = web.field(data, "key")
    key = key_text.encode() if key_text else None
    value = web.field(data, "value").encode()
    headers = header_lines(web.field(data, "headers"))
    now_ms = time.time_ns() // 1_000_000
    pod = web.pod(request)
    result = await pod.kafka.append_batch(config, partition, [(key, value, now_ms, headers)])
    if result.status not in (0, 1):
        raise web.Refusal(409, f"the partition refused the record (Kafka error {result.status})")
    written = {"partition": partition, "offset": result.base_offset}
    return web.render(request, "produce.html", {"config": config, "written": written})
