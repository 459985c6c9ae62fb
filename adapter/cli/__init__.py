"""``python -m adapter`` / ``adapter``: every command line of the project, in one click style.

serve     run one pod                       (adapter.cli.serve)
request   send V1 requests to a pod         (adapter.cli.request)
topic     create, alter, list, describe, trim, compact, delete (adapter.cli.topic)
          tail                              (adapter.cli.topic_tail)
group     list, describe, delete            (adapter.cli.group)
          reset-offsets                     (adapter.cli.group_reset)
inspect   topics, groups, lag               (adapter.cli.inspect)
          transactions, open-transactions   (adapter.cli.transactions)
user      the users AUTH checks             (adapter.cli.user)
acl       Kafka's ACL bindings              (adapter.cli.acl)
quota     Kafka's client quotas             (adapter.cli.quota)
config    cluster-wide broker configs, a group's configs (adapter.cli.config)
ping      health check of a pod             (adapter.cli.health)
console   the web console                   (adapter.cli.console, adapter/console/)

A failure of any of them is one line on stderr and a non-zero exit (adapter.cli.errors).
Commands are imported when named (adapter.cli.lazy), and import what they run on (redis,
the pod) only when they run, so ``--help`` answers at once.
"""

from __future__ import annotations

import click

from adapter.cli.errors import OneLineErrors


@click.group(
    cls=OneLineErrors,  # every failure in one line, never a traceback
    context_settings={"auto_envvar_prefix": "ADAPTER", "show_default": True},
    lazy_subcommands={
        "serve": "adapter.cli.serve:serve",
        "request": "adapter.cli.request:request",
        "topic": "adapter.cli.topic:topic",
        "group": "adapter.cli.group:group",
        "inspect": "adapter.cli.inspect:inspect_group",
        "user": "adapter.cli.user:user",
        "acl": "adapter.cli.acl:acl",
        "quota": "adapter.cli.quota:quota",
        "config": "adapter.cli.config:config",
        "ping": "adapter.cli.health:ping",
        "console": "adapter.cli.console:console",
    },
)
def main() -> None:
    """A Kafka-like broker on Redis Streams: pods, topics, groups, users.

    A command that fails prints one line saying why and exits non-zero
    (ADAPTER_LOG_LEVEL=DEBUG shows the traceback)."""
