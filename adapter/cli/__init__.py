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

A failure of any of them is one line on stderr and a non-zero exit (adapter.cli.errors).
"""

from __future__ import annotations

import click

from adapter.cli.errors import OneLineErrors
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


@click.group(
    cls=OneLineErrors,  # every failure in one line, never a traceback
    context_settings={"auto_envvar_prefix": "ADAPTER", "show_default": True},
)
def main() -> None:
    """A Kafka-like broker on Redis Streams: pods, topics, groups, users.

    A command that fails prints one line saying why and exits non-zero
    (ADAPTER_LOG_LEVEL=DEBUG shows the traceback)."""


# registered on import
assert inspect_transactions.name in inspect_group.commands
assert reset_offsets.name in group.commands
assert tail.name in topic.commands
for command in (serve, request, topic, group, inspect_group, user, ping):
    main.add_command(command)
