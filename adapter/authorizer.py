"""The pod's authorizer: Kafka's ACL decision (mapping/security/acls.py) over the pod's copy
of the bindings stored in Redis (mapping/security/acl_store.py).

Off by default (``--authorizer``): then every check allows at once, with no Redis call and
no lookup. On: the bindings are read at start and again whenever a change notice arrives
(or the pub/sub connection came back: notices may have been missed), so a change made
through any pod or ``adapter acl`` is in force on every pod within a moment. Every denial
writes one line to the ``adapter.audit`` logger (Kafka's authorizer logger).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from mapping.security.acl_store import AclStore
from mapping.security.acls import (
    ANONYMOUS,
    SUPPORTED,
    AclBinding,
    Operation,
    ResourceType,
    authorize,
    authorized_operations,
)

__all__ = ["ANONYMOUS", "Authorizer", "Operation", "ResourceType", "parse_super_users"]

log = logging.getLogger(__name__)
# Decisions remembered at most (then forgotten all at once: a pod serving that many distinct
# (principal, host, resource) triples recomputes them).
MAX_DECISIONS = 65_536
audit = logging.getLogger("adapter.audit")


def parse_super_users(text: str | None) -> frozenset[str]:
    """``--super-users``' principals: "User:alice,User:admin" (";" separates too, as
    Kafka's super.users)."""
    if not text:
        return frozenset()
    return frozenset(p.strip() for p in text.replace(";", ",").split(",") if p.strip())


def _host(host: str) -> str:
    """The client's address as bindings name it (Request.client_host has a leading "/")."""
    return host[1:] if host.startswith("/") else host


class Authorizer:
    """Whether a principal may do an operation on a resource; see the module's docstring."""

    def __init__(
        self,
        store: AclStore | None = None,
        *,
        enabled: bool = False,
        super_users: frozenset[str] = frozenset(),
        allow_if_no_acl: bool = False,
    ) -> None:
        self.store = store
        self.enabled = enabled
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        # the bindings by resource type: a check scans only its type's
        self._by_type: dict[ResourceType, tuple[AclBinding, ...]] = {}
        self.bindings: tuple[AclBinding, ...] = ()
        # (principal, host, operation, type, name) -> the decision, until the bindings change:
        # a check walks its type's bindings once, then costs a dict lookup
        self._decisions: dict[tuple[str, str, Operation, ResourceType, str], bool] = {}
        self.loaded = False  # a first read has succeeded
        self._reloads: set[asyncio.Task[None]] = set()
        self._dirty = False
        self._loading = False

    # -- decisions -------------------------------------------------------------------------

    def allows(
        self,
        principal: str,
        host: str,
        operation: Operation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        """Whether ``principal`` connected from ``host`` may ``operation`` the resource; a
        denial is audited."""
        if not self.enabled:
            return True
        return self._decide(principal, host, operation, resource_type, name, audited=True)

    def _decide(
        self,
        principal: str,
        host: str,
        operation: Operation,
        resource_type: ResourceType,
        name: str,
        *,
        audited: bool,
    ) -> bool:
        key = (principal, host, operation, resource_type, name)
        allowed = self._decisions.get(key)
        if allowed is None:
            allowed = authorize(
                self._by_type.get(resource_type, ()),
                principal,
                _host(host),
                operation,
                resource_type,
                name,
                super_users=self.super_users,
                allow_if_no_acl=self.allow_if_no_acl,
            )
            if len(self._decisions) >= MAX_DECISIONS:
                self._decisions.clear()
            self._decisions[key] = allowed
        if not allowed and audited:
            audit.info(
                "principal=%s host=%s operation=%s resource_type=%s name=%s DENIED",
                principal,
                _host(host),
                operation.name,
                resource_type.name,
                name,
            )
        return allowed

    def operations(
        self, principal: str, host: str, resource_type: ResourceType, name: str
    ) -> set[Operation]:
        """The operations of the resource's type the principal may do on it (every one the
        type supports when the authorizer is off). Not audited: it is a question, not a
        request (Kafka's authorizer does not log these either)."""
        if not self.enabled:
            return set(SUPPORTED.get(resource_type, frozenset()))
        return authorized_operations(
            self._by_type.get(resource_type, ()),
            principal,
            _host(host),
            resource_type,
            name,
            super_users=self.super_users,
            allow_if_no_acl=self.allow_if_no_acl,
        )

    def filter_allowed(
        self,
        principal: str,
        host: str,
        operation: Operation,
        resource_type: ResourceType,
        names: Iterable[str],
        *,
        audited: bool = True,
    ) -> list[str]:
        """Those of ``names`` the principal may ``operation`` (in their order); each denial
        is audited unless not ``audited`` (a listing that leaves out what it may not show:
        Kafka's Metadata of every topic filters with ``logIfDenied = false``)."""
        if not self.enabled:
            return list(names)
        return [
            n
            for n in names
            if self._decide(principal, host, operation, resource_type, n, audited=audited)
        ]

    # -- the pod's copy of the bindings ----------------------------------------------------

    def set_bindings(self, bindings: Iterable[AclBinding]) -> None:
        """Replace the pod's copy (what ``load`` read)."""
        kept = tuple(bindings)
        by_type: dict[ResourceType, list[AclBinding]] = {}
        for binding in kept:
            by_type.setdefault(binding.resource_type, []).append(binding)
        self._by_type = {t: tuple(found) for t, found in by_type.items()}
        self.bindings = kept
        self._decisions = {}

    async def load(self) -> None:
        """Read every binding again (a read failing keeps the last copy: the reconnect, or
        the next notice, reads them again). Reads that would overlap run once more after the
        current one, so the last read is never older than the last notice."""
        if self.store is None:
            return
        if self._loading:
            self._dirty = True
            return
        self._loading = True
        try:
            while True:
                self._dirty = False
                try:
                    self.set_bindings(await self.store.load())
                    self.loaded = True
                except Exception:
                    log.warning("could not read the ACL bindings", exc_info=True)
                    return
                if not self._dirty:
                    return
        finally:
            self._loading = False

    def changed(self, _data: Any = None) -> None:
        """A change notice (or a pub/sub reconnect): read the bindings again."""
        task = asyncio.ensure_future(self.load())
        self._reloads.add(task)
        task.add_done_callback(self._reloads.discard)

    async def run(self, subscriber: Any) -> None:
        """Listen for change notices, then read the bindings (so no change is missed); the
        pod's background work (adapter/pod.py) runs it when the authorizer is on."""
        if not self.enabled or self.store is None:
            return
        subscriber.on_reconnect(self.changed)
        await subscriber.subscribe(self.store.keys.acls_changed_channel, self.changed)
        await self.load()
