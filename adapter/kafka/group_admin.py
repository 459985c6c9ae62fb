"""ListGroups, DescribeGroups, DeleteGroups: what admin clients see of the groups (Kafka
groups of either protocol, and group names that only have V1 members or offsets).

ListGroups answers the groups this pod's broker coordinates (``KafkaContext.coordinated_here``:
FindCoordinator's hash over the same live brokers), as a Kafka broker does: clients list a
cluster's groups by asking every broker and concatenating the answers, so each group appears
once. DescribeGroups and DeleteGroups answer for any group on any pod.

Share groups (KIP-932, adapter/kafka/share_admin.py) are listed with protocol type and group
type ``share``, as long as their membership state exists (an empty one stays listed, as
Kafka keeps an empty group); DescribeGroups answers a share group as Kafka answers a group
that is not classic (v6+: GROUP_ID_NOT_FOUND; before: Dead); DeleteGroups deletes an empty
share group with its share-partitions' state (NON_EMPTY_GROUP while members are live)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from adapter.kafka import authorization, errors
from adapter.kafka.admin import NOT_ASKED, authorized_operations
from adapter.kafka.context import KafkaContext
from adapter.kafka.coordinator import coordinator_call
from adapter.kafka.protocol import Request
from adapter.kafka.share_admin import share_state
from adapter.kafka.versions import DELETE_GROUPS, DESCRIBE_GROUPS, LIST_GROUPS
from mapping.kafka_group import GroupDescription, GroupListing
from mapping.security.acls import SUPPORTED, Operation, ResourceType

ListResponse = LIST_GROUPS.response
Listed = ListResponse.ListedGroup
DescribeResponse = DESCRIBE_GROUPS.response
Described = DescribeResponse.DescribedGroup
DescribedMember = Described.DescribedGroupMember
DeleteResponse = DELETE_GROUPS.response
Deleted = DeleteResponse.DeletableGroupResult
DEAD = "Dead"
SHARE = "share"  # a share group's protocol type and group type (ListGroups)
GROUP_OPERATIONS = frozenset(int(op) for op in SUPPORTED[ResourceType.GROUP])


async def list_groups(context: KafkaContext, request: Request) -> Any:
    body = request.body
    states = set(body.states_filter or ()) if request.version >= 4 else set()
    types = {t.lower() for t in body.types_filter or ()} if request.version >= 5 else set()

    async def listed() -> tuple[int, list[GroupListing]]:
        coordinated = await context.coordinated_here()
        listings = await context.pod.kafka_groups.list_groups(
            states or None, coordinated=coordinated
        )
        shares = await _share_listings(context, listings, coordinated)
        return errors.NONE, listings + [g for g in shares if not states or g.state in states]

    code, listings = await coordinator_call(listed(), lambda code: (code, []))
    if context.authorizer.enabled:  # DESCRIBE on the cluster: all; else each group's
        hidden = await authorization.cluster_or_denied(
            context, request, Operation.DESCRIBE, Operation.DESCRIBE, ResourceType.GROUP,
            [g.group_id for g in listings],
        )  # fmt: skip
        listings = [g for g in listings if g.group_id not in hidden]
    return ListResponse[request.version](
        throttle_time_ms=0,
        error_code=code,
        groups=[
            Listed(
                group_id=g.group_id,
                protocol_type=g.protocol_type,
                group_state=g.state,
                group_type=g.group_type,
            )
            for g in listings
            if not types or g.group_type in types
        ],
    )


async def _share_listings(
    context: KafkaContext, listed: list[GroupListing], coordinated: Callable[[str], bool]
) -> list[GroupListing]:
    """The share groups this pod coordinates that are not already listed as Kafka groups."""
    state = share_state(context)
    taken = {g.group_id for g in listed}
    names = [g for g in await state.group_names() if g not in taken and coordinated(g)]
    found = await asyncio.gather(*(state.membership(g) for g in names))
    return [
        GroupListing(g, SHARE, membership.state, SHARE)
        for g, membership in zip(names, found, strict=True)
        if membership is not None
    ]


async def describe_groups(context: KafkaContext, request: Request) -> Any:
    names = list(request.body.groups or ())
    # DESCRIBE on each group, else GROUP_AUTHORIZATION_FAILED (Kafka's groupError)
    refused = await authorization.denied(
        context, request, Operation.DESCRIBE, ResourceType.GROUP, names
    )
    if refused:
        names = [n for n in names if n not in refused]
    found = await coordinator_call(
        context.pod.kafka_groups.describe_groups([n or "" for n in names]),
        lambda code: [GroupDescription(n, code, DEAD) for n in names],
    )
    described = [
        Described(
            error_code=errors.GROUP_AUTHORIZATION_FAILED,
            error_message=None,
            group_id=n,
            group_state="",
            protocol_type="",
            protocol_data="",
            members=[],
        )
        for n in dict.fromkeys(request.body.groups or ())
        if n in refused
    ]
    state = share_state(context)
    for g in found:
        code, message = g.error, None
        if request.version >= 6 and code == errors.NONE and g.state == DEAD:
            code = errors.GROUP_ID_NOT_FOUND
            if await coordinator_call(state.exists(g.group_id), lambda _: False):
                message = f"Group {g.group_id} is not a classic group."
        described.append(
            Described(
                error_code=code,
                error_message=message,
                group_id=g.group_id,
                group_state=g.state,
                protocol_type=g.protocol_type,
                protocol_data=g.protocol,
                members=[
                    DescribedMember(
                        member_id=m.member_id,
                        group_instance_id=m.group_instance_id,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        member_metadata=m.metadata,
                        member_assignment=m.assignment,
                    )
                    for m in g.members
                ],
            )
        )
    if request.version >= 3:  # KIP-430: the group's authorized operations, when asked
        asked = bool(getattr(request.body, "include_authorized_operations", False))
        for group in described:
            group.authorized_operations = (
                authorized_operations(
                    context, request, ResourceType.GROUP, group.group_id, GROUP_OPERATIONS
                )
                if asked and group.error_code == errors.NONE
                else set(NOT_ASKED)
            )
    return DescribeResponse[request.version](throttle_time_ms=0, groups=described)


async def delete_groups(context: KafkaContext, request: Request) -> Any:
    names = [n or "" for n in request.body.groups_names or ()]
    refused = await authorization.denied(
        context, request, Operation.DELETE, ResourceType.GROUP, names
    )
    allowed = [n for n in names if n not in refused] if refused else names
    # share groups first, the others as before (Kafka chains the group types so too)
    shares = await coordinator_call(
        _delete_share_groups(context, allowed), lambda code: dict.fromkeys(allowed, code)
    )
    others = [n for n in allowed if n not in shares]
    codes = await coordinator_call(
        context.pod.kafka_groups.delete_groups(others), lambda code: dict.fromkeys(others, code)
    )
    codes.update(shares)
    codes.update(dict.fromkeys(refused, errors.GROUP_AUTHORIZATION_FAILED))
    return DeleteResponse[request.version](
        throttle_time_ms=0,
        results=[Deleted(group_id=n, error_code=codes[n]) for n in dict.fromkeys(names)],
    )


async def _delete_share_groups(context: KafkaContext, names: list[str]) -> dict[str, int]:
    """DeleteGroups' answer for the ``names`` that are share groups: NON_EMPTY_GROUP while
    members are live; else their state on every partition and their membership go."""
    state = share_state(context)
    codes: dict[str, int] = {}
    for name in dict.fromkeys(names):
        membership = await state.membership(name) if name else None
        if membership is None:
            continue
        if membership.members:
            codes[name] = errors.NON_EMPTY_GROUP
            continue
        await state.delete_group(name)
        codes[name] = errors.NONE
    return codes
