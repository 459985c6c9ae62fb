"""A confluent-kafka group member as a child process (so a test can SIGKILL it: no
LeaveGroup). ``python -m tests.kafka.group_member BOOTSTRAP GROUP TOPIC STATUS_FILE
[PROTOCOL]`` writes its partitions, comma-separated, to STATUS_FILE whenever its
assignment changes; PROTOCOL ``consumer`` makes it a KIP-848 member."""

from __future__ import annotations

import sys
from pathlib import Path

from confluent_kafka import Consumer

from tests.kafka.group_helpers import CONFLUENT


def main(bootstrap: str, group: str, topic: str, status: str, protocol: str = "classic") -> None:
    config = dict(CONFLUENT)
    if protocol == "consumer":  # KIP-848: the session is the pods' setting
        config = {k: v for k, v in config.items() if "session" not in k and "heartbeat" not in k}
        config["group.protocol"] = "consumer"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **config})
    consumer.subscribe([topic])
    written = None
    while True:
        consumer.poll(0.1)
        owned = ",".join(str(tp.partition) for tp in sorted(consumer.assignment()))
        if owned != written:
            Path(status).write_text(owned)
            written = owned


if __name__ == "__main__":
    main(*sys.argv[1:6])
