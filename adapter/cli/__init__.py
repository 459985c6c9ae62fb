"""``python -m adapter`` / ``adapter``: every command line of the project, in one click style.

serve     run one pod                       (adapter.cli.serve)
topic     create, alter, describe, trim, delete (adapter.cli.topic)
          tail                              (adapter.cli.topic_tail)
group     list, describe, delete            (adapter.cli.group)
          reset-offsets                     (adapter.cli.group_reset)
inspect   topics, groups, lag               (adapter.cli.topic)
          transactions, open-transactions   (adapter.cli.transactions)
user      the users AUTH checks             (adapter.cli.user)
ping      health check of a pod             (adapter.cli.health)
"""

from __future__ import annotations

import click

from adapter.cli.group import group
from adapter.cli.group_reset import reset_offsets
from adapter.cli.health import ping
from adapter.cli.inspect import inspect_group
from adapter.cli.request import request
from adapter.cli.serve import serve
from adapter.cli.topic import topic
from adapter.cli.topic_tail import tail
from adapter.cli.transactions import inspect_transactions
from adapter.cli.user import user


@click.group(context_settings={"auto_envvar_prefix": "ADAPTER", "show_default": True})
def main() -> None:
    """A Kafka-like broker on Redis Streams: pods, topics, groups, users."""


# registered on import
assert inspect_transactions.name in inspect_group.commands
assert reset_offsets.name in group.commands
assert tail.name in topic.commands
for command in (serve, request, topic, group, inspect_group, user, ping):
    main.add_command(command)
