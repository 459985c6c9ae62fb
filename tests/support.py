"""Test helpers: adapter pods as real child processes, and waiting for conditions."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from adapter.client import Client
from mapping.embedded import free_port

ROOT = Path(__file__).resolve().parent.parent


def wait_until(condition: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05) -> Any:
    """Poll ``condition`` until it returns something truthy (tests only, bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


async def wait_until_async(
    condition: Callable[[], Any], timeout: float = 10.0, interval: float = 0.01
) -> Any:
    """`wait_until` for a test running on an event loop: the loop goes on while it polls."""
    import asyncio

    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


class Pod:
    """``python -m adapter serve`` as a child process."""

    def __init__(
        self, redis_url: str, *args: str, port: int | None = None, kafka_port: int | None = None
    ) -> None:
        self.redis_url = redis_url
        self.args = list(args)
        self.port = port or free_port()
        self.kafka_port = kafka_port or free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None

    def start(self, timeout: float = 20.0) -> Pod:
        command = [
            sys.executable, "-m", "adapter", "serve",
            "--redis-url", self.redis_url,
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--kafka-port", str(self.kafka_port),
            *self.args,
        ]  # fmt: skip
        log_dir = Path(os.environ.get("ADAPTER_TEST_LOGS", "/tmp/adapter-test-logs"))
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"pod-{self.port}.log"
        self.process = subprocess.Popen(
            command, cwd=ROOT, stdout=self.log_path.open("ab"), stderr=subprocess.STDOUT
        )
        wait_until(self._answers, timeout=timeout)
        return self

    def _answers(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"pod exited with {self.process.returncode}: {self.log()}")
        try:
            with Client("127.0.0.1", self.port, timeout=2) as client:
                return client.ping() == "pong"
        except OSError:
            return False

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path and self.log_path.exists() else ""

    @property
    def bootstrap(self) -> str:
        """Kafka clients' ``bootstrap.servers`` for this pod."""
        return f"127.0.0.1:{self.kafka_port}"

    def client(self, timeout: float = 30.0) -> Client:
        return Client("127.0.0.1", self.port, timeout=timeout)

    def signal(self, sig: int) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def kafka_read_for(bootstrap: str, topic: str, partitions: int, seconds: float) -> set[bytes]:
    """The values a Kafka consumer reads from the start of ``partitions`` within ``seconds``
    (a reader running beside a fault: what it saw must still be there afterwards)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{os.urandom(3).hex()}",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    seen: set[bytes] = set()
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                seen.add(message.value())
    finally:
        consumer.close()
    return seen
