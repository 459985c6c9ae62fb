"""Kafka classic groups under load and under pod loss, with real confluent-kafka consumers on
three real pods sharing one Redis: many members joining at once form one generation, and a
group whose coordinator pod is SIGKILLed in the middle of a rebalance completes on the
surviving pods. Each test starts its own pods under its own key prefix (a killed pod stays
in its prefix's broker registry until the registration's TTL runs out)."""

from __future__ import annotations

import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from mapping.core.keys import KafkaGroupKeys, Keys
from tests.kafka.balancer import Balancer
from tests.kafka.group_helpers import CONFLUENT, owned, poll_until, produce
from tests.support.pods import RF1, Pod, start_all

MEMBERS = 20
MANY_PARTITIONS = 24
PARTITIONS = 6


def _pod_args(prefix: str, initial_delay_ms: int) -> tuple[str, ...]:
    return (
        *RF1,
        "--key-prefix", prefix,
        "--kafka-group-initial-rebalance-delay-ms", str(initial_delay_ms),
    )  # fmt: skip


class GroupPods:
    """Three pods under one fresh key prefix, and reads of a group's state in Redis. Behind
    a balancer the pods advertise its address: clients see one broker, and each of their
    connections (the coordinator's too) lands on the next pod."""

    def __init__(
        self, redis_url: str, initial_delay_ms: int, balanced: bool, log_dir: Path
    ) -> None:
        self.prefix = f"kgpods-{uuid.uuid4().hex[:8]}"
        args = _pod_args(self.prefix, initial_delay_ms)
        self.balancer = Balancer(log_dir) if balanced else None
        if self.balancer is not None:
            args = (*args, "--kafka-advertised-listener", self.balancer.address)
        self.pods = [Pod(redis_url, *args, metrics=True) for _ in range(3)]
        self.redis = redis.Redis.from_url(redis_url, decode_responses=True)

    def start(self) -> None:
        """All three pods and the balancer, or (one of them failing) none left running."""
        try:
            start_all(self.pods)
            if self.balancer is not None:
                self.balancer.start([pod.kafka_port for pod in self.pods])
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for pod in self.pods:
            pod.stop()
        if self.balancer is not None:
            self.balancer.stop()
        self.redis.close()

    def balanced_connections(self) -> list[int]:
        """The pod (its index) each connection through the balancer went to, in order."""
        assert self.balancer is not None
        return self.balancer.connections([pod.kafka_port for pod in self.pods])

    def answered(self, pod: int, api: str) -> float:
        """How many ``api`` requests ``pod`` answered (its Prometheus counter)."""
        url = f"http://127.0.0.1:{self.pods[pod].metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "adapter_kafka_requests_total" and sample.labels == {"api": api}:
                    return sample.value
        return 0.0

    def pin(self, pod: int | None) -> None:
        """New connections through the balancer go to ``pod`` (None: round robin again)."""
        assert self.balancer is not None
        self.balancer.pin(None if pod is None else self.pods[pod].kafka_port)

    def bootstrap(self, first: int) -> str:
        """Every pod, ``first``'s first: the client talks to it and fails over to the others
        (behind a balancer: the balancer)."""
        if self.balancer is not None:
            return self.balancer.address
        order = self.pods[first:] + self.pods[:first]
        return ",".join(pod.bootstrap for pod in order)

    def keys(self, group: str) -> KafkaGroupKeys:
        return Keys(self.prefix).kafka_group(group)

    def meta(self, group: str) -> dict[str, str]:
        return self.redis.hgetall(self.keys(group).meta)

    def generation_of(self, group: str) -> dict[str, int]:
        """Member id -> the generation its JoinGroup was answered with."""
        return {m: int(g) for m, g in self.redis.hgetall(self.keys(group).generation_of).items()}

    def members(self, group: str) -> set[str]:
        return set(self.redis.hkeys(self.keys(group).members))

    def create_topic(self, topic: str, partitions: int) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap(0)})
        futures = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=10)
        futures[topic].result(timeout=15)


ROUTES = ["direct", "balancer"]


