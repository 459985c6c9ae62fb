"""The console's pages over HTTP (Starlette's TestClient running the app and its start-up
in this process) against a real Redis: the numbers the pages show are the ones Redis holds,
records are decoded, bad input gets a message and a 4xx, logins and authorization refuse
what they must. Kafka clients' view of the console's writes: test_views.py."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from html import unescape

import pytest
import redis
from click.testing import CliRunner
from starlette.testclient import TestClient

from adapter.cli import main
from adapter.console.app import ConsoleOptions, create_app
from adapter.console.decoding import HEX, JSON, NULL, TEXT, shown, utc_time
from mapping.core.keys import Keys
from mapping.security.acl_store import SyncAclStore
from mapping.security.acls import AclBinding, Operation, PatternType, Permission, ResourceType
from mapping.security.auth import RedisUsers


def make_client(redis_url: str, prefix: str, **options: object) -> TestClient:
    app = create_app(ConsoleOptions(redis_url, Keys(prefix), sample_interval_s=3600, **options))
    return TestClient(app, raise_server_exceptions=False, follow_redirects=False)


@pytest.fixture
def prefix() -> str:
    return f"console-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def client(redis_url: str, prefix: str) -> Iterator[TestClient]:
    with make_client(redis_url, prefix) as http:
        yield http


@pytest.fixture
def store(redis_url: str) -> Iterator[redis.Redis]:
    found = redis.Redis.from_url(redis_url)
    yield found
    found.close()


def cells(html: str, cls: str) -> list[str]:
    """The text of every element of class ``cls`` (tags dropped)."""
    found = re.findall(rf'class="{cls}"[^>]*>(.*?)</t[dh]>', html, re.S)
    return [unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in found]


def csrf(http: TestClient, path: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', http.get(path).text)
    assert match, path
    return match.group(1)


def create_topic(
    http: TestClient, store: redis.Redis, prefix: str, name: str, partitions: int
) -> None:
    """``adapter topic create`` on the console's deployment."""
    result = CliRunner().invoke(
        main,
        ["topic", "create", name, "--partitions", str(partitions), "--replication-factor", "1",
         "--min-insync-replicas", "1", "--redis-url", store_url(store), "--key-prefix", prefix],
    )  # fmt: skip
    assert result.exit_code == 0, result.output


def store_url(store: redis.Redis) -> str:
    kwargs = store.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs.get('db', 0)}"


def produce(
    http: TestClient, topic: str, partition: int, key: str, value: str, headers: str = ""
) -> int:
    """A record written through the console's produce form; its offset."""
    token = csrf(http, f"/topics/{topic}/produce")
    answer = http.post(
        f"/topics/{topic}/produce",
        data={"csrf": token, "partition": str(partition), "key": key, "value": value,
              "headers": headers},
    )  # fmt: skip
    assert answer.status_code == 200, answer.text
    return int(cells(answer.text.replace("<span", "<td").replace("</span>", "</td>"), "offset")[0])


def test_decoding() -> None:
    assert shown(None) == (NULL, "null")
    assert shown(b'{"a": [1, 2]}') == (JSON, '{\n  "a": [\n    1,\n    2\n  ]\n}')
    assert shown("héllo".encode()) == (TEXT, "héllo")
    assert shown(b"\xff\x00\x10") == (HEX, "ff 00 10")
    assert shown(b"{not json") == (TEXT, "{not json")


def test_times_in_utc() -> None:
    assert utc_time(0) == "1970-01-01T00:00:00.000Z"
    assert utc_time(1_700_000_000_123) == "2023-11-14T22:13:20.123Z"
    assert utc_time(-1) == "-" and utc_time(None) == "-"


def test_pages_show_what_redis_holds(client: TestClient, store: redis.Redis, prefix: str) -> None:
    create_topic(client, store, prefix, "orders", 3)
    create_topic(client, store, prefix, "audit", 1)
    offsets = [produce(client, "orders", 1, f"k{i}", f"v{i}") for i in range(5)]
    keys = Keys(prefix)

    listed = client.get("/topics")
    assert listed.status_code == 200
    assert 'id="topics"' in listed.text and '<main id="content">' in listed.text
    names = cells(listed.text, "name")
    assert names == ["audit", "orders"]
    assert cells(listed.text, "records") == ["0", "5"]
    searched = client.get("/topics", params={"q": "ORD"})
    assert cells(searched.text, "name") == ["orders"]

    page = client.get("/topics/orders")
    assert page.status_code == 200
    log = keys.partition("orders", 1).log
    assert cells(page.text, "records") == ["0", str(store.xlen(log)), "0"]
    # Kafka's high watermark: one past the last record's (time-encoded) offset
    assert cells(page.text, "high-watermark")[1] == str(offsets[-1] + 1)
    assert cells(page.text, "log-start")[1] == str(offsets[0])
    assert cells(page.text, "lso")[1] == str(offsets[-1] + 1)
    assert int(cells(page.text, "bytes")[1]) == store.memory_usage(log)

    deployment = client.get("/")
    assert deployment.status_code == 200
    assert 'id="rates"' in deployment.text and "<svg" in deployment.text
    assert cells(deployment.text, "topics") == ["2"]


