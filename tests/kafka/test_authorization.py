"""Kafka's ACLs (``--authorizer``) as Kafka clients meet them: confluent-kafka and kafka-python
users over SASL denied and allowed on topics, groups and transactional ids, by literal and
prefixed bindings, a DENY winning over an ALLOW, Metadata hiding what a user may not
describe. One pod for the module; the bindings are written to Redis as ``adapter acl``
writes them."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from adapter.kafka.versions import (
    CONSUMER_GROUP_HEARTBEAT,
    DESCRIBE_LOG_DIRS,
    DESCRIBE_PRODUCERS,
    DESCRIBE_TOPIC_PARTITIONS,
    DESCRIBE_TRANSACTIONS,
    LIST_OFFSETS,
    LIST_TRANSACTIONS,
    METADATA,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SHARE_ACKNOWLEDGE,
    SHARE_FETCH,
    SHARE_GROUP_HEARTBEAT,
)
from mapping.security.acls import AclBinding, Operation, PatternType, Permission, ResourceType
from tests.support.authorizing import authorizing_pod
from tests.support.kafka import RawKafka
from tests.support.pods import Pod
from tests.support.waiting import wait_until

USER, ADMIN, PASSWORD = "alice", "admin", "secret pass"
TOPIC_CODE, GROUP_CODE, CLUSTER_CODE, TXN_CODE = 29, 30, 31, 53


def _allow(
    rtype: ResourceType,
    name: str,
    op: Operation,
    pattern: PatternType = PatternType.LITERAL,
    permission: Permission = Permission.ALLOW,
) -> AclBinding:
    return AclBinding(rtype, name, pattern, f"User:{USER}", "*", op, permission)


BINDINGS = [
    _allow(ResourceType.TOPIC, "open", Operation.ALL),
    _allow(ResourceType.TOPIC, "pre-", Operation.WRITE, PatternType.PREFIXED),
    _allow(ResourceType.TOPIC, "pre-denied", Operation.WRITE, permission=Permission.DENY),
    _allow(ResourceType.GROUP, "g-ok", Operation.READ),
    _allow(ResourceType.TOPIC, "adm-", Operation.ALL, PatternType.PREFIXED),
    _allow(ResourceType.TRANSACTIONAL_ID, "tx-ok", Operation.ALL),
]


@pytest.fixture(scope="module")
def pod(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pod]:
    with authorizing_pod(
        redis_url,
        tmp_path_factory.mktemp("authz"),
        user=USER,
        admin=ADMIN,
        password=PASSWORD,
        bindings=BINDINGS,
        topics=("open", "secret", "pre-x", "pre-denied"),  # (the super user creates them)
    ) as started:
        yield started


def _config(pod: Pod, user: str = USER) -> dict:
    return {
        "bootstrap.servers": pod.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": PASSWORD,
    }


def _raw(pod: Pod, user: str = USER) -> RawKafka:
    """A raw Kafka connection authenticated as ``user`` (SASL PLAIN)."""
    raw = RawKafka(pod.kafka_port)
    raw.call(SASL_HANDSHAKE, 1, SASL_HANDSHAKE.request[1](mechanism="PLAIN"))
    token = f"\0{user}\0{PASSWORD}".encode()
    reply = raw.call(SASL_AUTHENTICATE, 1, SASL_AUTHENTICATE.request[1](auth_bytes=token))
    assert reply.error_code == 0
    return raw


def _produce_one(pod: Pod, topic: str) -> object:
    """The delivery report's error of one record (None: delivered)."""
    from confluent_kafka import Producer

    producer = Producer({**_config(pod), "message.timeout.ms": 5000, "retries": 0})
    delivered: list = []
    producer.produce(topic, b"v", partition=0, on_delivery=lambda e, m: delivered.append(e))
    producer.flush(15)
    assert len(delivered) == 1
    return delivered[0]