@pytest.fixture(params=ROUTES)
def many_joins_pods(
    redis_url: str, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[GroupPods]:
    # an initial delay that each new member extends: joins spread by a loaded machine
    # still land in the first generation
    balanced = request.param == "balancer"
    yield from _running(GroupPods(redis_url, 3000, balanced, tmp_path))


@pytest.fixture(params=ROUTES)
def killable_pods(
    redis_url: str, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[GroupPods]:
    balanced = request.param == "balancer"
    yield from _running(GroupPods(redis_url, 200, balanced, tmp_path))


def _running(group_pods: GroupPods) -> Iterator[GroupPods]:
    group_pods.start()
    starts = [len(pod.log()) for pod in group_pods.pods]
    try:
        yield group_pods
    finally:
        group_pods.stop()
    for pod, start in zip(group_pods.pods, starts, strict=True):
        assert "request failed" not in pod.log()[start:], pod.log_path
        assert "Traceback" not in pod.log()[start:], pod.log_path


def _consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, **CONFLUENT})


def _split_exactly(owned: list[set[int]], partitions: int) -> bool:
    """Every member owns some partition, every partition has exactly one owner."""
    return (
        all(owned)
        and set().union(*owned) == set(range(partitions))
        and sum(len(o) for o in owned) == partitions
    )


def _describe(bootstrap: str, group: str) -> ConsumerGroupDescription:
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 5000})
    return admin.describe_consumer_groups([group])[group].result(timeout=15)


@pytest.mark.slow
def test_twenty_members_joining_at_once_through_three_pods_form_one_generation(
    many_joins_pods: GroupPods, topic: str
) -> None:
    pods = many_joins_pods
    pods.create_topic(topic, MANY_PARTITIONS)
    group = f"g-{topic}"
    # bootstrapped round robin: each pod answers the metadata and FindCoordinator of a
    # third (behind the balancer each connection lands on the next pod: the JoinGroups of
    # one generation arrive at all three pods)
    consumers = [_consumer(pods.bootstrap(i % 3), group) for i in range(MEMBERS)]
    try:
        for consumer in consumers:
            consumer.subscribe([topic])

        def state() -> object:
            return pods.meta(group), [sorted(owned(c)) for c in consumers]

        poll_until(
            [lambda: [c.poll(0.02) for c in consumers]],
            lambda: _split_exactly([owned(c) for c in consumers], MANY_PARTITIONS),
            timeout=45,
            state=state,
        )
        meta = pods.meta(group)
        assert meta["state"] == "Stable"
        # exactly one rebalance: the first generation already had all twenty members
        assert int(meta["generation"]) == 1, meta
        member_ids = {c.memberid() for c in consumers}
        assert len(member_ids) == MEMBERS
        assert pods.members(group) == member_ids
        assert pods.generation_of(group) == dict.fromkeys(member_ids, 1)

        # Kafka's own view (DescribeGroups, asked of another pod than the first)
        described = _describe(pods.bootstrap(1), group)
        assert str(described.state).endswith("STABLE"), described.state
        assert {m.member_id for m in described.members} == member_ids
        assigned = [
            {tp.partition for tp in m.assignment.topic_partitions} for m in described.members
        ]
        assert _split_exactly(assigned, MANY_PARTITIONS)
        by_member = {m.member_id: a for m, a in zip(described.members, assigned, strict=True)}
        assert all(by_member[c.memberid()] == owned(c) for c in consumers)
        if pods.balancer is not None:  # the one generation was formed across the pods
            assert all(pods.answered(i, "JoinGroup") > 0 for i in range(3))
    finally:
        for consumer in consumers:
            consumer.close()


def _coordinator(pods: GroupPods, group: str) -> int:
    """The index of the pod FindCoordinator names for ``group`` (pods not balanced)."""
    node = _describe(pods.bootstrap(0), group).coordinator
    ports = [pod.kafka_port for pod in pods.pods]
    return ports.index(node.port)


