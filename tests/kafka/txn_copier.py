"""A confluent-kafka consume-transform-produce loop as a child process, so a test can
SIGKILL it mid-transaction: ``python -m tests.kafka.txn_copier BOOTSTRAP GROUP SOURCE SINK
TRANSACTIONAL_ID [PER_TXN]``. It reads SOURCE with read_committed in group GROUP and copies
each record to the same partition of SINK (value unchanged), PER_TXN records (default 7)
per transaction, the consumed offsets sent with send_offsets_to_transaction; it runs until
killed. A restart with the same transactional id fences the killed one's transaction (its
InitProducerId aborts it) and resumes from the group's committed offsets."""

from __future__ import annotations

import sys

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition


def main(
    bootstrap: str, group: str, source: str, sink: str, txn_id: str, per_txn: str = "7"
) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "socket.timeout.ms": 5000,
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": 10_000,
            "socket.timeout.ms": 5000,
        }
    )
    producer.init_transactions(30)
    consumer.subscribe([source])
    batch_size = int(per_txn)
    while True:
        messages = [m for m in consumer.consume(batch_size, 0.5) if m.error() is None]
        if not messages:
            continue
        producer.begin_transaction()
        try:
            for message in messages:
                producer.produce(sink, value=message.value(), partition=message.partition())
            offsets = {}
            for message in messages:
                offsets[message.partition()] = message.offset() + 1
            positions = [TopicPartition(source, p, o) for p, o in sorted(offsets.items())]
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
            _commit(producer)
        except KafkaException as exc:
            if exc.args[0].txn_requires_abort():
                producer.abort_transaction(30)
                # start again from the group's committed offsets (what the abort left)
                committed = consumer.committed(consumer.assignment(), 30)
                for tp in committed:
                    start = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                    consumer.seek(TopicPartition(source, tp.partition, start))
            else:
                raise


def _commit(producer: Producer) -> None:
    """commit_transaction, again while the error is retriable (the client's rule)."""
    while True:
        try:
            producer.commit_transaction(30)
            return
        except KafkaException as exc:
            if not exc.args[0].retriable():
                raise


if __name__ == "__main__":
    main(*sys.argv[1:7])
