"""Where a query starts and (batch) ends, as the options say it: parsed once on the driver.

Spark's Kafka source names them: ``startingOffsets`` / ``endingOffsets`` (``earliest``,
``latest`` or JSON ``{"<topic>": {"<partition>": <offset>}}``, -2 earliest, -1 latest),
``startingTimestamp`` / ``endingTimestamp`` (one timestamp for every partition) and
``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp`` (JSON of timestamps per topic
partition). As in Spark, a timestamp option wins over the per-partition one, which wins over
the offsets option. This connector also takes ``group:<name>`` (a group's committed offsets)
and the one-topic form ``{"<partition>": <offset>}`` it had first.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mapping.core.keys import is_valid_name
from spark_connector.errors import OptionError

# Kafka's special per-partition values in a JSON offsets spec.
KAFKA_LATEST = -1
KAFKA_EARLIEST = -2

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Earliest:
    """Every partition from its first record."""


@dataclass(frozen=True, slots=True)
class Latest:
    """Every partition after its last committed record (hw + 1)."""


@dataclass(frozen=True, slots=True)
class GroupOffsets:
    """A consumer group's committed offsets (absent = from the beginning)."""

    group: str


@dataclass(frozen=True, slots=True)
class PerPartition:
    """Explicit positions; -2 = earliest, -1 = latest, partitions not named use the default."""

    offsets: tuple[tuple[TopicPartition, int], ...]

    def as_dict(self) -> dict[TopicPartition, int]:
        return dict(self.offsets)


@dataclass(frozen=True, slots=True)
class AtTimestamp:
    """Every partition from (or, ending, up to) its first record appended at or after
    ``timestamp`` (ms since the epoch): option startingTimestamp / endingTimestamp."""

    timestamp: int


@dataclass(frozen=True, slots=True)
class ByTimestamp:
    """``AtTimestamp`` per topic partition; partitions not named use the default."""

    timestamps: tuple[tuple[TopicPartition, int], ...]

    def as_dict(self) -> dict[TopicPartition, int]:
        return dict(self.timestamps)


OffsetSpec = Earliest | Latest | GroupOffsets | PerPartition | AtTimestamp | ByTimestamp

# startingOffsetsByTimestampStrategy: what a starting timestamp with no record at or after it
# gives ("error": the query fails, Spark's default; "latest": the partition's latest offset).
TIMESTAMP_STRATEGIES = ("error", "latest")


def parse_offset_spec(
    name: str, text: str, *, ending: bool, single_topic: str | None
) -> OffsetSpec:
    """``earliest``, ``latest``, ``group:<name>`` or JSON; ``single_topic``: the subscription's
    one topic, which the one-topic JSON form ``{"<partition>": <offset>}`` means."""
    spec = text.strip()
    lowered = spec.lower()
    accepted = (
        '\'latest\' or JSON like {"<topic>": {"0": 123, "1": -1}}'
        if ending
        else "'earliest', 'latest', 'group:<name>' or JSON like "
        '{"<topic>": {"0": 123, "1": -2}}'
    )
    if lowered == "latest":
        return Latest()
    if lowered == "earliest" and not ending:
        return Earliest()
    if lowered.startswith("group:") and not ending:
        group = spec[len("group:") :]
        if not is_valid_name(group):
            raise OptionError(
                f"option {name}: group name must be 1-249 characters of [A-Za-z0-9._-], "
                f"got {group!r}"
            )
        return GroupOffsets(group)
    if spec.startswith("{"):
        lowest = KAFKA_LATEST if ending else KAFKA_EARLIEST
        what = "-1 (latest)" if ending else "-2 (earliest), -1 (latest)"
        pairs = _per_partition_json(name, spec, accepted, single_topic, lowest, "offset", what)
        return PerPartition(pairs)
    raise OptionError(f"option {name} must be {accepted}, got {text!r}")


def parse_timestamp(name: str, text: str) -> AtTimestamp:
    try:
        value = int(text.strip())
    except ValueError:
        value = -1
    if value < 0:
        raise OptionError(
            f"option {name} must be a timestamp in milliseconds since the epoch "
            f"(an integer >= 0), got {text!r}"
        )
    return AtTimestamp(value)


