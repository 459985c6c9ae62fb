"""A Redis deployment watched by Sentinel, on loopback: a primary, a replica and three
sentinels, each a child process with its own directory and configuration. Detection and
failover are tuned to take a few seconds (production keeps Redis' defaults)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import redis

from mapping.connection.embedded import RedisProcess, _die_with_parent, free_port

MASTER = "adapter-primary"
DATA_PASSWORD = "data-Pw1"
SENTINEL_PASSWORD = "sentinel-Pw2"
# A node that does not answer the sentinels' PING for this long is down. Not shorter: on a
# loaded 2-core machine a sentinel took more than 500 ms to reach a primary it had just
# promoted, called it down and promoted the old primary, just restarted empty, in its place.
DOWN_AFTER_MS = 2000
FAILOVER_TIMEOUT_MS = 3000


class SentinelProcess:
    """``redis-server <conf> --sentinel``: Sentinel rewrites its configuration file, so each
    has its own."""

    def __init__(self, folder: Path, primary_port: int) -> None:
        self.folder = folder
        self.port = free_port()
        self.primary_port = primary_port
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 10.0) -> SentinelProcess:
        self.folder.mkdir(parents=True, exist_ok=True)
        conf = self.folder / "sentinel.conf"
        conf.write_text(
            f"port {self.port}\n"
            "bind 127.0.0.1\n"
            f"dir {self.folder.resolve()}\n"
            "logfile sentinel.log\n"
            f"requirepass {SENTINEL_PASSWORD}\n"  # clients and the other sentinels log in
            f"sentinel monitor {MASTER} 127.0.0.1 {self.primary_port} 2\n"
            f"sentinel auth-pass {MASTER} {DATA_PASSWORD}\n"
            f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {MASTER} {FAILOVER_TIMEOUT_MS}\n"
        )
        binary = shutil.which("redis-server")
        assert binary is not None, "redis-server is not installed"
        preexec = _die_with_parent if sys.platform == "linux" else None
        self.process = subprocess.Popen(
            [binary, str(conf), "--sentinel"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=preexec,
        )
        client = self.client()
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                try:
                    if client.ping():
                        return self
                except redis.ConnectionError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"sentinel on port {self.port} did not start")
                time.sleep(0.05)
        finally:
            client.close()

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, password=SENTINEL_PASSWORD, socket_timeout=2)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.process = None


@dataclass
class SentinelDeployment:
    primary: RedisProcess
    replica: RedisProcess
    sentinels: list[SentinelProcess] = field(default_factory=list)

    @classmethod
    def start(cls, folder: Path) -> SentinelDeployment:
        # Redis 7 waits 5 s for more replicas before a diskless full sync: not here
        fast_sync = ["--repl-diskless-sync-delay", "0"]
        primary = RedisProcess(folder / "primary", appendonly=False, extra_args=fast_sync)
        primary.start()
        replica = RedisProcess(
            folder / "replica",
            appendonly=False,
            extra_args=[*fast_sync, "--replicaof", "127.0.0.1", str(primary.port)],
        ).start()
        deployment = cls(primary, replica)
        try:
            # the replica's password first, so its link logs in once the primary needs one
            for server in (replica, primary):
                _protect(server)
            deployment.wait_in_sync()
            for index in range(3):
                sentinel = SentinelProcess(folder / f"sentinel{index}", primary.port)
                deployment.sentinels.append(sentinel.start())
            # every sentinel knows the replica and the two others before anything fails
            deployment.wait(lambda: all(deployment._sees_everyone(s) for s in deployment.sentinels))
        except BaseException:
            deployment.stop()
            raise
        return deployment

    @property
    def addresses(self) -> str:
        """``--redis-sentinel``'s value."""
        return ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)

    @property
    def options(self) -> list[str]:
        """The options every command takes to reach the deployment (passwords included)."""
        return [
            "--redis-sentinel", self.addresses, "--redis-sentinel-master", MASTER,
            "--redis-password", DATA_PASSWORD, "--redis-sentinel-password", SENTINEL_PASSWORD,
        ]  # fmt: skip

    def data_client(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, password=DATA_PASSWORD, socket_timeout=5)

    def master_port(self) -> int | None:
        """The primary's port once every sentinel names it as redis-py takes it (a master,
        not subjectively or objectively down); None while they disagree or none answers:
        right after a failover the sentinels learn of it one by one, and a client asks
        whichever answers first."""
        ports = set()
        for sentinel in self.sentinels:
            client = sentinel.client()
            try:
                state = client.sentinel_master(MASTER)
            except (redis.ConnectionError, redis.ResponseError):
                return None
            finally:
                client.close()
            if not state.get("is_master") or state.get("is_sdown") or state.get("is_odown"):
                return None
            ports.add(int(state["port"]))
        return ports.pop() if len(ports) == 1 else None

    def revive(self, server: RedisProcess, timeout_s: float = 30.0) -> None:
        """Start a killed node again as a replica of the current primary (empty: no
        persistence here) and wait until it caught up. Started as a master, the sentinels
        would convert it too, ~10 s later."""
        master = self.master_port()
        server.extra_args = [*server.extra_args, "--replicaof", "127.0.0.1", str(master)]
        server.start()
        _protect(server)
        client = self.data_client(server.port)

        def following() -> bool:
            info = client.info("replication")
            return info["role"] == "slave" and info.get("master_link_status") == "up"

        try:
            self.wait(following, timeout_s)
        finally:
            client.close()
        self.wait_in_sync()
        # and every sentinel counts it as a healthy replica again, so it can be promoted
        self.wait(lambda: all(self._healthy_replica(s, server.port) for s in self.sentinels),
                  timeout_s)  # fmt: skip

    @staticmethod
    def _healthy_replica(sentinel: SentinelProcess, port: int) -> bool:
        client = sentinel.client()
        try:
            replicas = client.sentinel_slaves(MASTER)
        except redis.ConnectionError:
            return False
        finally:
            client.close()
        return any(
            int(r["port"]) == port and r["flags"] == "slave" and r["master-link-status"] == "ok"
            for r in replicas
        )

    def wait_in_sync(self, timeout_s: float = 10.0) -> None:
        """The replica has everything the primary (as the sentinels name it) wrote so far
        (Redis WAIT)."""
        port = self.master_port() if self.sentinels else self.primary.port
        assert port is not None
        client = self.data_client(port)
        try:
            self.wait(lambda: client.execute_command("WAIT", 1, 1000) >= 1, timeout_s)
        finally:
            client.close()

    def _sees_everyone(self, sentinel: SentinelProcess) -> bool:
        client = sentinel.client()
        try:
            master = client.sentinel_master(MASTER)
            return int(master["num-slaves"]) >= 1 and int(master["num-other-sentinels"]) >= 2
        except redis.ConnectionError:
            return False
        finally:
            client.close()

    @staticmethod
    def wait(condition: Callable[[], object], timeout_s: float = 15.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            if condition():
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met within {timeout_s}s")
            time.sleep(0.05)

    def stop(self) -> None:
        for sentinel in self.sentinels:
            sentinel.stop()
        self.replica.kill()
        self.primary.kill()


def _protect(server: RedisProcess) -> None:
    """Passwords after the start: RedisProcess checks readiness without one."""
    admin = redis.Redis(port=server.port)
    admin.config_set("masterauth", DATA_PASSWORD)
    admin.config_set("requirepass", DATA_PASSWORD)
    admin.close()
