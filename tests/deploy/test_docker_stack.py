"""The docker-compose stack as users run it, on a real Docker engine: Redis with AOF, three
pods, HAProxy, the topic job and the Spark job, checked through the published ports.

The engine is one that answers, or one started here on its own socket (tests/deploy/
docker_engine.py; never the machine's default socket). The base images are pulled or, with
no registry reachable, built by docker/offline-bases.sh from Debian packages. The project's
images are built by ``docker compose up --build`` (cached in the engine's data root between
runs). Skips, with the reason, only where no engine can run here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from adapter.client import Client, RequestFailed
from mapping.connection.embedded import free_port
from tests.deploy.docker_engine import Engine, NoEngine, ensure_tools, get_engine
from tests.support import ROOT
from tests.support.redis import REDIS_IMAGE
from tests.support.waiting import wait_until

# Cold (bases, images, Spark's JVM) takes minutes; every test here shares one stack.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

COMPOSE_FILE = ROOT / "docker" / "docker-compose.yml"
OFFLINE_BASES = ROOT / "docker" / "offline-bases.sh"
BASE_IMAGES = ("python:3.11-slim", "redis:7", "haproxy:2.6")
PODS = ("adapter-1", "adapter-2", "adapter-3")
ADAPTER_IMAGE = "redis-streams-adapter:latest"
SPARK_IMAGE = "redis-streams-adapter-spark:latest"


@dataclass
class Stack:
    engine: Engine
    project: str
    lb_port: int
    metrics_port: int
    kafka_port: int
    timings: dict[str, float]

    def compose(
        self, *args: str, timeout: float = 300, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        env = {
            **self.engine.env,
            "ADAPTER_LB_PORT": str(self.lb_port),
            "ADAPTER_METRICS_PUBLISH_PORT": str(self.metrics_port),
            "ADAPTER_KAFKA_PUBLISH_PORT": str(self.kafka_port),
        }
        result = subprocess.run(
            ["docker", "compose", "-p", self.project, "-f", str(COMPOSE_FILE), *args],
            env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if check and result.returncode != 0:
            raise AssertionError(
                f"docker compose {' '.join(args)} exited {result.returncode}:\n"
                f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
            )
        return result

    def exec(self, service: str, *command: str, timeout: float = 120) -> str:
        return self.compose("exec", "-T", service, *command, timeout=timeout).stdout

    def client(self, timeout: float = 30) -> Client:
        return Client("127.0.0.1", self.lb_port, timeout=timeout)


def _ensure_base_images(engine: Engine) -> None:
    missing = [
        i for i in BASE_IMAGES if engine.docker("image", "inspect", i, check=False).returncode
    ]
    if not missing:
        return
    if shutil.which("debootstrap") is None:
        try:
            ensure_tools(("debootstrap", "debootstrap"))
        except NoEngine as exc:
            pytest.skip(f"base images {missing} missing and cannot be built: {exc}")
    result = subprocess.run(
        [str(OFFLINE_BASES)], env=engine.env, capture_output=True, text=True, timeout=1200,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    try:
        engine = get_engine()
    except NoEngine as exc:
        pytest.skip(str(exc))
    try:
        yield engine
    finally:
        engine.stop()


@pytest.fixture(scope="module")
def stack(engine: Engine) -> Iterator[Stack]:
    timings: dict[str, float] = {}
    started = time.monotonic()
    _ensure_base_images(engine)
    timings["base images"] = time.monotonic() - started
    stack = Stack(
        engine, f"rsa-test-{uuid.uuid4().hex[:8]}", free_port(), free_port(), free_port(), timings
    )
    try:
        started = time.monotonic()
        stack.compose("build", timeout=1800)
        timings["build"] = time.monotonic() - started
        started = time.monotonic()
        stack.compose("up", "-d", "--wait", timeout=600)
        timings["up --wait"] = time.monotonic() - started
        yield stack
    finally:
        stack.compose("down", "-v", "--remove-orphans", "--timeout", "10", timeout=300, check=False)


def _image_size_mb(engine: Engine, image: str) -> float:
    return int(engine.docker("image", "inspect", image, "--format", "{{.Size}}").stdout) / 1e6


def test_images_are_lean_and_run_as_non_root(stack: Stack, request: pytest.FixtureRequest) -> None:
    engine = stack.engine
    sizes = {image: _image_size_mb(engine, image) for image in (ADAPTER_IMAGE, SPARK_IMAGE)}
    for image in (ADAPTER_IMAGE, SPARK_IMAGE):
        config = json.loads(
            engine.docker("image", "inspect", image, "--format", "{{json .Config}}").stdout
        )
        assert config["User"] == "adapter", image
        assert config["Healthcheck"]["Test"][0] == "CMD", image
        # No compiler, and no pip in the virtualenv the code runs from.
        probe = engine.docker(
            "run", "--rm", "--entrypoint", "sh", image, "-c",
            "id -u; command -v gcc cc || true; ls /opt/venv/bin",
        ).stdout.split()  # fmt: skip
        assert probe[0] == "10001", image
        assert not {"gcc", "cc", "pip", "pip3"} & {os.path.basename(p) for p in probe}, probe
    assert sizes[ADAPTER_IMAGE] < sizes[SPARK_IMAGE]
    report = ", ".join(f"{image} {size:.0f} MB" for image, size in sizes.items())
    timings = ", ".join(f"{step} {seconds:.0f} s" for step, seconds in stack.timings.items())
    with request.config.pluginmanager.get_plugin("capturemanager").global_and_fixture_disabled():
        print(f"\n[docker stack] images: {report}; {timings}")


def test_v1_through_the_load_balancer(stack: Stack) -> None:
    key = f"lb-{uuid.uuid4().hex[:8]}"
    with stack.client() as client:
        assert client.ping() == "pong"
        replies = [client.produce("orders", key, f"{key}-{i}", acks="all") for i in range(6)]
        for partition in {r.partition for r in replies}:
            read = _read_partition(client, "orders", partition)
            expected = [
                f"{key}-{i}".encode() for i, r in enumerate(replies) if r.partition == partition
            ]
            assert [v for v in read if v.startswith(key.encode())] == expected
    # Connections are spread: six clients through the balancer land on all three pods.
    clients = [stack.client() for _ in range(6)]
    try:
        for client in clients:
            assert client.ping() == "pong"
        per_pod = [_pod_connections(stack, pod) for pod in PODS]
        assert sum(per_pod) >= 6 and min(per_pod) >= 1, per_pod
    finally:
        for client in clients:
            client.close()


def test_kafka_through_the_load_balancer(stack: Stack) -> None:
    """A Kafka client bootstrapped to the balancer sees one broker, the balancer's published
    address (every pod advertises it), and its records are the V1 ones."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    bootstrap = f"localhost:{stack.kafka_port}"
    key = f"kafka-{uuid.uuid4().hex[:8]}".encode()
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "message.timeout.ms": 30000})  # fmt: skip
    brokers = producer.list_topics("orders", timeout=30).brokers
    assert [f"{b.host}:{b.port}" for b in brokers.values()] == [bootstrap]
    delivered: list = []
    for i in range(5):
        producer.produce(
            "orders", key=key, value=b"%d" % i, on_delivery=lambda e, m: delivered.append((e, m))
        )
    assert producer.flush(30) == 0
    assert [e for e, _ in delivered] == [None] * 5
    partition, first = delivered[0][1].partition(), delivered[0][1].offset()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": key.decode(),
                         "enable.auto.commit": False})  # fmt: skip
    try:
        consumer.assign([TopicPartition("orders", partition, first)])
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < 5 and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and message.error() is None and message.key() == key:
                got.append((message.offset(), message.value()))
        assert got == [(m.offset(), m.value()) for _, m in delivered]
    finally:
        consumer.close()
    with stack.client() as client:  # the same records through V1, at the same offsets
        read = dict(client.consume("orders", partition, first).records)
        assert [(offset, read.get(offset)) for offset, _ in got] == got