def parse_timestamps(name: str, text: str, single_topic: str | None) -> ByTimestamp:
    accepted = 'JSON like {"<topic>": {"0": 1700000000000, "1": 1700000000000}}'
    spec = text.strip()
    if not spec.startswith("{"):
        raise OptionError(f"option {name} must be {accepted}, got {text!r}")
    what = "milliseconds since the epoch"
    pairs = _per_partition_json(name, spec, accepted, single_topic, 0, "timestamp", what)
    return ByTimestamp(pairs)


def _per_partition_json(
    name: str,
    spec: str,
    accepted: str,
    single_topic: str | None,
    lowest: int,
    noun: str,
    what: str,
) -> tuple[tuple[TopicPartition, int], ...]:
    """``{"<topic>": {"<partition>": <int>}}`` (or the one-topic form ``{"<partition>":
    <int>}``) as sorted ((topic, partition), value) pairs, each value >= ``lowest``."""
    try:
        raw = json.loads(spec)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option {name} is not valid JSON ({exc}); expected {accepted}") from None
    if not isinstance(raw, dict):
        raise OptionError(f"option {name} must be a JSON object, expected {accepted}")
    if raw and all(not isinstance(value, dict) for value in raw.values()):
        if single_topic is None:
            raise OptionError(
                f"option {name}: this query reads several topics (or a pattern), so name "
                'each partition\'s topic: {"<topic>": {"<partition>": ...}} (the form '
                '{"<partition>": ...} is for a query of one topic)'
            )
        raw = {single_topic: raw}
    pairs: list[tuple[TopicPartition, int]] = []
    for topic, partitions in raw.items():
        if not isinstance(partitions, dict):
            raise OptionError(f"option {name}: topic {topic!r} must map to an object, {accepted}")
        if not is_valid_name(topic):
            raise OptionError(f"option {name}: {topic!r} is not a topic name")
        for key, value in partitions.items():
            partition = _partition(name, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
                raise OptionError(
                    f"option {name}: {noun} for partition {partition} must be an integer >= 0 "
                    f"or {what}, got {value!r} (topic {topic!r})"
                    if lowest < 0
                    else f"option {name}: {noun} for partition {partition} must be an integer "
                    f">= 0 ({what}), got {value!r} (topic {topic!r})"
                )
            pairs.append(((topic, partition), value))
    return tuple(sorted(pairs))


def _partition(name: str, key: Any) -> int:
    try:
        partition = int(key)
    except ValueError:
        raise OptionError(f"option {name}: {key!r} is not a partition number") from None
    if partition < 0:
        raise OptionError(f"option {name}: partition {key!r} is negative")
    return partition


def _given(opts: Mapping[str, str], single_topic: str | None, *, ending: bool) -> list[OffsetSpec]:
    """Every start (or end) option given, parsed (a malformed one is an error even where
    another wins), in Spark's order of preference: the timestamp, the timestamps per
    partition, the offsets."""
    side = "ending" if ending else "starting"
    given: list[OffsetSpec] = []
    if f"{side}timestamp" in opts:
        given.append(parse_timestamp(f"{side}Timestamp", opts[f"{side}timestamp"]))
    if f"{side}offsetsbytimestamp" in opts:
        name = f"{side}OffsetsByTimestamp"
        given.append(parse_timestamps(name, opts[name.lower()], single_topic))
    if f"{side}offsets" in opts:
        name = f"{side}Offsets"
        given.append(
            parse_offset_spec(name, opts[name.lower()], ending=ending, single_topic=single_topic)
        )
    return given


def starting_spec(opts: Mapping[str, str], single_topic: str | None) -> OffsetSpec | None:
    """startingTimestamp, else startingOffsetsByTimestamp, else startingOffsets; None: the
    query's default (earliest for batch, latest for streaming)."""
    return next(iter(_given(opts, single_topic, ending=False)), None)


def ending_spec(opts: Mapping[str, str], single_topic: str | None) -> OffsetSpec | None:
    """Batch only: endingTimestamp, else endingOffsetsByTimestamp, else endingOffsets;
    None: latest."""
    return next(iter(_given(opts, single_topic, ending=True)), None)


def timestamp_strategy(opts: Mapping[str, str]) -> str:
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in TIMESTAMP_STRATEGIES:
        raise OptionError(
            "option startingOffsetsByTimestampStrategy must be 'error' or 'latest', got "
            f"{opts['startingoffsetsbytimestampstrategy']!r}"
        )
    return strategy
