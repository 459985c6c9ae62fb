"""The console in a real browser (Chromium under Playwright) against a real deployment (two
pods on the run's Redis, ``adapter console`` reading it): each page shows the numbers Redis
holds as Kafka clients see them, the message browser decodes a Kafka record and its live
tail shows a new one, an offset reset and a config change made in the browser are seen by a
Kafka consumer and by DescribeConfigs, a record produced with the form is read back, a
deployment's SCRAM user logs in, and a bad input shows its message. Every main page is
photographed (tests/console/conftest.py: the run's temporary folder, and
$ADAPTER_CONSOLE_SCREENSHOTS).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pytest
import redis
from click.testing import CliRunner

from adapter.cli import main
from adapter.console.decoding import utc_time
from mapping.core.keys import Keys
from tests.support.console import Console
from tests.support.kafka import produce_delivered
from tests.support.pods import Pod
from tests.support.waiting import wait_until

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

# The browser first: without it (outside CI) the tests skip before the deployment starts.
pytestmark = pytest.mark.usefixtures("browser")
Screenshot = Callable[["Page", str], Path]
CLIENT = {"socket.timeout.ms": 10_000}


# --- Kafka clients and Redis ----------------------------------------------------------------


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **CLIENT})
    futures = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=15)
    futures[topic].result(timeout=30)


def watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    """(log start, high watermark) as a Kafka consumer sees them."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks", **CLIENT})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=15)
    finally:
        consumer.close()
    return low, high


def consume_and_commit(bootstrap: str, group: str, topic: str, count: int) -> list[Any]:
    """``count`` records of partition 0 from the start, then their position committed by
    ``group`` (a consumer that assigns itself the partition, as Kafka's simple consumers
    do); the records read."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, **CLIENT})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    read: list[Any] = []
    deadline = time.monotonic() + 30
    try:
        while len(read) < count and time.monotonic() < deadline:
            read += [m for m in consumer.consume(count - len(read), 1.0) if m.error() is None]
        assert len(read) == count, read
        consumer.commit(message=read[-1], asynchronous=False)
    finally:
        consumer.close()
    return read


def resume(bootstrap: str, group: str, topic: str) -> tuple[int, Any]:
    """Where ``group`` resumes on partition 0: (its committed offset, the first record a
    consumer of it reads)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, **CLIENT})  # fmt: skip
    try:
        [committed] = consumer.committed([TopicPartition(topic, 0)], timeout=15)
        consumer.assign([TopicPartition(topic, 0)])  # from the committed offset
        first = None
        deadline = time.monotonic() + 30
        while (first is None or first.error() is not None) and time.monotonic() < deadline:
            first = consumer.poll(1.0)
        assert first is not None and first.error() is None, first
    finally:
        consumer.close()
    return committed.offset, first


def described_configs(bootstrap: str, topic: str) -> dict[str, str]:
    """Topic ``topic``'s configs as DescribeConfigs answers them."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap, **CLIENT})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    return {name: entry.value for name, entry in entries.items()}


def stored_in_redis(redis_url: str, prefix: str) -> tuple[int, int]:
    """(topics, records) of the deployment as Redis holds them: its topics set, and the
    entries of every partition's log."""
    client = redis.Redis.from_url(redis_url)
    keys = Keys(prefix)
    try:
        names = [name.decode() for name in client.smembers(keys.topics)]
        counts = [int(client.hget(keys.topic(name), "partitions") or 0) for name in names]
        records = sum(
            client.xlen(keys.partition(name, p).log)
            for name, count in zip(names, counts, strict=True)
            for p in range(count)
        )
    finally:
        client.close()
    return len(names), records


# --- the pages ------------------------------------------------------------------------------


def visit(page: Page, console: Console, path: str) -> int:
    """Open ``path`` of the console; the HTTP status. Every page has its heading and its
    content."""
    response = page.goto(console.url.rstrip("/") + path)
    assert response is not None
    assert page.locator("h1").count() == 1, path
    assert page.locator("main#content").count() == 1, path
    return response.status


def table(page: Page, table_id: str) -> list[dict[str, str]]:
    """The rows of ``table#<table_id>``, each as header text (lower case) -> cell text."""
    found = page.locator(f"table#{table_id}")
    headers = [h.strip().lower() for h in found.locator("thead th").all_inner_texts()]
    rows = []
    for row in found.locator("tbody tr").all():
        cells = [c.strip() for c in row.locator("td, th").all_inner_texts()]
        rows.append(dict(zip(headers, cells, strict=False)))
    return rows