def test_confluent_producer_allowed_literal_and_prefixed(pod: Pod) -> None:
    # (the bindings reach the pod through its change notice: wait for the first)
    wait_until(lambda: _produce_one(pod, "open") is None)
    assert _produce_one(pod, "pre-x") is None


def test_confluent_producer_denied_topic_and_deny_wins(pod: Pod) -> None:
    wait_until(lambda: _produce_one(pod, "open") is None)
    for topic in ("secret", "pre-denied"):
        error = _produce_one(pod, topic)
        assert error is not None and error.code() == TOPIC_CODE, (topic, error)


def test_metadata_hides_and_refuses_topics(pod: Pod) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(_config(pod))
    wait_until(lambda: "open" in admin.list_topics(timeout=10).topics)
    listed = admin.list_topics(timeout=10).topics
    assert "secret" not in listed  # not DESCRIBE-able: left out of the listing
    asked = admin.list_topics("secret", timeout=10).topics["secret"]
    assert asked.error is not None and asked.error.code() == TOPIC_CODE


def test_confluent_consumer_denied_by_group(pod: Pod) -> None:
    from confluent_kafka import Consumer, KafkaError

    wait_until(lambda: _produce_one(pod, "open") is None)
    consumer = Consumer({**_config(pod), "group.id": "g-no", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["open"])
        codes: set[int] = set()

        def group_denied() -> bool:
            message = consumer.poll(0.5)
            if message is not None and message.error() is not None:
                codes.add(message.error().code())
            return KafkaError.GROUP_AUTHORIZATION_FAILED in codes

        wait_until(group_denied, timeout=20)
    finally:
        consumer.close()


def test_confluent_transactional_producer_denied(pod: Pod) -> None:
    from confluent_kafka import KafkaException, Producer

    producer = Producer({**_config(pod), "transactional.id": "tx-no"})
    with pytest.raises(KafkaException) as failure:
        producer.init_transactions(15)
    assert failure.value.args[0].code() == TXN_CODE


def test_kafka_python_producer_denied(pod: Pod) -> None:
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    wait_until(lambda: _produce_one(pod, "open") is None)
    producer = KafkaProducer(
        bootstrap_servers=pod.bootstrap, security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN", sasl_plain_username=USER, sasl_plain_password=PASSWORD,
        max_block_ms=5000, retries=0,
    )  # fmt: skip
    try:
        assert producer.send("open", b"v").get(timeout=15) is not None
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send("secret", b"v").get(timeout=15)
    finally:
        producer.close()


def _code(future: object) -> int:
    """The Kafka error code an admin future failed with (0: it succeeded)."""
    from confluent_kafka import KafkaException

    try:
        future.result(15)  # type: ignore[attr-defined]
    except KafkaException as exc:
        return exc.args[0].code()
    return 0


def test_admin_operations_denied_and_allowed(pod: Pod) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        NewTopic,
    )

    wait_until(lambda: _produce_one(pod, "open") is None)
    admin = AdminClient(_config(pod))
    made = admin.create_topics([NewTopic("adm-t", 1, 1), NewTopic("other-t", 1, 1)])
    assert _code(made["adm-t"]) == 0  # CREATE by the prefixed binding
    assert _code(made["other-t"]) == TOPIC_CODE
    grown = admin.create_partitions([NewPartitions("adm-t", 2), NewPartitions("secret", 2)])
    assert (_code(grown["adm-t"]), _code(grown["secret"])) == (0, TOPIC_CODE)
    topic, secret = ConfigResource("TOPIC", "adm-t"), ConfigResource("TOPIC", "secret")
    broker = ConfigResource("BROKER", str(next(iter(admin.list_topics(timeout=10).brokers))))
    described = admin.describe_configs([topic, secret, broker])
    assert "retention.ms" in described[topic].result(15)
    assert (_code(described[secret]), _code(described[broker])) == (TOPIC_CODE, CLUSTER_CODE)
    entry = ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)
    altered = admin.incremental_alter_configs(
        [ConfigResource("TOPIC", "adm-t", incremental_configs=[entry]),
         ConfigResource("TOPIC", "secret", incremental_configs=[entry])]
    )  # fmt: skip
    assert sorted(_code(f) for f in altered.values()) == [0, TOPIC_CODE]
    deleted = admin.delete_topics(["adm-t", "secret"])
    assert (_code(deleted["adm-t"]), _code(deleted["secret"])) == (0, TOPIC_CODE)


