"""Toward Redis: an ACL user with a password (in the URL or options), TLS (rediss://)
through a TLS-terminating proxy in front of a plain redis-server (the local redis-server
is built without TLS), and the startup checks with their messages."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from mapping.connection.client import connect
from mapping.connection.embedded import RedisProcess, free_port
from mapping.connection.startup import MIN_REDIS_VERSION, check_redis, parse_version
from mapping.core.errors import ConfigurationError
from mapping.core.keys import Keys
from tests.support import ROOT
from tests.support.pods import RF1, Pod
from tests.support.tls import Certs, TLSProxy

StartPod = Callable[..., Pod]
# What the adapter needs, on its own keys and channels only.
ADAPTER_ACL = [
    "on", ">adapter-pw", "~rsa:*", "&rsa:*",
    "+@read", "+@write", "+@stream", "+@hash", "+@set", "+@sortedset", "+@pubsub",
    "+@scripting", "+@connection", "+time", "+info",
]  # fmt: skip


def serve_and_exit(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``serve`` expecting it to refuse to start."""
    return subprocess.run(
        [sys.executable, "-m", "adapter", "serve", "--port", str(free_port()), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


@pytest.fixture
def acl_redis(own_redis: RedisProcess) -> RedisProcess:
    admin = redis.Redis(port=own_redis.port)
    admin.execute_command("ACL", "SETUSER", "adapter", *ADAPTER_ACL)
    admin.execute_command("ACL", "SETUSER", "default", "off")  # no anonymous access
    admin.close()
    return own_redis


def test_acl_user_in_the_url(start_pod: StartPod, acl_redis: RedisProcess, topic: str) -> None:
    url = f"redis://adapter:adapter-pw@127.0.0.1:{acl_redis.port}/0"
    pod = start_pod(url, *RF1)
    with pod.client() as client:
        produced = client.produce(topic, "user1", "acl")
        assert client.consume(topic, produced.partition, 0).records == [(produced.offset, b"acl")]
        produced = client.produce(topic, "user1", "all", acks="all")  # WAIT, pub/sub too
    assert "adapter-pw" not in pod.log() and "adapter:***@" in pod.log()


def test_acl_user_in_options(start_pod: StartPod, acl_redis: RedisProcess, topic: str) -> None:
    url = f"redis://127.0.0.1:{acl_redis.port}/0"
    pod = start_pod(url, *RF1, "--redis-username", "adapter", "--redis-password", "adapter-pw")
    with pod.client() as client:
        assert client.produce(topic, "k", "v").offset >= 0


def test_wrong_redis_password_is_a_clear_startup_error(acl_redis: RedisProcess) -> None:
    url = f"redis://adapter:not-Zq81@127.0.0.1:{acl_redis.port}/0"
    result = serve_and_exit("--redis-url", url)
    assert result.returncode != 0
    assert "refused the credentials" in result.stderr, result.stderr
    assert "redis://adapter:***@127.0.0.1" in result.stderr
    assert "Zq81" not in result.stderr + result.stdout  # the password is never shown


def test_missing_acl_permission_is_a_clear_startup_error(own_redis: RedisProcess) -> None:
    admin = redis.Redis(port=own_redis.port)
    admin.execute_command("ACL", "SETUSER", "reader", "on", ">pw", "~*", "+@read", "+info")
    admin.close()
    result = serve_and_exit("--redis-url", f"redis://reader:pw@127.0.0.1:{own_redis.port}/0")
    assert result.returncode != 0
    assert "lacks a permission" in result.stderr and "+@scripting" in result.stderr


def test_unreachable_redis(tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    result = serve_and_exit("--redis-url", url, "--redis-startup-timeout-s", "1")
    assert result.returncode != 0
    assert f"cannot reach Redis at {url} within 1s" in result.stderr, result.stderr


def test_require_aof(start_pod: StartPod, redis_url: str, own_redis: RedisProcess) -> None:
    # the session Redis runs without AOF
    result = serve_and_exit("--redis-url", redis_url, "--require-aof")
    assert result.returncode != 0
    assert "--require-aof: Redis at" in result.stderr and "AOF off" in result.stderr
    pod = start_pod(own_redis.url, *RF1, "--require-aof")  # AOF on: starts
    with pod.client() as client:
        assert client.ping() == "pong"


class _OldRedis:
    async def info(self, section: str) -> dict[str, str]:
        return {"redis_version": "6.0.16"}


def test_old_redis_version_refused() -> None:
    assert parse_version("7.0.15") > MIN_REDIS_VERSION > parse_version("6.0.16")
    with pytest.raises(ConfigurationError, match="version 6.0.16; the adapter needs 6.2.0"):
        asyncio.run(
            check_redis(
                _OldRedis(),  # type: ignore[arg-type]
                Keys(),
                sequence_bits=10,
                require_aof=False,
                url="redis://old",
            )
        )


def test_rediss_with_ca_and_client_certificate(
    start_pod: StartPod, tls_proxy: TLSProxy, certs: Certs, topic: str
) -> None:
    url = f"rediss://127.0.0.1:{tls_proxy.port}/0"
    tls = [
        "--redis-tls-ca", str(certs.ca),
        "--redis-tls-cert", str(certs.client_cert),
        "--redis-tls-key", str(certs.client_key),
    ]  # fmt: skip
    pod = start_pod(url, *RF1, *tls)
    with pod.client() as client:
        produced = client.produce(topic, "user1", "over rediss", acks="all")
        assert client.consume(topic, produced.partition, 0).records[-1][1] == b"over rediss"
    # the same settings in the URL's query, as redis-py reads them
    query = (
        f"?ssl_ca_certs={certs.ca}&ssl_certfile={certs.client_cert}&ssl_keyfile={certs.client_key}"
    )
    pod = start_pod(url + query, *RF1)
    with pod.client() as client:
        assert client.produce(topic, "user1", "again").offset > produced.offset


def test_rediss_with_an_untrusted_certificate_fails_to_start(
    tls_proxy: TLSProxy, certs: Certs
) -> None:
    url = f"rediss://127.0.0.1:{tls_proxy.port}/0"  # the system CAs do not know trustme's CA
    result = serve_and_exit("--redis-url", url, "--redis-startup-timeout-s", "1")
    assert result.returncode != 0
    assert "certificate verify failed" in result.stderr, result.stderr


@pytest.fixture
def evicting_redis(tmp_path: Path) -> Iterator[RedisProcess]:
    """A Redis that deletes keys when full, as a cache would be configured."""
    extra = ["--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"]
    with RedisProcess(tmp_path / "evicting", appendonly=False, extra_args=extra) as server:
        yield server


def test_evicting_redis_refused_unless_allowed(
    start_pod: StartPod, evicting_redis: RedisProcess
) -> None:
    result = serve_and_exit("--redis-url", evicting_redis.url)
    assert result.returncode != 0
    assert "has maxmemory-policy allkeys-lru" in result.stderr, result.stderr
    assert "set maxmemory-policy noeviction" in result.stderr
    assert "--allow-evicting-redis" in result.stderr
    pod = start_pod(evicting_redis.url, *RF1, "--allow-evicting-redis")  # the override starts
    with pod.client() as client:
        assert client.ping() == "pong"


def test_embedded_redis_passes_the_eviction_check(tmp_path: Path) -> None:
    """The embedded Redis keeps Redis' default policy, noeviction."""
    with RedisProcess(tmp_path / "embedded") as server:
        asyncio.run(_check(server.url))


async def _check(url: str) -> None:
    client = connect(url)
    try:
        await check_redis(client, Keys(), sequence_bits=10, require_aof=True, url=url)
    finally:
        await client.aclose()
