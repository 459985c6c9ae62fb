"""A pod under Kafka's ACLs (``--authorizer``) for the doors' authorization tests: a users
file with a user and a super user, the bindings written to Redis as ``adapter acl`` writes
them, and the topics the tests need created by the super user."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import redis

from adapter.client import Client
from mapping.core.keys import Keys
from mapping.security.acl_store import SyncAclStore
from mapping.security.acls import AclBinding
from mapping.security.auth import auth_file_line
from tests.support.pods import RF1, Pod, plain_client


@contextmanager
def authorizing_pod(
    redis_url: str,
    folder: Path,
    *,
    user: str,
    admin: str,
    password: str,
    bindings: list[AclBinding],
    topics: Iterable[str],
    extra_args: Sequence[str] = (),
    metrics: bool = False,
) -> Iterator[Pod]:
    """A started pod with its own key prefix, ``user`` and ``admin`` (a super user) sharing
    ``password``, ``bindings`` stored and ``topics`` created; ``extra_args``: more options;
    ``metrics``: with its Prometheus endpoint."""
    prefix = f"authz-{uuid.uuid4().hex[:8]}"
    users = folder / "users"
    users.write_text(f"{auth_file_line(user, password)}\n{auth_file_line(admin, password)}\n")
    args = [*RF1, "--key-prefix", prefix, "--auth-file", str(users), "--authorizer",
            "--super-users", f"User:{admin}", *extra_args]  # fmt: skip
    pod = Pod(
        redis_url,
        *args,
        connect=plain_client,
        metrics=metrics,
    )
    pod.start()
    try:
        client = redis.Redis.from_url(redis_url)
        try:
            SyncAclStore(client, Keys(prefix)).create(bindings)
        finally:
            client.close()
        super_user = Client("127.0.0.1", pod.port, timeout=10)
        super_user.auth(admin, password)
        for topic in topics:
            assert super_user.request("PRODUCE", f"{topic} k:v").ok
        super_user.close()
        yield pod
    finally:
        pod.stop()