def test_redis_runs_the_project_module(stack: Stack) -> None:
    """The stack's Redis loaded the streamadapter module, and the pods appended the Kafka
    batches and copied the replicas (the RF 3 orders topic) through it."""
    modules = stack.exec("redis", "redis-cli", "MODULE", "LIST")
    assert "streamadapter" in modules
    stats = stack.exec("redis", "redis-cli", "INFO", "commandstats")
    calls = dict(re.findall(r"cmdstat_(streamadapter\.\w+):calls=(\d+)", stats))
    # (small batches go several to a PRODUCEMANY call, larger ones a PRODUCE each)
    produced = int(calls.get("streamadapter.produce", 0)) + int(
        calls.get("streamadapter.producemany", 0)
    )
    assert produced > 0, stats
    assert int(calls.get("streamadapter.copy", 0)) > 0, stats


def test_inspect_and_metrics(stack: Stack) -> None:
    topics = stack.exec("adapter-1", "python", "-m", "adapter", "inspect", "topics")
    assert re.search(
        r"topic=orders partitions=3 replication_factor=3 min_insync_replicas=2 ", topics
    )
    described = json.loads(
        stack.exec("adapter-2", "python", "-m", "adapter", "inspect", "topic", "orders", "--json")
    )
    assert (described["name"], described["partitions"]) == ("orders", 3)
    assert [view["isr"] for view in described["partition_views"]] == [[0, 1, 2]] * 3
    with stack.client() as client:
        client.ping()
    metrics = _metrics(stack)
    assert "adapter_requests_total" in metrics
    assert "adapter_connections" in metrics


