"""Kafka's ACL bindings in Redis: one set (``Keys.acls``) of canonical encodings, one member
per binding, and a change notice (``Keys.acls_changed_channel``) every pod listens to.

A binding is the JSON array ``[resource type, pattern type, name, principal, host,
operation, permission]`` (Kafka's codes for the enums), so equal bindings are one member:
a create is idempotent (SADD), and each removal is one SREM whose reply says whether it
was this call that removed it (what DeleteAcls answers). ``AclStore`` is the pods' (on the
batcher), ``SyncAclStore`` the command line's (a synchronous client); both publish the
notice after every change.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Sequence
from typing import Any

from mapping.connection.batcher import RedisBatcher
from mapping.core.codec import to_str
from mapping.core.keys import Keys
from mapping.security.acls import (
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

CHANGED = "changed"  # the notice's payload (pods read every binding again)


def encode(binding: AclBinding) -> str:
    """The binding's one canonical encoding (its member of the set)."""
    return json.dumps(
        [
            int(binding.resource_type),
            int(binding.pattern_type),
            binding.name,
            binding.principal,
            binding.host,
            int(binding.operation),
            int(binding.permission),
        ],
        separators=(",", ":"),
        ensure_ascii=False,
    )


def decode(raw: bytes | str) -> AclBinding | None:
    """The binding a member encodes; None for a member that is not one (never written by
    this module: skipped rather than failing every authorization)."""
    try:
        rtype, ptype, name, principal, host, operation, permission = json.loads(to_str(raw))
        return AclBinding(
            ResourceType(rtype),
            str(name),
            PatternType(ptype),
            str(principal),
            str(host),
            Operation(operation),
            Permission(permission),
        )
    except (ValueError, TypeError):
        return None


def decode_all(members: Iterable[bytes | str]) -> list[AclBinding]:
    """Every binding of the set's members, in their canonical order (stable listings)."""
    bindings = [b for b in (decode(m) for m in members) if b is not None]
    return sorted(bindings, key=encode)


def matching(
    bindings: Sequence[AclBinding], filters: Sequence[AclFilter]
) -> tuple[list[list[AclBinding]], list[AclBinding]]:
    """Per filter the bindings it matches, and every matched binding once (to remove)."""
    per_filter = [[b for b in bindings if f.matches(b)] for f in filters]
    unique = list({encode(b): b for found in per_filter for b in found}.values())
    return per_filter, unique


class AclStore:
    """The ACL bindings on the pod's batcher."""

    def __init__(self, batcher: RedisBatcher, keys: Keys) -> None:
        self.batcher = batcher
        self.keys = keys

    async def load(self) -> list[AclBinding]:
        """Every binding stored."""
        return decode_all(await self.batcher.call("SMEMBERS", self.keys.acls))

    async def create(self, bindings: Sequence[AclBinding]) -> None:
        """Store the bindings (those stored already stay as they are), then tell every pod."""
        if not bindings:
            return
        await self.batcher.call("SADD", self.keys.acls, *(encode(b) for b in bindings))
        await self.batcher.call("PUBLISH", self.keys.acls_changed_channel, CHANGED)

    async def delete(self, filters: Sequence[AclFilter]) -> list[list[AclBinding]]:
        """Remove the bindings each filter matches; per filter, those it removed (a binding
        removed meanwhile by another caller is not reported twice)."""
        per_filter, unique = matching(await self.load(), filters)
        if not unique:
            return per_filter
        removed = await _remove(self.batcher.call, self.keys, unique)
        await self.batcher.call("PUBLISH", self.keys.acls_changed_channel, CHANGED)
        return [[b for b in found if encode(b) in removed] for found in per_filter]


async def _remove(call: Any, keys: Keys, bindings: Sequence[AclBinding]) -> set[str]:
    """The members this call removed (one SREM each, all in one pipeline)."""
    members = [encode(b) for b in bindings]
    replies = await asyncio.gather(*(call("SREM", keys.acls, m) for m in members))
    return {m for m, reply in zip(members, replies, strict=True) if reply}


class SyncAclStore:
    """The ACL bindings through a synchronous client (``adapter acl``)."""

    def __init__(self, client: Any, keys: Keys) -> None:
        self.client = client
        self.keys = keys

    def load(self) -> list[AclBinding]:
        return decode_all(self.client.smembers(self.keys.acls))

    def create(self, bindings: Sequence[AclBinding]) -> int:
        """Store the bindings; how many were new. Every pod is told."""
        if not bindings:
            return 0
        added = int(self.client.sadd(self.keys.acls, *(encode(b) for b in bindings)))
        self.client.publish(self.keys.acls_changed_channel, CHANGED)
        return added

    def delete(self, filters: Sequence[AclFilter]) -> list[list[AclBinding]]:
        per_filter, unique = matching(self.load(), filters)
        if not unique:
            return per_filter
        removed = {encode(b) for b in unique if self.client.srem(self.keys.acls, encode(b))}
        self.client.publish(self.keys.acls_changed_channel, CHANGED)
        return [[b for b in found if encode(b) in removed] for found in per_filter]
