"""The health probes on the metrics port: /livez (the pod's event loop answers), /readyz
(the pod serves, Redis answers with every script loaded) and where they listen."""

from __future__ import annotations

import asyncio
import threading
import urllib.error
import urllib.request

import pytest
import redis

from adapter.client import Client
from adapter.metrics_http import Probes
from mapping.connection import scripts
from mapping.connection.cluster import LazySyncClient
from mapping.connection.embedded import RedisProcess, free_port
from tests.support.pods import RF1
from tests.support.waiting import wait_until


def probe(port: int, path: str, host: str = "127.0.0.1") -> tuple[int, str]:
    """(HTTP status, body) of GET ``path``."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as failed:
        return failed.code, failed.read().decode()


def test_readyz_follows_redis(start_pod, own_redis: RedisProcess) -> None:  # noqa: ANN001
    port = free_port()
    start_pod(own_redis.url, "--metrics-port", str(port), *RF1)
    assert wait_until(lambda: probe(port, "/readyz") == (200, "ok\n"))
    assert probe(port, "/livez") == (200, "ok\n")

    def unready() -> str | None:
        status, body = probe(port, "/readyz")
        return body if status == 503 else None

    own_redis.stop()
    assert wait_until(unready).startswith("redis unavailable: ")
    assert probe(port, "/livez") == (200, "ok\n")  # the pod itself is fine: no restart

    own_redis.start()  # its script cache is empty after the restart
    assert wait_until(lambda: probe(port, "/readyz") == (200, "ok\n"), timeout=20)
    client = redis.Redis.from_url(own_redis.url)
    try:  # ready: every script is loaded (the check loaded those nothing had used yet)
        shas = [scripts.load(name).sha for name in scripts.names()]
        assert all(client.script_exists(*shas))
    finally:
        client.close()


def test_probes_answer_plain_text(start_pod, redis_url: str) -> None:  # noqa: ANN001
    port = free_port()
    start_pod(redis_url, "--metrics-port", str(port), *RF1)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
    request = urllib.request.Request(f"http://127.0.0.1:{port}/readyz", method="POST", data=b"")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 405
    status, body = probe(port, "/metrics")  # the metrics are still at /metrics
    assert status == 200 and "adapter_connections" in body


def test_metrics_listen_on_the_pods_host_by_default(start_pod, redis_url: str) -> None:  # noqa: ANN001
    """No --metrics-host: the endpoint binds --host (127.0.0.2 here), not every address."""
    port = free_port()
    start_pod(
        redis_url, "--host", "127.0.0.2", "--metrics-port", str(port), *RF1,
        connect=lambda p: Client("127.0.0.2", p, timeout=5),
    )  # fmt: skip
    assert probe(port, "/livez", host="127.0.0.2") == (200, "ok\n")
    with pytest.raises(urllib.error.URLError):  # nothing listens on 127.0.0.1
        urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=5)


def test_a_loop_that_runs_no_callbacks_is_not_live() -> None:
    stalled = asyncio.new_event_loop()  # never run: what a wedged pod looks like from outside
    try:
        probes = Probes(stalled, LazySyncClient("redis://127.0.0.1:1/0", 0.1))
        live, why = probes.live()
        assert not live and "did not answer" in why
    finally:
        stalled.close()
    running = asyncio.new_event_loop()
    thread = threading.Thread(target=running.run_forever, daemon=True)
    thread.start()
    try:
        assert Probes(running, LazySyncClient("redis://127.0.0.1:1/0", 0.1)).live() == (True, "ok")
    finally:
        running.call_soon_threadsafe(running.stop)
        thread.join(5)
        running.close()


def test_not_ready_before_serving_nor_while_draining() -> None:
    """The pod sets ``serving`` once its listeners accept and ``draining`` on SIGTERM; Redis
    is not asked then (its address here answers nothing)."""
    probes = Probes(asyncio.new_event_loop(), LazySyncClient("redis://127.0.0.1:1/0", 0.1))
    try:
        assert probes.ready() == (False, "starting")
        probes.serving = True
        ready, why = probes.ready()
        assert not ready and why.startswith("redis unavailable")
        probes.draining = True
        assert probes.ready() == (False, "draining (SIGTERM)")
    finally:
        probes.loop.close()