def test_spark_job_counts_what_is_produced(stack: Stack) -> None:
    key = f"spark-{uuid.uuid4().hex[:8]}"
    with stack.client() as client:
        replies = [client.produce("orders", key, f"v{i}", acks="all") for i in range(20)]

        def counted() -> int:
            # foreachBatch appends JSON lines {"key", "count", "batch_id"} under --output
            output = stack.exec("spark", "sh", "-c", "cat /home/adapter/output/*.json || true")
            rows = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
            return sum(row["count"] for row in rows if row["key"] == key)

        # Spark's first batches are slow on a loaded 2-core machine (tens of seconds each).
        wait_until(lambda: counted() >= 20, timeout=300, interval=3)
        assert counted() == 20  # the checkpoint makes it exact: no batch counted twice

        def batch_logged() -> str | None:  # printed after the batch's files and commit
            logs = stack.compose("logs", "--no-color", "spark").stdout
            return logs if re.search(rf"batch \d+: \d+ records, top keys .*'{key}'", logs) else None

        logs = wait_until(batch_logged, timeout=60, interval=1)
        assert "[Stage " not in logs  # no console progress bars between the job's lines
        last = {}
        for reply in replies:
            last[reply.partition] = max(last.get(reply.partition, 0), reply.offset)
        # The job committed its progress to its group, past every record produced.
        for partition, offset in last.items():
            wait_until(
                lambda p=partition, o=offset: client.committed("spark-counts", "orders", p) > o,
                timeout=60,
                interval=1,
            )


