"""A real Redis Cluster on loopback (child processes), for the ``cluster_url`` and
``failover_cluster`` fixtures."""

from __future__ import annotations

import subprocess
from pathlib import Path

import redis

from mapping.connection.embedded import RedisProcess
from tests.support.waiting import wait_until


def _node_info(port: int, *section: str) -> dict[str, str]:
    """``CLUSTER INFO`` (no section) or ``INFO <section>`` of one node, as a dict."""
    client = redis.Redis(port=port, socket_timeout=2, socket_connect_timeout=2)
    try:
        if section:
            return {k: str(v) for k, v in client.info(*section).items()}
        reply = client.execute_command("CLUSTER", "INFO")
    finally:
        client.close()
    text = reply.decode() if isinstance(reply, bytes) else str(reply)
    return dict(line.split(":", 1) for line in text.split() if ":" in line)


class LoopbackCluster:
    """A Redis Cluster of child processes on loopback: ``primaries`` primaries with
    ``replicas`` replicas each, slots spread by ``redis-cli --cluster create`` (without
    replicas by hand: in a third of the time, and for the 1 or 2 primaries it refuses), AOF
    on like a real deployment unless ``appendonly`` is False (the benchmarks). A test may
    SIGKILL a node (``kill``) and start it again (``restart``: it rejoins, as a replica of
    the node that took over)."""

    def __init__(
        self,
        base: Path,
        primaries: int = 3,
        replicas: int = 0,
        node_timeout_ms: int = 5000,
        appendonly: bool = True,
    ) -> None:
        self.replicas = replicas
        self.nodes = [
            RedisProcess(
                base / f"node{i}",
                appendonly=appendonly,
                cluster_bus=True,
                extra_args=[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    str(node_timeout_ms),
                ],
            )  # fmt: skip
            for i in range(primaries * (1 + replicas))
        ]

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    def start(self) -> LoopbackCluster:
        for node in self.nodes:
            node.start()
        if not self.replicas:
            self._join_by_hand()
        else:
            subprocess.run(
                ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes),
                 "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                check=True, capture_output=True, timeout=60,
            )  # fmt: skip
        self.wait_ok(timeout=60)
        return self

    def _join_by_hand(self) -> None:
        """What ``redis-cli --cluster create`` does for primaries alone (it also refuses
        fewer than 3, and sleeps while they meet): each node takes an even run of the slots
        and a config epoch of its own, and meets the first."""
        if self.replicas:
            raise ValueError("a cluster with replicas needs 3 primaries at least")
        count = len(self.nodes)
        for i, node in enumerate(self.nodes):
            client = redis.Redis(port=node.port, socket_timeout=5)
            try:
                client.execute_command("CLUSTER", "SET-CONFIG-EPOCH", i + 1)
                first, last = 16384 * i // count, 16384 * (i + 1) // count - 1
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
                if i:
                    client.execute_command(
                        "CLUSTER", "MEET", "127.0.0.1", self.nodes[0].port, self.nodes[0].bus_port
                    )
            finally:
                client.close()

    def _ok(self) -> bool:
        """Every running node sees the whole cluster healthy, and every replica is in sync."""
        for node in self.running():
            info = _node_info(node.port)
            if info.get("cluster_state") != "ok":
                return False
            if info.get("cluster_known_nodes") != str(len(self.nodes)):
                return False
            replication = _node_info(node.port, "replication")
            if replication.get("role") == "slave" and replication.get("master_link_status") != "up":
                return False
        return True

    def wait_ok(self, timeout: float = 30.0) -> None:
        wait_until(self._ok, timeout=timeout, interval=0.1)

    def running(self) -> list[RedisProcess]:
        return [node for node in self.nodes if node.process is not None]

    def primary_of(self, key: str) -> RedisProcess:
        """The running node that serves ``key``'s slot now."""
        client = redis.Redis(port=self.running()[0].port, socket_timeout=2)
        try:
            slot = int(client.execute_command("CLUSTER", "KEYSLOT", key))
            for start, end, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
                if start <= slot <= end:
                    port = int(primary[1])
                    return next(n for n in self.nodes if n.port == port)
        finally:
            client.close()
        raise AssertionError(f"no node serves slot {slot}")

    def replica_of(self, primary: RedisProcess) -> RedisProcess:
        """A running replica of ``primary``."""
        for node in self.running():
            info = _node_info(node.port, "replication")
            if info.get("role") == "slave" and info.get("master_port") == str(primary.port):
                return node
        raise AssertionError(f"no replica of the node on port {primary.port}")

    def failover(self, replica: RedisProcess) -> None:
        """A manual failover (``CLUSTER FAILOVER``): ``replica`` takes over from its primary
        once it has everything, as a failover that loses nothing."""
        client = redis.Redis(port=replica.port, socket_timeout=5)
        try:
            client.execute_command("CLUSTER", "FAILOVER")
        finally:
            client.close()
        self.wait_promoted(replica)

    def wait_promoted(self, replica: RedisProcess, timeout: float = 30.0) -> None:
        """Until ``replica`` is a primary and the cluster is healthy again."""
        wait_until(
            lambda: _node_info(replica.port, "replication").get("role") == "master",
            timeout=timeout,
            interval=0.05,
        )
        self.wait_ok(timeout=timeout)

    def kill(self, node: RedisProcess) -> None:
        node.kill()

    def restart(self, node: RedisProcess) -> None:
        node.start()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