def test_groups_listed_described_and_deleted_only_with_rights(pod: Pod) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    wait_until(lambda: _produce_one(pod, "open") is None)
    for user, group in ((USER, "g-ok"), (ADMIN, "g-hidden")):  # a group each, by a commit
        consumer = Consumer({**_config(pod, user), "group.id": group})
        consumer.commit(offsets=[TopicPartition("open", 0, 1)], asynchronous=False)
        consumer.close()
    admin = AdminClient(_config(pod))
    listed = {g.group_id for g in admin.list_consumer_groups().result(15).valid}
    assert "g-ok" in listed and "g-hidden" not in listed  # READ implies DESCRIBE
    described = admin.describe_consumer_groups(["g-hidden"])["g-hidden"]
    assert _code(described) == GROUP_CODE
    assert _code(admin.delete_consumer_groups(["g-hidden"])["g-hidden"]) == GROUP_CODE


def test_list_offsets_needs_describe_on_the_topic(pod: Pod) -> None:
    wait_until(lambda: _produce_one(pod, "open") is None)
    Topic = LIST_OFFSETS.request[1].ListOffsetsTopic
    wanted = [
        Topic(name=name, partitions=[Topic.ListOffsetsPartition(partition_index=0, timestamp=-1)])
        for name in ("open", "secret")
    ]
    with _raw(pod) as raw:
        reply = raw.call(LIST_OFFSETS, 1, LIST_OFFSETS.request[1](replica_id=-1, topics=wanted))
    codes = {t.name: t.partitions[0].error_code for t in reply.topics}
    assert codes == {"open": 0, "secret": TOPIC_CODE}


def test_transactions_described_and_listed_only_with_describe(pod: Pod) -> None:
    from confluent_kafka import Producer

    for user, txn in ((USER, "tx-ok"), (ADMIN, "tx-hidden")):
        Producer({**_config(pod, user), "transactional.id": txn}).init_transactions(15)
    with _raw(pod) as raw:
        body = DESCRIBE_TRANSACTIONS.request[0](transactional_ids=["tx-ok", "tx-hidden"])
        states = raw.call(DESCRIBE_TRANSACTIONS, 0, body).transaction_states
        listed = raw.call(LIST_TRANSACTIONS, 0, LIST_TRANSACTIONS.request[0](
            state_filters=[], producer_id_filters=[]
        )).transaction_states  # fmt: skip
    assert {s.transactional_id: s.error_code for s in states} == {"tx-ok": 0, "tx-hidden": TXN_CODE}
    assert {t.transactional_id for t in listed} == {"tx-ok"}