def number(text: str) -> int:
    """A number as the page writes it (thousands separated, perhaps with a unit)."""
    digits = re.sub(r"[,\s\u202f\u00a0]", "", text)
    found = re.match(r"-?\d+", digits)
    assert found is not None, text
    return int(found.group())


def row_of(rows: list[dict[str, str]], column: str, value: str) -> dict[str, str]:
    matching = [row for row in rows if row.get(column) == value]
    assert len(matching) == 1, (column, value, rows)
    return matching[0]


def submit(form: Locator) -> None:
    """Submit ``form`` with its own button and wait for the page it brings."""
    with form.page.expect_navigation():
        form.locator("button[type=submit], input[type=submit]").first.click()


def error_text(page: Page) -> str:
    shown = page.locator(".error")
    assert shown.count() >= 1, page.content()[:2000]
    return shown.first.inner_text()


# --- the tests ------------------------------------------------------------------------------


def test_deployment_page_shows_the_pods_and_the_stored_records(
    console: Console, console_pods: tuple[Pod, Pod], console_prefix: str, redis_url: str,
    page: Page, screenshot: Screenshot, topic: str,
) -> None:  # fmt: skip
    first, _ = console_pods
    create_topic(first.bootstrap, topic, 1)
    produce_delivered(first.bootstrap, topic, [(0, None, b"v%d" % i, []) for i in range(3)])

    def shows_what_redis_holds() -> bool:
        assert visit(page, console, "/") == 200
        totals = page.locator("table#totals")
        topics, records = stored_in_redis(redis_url, console_prefix)
        shown = totals.locator(".topics").inner_text(), totals.locator(".records").inner_text()
        # (records: the console's sampler counts them every second)
        return shown == (str(topics), str(records)) and records >= 3

    # (records stored are read every few samples: within 6 s here)
    wait_until(shows_what_redis_holds, timeout=30, interval=0.5)
    brokers = table(page, "brokers")
    ports = sorted(number(row["port"]) for row in brokers)
    assert ports == sorted(pod.kafka_port for pod in console_pods)  # both pods, as brokers
    assert page.locator("#rates svg, #rates canvas, #rates img").count() >= 1
    screenshot(page, "deployment")


def test_topics_list_and_topic_page_show_what_kafka_sees(
    console: Console, console_pods: tuple[Pod, Pod], page: Page, screenshot: Screenshot,
    topic: str,
) -> None:  # fmt: skip
    first, second = console_pods
    create_topic(first.bootstrap, topic, 2)
    produce_delivered(first.bootstrap, topic,
                      [(0, None, b"a%d" % i, []) for i in range(3)]
                      + [(1, None, b"b%d" % i, []) for i in range(2)])  # fmt: skip
    expected = {p: watermarks(second.bootstrap, topic, p) for p in (0, 1)}

    assert visit(page, console, f"/topics?q={quote(topic)}") == 200
    listed = row_of(table(page, "topics"), "topic", topic)
    assert number(listed["partitions"]) == 2
    assert number(listed["records"]) == 5
    screenshot(page, "topics")

    assert visit(page, console, f"/topics/{quote(topic)}") == 200
    partitions = table(page, "partitions")
    assert [number(row["partition"]) for row in partitions] == [0, 1]
    for row, records in zip(partitions, (3, 2), strict=True):
        low, high = expected[number(row["partition"])]
        assert number(row["log start"]) == low, row
        assert number(row["high watermark"]) == high, row
        assert number(row["lso"]) == high, row  # no transaction open
        assert number(row["records"]) == records, row
        assert number(row["bytes"]) > 0, row
    screenshot(page, "topic")


