"""A group consumer as a process of its own, for the multi-pod tests (which SIGKILL it).

    python -m tests.v1.consumer_process <port> <group> <topic> <consumer_id> <log> <hb_s>

Appends one JSON line per JOIN (``{"generation": g, "assigned": [...]}``) and per record
handed to the callback (``{"p": partition, "o": offset, "v": value}``) to ``<log>``; each
line is written before the record is committed, so the log is what was handed out.
"""

from __future__ import annotations

import json
import sys

from adapter.client import GroupAssignment
from adapter.client.group_consumer import GroupConsumer, Record


def main() -> None:
    port, group, topic, consumer_id, log_path, heartbeat_s = sys.argv[1:7]
    with open(log_path, "a", buffering=1) as log:  # line-buffered: one write per line

        def on_assign(reply: GroupAssignment) -> None:
            log.write(json.dumps({"generation": reply.generation, "assigned": reply.assigned}))
            log.write("\n")

        def handle(record: Record) -> None:
            log.write(json.dumps({"p": record.partition, "o": record.offset}))
            log.write("\n")

        consumer = GroupConsumer(
            group,
            topic,
            consumer_id,
            port=int(port),
            heartbeat_interval_s=float(heartbeat_s),
            idle_wait_s=0.02,
            on_assign=on_assign,
        )
        with consumer:
            consumer.run(handle)


if __name__ == "__main__":
    main()
