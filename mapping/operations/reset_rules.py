"""A group's offset reset with its safety rules, for ``adapter group reset-offsets`` and
the console's reset form: refused while the group has live members of any protocol (Kafka's
"the group is inactive"), a share group's start offsets moved instead when the name is a
share group's, the plan (mapping/operations/offset_reset.py) written only when asked."""

from __future__ import annotations

from mapping.kafka_group import KafkaGroups
from mapping.operations.group_overview import overview
from mapping.operations.offset_reset import (
    CannotReset,
    PlannedOffset,
    ResetTarget,
    execute_reset,
    plan_reset,
)
from mapping.operations.share_group_overview import (
    CannotResetShare,
    execute_share_reset,
    plan_share_reset,
)
from mapping.partition.kafka import KafkaStore
from mapping.share_group.state import ShareGroupState
from mapping.topic.topics import Topics


async def reset_group(
    topics: Topics, kafka: KafkaStore, groups: KafkaGroups, shares: ShareGroupState,
    group: str, topic: str, partitions: list[int] | None, target: ResetTarget, execute: bool,
) -> list[PlannedOffset]:  # fmt: skip
    """The plan for ``group`` on ``topic`` (``partitions``: None for every one), written
    when ``execute``; ``CannotReset`` saying why when refused."""
    config = await topics.read(topic)
    if config is None:
        raise CannotReset(f"no topic {topic}")
    chosen = partitions if partitions is not None else list(range(config.partitions))
    outside = [p for p in chosen if p >= config.partitions]
    if outside:
        raise CannotReset(
            f"topic {topic} has {config.partitions} partitions: no partition {outside[0]}"
        )
    membership = await shares.membership(group)
    if membership is not None:  # a share group: its start offsets
        if membership.members:
            raise CannotReset(
                f"Share group '{group}' is not empty: the current state is "
                f"{membership.state} ({len(membership.members)} live members; NON_EMPTY_GROUP)."
            )
        try:
            planned = await plan_share_reset(kafka, shares, group, config, chosen, target)
        except CannotResetShare as exc:
            raise CannotReset(str(exc)) from None
        if execute:
            await execute_share_reset(shares, group, planned)
        return planned
    found = await overview(groups, group, kafka.bits, offsets=False)
    if found is not None and not found.inactive:
        raise CannotReset(
            f"Assignments can only be reset if the group '{group}' is inactive, but the "
            f"current state is {found.state} ({found.protocol}, {len(found.members)} live "
            "members)."
        )
    plan = await plan_reset(kafka, groups, group, config, chosen, target)
    if execute:
        refused = await execute_reset(groups, group, plan)
        if refused:
            raise CannotReset(
                f"group '{group}' refused the reset (it has members again?): " + "; ".join(refused)
            )
    return plan
