"""One configuration of ``python -m bench.scale`` running: Redis (one ``redis-server``, or a
Redis Cluster of M primaries on loopback), P pods on it, and what the load processes need to
know about both: where each key lives, the pods' addresses, every process's id."""

from __future__ import annotations

import contextlib
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import redis
from redis.crc import key_slot

from mapping.connection.embedded import RedisProcess
from mapping.core.keys import DEFAULT_PREFIX, Keys
from tests.support.cluster import LoopbackCluster
from tests.support.pods import RF1, Pod

KEYS = Keys(DEFAULT_PREFIX)
SLOTS = 16384


@dataclass(frozen=True)
class Shape:
    """A configuration: Redis primaries (1: a plain redis-server), pods, load processes."""

    primaries: int
    pods: int
    loaders: int

    @property
    def label(self) -> str:
        return f"{self.primaries},{self.pods},{self.loaders}"

    @classmethod
    def parse(cls, text: str) -> list[Shape]:
        """``"1,1,4;3,3,6"`` -> two shapes (each count at least 1)."""
        shapes = []
        for part in text.split(";"):
            if not part.strip():
                continue
            numbers = [int(n) for n in part.split(",")]
            if len(numbers) != 3 or min(numbers) < 1:
                raise ValueError(f"a configuration is primaries,pods,loaders (each >= 1): {part!r}")
            shapes.append(cls(*numbers))
        if not shapes:
            raise ValueError("no configuration given")
        return shapes


class Deployment:
    """Redis and the pods of one shape, started together and stopped together."""

    def __init__(self, base: Path, primaries: int, pods: int, partitions: int,
                 adapter_args: list[str]) -> None:  # fmt: skip
        self.partitions = partitions
        self.cluster: LoopbackCluster | None = None
        self.single: RedisProcess | None = None
        if primaries == 1:
            self.single = RedisProcess(base / "redis", appendonly=False)
        else:
            self.cluster = LoopbackCluster(base / "cluster", primaries, appendonly=False)
        self.pods: list[Pod] = []
        self._pod_count = pods
        self._base = base
        self._adapter_args = adapter_args
        self.node_ports: list[int] = []  # the primaries, in slot order
        self._slot_node: list[int] = []  # slot -> index into node_ports

    @property
    def redis_url(self) -> str:
        return self.cluster.url if self.cluster else self._single().url

    def _single(self) -> RedisProcess:
        assert self.single is not None
        return self.single

    def start(self) -> Deployment:
        try:
            if self.cluster is not None:
                self.cluster.start()
                client = redis.Redis(port=self.cluster.nodes[0].port, socket_timeout=10)
                with contextlib.closing(client):
                    slots = client.execute_command("CLUSTER", "SLOTS")
                ranges = sorted((int(s[0]), int(s[1]), int(s[2][1])) for s in slots)
            else:
                self._single().start()
                ranges = [(0, SLOTS - 1, self._single().port)]
            self.node_ports = list(dict.fromkeys(port for _, _, port in ranges))
            self._slot_node = [0] * SLOTS
            for first, last, port in ranges:
                index = self.node_ports.index(port)
                self._slot_node[first : last + 1] = [index] * (last - first + 1)
            args = ["--default-partitions", str(self.partitions), *RF1, "--no-replicator",
                    "--log-level", "WARNING", *self._adapter_args]  # fmt: skip
            log_dir = self._base / "pods"
            pods = [Pod(self.redis_url, *args, log_dir=log_dir) for _ in range(self._pod_count)]
            self.pods = pods
            with ThreadPoolExecutor(len(pods)) as pool:  # each takes a second or two to import
                list(pool.map(lambda pod: pod.start(timeout=60), pods))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for pod in self.pods:
            pod.stop(timeout=15)
        if self.cluster is not None:
            self.cluster.stop()
        if self.single is not None:
            self.single.stop()

    # --- where things are ------------------------------------------------------------------

    def node_of(self, key: str) -> int:
        """The index into ``node_ports`` of the primary serving ``key``."""
        return self._slot_node[key_slot(key.encode())]

    def spread_topic(self, stem: str, tries: int = 2000) -> str:
        """A fresh topic name whose partitions fall on the primaries as evenly as the best of
        ``tries`` names (partition p's keys hash on ``{<topic>:<p>}``). CRC16 is linear, so a
        name only XORs every partition's slot with one constant: with 2 or 4 primaries (slot
        ranges on bit boundaries) no name changes which partitions share a primary, and 6
        partitions on 2 primaries are always 4 and 2."""
        nodes = len(self.node_ports)
        run = uuid.uuid4().hex[:6]
        best, spread = "", self.partitions + 1
        for i in range(tries):
            name = f"{stem}-{run}-{i}"
            counts = [0] * nodes
            for p in range(self.partitions):
                counts[self.node_of(KEYS.partition(name, p).log)] += 1
            if max(counts) - min(counts) < spread:
                best, spread = name, max(counts) - min(counts)
            if spread <= (1 if self.partitions % nodes else 0):
                break
        return best

    def stored(self, topic: str) -> int:
        """Records in the topic's logs (XLEN of every partition)."""
        total = 0
        for p in range(self.partitions):
            log = KEYS.partition(topic, p).log
            client = redis.Redis(port=self.node_ports[self.node_of(log)], socket_timeout=30)
            with contextlib.closing(client):
                total += int(client.xlen(log))
        return total

    @property
    def bootstrap(self) -> str:
        """Kafka clients' ``bootstrap.servers``: every pod."""
        return ",".join(pod.bootstrap for pod in self.pods)

    @property
    def v1_ports(self) -> tuple[int, ...]:
        return tuple(pod.port for pod in self.pods)

    def pod_pids(self) -> list[int]:
        return [pid for pod in self.pods for pid in pod.pids()]

    def redis_pids(self) -> list[int]:
        nodes = self.cluster.nodes if self.cluster else [self._single()]
        return [node.process.pid for node in nodes if node.process is not None]

    def create_kafka_topic(self, name: str, partitions: int | None = None) -> None:
        """``name`` with ``partitions`` partitions (default: the deployment's) and one
        replica, by Kafka's admin client (so no producer races another to auto-create it)."""
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 4})
        topic = NewTopic(name, partitions or self.partitions, 1)
        admin.create_topics([topic], request_timeout=60)[name].result(timeout=90)
