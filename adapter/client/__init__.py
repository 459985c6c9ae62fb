"""The Python V1 client, the batching Producer and the GroupConsumer.

Imports nothing of the pod (no anyio, uvloop, prometheus or click), so an application
needs only this package and the protocol core (``adapter.v1``).
"""

from adapter.client.client import (
    AsyncClient,
    Client,
    ConsumeReply,
    GroupAssignment,
    ProduceReply,
    RequestFailed,
    consume_reply,
    produce_args,
    produce_reply,
)
from adapter.client.group_consumer import GroupConsumer, Record
from adapter.client.producer import Producer, ProducerClosed

__all__ = [
    "AsyncClient",
    "Client",
    "ConsumeReply",
    "GroupAssignment",
    "GroupConsumer",
    "ProduceReply",
    "Producer",
    "ProducerClosed",
    "Record",
    "RequestFailed",
    "consume_reply",
    "produce_args",
    "produce_reply",
]