def test_killed_pod_loses_nothing_acknowledged(stack: Stack) -> None:
    """Three producers through the balancer (leastconn puts one on each pod), acks=all;
    ``docker compose kill`` of a pod a producer is connected to, mid-stream: that producer's
    send fails, it reconnects through the balancer and sends again, and every acknowledged
    record is read back afterwards."""
    topic = f"kill-{uuid.uuid4().hex[:8]}"
    settings = ["--partitions", "3", "--replication-factor", "3", "--min-insync-replicas", "2"]
    stack.exec("adapter-1", "python", "-m", "adapter", "topic", "create", topic, *settings)
    acked: list[bytes] = []
    errors: list[str] = []
    stop = threading.Event()
    deadline = time.monotonic() + 300  # the producers stop by themselves, whatever happens

    def produce(index: int) -> None:
        client: Client | None = None
        sent = 0
        while not stop.is_set() and time.monotonic() < deadline:
            value = f"{topic}-{index}-{sent}"
            try:
                if client is None:
                    client = stack.client(timeout=15)
                client.produce(topic, f"p{index}", value, acks="all")
            except (OSError, RequestFailed) as exc:  # the pod died, or acks=all not yet met
                errors.append(f"producer {index}: {type(exc).__name__}: {exc}")
                if client is not None:
                    client.close()
                client = None
                continue
            acked.append(value.encode())
            sent += 1
        if client is not None:
            client.close()

    producers = [threading.Thread(target=produce, args=(i,)) for i in range(3)]
    for thread in producers:
        thread.start()
    try:
        wait_until(lambda: len(acked) >= 30, timeout=120, interval=0.1)
        connections = {pod: _pod_connections(stack, pod) for pod in PODS}
        victim = max(connections, key=lambda pod: connections[pod])
        assert connections[victim] >= 1, connections
        stack.compose("kill", victim)
        at_kill = len(acked)
        # Producing goes on through the other pods.
        wait_until(lambda: len(acked) >= at_kill + 150, timeout=180, interval=0.2)
    finally:
        stop.set()
        for thread in producers:
            thread.join(timeout=60)
    assert errors, "no producer was connected to the killed pod"
    wanted = set(acked)
    assert len(wanted) == len(acked)

    def all_read() -> bool:
        with stack.client() as client:
            read = {v for p in range(3) for v in _read_partition(client, topic, p)}
        return wanted <= read

    wait_until(all_read, timeout=120, interval=1)
    with stack.client() as client:
        assert client.ping() == "pong"  # the balancer took the dead pod out
    stack.compose("start", victim)


def test_redis_fixtures_use_this_engine(stack: Stack) -> None:
    """tests/conftest.py with this engine as DOCKER_HOST: the Redis fixture runs in a
    testcontainers container of the local redis:7 (Ryuk off, nothing pulled), a test that
    uses it passes, and the container is gone afterwards."""
    env = {**stack.engine.env, "PYTHONPATH": str(ROOT)}
    since = stack.engine.docker("system", "info", "--format", "{{.SystemTime}}").stdout.strip()
    pytest_args = ["-q", "-p", "no:cacheprovider", "tests/mapping/partition/test_partitions.py"]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *pytest_args],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    until = stack.engine.docker("system", "info", "--format", "{{.SystemTime}}").stdout.strip()
    label = "label=org.testcontainers"
    started = stack.engine.docker(
        "events", "--since", since, "--until", until, "--filter", label,
        "--filter", "event=start", "--format", "{{.From}}",
    ).stdout.split()  # fmt: skip
    assert started == [REDIS_IMAGE]
    assert stack.engine.docker("ps", "-aq", "--filter", label).stdout.strip() == ""


def test_down_removes_everything(stack: Stack) -> None:
    stack.compose("down", "-v", "--timeout", "10", timeout=300)
    label = f"label=com.docker.compose.project={stack.project}"
    engine = stack.engine
    assert engine.docker("ps", "-aq", "--filter", label).stdout.strip() == ""
    assert engine.docker("volume", "ls", "-q", "--filter", label).stdout.strip() == ""
    assert engine.docker("network", "ls", "-q", "--filter", label).stdout.strip() == ""


def _read_partition(client: Client, topic: str, partition: int) -> list[bytes]:
    values: list[bytes] = []
    offset = 0
    while True:
        reply = client.consume(topic, partition, offset)
        if not reply.records:
            return values
        values.extend(value for _, value in reply.records)
        offset = reply.next_offset


def _metrics(stack: Stack) -> str:
    import urllib.request

    url = f"http://127.0.0.1:{stack.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


def _pod_connections(stack: Stack, pod: str) -> float:
    text = stack.exec(
        pod, "python", "-c",
        "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9100/metrics').read().decode())",
    )  # fmt: skip
    for line in text.splitlines():
        if line.startswith("adapter_connections "):
            return float(line.split()[1])
    raise AssertionError(f"adapter_connections not served by {pod}")
