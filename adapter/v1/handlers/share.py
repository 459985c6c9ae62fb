"""SHARE_ACQUIRE, SHARE_ACK and SHARE_LEAVE: queue consumption on share groups (KIP-932),
the same groups Kafka's ShareConsumers use (``mapping.share_group``): each record is handed
to one member at a time, V1 or Kafka, and acknowledged one by one (docs/share-groups.md,
"V1 queue commands").

A V1 member is its consumer id. It keeps no epoch: each SHARE_ACQUIRE heartbeats with the
member epoch Redis holds for it (joining with epoch 0 the first time, or again when it was
fenced or dropped), subscribed to the command's topic, which keeps its session alive."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

from adapter.v1.escaping import escape
from adapter.v1.handlers import Context, Handler, args
from mapping.core.codec import MAX_OFFSET, entry_offset
from mapping.core.errors import BadRequest, BrokerError
from mapping.core.records import entry_record
from mapping.share_group.share_groups import (
    ACCEPT,
    HEARTBEAT_OK,
    REJECT,
    RELEASE,
    AckBatch,
    HeartbeatResult,
    ShareClient,
)

ACQUIRE_USAGE = "SHARE_ACQUIRE requires: <group> <topic> <consumer_id> [max=<n>]"
ACK_USAGE = (
    "SHARE_ACK requires: <group> <topic> <consumer_id> <partition> <offset>[,<offset>...] "
    "accept|release|reject"
)
LEAVE_USAGE = "SHARE_LEAVE requires: <group> <topic> <consumer_id>"
# Additive V1 code (Kafka's INVALID_RECORD_STATE): SHARE_ACK named records the member does
# not hold (never acquired, already acknowledged, released, or their lock ran out).
INVALID_RECORD_STATE = "INVALID_RECORD_STATE"
# Records one SHARE_ACQUIRE hands out unless max= says otherwise (at most the CONSUME page).
DEFAULT_MAX_RECORDS = 100
ACK_TYPES = {"accept": ACCEPT, "release": RELEASE, "reject": REJECT}
# Refused offsets an INVALID_RECORD_STATE message names at most.
NAMED_REFUSALS = 10
# Who a V1 member is in ShareGroupDescribe and `adapter group describe` (no client id, no
# rack; the handler does not see the connection's host).
V1_CLIENT = ShareClient(client_id="v1", host="")


@dataclass(frozen=True, slots=True)
class ShareRecord:
    """One acquired record as SHARE_ACQUIRE writes it."""

    partition: int
    offset: int
    delivery_count: int
    value: bytes


def acquire_args(argv: list[str], page_limit: int) -> tuple[str, str, str, int]:
    """(group, topic, consumer_id, max records) of a valid SHARE_ACQUIRE; ``page_limit`` is
    the pod's --consume-max-records, the most ``max=`` may ask for."""
    args.expect_count(argv, ACQUIRE_USAGE, 3, 4)
    group = args.name(argv[0], "group")
    topic = args.name(argv[1], "topic")
    member = args.name(argv[2], "consumer_id")
    if len(argv) < 4:
        return group, topic, member, min(DEFAULT_MAX_RECORDS, page_limit)
    name, sep, value = argv[3].partition("=")
    invalid = f"invalid max: must be max=<n> with n in 1..{page_limit}"
    if not sep or name.lower() != "max":
        raise BadRequest(invalid)
    try:
        wanted = args.integer(value, "max", minimum=1)
    except BadRequest:
        raise BadRequest(invalid) from None
    if wanted > page_limit:
        raise BadRequest(invalid)
    return group, topic, member, wanted


def ack_args(argv: list[str], most_offsets: int) -> tuple[str, str, str, int, list[int], int]:
    """(group, topic, consumer_id, partition, offsets sorted and distinct, acknowledge
    type) of a valid SHARE_ACK; at most ``most_offsets`` offsets."""
    args.expect_count(argv, ACK_USAGE, 6)
    group = args.name(argv[0], "group")
    topic = args.name(argv[1], "topic")
    member = args.name(argv[2], "consumer_id")
    partition = args.integer(argv[3], "partition", minimum=0)
    offsets: set[int] = set()
    for item in argv[4].split(","):
        offset = args.integer(item, "offset", minimum=0)
        if offset > MAX_OFFSET:
            raise BadRequest("invalid offset")
        offsets.add(offset)
    if len(offsets) > most_offsets:
        raise BadRequest(f"too many offsets: at most {most_offsets} per SHARE_ACK")
    kind = ACK_TYPES.get(argv[5].lower())
    if kind is None:
        raise BadRequest("invalid type: must be accept, release or reject")
    return group, topic, member, partition, sorted(offsets), kind


