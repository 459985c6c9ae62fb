"""A Faust application (faust-streaming), run as a child process by tests/apps/test_faust.py:
an agent keeps a per-key running total in a Table (its changelog topic is Faust's
``<app id>-<table>-changelog``) and sends each new state to an output topic.

Usage: python -m tests.apps.faust_app BOOTSTRAP APP_ID INPUT OUTPUT DATA_DIR PARTITIONS

Input records: key = a word, value = JSON ``{"seq": n, "amount": a}`` where ``seq`` counts
that key's records from 0 in production order. The table holds per key ``{"seq": last seq
applied, "count": records applied, "total": sum of amounts}``.

Why the result is exact under at-least-once: after a crash Faust re-reads the records after
the last committed offset, and the table (rebuilt from its changelog) may or may not already
hold their effect. A key's records are in one partition, in order, so a record whose
``seq`` is not above the table's ``seq`` has been applied already and is skipped: every
record is applied exactly once.

Each record processed prints ``processed <key> <seq> <applied|skipped>`` on stdout, so a
test sees which records a run read.
"""

from __future__ import annotations

import sys
from typing import Any

import faust


def build(
    bootstrap: str, app_id: str, input_name: str, output_name: str, data_dir: str, partitions: int
) -> faust.App:
    app = faust.App(
        app_id,
        broker=",".join(f"kafka://{address}" for address in bootstrap.split(",")),
        datadir=data_dir,
        store="rocksdb://",  # (rocksdict) the table in RocksDB under data_dir, as users run it
        topic_partitions=partitions,  # the table's changelog is co-partitioned with the input
        topic_replication_factor=1,
        broker_commit_interval=0.5,  # commits often: the test kills it between two
        consumer_auto_offset_reset="earliest",
        processing_guarantee="at_least_once",
        # a SIGKILLed member holds its partitions until its session expires: a short one
        # lets the restarted app in quickly (Kafka's floor is 6 s)
        broker_session_timeout=6.0,
        broker_heartbeat_interval=1.0,
        web_enabled=False,
    )
    source = app.topic(input_name, key_type=str, value_serializer="json", partitions=partitions)
    sink = app.topic(output_name, key_type=str, value_serializer="json")
    totals = app.Table("totals", default=None, partitions=partitions)

    @app.agent(source)
    async def add(stream: Any) -> None:
        async for key, value in stream.items():
            current = totals.get(key) or {"seq": -1, "count": 0, "total": 0}
            applied = value["seq"] > current["seq"]
            if applied:
                current = {
                    "seq": value["seq"],
                    "count": current["count"] + 1,
                    "total": current["total"] + value["amount"],
                }
                totals[key] = current
            print(
                f"processed {key} {value['seq']} {'applied' if applied else 'skipped'}", flush=True
            )
            await sink.send(key=key, value={"key": key, **current})

    return app


if __name__ == "__main__":
    bootstrap, app_id, input_name, output_name, data_dir, partitions = sys.argv[1:7]
    faust_app = build(bootstrap, app_id, input_name, output_name, data_dir, int(partitions))
    sys.argv = [
        sys.argv[0],
        "worker",
        "--loglevel",
        "info",
        "--without-web",
    ]  # what Faust's command line reads
    faust_app.main()
