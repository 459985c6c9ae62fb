"""``python -m adapter group ...``: consumer groups' lifecycle.

    group delete GROUP [--topic T] [--force]

A group is keyed by (group, topic): without ``--topic`` GROUP is deleted for every topic
it has. GROUP is any group id: a Kafka group's may hold any character (quote it for the
shell), a V1 group's is ``[A-Za-z0-9._-]``. A group with live members (a member whose
session has not run out) is refused, as Kafka's DeleteGroups answers NON_EMPTY_GROUP, unless
``--force`` (its members then get "group not found" and JOIN again). Looking at groups is
``adapter inspect groups``.
"""

from __future__ import annotations

import click

from adapter.cli import options
from adapter.cli.local_pod import run_on_redis
from adapter.cli.options import RedisTarget
from adapter.settings import Settings
from mapping.admin import DELETED, NON_EMPTY, GroupDeletion, delete_groups
from mapping.keys import is_valid_name


def _name(value: str | None) -> str | None:
    if value is not None and not is_valid_name(value):
        raise click.BadParameter("must be 1-249 characters of [A-Za-z0-9._-]")
    return value


@click.group()
def group() -> None:
    """Delete consumer groups (see `inspect groups` to list them)."""


@group.command()
@click.argument("group_name", metavar="GROUP")
@click.option(
    "--topic", "topic_name", default=None, callback=lambda _c, _p, v: _name(v),
    help="Only GROUP's group of this topic (default: of every topic).",
)  # fmt: skip
@click.option("--force", is_flag=True, help="Delete even a group with live members.")
@click.option(
    "--session-timeout-ms",
    default=Settings().session_timeout_ms,
    type=click.IntRange(1),
    show_default=True,
    help="A member heard from within this long is live (the pods' --session-timeout-ms).",
)
@options.redis_target
def delete(
    group_name: str,
    topic_name: str | None,
    force: bool,
    session_timeout_ms: int,
    target: RedisTarget,
) -> None:
    """Delete GROUP: members, assignment, generation, committed offsets, its listing."""
    results: list[GroupDeletion] = run_on_redis(
        target,
        lambda partitions: delete_groups(
            partitions.topics,
            group_name,
            topic_name,
            force=force,
            session_timeout_ms=session_timeout_ms,
        ),
    )
    deleted = [r for r in results if r.outcome == DELETED]
    refused = [r for r in results if r.outcome == NON_EMPTY]
    for r in deleted:
        click.echo(f"deleted group={r.group} topic={r.topic}")
    for r in refused:
        click.echo(
            f"refused group={r.group} topic={r.topic}: {r.message} (NON_EMPTY_GROUP; "
            "--force deletes it anyway)",
            err=True,
        )
    if refused:
        raise SystemExit(1)
    if not deleted:
        where = f" on topic {topic_name}" if topic_name else ""
        raise click.ClickException(f"no group {group_name}{where}")