@pytest.mark.slow
def test_a_coordinator_pod_killed_in_the_middle_of_a_rebalance(
    killable_pods: GroupPods, topic: str
) -> None:
    pods = killable_pods
    pods.create_topic(topic, PARTITIONS)
    group = f"g-{topic}"
    consumers = [_consumer(pods.bootstrap(i), group) for i in range(3)]
    got: list[bytes] = []

    def poll(members: list[Consumer]) -> None:
        for consumer in members:
            message = consumer.poll(0.05)
            if message is not None and message.error() is None:
                got.append(message.value())

    def state() -> object:
        return pods.meta(group), [sorted(owned(c)) for c in consumers], len(got)

    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        poll_until(
            [lambda: poll(consumers)],
            lambda: _split_exactly([owned(c) for c in consumers], PARTITIONS),
            state=state,
        )
        assert pods.meta(group)["state"] == "Stable"
        stable_generation = int(pods.meta(group)["generation"])
        if pods.balancer is None:
            # the coordinator pod (every member's group requests go there) is killed; the
            # newcomer bootstraps to the next one
            doomed = _coordinator(pods, group)
            newcomer_pod = (doomed + 1) % 3
        else:
            # the newcomer's connections (its coordinator connection with them) all land on
            # one pod, which is killed while its JoinGroup waits there; the three others'
            # group connections are spread over the pods
            doomed, newcomer_pod = 0, 1
            pods.pin(doomed)
            old_connections = len(pods.balanced_connections())

        # a fourth member joins; the three others are not polled, so they do not rejoin
        # (librdkafka revokes on poll) and the JoinGroup barrier stays open with the
        # newcomer waiting in it
        consumers.append(_consumer(pods.bootstrap(newcomer_pod), group))
        consumers[-1].subscribe([topic])
        poll_until(
            [lambda: poll(consumers[-1:])],
            lambda: (
                pods.meta(group).get("state") == "PreparingRebalance"
                and bool(pods.redis.hlen(pods.keys(group).joining))
            ),
            state=state,
        )
        if pods.balancer is not None:
            assert set(pods.balanced_connections()[old_connections:]) == {doomed}
            pods.pin(None)
        pods.pods[doomed].kill()
        # killed with the barrier open: no other pod moved the group on meanwhile
        assert pods.meta(group)["state"] == "PreparingRebalance"
        assert int(pods.meta(group)["generation"]) == stable_generation

        # the four fail over (their bootstrap lists name every pod, FindCoordinator names a
        # live pod once the killed one's registration expired; behind the balancer their
        # reconnections land on live pods) and end in one stable generation that owns every
        # partition once
        def stable() -> bool:
            meta = pods.meta(group)
            if meta.get("state") != "Stable":
                return False
            generation = int(meta["generation"])
            member_ids = {c.memberid() for c in consumers}
            return (
                _split_exactly([owned(c) for c in consumers], PARTITIONS)
                and pods.members(group) == member_ids
                and pods.generation_of(group) == dict.fromkeys(member_ids, generation)
            )

        poll_until([lambda: poll(consumers)], stable, timeout=60, state=state)
        assert int(pods.meta(group)["generation"]) > stable_generation

        # consuming works: what is produced now through a surviving pod is consumed
        survivor = pods.pods[newcomer_pod]
        produce(survivor.bootstrap, topic, PARTITIONS, 1, tag="late")

        def late() -> set[int]:
            return {int(v.split(b"-")[0]) for v in got if b"-late" in v}

        poll_until([lambda: poll(consumers)], lambda: late() == set(range(PARTITIONS)), state=state)
    finally:
        for consumer in consumers:
            consumer.close()


def test_three_pods_whose_last_fails_to_start_leave_none_running(
    redis_url: str, tmp_path: Path
) -> None:
    """A fixture that fails half-way stops what it had started (the suite once ended with two
    pods of a failed start still running)."""
    group_pods = GroupPods(redis_url, 200, False, tmp_path)
    group_pods.pods[2].args.append("--no-such-option")
    with pytest.raises(AssertionError, match="pod exited"):
        group_pods.start()
    first, second, failed = group_pods.pods
    for pod in (first, second):
        assert pod.process is not None and pod.process.poll() is not None
    assert failed.process is not None and failed.process.poll() is not None
