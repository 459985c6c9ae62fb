"""TLS on the Kafka listener: the pod's --tls-* options apply to it as to V1."""

from __future__ import annotations

import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from tests.support.pods import RF1, Pod
from tests.support.tls import Certs, tls_args, tls_connect


def test_confluent_kafka_over_tls_with_a_client_certificate(
    start_pod,
    redis_url: str,
    certs: Certs,
    topic: str,
) -> None:
    from adapter.client.tls import client_context

    v1_context = client_context(certs.ca, certs.client_cert, certs.client_key)
    # Its own key prefix, so its own broker registry: pods of other tests on this Redis are
    # live brokers of the default deployment, and Metadata would send the client to them.
    pod: Pod = start_pod(
        redis_url, "--key-prefix", f"ktls{uuid.uuid4().hex[:8]}", *RF1,
        *tls_args(certs, verify_clients=True),
        connect=tls_connect(v1_context),
    )  # fmt: skip
    ssl_config = {
        "bootstrap.servers": pod.bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs.ca),
        "ssl.certificate.location": str(certs.client_cert),
        "ssl.key.location": str(certs.client_key),
        "socket.timeout.ms": 5000,
    }
    producer = Producer({**ssl_config, "message.timeout.ms": 10000})
    delivered = []
    producer.produce(topic, key=b"k", value=b"over tls", partition=0,
                     on_delivery=lambda err, msg: delivered.append(err or msg))  # fmt: skip
    assert producer.flush(15) == 0
    assert delivered[0].offset() >= 0
    consumer = Consumer({**ssl_config, "group.id": "tls", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    try:
        message = None
        for _ in range(20):
            message = consumer.poll(0.5)
            if message is not None:
                break
        assert message is not None and message.error() is None
        assert message.value() == b"over tls"
    finally:
        consumer.close()