def leave_args(argv: list[str]) -> tuple[str, str, str]:
    """(group, topic, consumer_id) of a valid SHARE_LEAVE."""
    args.expect_count(argv, LEAVE_USAGE, 3)
    return (
        args.name(argv[0], "group"),
        args.name(argv[1], "topic"),
        args.name(argv[2], "consumer_id"),
    )


def records_payload(records: list[ShareRecord], lock_ms: int) -> str:
    """``records=<p>:<o>:<delivery count>:<value>,... lock_ms=<n>`` (values escaped as
    CONSUME escapes them; ``records=`` when none)."""
    listed = ",".join(
        f"{r.partition}:{r.offset}:{r.delivery_count}:{escape(r.value)}" for r in records
    )
    return f"records={listed} lock_ms={lock_ms}"


def refusal_message(member: str, refused: list[int], named: int) -> str:
    """INVALID_RECORD_STATE's text: which offsets (the first few) ``member`` does not hold,
    and how many of the ``named`` were acknowledged all the same."""
    shown = ",".join(map(str, refused[:NAMED_REFUSALS]))
    more = f",... ({len(refused)} in all)" if len(refused) > NAMED_REFUSALS else ""
    done = named - len(refused)
    return f"records not held by {member}: {shown}{more}; the other {done} were acknowledged"


async def _heartbeat(context: Context, group: str, topic: str, member: str) -> HeartbeatResult:
    """Join (epoch 0) or renew the member's session with the epoch Redis holds for it; a
    member fenced or dropped in between (its session ran out) joins again."""
    groups = context.share_groups
    epoch = await groups.member_epoch(group, member)
    if epoch is not None:
        result = await groups.heartbeat(group, member, epoch, [topic])
        if result.error == HEARTBEAT_OK:
            return result
    return await groups.heartbeat(group, member, 0, [topic], V1_CLIENT)


async def share_acquire(context: Context, argv: list[str]) -> str:
    settings = context.pod.settings
    group, topic, member, wanted = acquire_args(argv, settings.consume_max_records)
    config = await context.pod.topics.topic(topic)  # created on first use, as CONSUME does
    groups = context.share_groups
    result = await _heartbeat(context, group, topic, member)
    partitions = [p for p in result.assignment.get(topic, []) if p < config.partitions]
    # start at another partition each time, so one busy partition does not take every turn
    if partitions:
        start = random.randrange(len(partitions))
        partitions = partitions[start:] + partitions[:start]
    bits = context.pod.kafka.bits
    byte_limit = settings.consume_max_bytes
    records: list[ShareRecord] = []
    size = 0
    for partition in partitions:
        left = wanted - len(records)
        if left <= 0 or (byte_limit and size >= byte_limit):
            break
        for taken in await groups.acquire(group, member, topic, partition, left):
            value = entry_record(taken.entry_id, taken.fields, bits).value or b""
            offset = entry_offset(taken.entry_id, bits)
            records.append(ShareRecord(partition, offset, taken.delivery_count, value))
            size += len(value)
    lock_ms = (await groups.settings(group)).lock_ms
    return records_payload(records, lock_ms)


async def share_ack(context: Context, argv: list[str]) -> str:
    most = context.pod.settings.consume_max_records
    group, topic, member, partition, offsets, kind = ack_args(argv, most)
    await context.pod.topics.partition_of(topic, partition)
    groups = context.share_groups
    await groups.settings(group)  # read once, before the calls below ask for it together
    # one acknowledgement per offset, sent together: each answers whether the member held it
    held = await asyncio.gather(
        *(
            groups.acknowledge(group, member, topic, partition, [AckBatch(o, o, [kind])])
            for o in offsets
        )
    )
    refused = [o for o, ok in zip(offsets, held, strict=True) if not ok]
    if refused:
        raise BrokerError(INVALID_RECORD_STATE, refusal_message(member, refused, len(offsets)))
    return f"acked={len(offsets)}"


async def share_leave(context: Context, argv: list[str]) -> str:
    group, _, member = leave_args(argv)
    groups = context.share_groups
    if await groups.member_epoch(group, member) is None:
        return "left=false"
    # epoch -1: the member leaves and what it holds is released at once (its
    # acknowledgements came before, on this connection)
    await groups.heartbeat(group, member, -1, None, release_delay_s=0)
    return "left=true"


HANDLERS: dict[str, Handler] = {
    "SHARE_ACQUIRE": share_acquire,
    "SHARE_ACK": share_ack,
    "SHARE_LEAVE": share_leave,
}
