"""Resetting a group's committed offsets (``adapter group reset-offsets``, Kafka's
``kafka-consumer-groups --reset-offsets``): where each partition goes, and the write.

Targets resolve as Kafka's tool resolves them, on this project's time-encoded offsets:

- ``earliest``: ListOffsets earliest, the first record still in the log;
- ``latest``: ListOffsets latest, Kafka's high watermark (V1 hw + 1);
- ``timestamp``: ListOffsets by timestamp, the first committed record appended at or
  after it (``KafkaStore.at_or_after_time``); none: latest, as Kafka's tool does;
- ``offset``: as given, clamped into [earliest, latest] (Kafka's tool clamps too);
- ``shift``: N *records* from the committed offset, forward or back, clamped likewise.
  Kafka adds N to the offset, which there is N records; here offsets are time-encoded
  (``(ms << B) | seq``), so N offset units is mostly less than one record, and the shift
  walks the log instead (markers count, as they hold offsets in Kafka too). A partition
  with nothing committed cannot be shifted (Kafka's tool refuses it too).

The write is an OffsetCommit from outside group management (empty member id, generation
-1) through ``KafkaGroups.commit_offsets``, the path every Kafka commit takes: its check
(``kafka_group/commit_check``) refuses it while the group has Kafka members, atomically,
and its write goes under the commit fence (docs/kafka-groups-design.md), so a commit a
paused pod checked earlier cannot land over the reset. V1 members live on another slot:
the caller checks that none is live first (``GroupOverview.inactive``), as Kafka's tool
checks the group's state.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from mapping.core import codec
from mapping.core import kafka_errors as errors
from mapping.kafka_group import KafkaGroups
from mapping.operations.group_overview import record_lag
from mapping.partition.kafka import KafkaStore
from mapping.topic.topic_config import TopicConfig

EARLIEST, LATEST, TIMESTAMP, OFFSET, SHIFT = "earliest", "latest", "timestamp", "offset", "shift"


@dataclass(frozen=True, slots=True)
class ResetTarget:
    kind: str  # EARLIEST, LATEST, TIMESTAMP (value: ms), OFFSET (value), SHIFT (value: records)
    value: int = 0


@dataclass(frozen=True, slots=True)
class PlannedOffset:
    topic: str
    partition: int
    current: int | None  # the committed offset now (None: nothing committed)
    new: int
    lag: int  # records from ``new`` to the high watermark
    clamped: str = ""  # EARLIEST or LATEST: the offset asked for was outside the log


class CannotReset(ValueError):
    """A partition the target cannot be applied to (shifting one with nothing committed)."""


async def plan_reset(
    kafka: KafkaStore,
    groups: KafkaGroups,
    group: str,
    config: TopicConfig,
    partitions: list[int],
    target: ResetTarget,
) -> list[PlannedOffset]:
    """Where each of ``partitions`` of topic ``config`` goes; nothing is written."""
    stored = (await groups.fetch_offsets(group)).get(config.name, {})  # raises no fence
    current = {p: c.offset for p, c in stored.items() if c.offset >= 0}
    if target.kind == SHIFT:
        missing = [p for p in partitions if p not in current]
        if missing:
            raise CannotReset(
                f"cannot shift partitions {missing} of topic {config.name}: group {group} has "
                "no committed offset there"
            )

    async def one(p: int) -> PlannedOffset:
        earliest, latest = await kafka.first_offset(config, p)
        asked = await _asked(kafka, config, p, target, current.get(p), earliest, latest)
        new = min(max(asked, earliest), latest)
        clamped = "" if new == asked else (EARLIEST if new > asked else LATEST)
        _, lag, _ = await record_lag(groups.batcher, groups.keys, config.name, p, new, kafka.bits)
        return PlannedOffset(config.name, p, current.get(p), new, lag, clamped)

    return list(await asyncio.gather(*(one(p) for p in partitions)))


async def _asked(
    kafka: KafkaStore,
    config: TopicConfig,
    partition: int,
    target: ResetTarget,
    current: int | None,
    earliest: int,
    latest: int,
) -> int:
    if target.kind == EARLIEST:
        return earliest
    if target.kind == LATEST:
        return latest
    if target.kind == OFFSET:
        return target.value
    if target.kind == TIMESTAMP:
        found = await kafka.at_or_after_time(config, partition, target.value)
        return latest if found is None else found.offset
    if target.kind == SHIFT:
        assert current is not None  # (plan_reset refused it)
        return await _shifted(kafka, config, partition, current, target.value, earliest, latest)
    raise ValueError(f"unknown reset target {target.kind}")


async def _shifted(
    kafka: KafkaStore,
    config: TopicConfig,
    partition: int,
    current: int,
    records: int,
    earliest: int,
    latest: int,
) -> int:
    """The position ``records`` records after ``current`` (before it when negative)."""
    log = kafka.keys.partition(config.name, partition).log
    bits = kafka.bits
    call = kafka.partitions.batcher.call
    if records > 0:
        if current >= latest:
            return latest
        # records at or after ``current`` up to the hw: skip ``records``, land on the next
        found = await call(
            "XRANGE",
            log,
            codec.entry_id(current, bits),
            codec.entry_id(latest - 1, bits),
            "COUNT",
            records + 1,
        )
        return codec.entry_offset(found[records][0], bits) if len(found) > records else latest
    if records < 0:
        if current <= earliest:
            return earliest
        found = await call(
            "XREVRANGE", log, codec.entry_id(current - 1, bits), "-", "COUNT", -records
        )
        return codec.entry_offset(found[-1][0], bits) if len(found) == -records else earliest
    return current


async def execute_reset(groups: KafkaGroups, group: str, plan: list[PlannedOffset]) -> list[str]:
    """Commit ``plan`` (one topic's partitions) as an OffsetCommit from outside group
    management; the partitions refused, as ``"<partition>: <Kafka error name>"`` (empty:
    all written). UNKNOWN_MEMBER_ID / REBALANCE_IN_PROGRESS: Kafka members joined since."""
    by_topic: dict[str, dict[int, tuple[int, str | None]]] = {}
    for planned in plan:
        by_topic.setdefault(planned.topic, {})[planned.partition] = (planned.new, None)
    answer = await groups.commit_offsets(group, "", -1, by_topic)
    return [
        f"{topic} {p}: {errors.name_of(code)}"
        for topic, codes in answer.items()
        for p, code in sorted(codes.items())
        if code != errors.NONE
    ]