def test_message_browser_decodes(client: TestClient, store: redis.Redis, prefix: str) -> None:
    create_topic(client, store, prefix, "events", 1)
    first = produce(client, "events", 0, "user-1", '{"amount": 12, "tags": ["a"]}', "trace: t-1")
    produce(client, "events", 0, "user-2", "plain text")
    produce(client, "events", 0, "user-1", "second")

    page = client.get("/topics/events/messages", params={"from": "start"})
    assert page.status_code == 200
    assert cells(page.text, "offset")[0] == str(first)
    assert cells(page.text, "key") == ["user-1", "user-2", "user-1"]
    values = cells(page.text, "value")
    assert values[0] == '{\n  "amount": 12,\n  "tags": [\n    "a"\n  ]\n}'
    assert values[1:] == ["plain text", "second"]
    assert cells(page.text, "headers")[0] == "trace: t-1"
    # times in UTC (the ms in the tooltip); the append time is the offset's high bits
    bits = int(store.hget(Keys(prefix).meta, "sequence_bits") or 10)
    appended = first >> bits
    assert cells(page.text, "append-time")[0] == utc_time(appended)
    assert f'title="{appended} ms since the epoch"' in page.text
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", cells(page.text, "timestamp")[0])

    found = client.get("/topics/events/messages", params={"from": "start", "key": "user-1"})
    assert cells(found.text, "value") == [values[0], "second"]
    last = client.get("/topics/events/messages", params={"from": "end", "limit": "1"})
    assert cells(last.text, "value") == ["second"]
    at = client.get("/topics/events/messages", params={"from": "offset", "offset": str(first + 1)})
    assert cells(at.text, "value") == ["plain text", "second"]


@pytest.mark.parametrize(
    ("path", "params", "status", "message"),
    [
        ("/topics/nope", {}, 404, "no topic nope"),
        ("/topics/bad%20name", {}, 400, "is not a topic name"),
        ("/topics", {"page": "x"}, 400, "page must be a whole number"),
        ("/topics/t/messages", {"partition": "7"}, 400, "partition must be from 0 to 1"),
        ("/topics/t/messages", {"from": "middle"}, 400, "from must be one of"),
        ("/topics/t/messages", {"limit": "0"}, 400, "limit must be from 1 to 500"),
        ("/topics/t/messages", {"from": "time", "time": "soon"}, 400, "time must be"),
        ("/groups/none-such", {}, 404, "does not exist"),
        ("/no/such/page", {}, 404, "no such page"),
    ],
)
def test_bad_input_says_why(
    client: TestClient, store: redis.Redis, prefix: str, path: str, params: dict, status: int,
    message: str,
) -> None:  # fmt: skip
    create_topic(client, store, prefix, "t", 2)
    answer = client.get(path, params=params)
    assert answer.status_code == status
    assert message in " ".join(cells(answer.text.replace("<p", "<td").replace("</p>", "</td>"),
                                     "error"))  # fmt: skip
    assert "Traceback" not in answer.text


def error_of(html: str) -> str:
    return " ".join(cells(html.replace("<p", "<td").replace("</p>", "</td>"), "error"))


def test_config_change_is_validated(client: TestClient, store: redis.Redis, prefix: str) -> None:
    create_topic(client, store, prefix, "conf", 1)
    token = csrf(client, "/topics/conf")
    bad = client.post("/topics/conf/configs", data={"csrf": token, "name": "retention.ms",
                                                   "value": "soon"})  # fmt: skip
    assert bad.status_code == 400
    assert "retention.ms" in error_of(bad.text)
    unknown = client.post("/topics/conf/configs", data={"csrf": token, "name": "no.such",
                                                       "value": "1"})  # fmt: skip
    assert unknown.status_code == 400
    assert "Unknown topic config name: no.such" in error_of(unknown.text)
    forged = client.post("/topics/conf/configs", data={"name": "retention.ms", "value": "1"})
    assert forged.status_code == 403
    assert "form" in error_of(forged.text)
    good = client.post("/topics/conf/configs", data={"csrf": token, "name": "retention.ms",
                                                    "value": "3600000"})  # fmt: skip
    assert good.status_code == 303
    assert store.hget(Keys(prefix).topic("conf"), "retention_ms") == b"3600000"
    page = client.get("/topics/conf")
    row = re.search(r'data-name="retention.ms">.*?class="value">([^<]*)<', page.text, re.S)
    assert row and row.group(1) == "3600000"


