"""Raw V1 exchanges with a pod: lines over a socket, below the client's checks."""

from __future__ import annotations

import socket

from adapter.client import Client
from adapter.v1.protocol import Response
from mapping.core.keys import Keys

KEYS = Keys()  # the default key prefix, as pods use it unless told another


def raw_connection(port: int, timeout: float = 15.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_lines(sock: socket.socket, count: int) -> list[bytes]:
    """``count`` reply lines (fewer when the pod closes the connection)."""
    data = b""
    while data.count(b"\n") < count:
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        data += chunk
    return data.split(b"\n")[:count] if data.count(b"\n") >= count else data.split(b"\n")[:-1]


def exchange(client: Client, line: bytes) -> Response:
    """Send one raw request line (newline added) and read one reply."""
    client.send_raw(line + b"\n")
    return client.read_response()


def closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def consume_values(client: Client, topic: str, partitions: int) -> set[bytes]:
    """Every value V1 CONSUME serves now, each partition read to its end."""
    values: set[bytes] = set()
    for partition in range(partitions):
        position = 0
        while True:
            reply = client.consume(topic, partition, position)
            if not reply.records:
                break
            values.update(value for _, value in reply.records)
            position = reply.records[-1][0] + 1
    return values
