"""The Python V1 client, the batching Producer and the GroupConsumer.

Imports nothing of the pod (no anyio, uvloop, prometheus or click), so an application
needs only this package, the protocol core (``adapter.v1``) and the offset codec
(``mapping.core.codec``, for records' timestamps).
"""

from adapter.client.client import AsyncClient, Client, Endpoint
from adapter.client.group_consumer import GroupConsumer
from adapter.client.producer import Producer, ProducerClosed
from adapter.client.wire import (
    AcquiredRecord,
    ConsumeReply,
    GroupAssignment,
    ProduceReply,
    Record,
    RequestFailed,
    ShareAcquireReply,
    consume_reply,
    produce_args,
    produce_reply,
)

__all__ = [
    "AcquiredRecord",
    "AsyncClient",
    "Client",
    "ConsumeReply",
    "Endpoint",
    "GroupAssignment",
    "GroupConsumer",
    "ProduceReply",
    "Producer",
    "ProducerClosed",
    "Record",
    "RequestFailed",
    "ShareAcquireReply",
    "consume_reply",
    "produce_args",
    "produce_reply",
]
