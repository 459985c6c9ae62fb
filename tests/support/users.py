"""Users in Redis, as ``adapter user add`` stores them, for the pods started with
``--auth-redis``."""

from __future__ import annotations

from collections.abc import Mapping

import redis

from mapping.core.keys import Keys
from mapping.security.auth import RedisUsers


def add_redis_users(redis_url: str, prefix: str, users: Mapping[str, str]) -> None:
    """``users`` (name -> password) added to the user store under key prefix ``prefix``."""
    store = RedisUsers(redis.Redis.from_url(redis_url), Keys(prefix))
    try:
        for name, password in users.items():
            store.add(name, password)
    finally:
        store.client.close()
