"""The pod's Kafka listener: its socket, its context and its broker registration; the
connections share the pod's slots, users, append budget, TLS context and SIGTERM drain
(adapter/sockets.py) with V1's."""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from functools import partial
from typing import Any

from anyio.abc import SocketAttribute

from adapter import tls
from adapter.auth import Authenticator
from adapter.backpressure import AppendBudget
from adapter.kafka.apis import HANDLERS
from adapter.kafka.connection import KafkaConnection
from adapter.kafka.context import KafkaContext
from adapter.kafka.fetch_ahead import ReadAhead
from adapter.kafka.fetch_sessions import FetchSessions
from adapter.limits import ConnectionSlots
from adapter.pod import Pod
from adapter.settings import Settings
from adapter.sockets import Draining, SocketServer, listen, serve_socket
from mapping.core.errors import ConfigurationError
from mapping.topic.brokers import BrokerRegistry

log = logging.getLogger(__name__)

# Requests of one Kafka connection open at once (clients pipeline at most a few: librdkafka
# max.in.flight defaults to 5 per broker connection).
MAX_IN_FLIGHT = 100


def advertised(settings: Settings, bound_port: int) -> tuple[str, int]:
    """HOST:PORT told to clients: --kafka-advertised-listener, else the listen address (a
    wildcard listen address advertises the host name)."""
    if settings.kafka_advertised_listener:
        host, _, port = settings.kafka_advertised_listener.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigurationError(
                f"--kafka-advertised-listener must be HOST:PORT, got "
                f"{settings.kafka_advertised_listener!r}"
            )
        return host.strip("[]"), int(port)
    host = settings.kafka_host or settings.host
    if host in ("", "0.0.0.0", "::"):
        host = socket.gethostname()
    return host, bound_port


@dataclass
class KafkaListener:
    listener: Any
    context: KafkaContext
    registry: BrokerRegistry
    serve_socket: SocketServer

    @classmethod
    async def open(
        cls,
        pod: Pod,
        slots: ConnectionSlots,
        draining: Draining,
        metrics: Any = None,
        authenticator: Authenticator | None = None,
        budget: AppendBudget | None = None,
    ) -> KafkaListener:
        settings = pod.settings
        listener = await listen(
            "Kafka",
            "--kafka-port",
            settings.kafka_host or settings.host,
            settings.kafka_port,
            reuse_port=settings.workers > 1,
        )
        bound = listener.listeners[0].extra(SocketAttribute.local_port)
        host, port = advertised(settings, bound)
        registry = BrokerRegistry(
            pod.batcher, pod.keys, pod_id=pod.pod_id, address=f"{host}:{port}"
        )
        context = KafkaContext(
            pod,
            registry,
            advertised_host=host,
            advertised_port=port,
            fetch_sessions=FetchSessions(settings.kafka_fetch_session_slots),
            read_ahead=ReadAhead(settings.kafka_fetch_read_ahead_bytes),
        )
        if metrics is not None:
            metrics.watch_fetch_sessions(context.fetch_sessions)
            metrics.watch_read_ahead(context.read_ahead)
        new_connection = partial(
            KafkaConnection,
            context,
            HANDLERS,
            max_request_bytes=settings.kafka_max_request_bytes,
            max_in_flight=min(settings.max_in_flight or MAX_IN_FLIGHT, MAX_IN_FLIGHT),
            idle_timeout_s=settings.idle_timeout_s,
            keepalive_s=settings.tcp_keepalive_s,
            slots=slots,
            on_answer=metrics.on_kafka_answer if metrics is not None else None,
            authenticator=authenticator,  # None: no SASL required
            auth_timeout_s=settings.auth_timeout_s,
            max_reauth_ms=settings.max_reauth_ms,
            on_sasl=metrics.on_kafka_sasl if metrics is not None else None,
            budget=budget,  # the pod's, shared with V1
        )
        serve_one = partial(serve_socket, new_connection, draining, tls.listener_context(settings))
        bound_host = settings.kafka_host or settings.host
        log.info(
            "serving Kafka on %s:%d, advertised as %s:%d%s", bound_host, bound, host, port,
            " (SASL required)" if authenticator is not None else "",
        )  # fmt: skip
        return cls(listener, context, registry, serve_one)