def test_operators_views_need_their_operations(pod: Pod) -> None:
    """DescribeTopicPartitions DESCRIBE on each topic (a listing leaves out, a name is refused
    with no id), DescribeLogDirs DESCRIBE on the cluster, DescribeProducers READ on the
    topic; the super user sees everything."""
    wait_until(lambda: _produce_one(pod, "open") is None)
    request = DESCRIBE_TOPIC_PARTITIONS.request[0]
    named = request(
        topics=[request.TopicRequest(name=n) for n in ("secret", "open")],
        response_partition_limit=100,
    )
    listing = request(topics=[], response_partition_limit=100)
    dirs = DESCRIBE_LOG_DIRS.request[3](topics=None)
    producers = DESCRIBE_PRODUCERS.request[0](
        topics=[
            DESCRIBE_PRODUCERS.request[0].TopicRequest(name=n, partition_indexes=[0])
            for n in ("open", "secret")
        ]
    )
    with _raw(pod) as raw:
        described = raw.call(DESCRIBE_TOPIC_PARTITIONS, 0, named).topics
        listed = raw.call(DESCRIBE_TOPIC_PARTITIONS, 0, listing).topics
        refused_dirs = raw.call(DESCRIBE_LOG_DIRS, 3, dirs)
        by_topic = raw.call(DESCRIBE_PRODUCERS, 0, producers).topics
    assert [(t.name, t.error_code) for t in described] == [("open", 0), ("secret", TOPIC_CODE)]
    assert described[1].topic_id is None and described[0].topic_id is not None  # (None: zero)
    assert described[0].topic_authorized_operations == 1 << 3 | 1 << 4 | 1 << 5 | 1 << 6 | (
        1 << 7 | 1 << 8 | 1 << 10 | 1 << 11
    )  # ALL on "open": every operation of a topic
    assert "open" in {t.name for t in listed} and "secret" not in {t.name for t in listed}
    assert (refused_dirs.error_code, refused_dirs.results) == (CLUSTER_CODE, [])
    codes = {t.name: t.partitions[0].error_code for t in by_topic}
    assert codes == {"open": 0, "secret": TOPIC_CODE}
    with _raw(pod, ADMIN) as raw:
        (log_dir,) = raw.call(DESCRIBE_LOG_DIRS, 3, dirs).results
        listed = raw.call(DESCRIBE_TOPIC_PARTITIONS, 0, listing).topics
    assert {"open", "secret"} <= {t.name for t in log_dir.topics}
    assert {"open", "secret"} <= {t.name for t in listed}


def test_kcat_produces_consumes_and_lists_only_what_it_may(pod: Pod) -> None:
    """Debian's kcat (librdkafka 2.0.2) over SASL PLAIN: it produces to and consumes a
    topic its user may write and read, a denied topic fails its delivery with Kafka's
    error (and kcat exits non-zero), and its metadata listing leaves the denied topic out."""
    from tests.kafka.debian_tools import require

    kcat = require("kcat", "kcat")
    sasl = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=PLAIN",
            "-X", f"sasl.username={USER}", "-X", f"sasl.password={PASSWORD}"]  # fmt: skip

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        command = [kcat, "-b", pod.bootstrap, "-m", "10", *sasl, *args]
        return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=60)

    wait_until(lambda: _produce_one(pod, "open") is None)
    value = f"kcat-{uuid.uuid4().hex[:8]}"
    produced = run("-P", "-t", "open", "-p", "0", stdin=f"{value}\n")
    assert produced.returncode == 0, produced.stderr

    denied = run("-P", "-t", "secret", "-p", "0", stdin="never\n")
    assert denied.returncode != 0
    assert "Topic authorization failed" in denied.stderr, denied.stderr

    consumed = run("-C", "-t", "open", "-p", "0", "-o", "beginning", "-e", "-f", "%s\n")
    assert consumed.returncode == 0, consumed.stderr
    assert value in consumed.stdout.splitlines()

    listed = run("-L", "-J")
    assert listed.returncode == 0, listed.stderr
    topics = {t["topic"] for t in json.loads(listed.stdout)["topics"]}
    assert "open" in topics and "secret" not in topics


def _topic_id(pod: Pod, topic: str) -> uuid.UUID:
    raw = _raw(pod, ADMIN)
    try:
        asked = METADATA.request.MetadataRequestTopic(name=topic)
        body = METADATA.request[12](topics=[asked], allow_auto_topic_creation=False)
        (answer,) = raw.call(METADATA, 12, body).topics
    finally:
        raw.close()
    assert answer.error_code == 0
    return answer.topic_id


