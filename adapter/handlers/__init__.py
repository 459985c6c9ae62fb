"""The command table: command name -> a small function that validates, calls `mapping`,
and formats the payload. A handler raises `BrokerError` for an error reply."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from adapter.settings import Settings
from mapping.store import Store

if TYPE_CHECKING:
    from mapping.batcher import Pending
    from mapping.groups import Groups
    from mapping.replication import Replication


# A hot command's synchronous start: validates (raising BrokerError) and queues its Redis
# calls, returning the pending payload (or a task for what must wait further); None when
# it needs the full handler (say, the topic is not known yet). It never replaces the
# command's Handler, only starts it without a task of its own.
Starter = Callable[["Context", list[str]], "Pending[str] | asyncio.Task[str] | None"]


@dataclass
class Context:
    """What a handler may use; shared by every connection of the pod."""

    settings: Settings
    store: Store
    groups: Groups
    replication: Replication
    # The hot commands' starters (see ``Starter``); None: the default table's.
    starters: dict[str, Starter] | None = None


Handler = Callable[[Context, list[str]], Awaitable[str]]


def on_topic(
    parse: Callable[[list[str]], tuple],
    start: Callable[..., Pending[str]],
) -> tuple[Handler, Starter]:
    """A hot command's handler and starter from one definition: ``parse(argv)`` gives
    ``(topic, *rest)`` (raising ``BadRequest``), ``start(context, config, *rest)`` queues the
    work for the topic's settings. The handler looks the topic up (creating it on first
    use); the starter runs only when the pod knows the topic already, else it returns None
    and the handler takes the request."""

    async def handler(context: Context, argv: list[str]) -> str:
        topic, *rest = parse(argv)
        return await start(context, await context.store.topic(topic), *rest)

    def starter(context: Context, argv: list[str]) -> Pending[str] | None:
        topic, *rest = parse(argv)
        config = context.store.known_topic(topic)
        return None if config is None else start(context, config, *rest)

    return handler, starter


def build_table() -> dict[str, Handler]:
    from adapter.handlers import core, groups, replication

    table: dict[str, Handler] = {}
    for module in (core, groups, replication):
        table.update(module.HANDLERS)
    return table


def build_starters() -> dict[str, Starter]:
    from adapter.handlers import core, groups

    return {**core.STARTERS, **groups.STARTERS}
