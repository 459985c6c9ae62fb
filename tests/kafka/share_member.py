"""A confluent-kafka share consumer as a child process (so a test can SIGKILL it while it
holds records). ``python -m tests.kafka.share_member BOOTSTRAP GROUP TOPIC STATUS_FILE``
polls until it gets records, writes them to STATUS_FILE (``partition offset delivery_count``
a line), then never polls again: in implicit acknowledgement mode the records of a poll are
accepted by the next poll, so it holds them until it dies."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from confluent_kafka import ShareConsumer

# few records a fetch: the other members find records the killed one never took
MAX_POLL_RECORDS = 3


def main(bootstrap: str, group: str, topic: str, status: str) -> None:
    consumer = ShareConsumer({
        "bootstrap.servers": bootstrap, "group.id": group, "socket.timeout.ms": 5000,
        "max.poll.records": MAX_POLL_RECORDS,
    })  # fmt: skip
    consumer.subscribe([topic])
    while not (got := [m for m in consumer.poll(0.5) if m.error() is None]):
        pass
    lines = "".join(f"{m.partition()} {m.offset()} {m.delivery_count()}\n" for m in got)
    written = Path(f"{status}.tmp")
    written.write_text(lines)
    written.replace(status)  # whole, at once: the test reads it as soon as it is there
    while True:  # holds the records: no poll, no commit, no close
        time.sleep(1)


if __name__ == "__main__":
    main(*sys.argv[1:5])