def test_share_groups_need_read_on_the_group_and_the_topics(pod: Pod) -> None:
    """KIP-932 under ACLs, as Kafka checks it: ShareGroupHeartbeat needs READ on the group
    and DESCRIBE on each subscribed topic; ShareFetch and ShareAcknowledge READ on the group,
    and READ on each topic for its partitions (TOPIC_AUTHORIZATION_FAILED, the others
    served)."""
    heartbeat = SHARE_GROUP_HEARTBEAT.request[1]
    fetch, ack = SHARE_FETCH.request, SHARE_ACKNOWLEDGE.request
    wait_until(lambda: _produce_one(pod, "open") is None)  # the bindings are loaded
    open_id, secret_id = _topic_id(pod, "open"), _topic_id(pod, "secret")
    member = uuid.uuid4().hex[:22]

    def join(group: str, topics: list[str]) -> int:
        return raw.call(SHARE_GROUP_HEARTBEAT, 1, heartbeat(
            group_id=group, member_id=member, member_epoch=0, rack_id=None,
            subscribed_topic_names=topics,
        )).error_code  # fmt: skip

    def share_fetch(group: str, epoch: int) -> Any:
        wanted = [
            fetch.FetchTopic(topic_id=t, partitions=[
                fetch.FetchTopic.FetchPartition(partition_index=0, acknowledgement_batches=[])
            ])
            for t in (open_id, secret_id)
        ]  # fmt: skip
        return raw.call(SHARE_FETCH, 1, fetch[1](
            group_id=group, member_id=member, share_session_epoch=epoch, max_wait_ms=0,
            min_bytes=1, max_bytes=1 << 20, max_records=10, batch_size=10, topics=wanted,
            forgotten_topics_data=[],
        ))  # fmt: skip

    raw = _raw(pod)
    try:
        assert join("g-denied", ["open"]) == GROUP_CODE
        assert join("g-ok", ["open", "secret"]) == TOPIC_CODE
        assert join("g-ok", ["open"]) == 0
        assert share_fetch("g-denied", 0).error_code == GROUP_CODE
        answer = share_fetch("g-ok", 0)
        assert answer.error_code == 0
        codes = {t.topic_id: t.partitions[0].error_code for t in answer.responses}
        assert codes == {open_id: 0, secret_id: TOPIC_CODE}
        batch = ack.AcknowledgeTopic.AcknowledgePartition.AcknowledgementBatch
        acked = raw.call(SHARE_ACKNOWLEDGE, 1, ack[1](
            group_id="g-ok", member_id=member, share_session_epoch=1, topics=[
                ack.AcknowledgeTopic(topic_id=secret_id, partitions=[
                    ack.AcknowledgeTopic.AcknowledgePartition(
                        partition_index=0, acknowledgement_batches=[
                            batch(first_offset=0, last_offset=0, acknowledge_types=[1])
                        ])
                ])
            ],
        ))  # fmt: skip
        assert acked.responses[0].partitions[0].error_code == TOPIC_CODE
    finally:
        raw.close()


def test_a_regex_subscription_leaves_out_topics_the_member_may_not_describe(pod: Pod) -> None:
    """KIP-848's SubscribedTopicRegex under ACLs: the regex matches ``open`` and ``secret``,
    and the member is given ``open`` only (Kafka filters the matches by DESCRIBE, with no
    error); a heartbeat's group still needs READ."""
    heartbeat = CONSUMER_GROUP_HEARTBEAT.request[1]
    wait_until(lambda: _produce_one(pod, "open") is None)  # the bindings are loaded

    def join(group: str) -> Any:
        return raw.call(CONSUMER_GROUP_HEARTBEAT, 1, heartbeat(
            group_id=group, member_id="", member_epoch=0, rebalance_timeout_ms=5000,
            subscribed_topic_regex="open|secret", server_assignor="uniform",
        ))  # fmt: skip

    raw = _raw(pod)
    try:
        assert join("g-denied").error_code == GROUP_CODE
        joined = join("g-ok")
        assert joined.error_code == 0
        assigned = {t.topic_id for t in joined.assignment.topic_partitions}
        assert assigned == {_topic_id(pod, "open")}
        left = raw.call(CONSUMER_GROUP_HEARTBEAT, 1, heartbeat(
            group_id="g-ok", member_id=joined.member_id, member_epoch=-1,
        ))  # fmt: skip
        assert left.error_code == 0
    finally:
        raw.close()
