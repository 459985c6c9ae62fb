"""Every command line and task logs in to Redis like ``serve`` does: ``topic``, ``inspect`` and
``user`` take the same --redis-username/--redis-password (ADAPTER_REDIS_PASSWORD) and
--redis-tls-* options, and the pod's lag metrics read Redis with the pod's own login. ``ping``
speaks to a pod over TLS and authenticates when asked to."""

from __future__ import annotations

import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner, Result
from prometheus_client.parser import text_string_to_metric_families

from adapter.cli import main
from adapter.client.tls import client_context
from mapping.connection.embedded import RedisProcess, free_port
from mapping.core.keys import Keys
from mapping.security.auth import hash_password
from tests.support.pods import RF1, Pod
from tests.support.tls import Certs, TLSProxy, tls_connect
from tests.support.waiting import wait_until

PASSWORD = "redis-Pw7"


@dataclass
class Protected:
    """A redis-server that requires PASSWORD, and a key prefix of the test's own."""

    redis: RedisProcess
    keys: Keys = field(default_factory=lambda: Keys(f"login{uuid.uuid4().hex[:8]}"))

    @property
    def url(self) -> str:
        return self.redis.url

    def admin(self) -> redis.Redis:
        return redis.Redis(port=self.redis.port, password=PASSWORD)

    def cli(self, *args: str, env: dict[str, str] | None = None) -> Result:
        """``python -m adapter ARGS --redis-url URL --key-prefix P`` (no password given:
        ``env`` or ``args`` carry it)."""
        base = ["--redis-url", self.url, "--key-prefix", self.keys.prefix]
        return CliRunner().invoke(main, [*args, *base], env=env or {})

    def cli_ok(self, *args: str) -> str:
        result = self.cli(*args, env={"ADAPTER_REDIS_PASSWORD": PASSWORD})
        assert result.exit_code == 0, result.output
        return result.output


@pytest.fixture
def protected(own_redis: RedisProcess) -> Iterator[Protected]:
    client = redis.Redis(port=own_redis.port)
    client.config_set("requirepass", PASSWORD)
    client.close()
    yield Protected(own_redis)


def test_topic_commands_use_the_redis_password(protected: Protected) -> None:
    without = protected.cli("topic", "create", "orders", "--partitions", "2")
    assert without.exit_code != 0  # the password is really needed
    assert "created topic=orders partitions=2" in protected.cli_ok(
        "topic", "create", "orders", "--partitions", "2", "--replication-factor", "1",
        "--min-insync-replicas", "1",
    )  # fmt: skip
    assert "retention_ms=60000" in protected.cli_ok(
        "topic", "alter", "orders", "--retention-ms", "60000"
    )
    assert "topic=orders partitions=2" in protected.cli_ok("topic", "describe", "orders")
    protected.cli_ok("topic", "trim", "orders")  # the async client logs in too
    # the option works as well as the variable
    by_option = protected.cli("topic", "describe", "orders", "--redis-password", PASSWORD)
    assert by_option.exit_code == 0 and "topic=orders" in by_option.output


def test_inspect_uses_the_redis_password(protected: Protected) -> None:
    protected.cli_ok("topic", "create", "audit", "--partitions", "1", "--replication-factor",
                     "1", "--min-insync-replicas", "1")  # fmt: skip
    admin = protected.admin()
    group = protected.keys.group("billing", "audit")
    admin.sadd(protected.keys.groups, "billing audit")
    admin.hset(group.meta, mapping={"generation": 1, "assignor": "range", "partitions": 1})
    admin.close()
    assert protected.cli("inspect", "topics").exit_code != 0
    assert "topic=audit partitions=1" in protected.cli_ok("inspect", "topics")
    assert "topic=audit" in protected.cli_ok("inspect", "topic", "audit")
    assert "group=billing topic=audit generation=1" in protected.cli_ok("inspect", "groups")
    assert "group=billing topic=audit" in protected.cli_ok("inspect", "group", "billing", "audit")


def test_user_commands_use_an_acl_user(protected: Protected) -> None:
    admin = protected.admin()
    admin.execute_command(
        "ACL", "SETUSER", "ops", "on", ">ops-pw", f"~{protected.keys.prefix}:*", "+@all"
    )
    admin.close()
    env = {"ADAPTER_REDIS_USERNAME": "ops", "ADAPTER_REDIS_PASSWORD": "ops-pw",
           "ADAPTER_USER_PASSWORD": "alice-pw"}  # fmt: skip
    added = protected.cli("user", "add", "alice", env=env)
    assert added.exit_code == 0 and "added user=alice" in added.output, added.output
    listed = protected.cli("user", "list", "--redis-username", "ops", env=env)
    assert listed.output.split() == ["alice"]
    removed = protected.cli("user", "remove", "alice", env=env)
    assert removed.exit_code == 0 and "removed user=alice" in removed.output
    assert protected.cli("user", "list").exit_code != 0  # no login: refused