def test_message_browser_shows_key_headers_and_pretty_json(
    console: Console, console_pods: tuple[Pod, Pod], page: Page, screenshot: Screenshot,
    topic: str,
) -> None:  # fmt: skip
    first, _ = console_pods
    create_topic(first.bootstrap, topic, 1)
    value = {"order": 42, "items": ["tea", "milk"], "paid": True}
    headers = [("trace-id", b"abc-123"), ("source", b"checkout")]
    [written] = produce_delivered(
        first.bootstrap, topic, [(0, b"order-42", json.dumps(value).encode(), headers)]
    )
    assert visit(page, console, f"/topics/{quote(topic)}/messages?partition=0&from=start") == 200
    rows = page.locator("table#messages tbody tr")
    assert rows.count() == 1
    row = rows.first
    assert number(row.locator(".offset").inner_text()) == written.offset()
    assert row.locator(".key").inner_text().strip() == "order-42"
    shown_headers = row.locator(".headers").inner_text()
    for name, header_value in headers:
        assert name in shown_headers and header_value.decode() in shown_headers, shown_headers
    shown_value = row.locator(".value").inner_text()
    assert json.loads(shown_value) == value
    assert "\n" in shown_value.strip() and '"order": 42' in shown_value  # pretty-printed
    # times as ISO 8601 in UTC, the ms since the epoch on hover
    created_ms = written.timestamp()[1]
    assert row.locator(".timestamp").inner_text().strip() == utc_time(created_ms)
    assert (
        row.locator(".timestamp time").get_attribute("title") == f"{created_ms} ms since the epoch"
    )
    screenshot(page, "messages")


def test_live_tail_shows_a_record_produced_after_it_started(
    console: Console, console_pods: tuple[Pod, Pod], page: Page, topic: str
) -> None:
    first, _ = console_pods
    create_topic(first.bootstrap, topic, 1)
    produce_delivered(first.bootstrap, topic, [(0, b"before", b"old", [])])
    assert visit(page, console, f"/topics/{quote(topic)}/messages?partition=0") == 200
    # the stream's answer starts once it knows where the partition ends
    with page.expect_response(lambda response: "/tail" in response.url):
        page.locator("#tail-toggle").click()
    [written] = produce_delivered(first.bootstrap, topic, [(0, b"live", b'{"n": 1}', [])])
    tailed = page.locator("#tail tbody tr")
    tailed.first.wait_for()
    assert tailed.count() == 1  # only what came after the start
    assert number(tailed.first.locator(".offset").inner_text()) == written.offset()
    assert tailed.first.locator(".key").inner_text() == "live"
    assert json.loads(tailed.first.locator(".value").inner_text()) == {"n": 1}


def test_group_lag_then_a_reset_in_the_browser_moves_the_consumer(
    console: Console, console_pods: tuple[Pod, Pod], page: Page, screenshot: Screenshot,
    topic: str,
) -> None:  # fmt: skip
    first, second = console_pods
    group = f"g-{uuid.uuid4().hex[:10]}"
    create_topic(first.bootstrap, topic, 1)
    written = produce_delivered(
        first.bootstrap, topic, [(0, None, b"%d" % i, []) for i in range(10)]
    )
    consume_and_commit(second.bootstrap, group, topic, 4)  # 6 records left unconsumed

    assert visit(page, console, "/groups") == 200
    assert group in page.locator("table#groups").inner_text()
    screenshot(page, "groups")

    def lag_drawn() -> bool:  # once the console's sampler has seen the group (every 1 s)
        assert visit(page, console, f"/groups/{quote(group)}") == 200
        return page.locator("#lag-chart svg").count() == 1

    wait_until(lag_drawn, timeout=20, interval=0.5)
    [state] = table(page, "states")  # only committed offsets: a classic group to Kafka
    assert state["protocol"].startswith("classic") and state["topics"] == topic, state
    offsets = table(page, "offsets")
    row = row_of(offsets, "topic", topic)
    assert number(row["partition"]) == 0
    assert number(page.locator("table#offsets .lag").first.inner_text()) == 6
    assert row["lag (records)"] == "6"  # exact (no "+")
    screenshot(page, "group")

    # back to the start of the log (the group has no members: the reset is allowed)
    form = page.locator("form#reset-form")
    form.locator("[name=topic]").fill(topic)
    form.locator("[name=target]").select_option("earliest")
    form.locator("[name=execute]").check()
    submit(form)
    assert page.locator(".error").count() == 0, error_text(page)
    planned = table(page, "reset-plan")
    assert [number(row["new lag (records)"]) for row in planned] == [10]
    committed, resumed = resume(second.bootstrap, group, topic)
    assert committed == written[0].offset()
    assert resumed.offset() == written[0].offset() and resumed.value() == b"0"
    assert visit(page, console, f"/groups/{quote(group)}") == 200
    assert number(page.locator("table#offsets .lag").first.inner_text()) == 10


def change_config(page: Page, console: Console, topic: str, name: str, value: str) -> None:
    """The topic page's config form sent with ``name`` = ``value``."""
    assert visit(page, console, f"/topics/{quote(topic)}") == 200
    form = page.locator("form#config-form")
    form.locator("[name=name]").fill(name)
    form.locator("[name=value]").fill(value)
    submit(form)


