"""A Quix Streams application, run as a child process by tests/apps/test_quix.py in its own
interpreter (``.venv-quix``: Quix Streams pins confluent-kafka below the project's, see
tests/apps/README.md): a stateful per-key running total over an input topic, its state in
RocksDB with a changelog topic (Quix's defaults), each new state sent to an output topic.

Usage: python tests/apps/quix_app.py BOOTSTRAP GROUP INPUT OUTPUT STATE_DIR [GUARANTEE]

GUARANTEE: ``at-least-once`` (the default) or ``exactly-once`` (Quix's Kafka transactions:
the output, the changelog and the consumed offsets commit together).

Input records: key = a word, value = JSON ``{"seq": n, "amount": a}`` where ``seq`` counts
that key's records from 0 in production order. The state per key is ``{"seq": last seq
applied, "count": records applied, "total": sum of amounts}``.

Why the result is exact under at-least-once: after a crash Quix re-reads the records after
the last committed offset, and its state may or may not already hold their effect (the
changelog is flushed before the offsets are committed). A key's records are in one
partition, in order, so a record whose ``seq`` is not above the state's ``seq`` has been
applied already and is skipped: every record is applied exactly once.

Under exactly-once the ``seq`` check is off: every record read is applied, so a record the
state or the output saw twice would show as a wrong count, total or a repeated output.

Each record processed prints ``processed <key> <seq> <applied|skipped>`` on stdout, so a
test sees which records a run read.

With ``$QUIX_EXIT_IN_CHECKPOINT`` = n the app dies (exit status 9, no clean-up, as a
SIGKILL) inside the first checkpoint after it processed n records: once the checkpoint
has flushed the changelog and before it commits the consumed offsets, the window where a
recovery must fall back on each key's previous changelog record.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from quixstreams import Application, State
from quixstreams.kafka.consumer import BaseConsumer

EXIT_IN_CHECKPOINT = int(os.environ.get("QUIX_EXIT_IN_CHECKPOINT", "0"))
processed_count = 0


def exit_inside_checkpoints() -> None:
    """Make the checkpoint's offset commit (its step after the changelog flush) die once
    EXIT_IN_CHECKPOINT records were processed."""
    commit = BaseConsumer.commit

    def commit_or_die(self: BaseConsumer, *args: Any, **kwargs: Any) -> Any:
        if processed_count >= EXIT_IN_CHECKPOINT:
            print("exiting inside the checkpoint", flush=True)
            os._exit(9)
        return commit(self, *args, **kwargs)

    BaseConsumer.commit = commit_or_die  # type: ignore[method-assign]


def main(
    bootstrap: str, group: str, input_name: str, output_name: str, state_dir: str,
    guarantee: str = "at-least-once",
) -> None:  # fmt: skip
    exactly_once = guarantee == "exactly-once"
    if EXIT_IN_CHECKPOINT:
        exit_inside_checkpoints()
    app = Application(
        broker_address=bootstrap,
        consumer_group=group,
        auto_offset_reset="earliest",
        state_dir=state_dir,
        commit_interval=0.5,  # checkpoints often: the test kills it between two
        processing_guarantee="exactly-once" if exactly_once else "at-least-once",
        use_changelog_topics=True,
        # a SIGKILLed member holds its partitions until its session expires: a short one
        # lets the restarted app in quickly (Kafka's floor is 6 s)
        consumer_extra_config={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000},
    )
    input_topic = app.topic(input_name, key_deserializer="str", value_deserializer="json")
    output_topic = app.topic(output_name, key_serializer="str", value_serializer="json")

    def add(value: dict[str, Any], key: str, _timestamp: int, _headers: Any, state: State) -> dict:
        global processed_count
        processed_count += 1
        current = state.get("total", {"seq": -1, "count": 0, "total": 0})
        applied = exactly_once or value["seq"] > current["seq"]
        if applied:
            current = {
                "seq": value["seq"],
                "count": current["count"] + 1,
                "total": current["total"] + value["amount"],
            }
            state.set("total", current)
        print(f"processed {key} {value['seq']} {'applied' if applied else 'skipped'}", flush=True)
        return {"key": key, **current}

    app.dataframe(input_topic).apply(add, stateful=True, metadata=True).to_topic(output_topic)
    app.run()


if __name__ == "__main__":
    main(*sys.argv[1:7])