def test_login_and_authorization(redis_url: str, store: redis.Redis, prefix: str) -> None:
    keys = Keys(prefix)
    RedisUsers(store, keys).add("alice", "alice-secret")
    RedisUsers(store, keys).add("bob", "bob-secret")
    allow = [
        AclBinding(ResourceType.TOPIC, "seen", PatternType.LITERAL, "User:alice", "*", op,
                   Permission.ALLOW)
        for op in (Operation.DESCRIBE, Operation.READ)
    ]  # fmt: skip
    SyncAclStore(store, keys).create(allow)
    with make_client(redis_url, prefix, authorizer=True, super_users="User:bob") as http:
        create_topic(http, store, prefix, "seen", 1)
        create_topic(http, store, prefix, "hidden", 1)
        first = http.get("/topics/seen")
        assert first.status_code == 303
        assert first.headers["location"] == "/login?next=/topics/seen"
        token = csrf(http, "/login?next=/topics/seen")
        wrong = http.post("/login", data={"csrf": token, "username": "alice",
                                         "password": "guess", "next": "/topics/seen"})  # fmt: skip
        assert wrong.status_code == 401
        assert "wrong user name or password" in error_of(wrong.text)
        assert "alice-secret" not in wrong.text
        login = {"csrf": token, "username": "alice", "password": "alice-secret"}
        right = http.post("/login", data={**login, "next": "/topics/seen"})
        assert right.status_code == 303 and right.headers["location"] == "/topics/seen"
        assert http.get("/topics/seen").status_code == 200
        assert cells(http.get("/topics").text, "name") == ["seen"]
        denied = http.get("/topics/hidden")
        assert denied.status_code == 403
        assert "DESCRIBE on topic 'hidden' is not allowed" in error_of(denied.text)
        assert http.get("/topics/seen/messages").status_code == 200
        assert http.get("/topics/seen/produce").status_code == 403  # no WRITE
        assert http.get("/").status_code == 403  # no DESCRIBE on the cluster
        # a super user may do everything; no secret on any page
        token = csrf(http, "/topics/seen")
        http.post("/logout", data={"csrf": token})
        token = csrf(http, "/login")
        http.post("/login", data={"csrf": token, "username": "bob", "password": "bob-secret"})
        assert http.get("/topics/hidden").status_code == 200
        deployment = http.get("/")
        assert deployment.status_code == 200
        for secret in ("bob-secret", "scrypt", "SCRAM-SHA-256$"):
            assert secret not in deployment.text


def cli(redis_url: str, prefix: str, *args: str) -> str:
    result = CliRunner().invoke(main, [*args, "--redis-url", redis_url, "--key-prefix", prefix])
    assert result.exit_code == 0, result.output
    return result.output


def test_acls_and_quotas_pages_list_what_the_cli_made(
    client: TestClient, redis_url: str, prefix: str
) -> None:
    assert "no binding" in client.get("/acls").text
    assert "no quota" in client.get("/quotas").text
    cli(redis_url, prefix, "acl", "add", "--topic", "orders", "--allow-principal", "User:alice",
        "--operation", "Read")  # fmt: skip
    cli(redis_url, prefix, "acl", "add", "--group", "billing", "--deny-principal", "User:mallory",
        "--operation", "Describe", "--host", "10.0.0.9")  # fmt: skip
    cli(redis_url, prefix, "quota", "set", "--user", "alice", "--producer-byte-rate", "1048576")
    cli(redis_url, prefix, "quota", "set", "--client-id-default", "--consumer-byte-rate", "2048")

    acls = client.get("/acls")
    assert acls.status_code == 200
    rows = re.findall(r"<tr><td>(.*?)</td></tr>", acls.text)
    shown = sorted(tuple(unescape(c) for c in row.split("</td><td>")) for row in rows)
    assert shown == [
        ("GROUP", "LITERAL", "billing", "User:mallory", "10.0.0.9", "DESCRIBE", "DENY"),
        ("TOPIC", "LITERAL", "orders", "User:alice", "*", "READ", "ALLOW"),
    ]
    assert "listed, not enforced here" in acls.text  # (started without --authorizer)
    quotas = client.get("/quotas").text
    assert "producer_byte_rate=1048576" in quotas
    assert "consumer_byte_rate=2048" in quotas
    assert "alice" in quotas