def test_a_config_change_in_the_browser_is_seen_by_describe_configs(
    console: Console, console_pods: tuple[Pod, Pod], page: Page, topic: str
) -> None:
    first, second = console_pods
    create_topic(first.bootstrap, topic, 1)
    change_config(page, console, topic, "retention.ms", "3600000")
    assert page.locator(".error").count() == 0, error_text(page)
    assert described_configs(second.bootstrap, topic)["retention.ms"] == "3600000"
    assert visit(page, console, f"/topics/{quote(topic)}") == 200
    assert number(row_of(table(page, "configs"), "name", "retention.ms")["value"]) == 3600000


def test_bad_input_shows_its_message(
    console: Console, console_pods: tuple[Pod, Pod], page: Page, topic: str
) -> None:
    first, second = console_pods
    create_topic(first.bootstrap, topic, 1)
    # a config value Kafka's validation refuses: the message, and nothing changed
    change_config(page, console, topic, "retention.ms", "soon")
    assert "retention.ms" in error_text(page)
    assert described_configs(second.bootstrap, topic)["retention.ms"] != "soon"
    # a partition the topic does not have, an offset that is no number: 4xx with the message
    status = visit(page, console, f"/topics/{quote(topic)}/messages?partition=7")
    assert 400 <= status < 500 and "partition" in error_text(page)
    status = visit(page, console, f"/topics/{quote(topic)}/messages?from=offset&offset=abc")
    assert 400 <= status < 500 and "offset" in error_text(page).lower()
    # a topic that does not exist
    status = visit(page, console, f"/topics/no-such-{topic}")
    assert 400 <= status < 500 and error_text(page)


def test_the_produce_form_writes_a_record_kafka_reads(
    console: Console, console_pods: tuple[Pod, Pod], page: Page, screenshot: Screenshot,
    topic: str,
) -> None:  # fmt: skip
    first, second = console_pods
    create_topic(first.bootstrap, topic, 2)
    assert visit(page, console, f"/topics/{quote(topic)}/produce") == 200
    form = page.locator("form#produce-form")
    form.locator("[name=partition]").fill("1")
    form.locator("[name=key]").fill("cart-7")
    form.locator("[name=value]").fill('{"items": 3}')
    form.locator("[name=headers]").fill("origin: console\ntrace: t-1")
    screenshot(page, "produce")
    submit(form)
    assert page.locator(".error").count() == 0, error_text(page)
    offset = number(page.locator("#written .offset").inner_text())
    assert watermarks(second.bootstrap, topic, 1)[1] == offset + 1  # Kafka's high watermark
    assert visit(page, console, f"/topics/{quote(topic)}/messages?partition=1&from=start") == 200
    row = page.locator("table#messages tbody tr").first
    assert number(row.locator(".offset").inner_text()) == offset
    assert row.locator(".key").inner_text().strip() == "cart-7"
    assert json.loads(row.locator(".value").inner_text()) == {"items": 3}
    assert "origin: console" in row.locator(".headers").inner_text()


def test_login_with_a_scram_user_of_the_deployment(
    redis_url: str, page: Page, screenshot: Screenshot, tmp_path: Path
) -> None:
    """A console of its own (users on for its key prefix only): a user ``adapter user add``
    made (its SCRAM secrets) logs in; a wrong password is refused with its message."""
    prefix = f"console-login-{uuid.uuid4().hex[:8]}"
    target = ["--redis-url", redis_url, "--key-prefix", prefix]
    added = CliRunner().invoke(main, ["user", "add", "carol", "--password", "carol-pass", *target])
    assert added.exit_code == 0, added.output
    served = Console(redis_url, "--key-prefix", prefix, log_dir=tmp_path).start()
    try:
        page.goto(served.url + "topics")
        assert page.url.startswith(served.url + "login")  # every page needs a login
        form = page.locator("form#login-form")
        form.locator("[name=username]").fill("carol")
        form.locator("[name=password]").fill("wrong")
        submit(form)
        assert "wrong user name or password" in error_text(page)
        form.locator("[name=username]").fill("carol")
        form.locator("[name=password]").fill("carol-pass")
        screenshot(page, "login")
        submit(form)
        assert page.url == served.url + "topics"  # back where it was going
        assert page.locator("h1").inner_text() == "Topics"
        assert page.locator("header .user").inner_text() == "carol"
        assert "carol-pass" not in page.content()
    finally:
        served.stop()
