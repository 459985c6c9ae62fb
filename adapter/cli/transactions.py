"""``adapter inspect transactions`` and ``adapter inspect open-transactions TOPIC``: Kafka
transactions, read-only.

    inspect transactions [--open]        every transactional id: state, producer id and
                                         epoch, how long its transaction has been open, its
                                         partitions and groups
    inspect open-transactions TOPIC      per partition: the last stable offset, how far (in
                                         append time) it is behind the high watermark, and
                                         each open transaction with its age
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

import click

from adapter.cli import options
from adapter.cli.inspect import echo_json
from adapter.cli.options import RedisTarget, topic_name
from mapping.txn.txn_state import OPEN_STATES

if TYPE_CHECKING:  # (imported where a command runs, never for its --help)
    from adapter.pod import Pod
    from mapping.txn.txn_inspection import PartitionTxnView


@click.command(name="transactions")  # of ``inspect`` (adapter/cli/inspect.py)
@click.option("--open", "only_open", is_flag=True, help="Only open transactions.")
@options.redis_target
@options.as_json
def inspect_transactions(only_open: bool, target: RedisTarget, as_json: bool) -> None:
    """One line per transactional id (the transaction coordinator's state)."""
    from mapping.txn.txn_inspection import transaction_states

    client = target.connect()
    try:
        states = transaction_states(client, target.keys)
    finally:
        client.close()
    if only_open:
        states = [s for s in states if s.state in OPEN_STATES]
    if as_json:
        echo_json([dataclasses.asdict(s) for s in states])
        return
    now = int(time.time() * 1000)
    for s in sorted(states, key=lambda s: s.transactional_id):
        age = now - s.txn_start_ms if s.state in OPEN_STATES and s.txn_start_ms >= 0 else -1
        partitions = ",".join(f"{t}/{p}" for t, p in s.partitions) or "-"
        click.echo(
            f"transactional_id={s.transactional_id} state={s.state} producer_id={s.producer_id} "
            f"epoch={s.epoch} timeout_ms={s.timeout_ms} age_ms={age} partitions={partitions} "
            f"groups={','.join(s.groups) or '-'}"
        )


@click.command(name="open-transactions")  # of ``inspect``
@click.argument("topic_name", metavar="TOPIC", callback=lambda _c, _p, v: topic_name(v))
@options.redis_target
@options.as_json
def inspect_open_transactions(topic_name: str, target: RedisTarget, as_json: bool) -> None:
    """Per partition of TOPIC: LSO, its lag behind the high watermark, open transactions."""
    from adapter.cli.local_pod import run_on_pod
    from mapping.txn.txn_inspection import partition_views

    async def work(pod: Pod) -> list[PartitionTxnView]:
        return await partition_views(pod.partitions, pod.partition_txns, topic_name)

    views = run_on_pod(target, work)
    if as_json:
        echo_json([dataclasses.asdict(v) for v in views])
        return
    for v in views:
        opened = " ".join(
            f"{pid}/{epoch}@{first}(age_ms={age})" for pid, epoch, first, age in v.open
        )
        click.echo(
            f"topic={v.topic} partition={v.partition} lso={v.last_stable_offset} "
            f"high_watermark={v.high_watermark} lso_lag_ms={v.lso_lag_ms} "
            f"open_transactions={len(v.open)} {opened}".rstrip()
        )
