"""The metrics port's HTTP server (``--metrics-port``): ``/metrics`` (prometheus-client's WSGI
app), and ``/livez`` and ``/readyz`` for orchestrators' probes, answered over plain HTTP so a
probe needs no Python process of its own. A thread per request, none of it on the event loop.

- ``/livez``: 200 while the pod's event loop answers (a callback it runs within
  ``LOOP_TIMEOUT_S``), else 503: a wedged pod is restarted.
- ``/readyz``: 200 while the pod serves (its listeners accept, it is not draining after
  SIGTERM) and Redis answers with every script loaded (missing ones, after a Redis restart
  without its script cache, are loaded by the check), else 503: no traffic to a pod that
  cannot answer it. One check at a time, its answer kept ``READY_CACHE_S``, each Redis call
  at most ``READY_TIMEOUT_S``.

Bodies are one short line of text.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client.exposition import ThreadingWSGIServer

from mapping.connection import scripts
from mapping.connection.cluster import LazySyncClient

log = logging.getLogger(__name__)

LOOP_TIMEOUT_S = 0.5  # below the 1 s a Kubernetes probe waits by default
READY_TIMEOUT_S = 0.5
READY_CACHE_S = 1.0

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class Probes:
    def __init__(self, loop: asyncio.AbstractEventLoop, redis: LazySyncClient) -> None:
        self.loop = loop
        self.redis = redis
        self.serving = False  # set once the listeners accept, cleared on SIGTERM
        self.draining = False
        self._lock = threading.Lock()
        self._ready: tuple[float, bool, str] | None = None  # (checked at, ready, why)

    def live(self) -> tuple[bool, str]:
        answered = threading.Event()
        try:
            self.loop.call_soon_threadsafe(answered.set)
        except RuntimeError:  # the loop is closed: the pod is going away
            return False, "event loop closed"
        if not answered.wait(LOOP_TIMEOUT_S):
            return False, f"event loop did not answer within {LOOP_TIMEOUT_S} s"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        if self.draining:
            return False, "draining (SIGTERM)"
        if not self.serving:
            return False, "starting"
        with self._lock:
            now = time.monotonic()
            if self._ready is None or now - self._ready[0] >= READY_CACHE_S:
                self._ready = (now, *self._check_redis())
            return self._ready[1], self._ready[2]

    def _check_redis(self) -> tuple[bool, str]:
        try:
            loaded = scripts.ensure_loaded_sync(self.redis.get())
        except Exception as exc:
            self.redis.reset()
            return False, f"redis unavailable: {exc}"
        if loaded:
            log.info("readiness check: loaded %d scripts Redis lacked", loaded)
        return True, "ok"


def router(metrics: WsgiApp, probes: Probes | None) -> WsgiApp:
    """``/livez`` and ``/readyz`` answered by ``probes``; every other path by ``metrics``
    (prometheus-client's app answers any path, ``/metrics`` included)."""
    checks = {"/livez": probes.live, "/readyz": probes.ready} if probes is not None else {}

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        check = checks.get(environ.get("PATH_INFO", ""))
        if check is None:
            return metrics(environ, start_response)
        if environ["REQUEST_METHOD"] not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD")])
            return [b"use GET or HEAD\n"]
        ok, why = check()
        body = f"{why}\n".encode()
        status = "200 OK" if ok else "503 Service Unavailable"
        headers = [("Content-Type", "text/plain; charset=utf-8"), ("Cache-Control", "no-store")]
        start_response(status, [*headers, ("Content-Length", str(len(body)))])
        return [body] if environ["REQUEST_METHOD"] == "GET" else []

    return app


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        """No line per request (Prometheus and probes ask every few seconds)."""


def serve(app: WsgiApp, host: str, port: int) -> Callable[[], None]:
    """Serve ``app`` on ``host``:``port`` (IPv4 or IPv6) from a daemon thread; returns the
    function that stops it."""
    family, _, _, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]

    class Server(ThreadingWSGIServer):
        address_family = family

    server = make_server(address[0], port, app, Server, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return stop
