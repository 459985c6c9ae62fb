"""Client authentication: AUTH <user> <password> against an auth file or users in Redis.
Before a successful AUTH a client gets nothing but the refusal, and nothing it sent runs."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from adapter.client import Client, RequestFailed
from mapping.security.auth import (
    CredentialsError,
    hash_password,
    parse_auth_file,
    verify_password,
)
from tests.support import ROOT
from tests.support.pods import RF1, Pod
from tests.support.v1 import KEYS, closed_by_peer, raw_connection, read_lines

StartPod = Callable[..., Pod]


def plain(port: int) -> Client:
    return Client("127.0.0.1", port, timeout=10)


@pytest.fixture
def auth_file(tmp_path: Path) -> Path:
    path = tmp_path / "users"
    path.write_text(
        f"# user:hash lines\nalice:{hash_password('s3cret')}\nbob:{hash_password('pass word|%')}\n"
    )
    return path


def test_hashes_are_salted_and_verified() -> None:
    # "-" and "!" are outside base64's alphabet: the password is in the hash only if stored
    # in clear (a short "pw" occurs in random base64 now and then).
    password = "pass-word!"
    first, second = hash_password(password), hash_password(password)
    assert first != second  # a fresh salt each time
    assert verify_password(password, first) and verify_password(password.encode(), second)
    assert not verify_password("pass-worD!", first)
    assert password not in first


@pytest.mark.parametrize(
    "text",
    ["alice", "alice:plain-password", "bad name:" + hash_password("x"), "a:scrypt$1$2"],
)
def test_malformed_auth_file_lines_are_refused(text: str) -> None:
    with pytest.raises(CredentialsError, match="line 1"):
        parse_auth_file(text)


def test_everything_refused_before_auth(
    start_pod: StartPod, redis_url: str, auth_file: Path, topic: str
) -> None:
    pod = start_pod(redis_url, *RF1, "--auth-file", str(auth_file), connect=plain)
    sock = raw_connection(pod.port)
    requests = [
        b"V1|1|PING|",
        f"V1|2|PRODUCE|{topic} k:v".encode(),
        f"V1|3|CONSUME|{topic} 0 0".encode(),
        f"V1|4|JOIN|g {topic} c1".encode(),
        f"V1|5|SET_PARTITION_ROLE|{topic} 0 follower".encode(),
        b"V1|6|NOSUCH|x",
        b"V1|7|AUTH|alice wrong",
        b"V1|8|AUTH|nobody s3cret",
        b"V1|9|AUTH|alice",
        f"V1|10|PRODUCE|{topic} k:v".encode(),
    ]
    sock.sendall(b"\n".join(requests) + b"\n")
    replies = read_lines(sock, len(requests))
    refused = [b"AUTH_REQUIRED|authenticate first: AUTH <user> <password>"]
    assert [r.split(b"|", 3)[3] for r in replies[:6]] == refused * 6, replies
    assert replies[6] == b"V1|7|ERR|AUTH_FAILED|invalid user or password"
    assert replies[7] == b"V1|8|ERR|AUTH_FAILED|invalid user or password"
    assert replies[8] == b"V1|9|ERR|BAD_REQUEST|AUTH requires: <user> <password>"
    assert replies[9].startswith(b"V1|10|ERR|AUTH_REQUIRED|")
    # nothing the unauthenticated client sent reached Redis
    client = redis.Redis.from_url(redis_url)
    try:
        assert not client.exists(KEYS.topic(topic), KEYS.partition(topic, 0).log)
    finally:
        client.close()
    sock.close()


def test_auth_then_commands_work(
    start_pod: StartPod, redis_url: str, auth_file: Path, topic: str
) -> None:
    pod = start_pod(redis_url, *RF1, "--auth-file", str(auth_file), connect=plain)
    with plain(pod.port) as client:
        with pytest.raises(RequestFailed) as refused:
            client.auth("alice", "nope")
        assert refused.value.code == "AUTH_FAILED"
        client.auth("alice", "s3cret")
        assert client.ping() == "pong"
        produced = client.produce(topic, "user1", "hello")
        assert client.consume(topic, produced.partition, 0).records == [(produced.offset, b"hello")]
        # a later failed AUTH leaves the earlier one in force
        with pytest.raises(RequestFailed):
            client.auth("bob", "s3cret")
        assert client.ping() == "pong"
    with plain(pod.port) as other:  # authentication is per connection
        assert other.request("PING").code == "AUTH_REQUIRED"
        other.auth("bob", "pass word|%")  # escaped on the wire: spaces, | and % work
        assert other.ping() == "pong"


def test_requests_pipelined_behind_auth_wait_for_it(
    start_pod: StartPod, redis_url: str, auth_file: Path, topic: str
) -> None:
    pod = start_pod(redis_url, *RF1, "--auth-file", str(auth_file), connect=plain)
    sock = raw_connection(pod.port)
    lines = [
        f"V1|1|PRODUCE|{topic} a:before".encode(),
        b"V1|2|AUTH|alice s3cret",
        *(f"V1|{i}|PRODUCE|{topic} a:after{i}".encode() for i in range(3, 50)),
    ]
    sock.sendall(b"\n".join(lines) + b"\n")
    replies = read_lines(sock, len(lines))
    assert replies[0].startswith(b"V1|1|ERR|AUTH_REQUIRED|")
    assert replies[1] == b"V1|2|OK|user=alice"
    assert all(r.startswith(f"V1|{i}|OK|partition=".encode()) for i, r in enumerate(replies[2:], 3))
    sock.close()


def test_connection_that_never_authenticates_is_closed(
    start_pod: StartPod, redis_url: str, auth_file: Path
) -> None:
    pod = start_pod(
        redis_url, *RF1, "--auth-file", str(auth_file), "--auth-timeout-s", "0.5", connect=plain
    )
    with plain(pod.port) as authenticated:
        authenticated.auth("alice", "s3cret")
        stranger = raw_connection(pod.port, timeout=30)
        stranger.sendall(b"V1|1|PING|\n")
        assert read_lines(stranger, 1)[0].startswith(b"V1|1|ERR|AUTH_REQUIRED|")
        assert closed_by_peer(stranger)  # blocks until the pod closes it
        stranger.close()
        assert authenticated.ping() == "pong"  # opened as early, but authenticated


def test_auth_when_authentication_is_off(pod: Pod) -> None:
    with pod.client() as client:
        assert client.request("AUTH", "anyone anything").payload == "auth=off"
        assert client.request("AUTH", "").code == "BAD_REQUEST"


def _user_cli(
    redis_url: str, *args: str, password: str | None = None
) -> subprocess.CompletedProcess:
    env = {**os.environ, "ADAPTER_REDIS_URL": redis_url}
    if password is not None:
        env["ADAPTER_USER_PASSWORD"] = password
    return subprocess.run(
        [sys.executable, "-m", "adapter", "user", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_users_stored_in_redis(start_pod: StartPod, own_redis, topic: str) -> None:
    url = own_redis.url
    added = _user_cli(url, "add", "carol", password="hunter2")
    assert added.returncode == 0 and "added user=carol" in added.stdout, added.stderr
    stored = redis.Redis.from_url(url).hget(KEYS.users, "carol")
    assert stored is not None and b"hunter2" not in stored and stored.startswith(b"scrypt$")
    assert _user_cli(url, "list").stdout.split() == ["carol"]

    pod = start_pod(url, *RF1, "--auth-redis", connect=plain)
    with plain(pod.port) as client:
        assert client.request("PRODUCE", f"{topic} k:v").code == "AUTH_REQUIRED"
        client.auth("carol", "hunter2")
        client.produce(topic, "k", "v")
    # a new password takes effect for the next AUTH, without restarting the pod
    assert "updated" in _user_cli(url, "add", "carol", password="changed").stdout
    with plain(pod.port) as client:
        assert client.request("AUTH", "carol hunter2").code == "AUTH_FAILED"
        client.auth("carol", "changed")
    removed = _user_cli(url, "remove", "carol")
    assert removed.returncode == 0, removed.stderr
    with plain(pod.port) as client:
        assert client.request("AUTH", "carol changed").code == "AUTH_FAILED"
    again = _user_cli(url, "remove", "carol")
    assert again.returncode != 0 and "no user carol" in again.stderr


def test_malformed_auth_file_stops_the_pod_with_a_message(redis_url: str, tmp_path: Path) -> None:
    path = tmp_path / "users"
    path.write_text("alice:not-a-hash\n")
    pod = Pod(redis_url, "--auth-file", str(path))
    with pytest.raises(AssertionError, match="auth-file.*line 1"):
        pod.start()


def test_user_hash_line_works_in_an_auth_file(
    start_pod: StartPod, redis_url: str, tmp_path: Path
) -> None:
    line = _user_cli(redis_url, "hash", "dave", password="pw-of-dave").stdout.strip()
    assert line.startswith("dave:scrypt$")
    path = tmp_path / "users"
    path.write_text(line + "\n")
    pod = start_pod(redis_url, *RF1, "--auth-file", str(path), connect=plain)
    with plain(pod.port) as client:
        client.auth("dave", "pw-of-dave")
        assert client.ping() == "pong"