def test_cli_over_rediss_with_client_certificate(
    protected: Protected, tls_proxy: TLSProxy, certs: Certs
) -> None:
    url = f"rediss://127.0.0.1:{tls_proxy.port}/0"
    tls = ["--redis-tls-ca", str(certs.ca), "--redis-tls-cert", str(certs.client_cert),
           "--redis-tls-key", str(certs.client_key)]  # fmt: skip
    base = ["--redis-url", url, "--key-prefix", protected.keys.prefix, *tls]
    env = {"ADAPTER_REDIS_PASSWORD": PASSWORD}
    created = CliRunner().invoke(
        main, ["topic", "create", "tls", *base, "--partitions", "1"], env=env
    )
    assert created.exit_code == 0 and "created topic=tls" in created.output, created.output
    listed = CliRunner().invoke(main, ["inspect", "topics", *base], env=env)
    assert "topic=tls partitions=1" in listed.output, listed.output
    # TLS files with a plain URL: a clear usage error instead of redis-py's TypeError
    plain = ["--redis-url", protected.url, *tls]
    refused = CliRunner().invoke(main, ["inspect", "topics", *plain], env=env)
    assert refused.exit_code == 2 and "need a rediss://" in refused.output


def _lag_samples(port: int) -> dict[tuple[str, str], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.labels["group"], sample.labels["partition"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "adapter_consumer_lag_records"
    }


def test_lag_metrics_with_the_password_in_the_environment(
    protected: Protected, start_pod: Callable[..., Pod], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ADAPTER_REDIS_PASSWORD", PASSWORD)  # the pod inherits it
    metrics_port = free_port()
    pod = start_pod(
        protected.url, *RF1, "--key-prefix", protected.keys.prefix,
        "--metrics-port", str(metrics_port), "--metrics-host", "127.0.0.1",
    )  # fmt: skip
    with pod.client() as client:
        sent = client.produce_many("lagged", [("k", f"v{i}") for i in range(5)])
    partition = sent[0].partition
    admin = protected.admin()
    admin.sadd(protected.keys.groups, "slow lagged")
    admin.hset(protected.keys.group("slow", "lagged").offsets, str(partition), sent[1].offset)
    admin.close()
    in_partition = sum(1 for reply in sent if reply.partition == partition)
    samples = wait_until(lambda: _lag_samples(metrics_port))
    assert samples[("slow", str(partition))] == in_partition - 1
    assert "cannot read consumer lag" not in pod.log()


@pytest.fixture
def auth_file(tmp_path: Path) -> Path:
    path = tmp_path / "users"
    path.write_text(f"alice:{hash_password('alice-pw')}\n")
    return path


def test_ping_over_tls_with_auth(
    start_pod: Callable[..., Pod], redis_url: str, certs: Certs, auth_file: Path
) -> None:
    pod = start_pod(
        redis_url, *RF1, "--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key),
        "--auth-file", str(auth_file), connect=tls_connect(client_context(certs.ca)),
    )  # fmt: skip
    base = ["ping", "--port", str(pod.port), "--tls-ca", str(certs.ca)]
    answered = CliRunner().invoke(
        main, [*base, "--user", "alice"], env={"ADAPTER_PING_PASSWORD": "alice-pw"}
    )
    assert answered.exit_code == 0 and answered.output.strip() == "pong", answered.output
    not_authenticated = CliRunner().invoke(main, base)
    assert not_authenticated.exit_code == 1 and "AUTH_REQUIRED" in not_authenticated.output
    wrong = CliRunner().invoke(main, [*base, "--user", "alice", "--password", "nope"])
    assert wrong.exit_code == 1 and "AUTH_FAILED" in wrong.output
    no_tls = CliRunner().invoke(main, ["ping", "--port", str(pod.port), "--timeout", "2"])
    assert no_tls.exit_code == 1 and "no answer from" in no_tls.output


def test_spark_source_logs_in_with_its_password_option(protected: Protected) -> None:
    """The Spark source's driver side and its tasks (no Spark session needed for either)."""
    from spark_connector import offsets
    from spark_connector.options import ConnectorError, parse_options
    from spark_connector.records import read_partition, source_schema
    from tests.support.topic_writer import TopicWriter

    writer = TopicWriter(f"redis://:{PASSWORD}@127.0.0.1:{protected.redis.port}/0",
                         prefix=protected.keys.prefix)  # fmt: skip
    try:
        sent = writer.produce("sparked", 0, [(b"k", b"one"), (b"k", b"two")])
    finally:
        writer.close()
    options = {"redis.url": protected.url, "topic": "sparked", "keyPrefix": protected.keys.prefix}
    with pytest.raises(ConnectorError):
        offsets.connect(parse_options(options))
    opts = parse_options({**options, "redis.password": PASSWORD})
    client = offsets.connect(opts)
    try:
        info = offsets.describe_topic(client, protected.keys, "sparked")
    finally:
        client.close()
    planned = offsets.RangePartition(0, sent[0], sent[-1] + 1, info.sequence_bits)
    batches = list(read_partition(opts, source_schema(), planned))
    assert [v for b in batches for v in b.column("value").to_pylist()] == ["one", "two"]
