"""V1's handlers: per command a small function that validates, calls `mapping`, and formats
the payload (core.py, groups.py, replication.py, share.py; the command table, table.py). A
handler raises `BrokerError` for an error reply. Here: what every handler module shares."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from adapter.authorizer import Authorizer
from adapter.pod import Pod
from mapping.connection.batcher import Pending
from mapping.core.errors import UNKNOWN_TOPIC, BrokerError
from mapping.share_group.share_groups import ShareGroups
from mapping.topic.topic_config import TopicConfig
from mapping.topic.topics import Topics

# A hot command's synchronous start: validates (raising BrokerError) and queues its Redis
# calls, returning the pending payload (or a task for what must wait further); None when
# it needs the full handler (say, the topic is not known yet). It never replaces the
# command's Handler, only starts it without a task of its own.
Starter = Callable[["Context", list[str]], "Pending[str] | asyncio.Task[str] | None"]


@dataclass
class Context:
    """What a handler may use: the pod's parts, shared by every V1 connection of the pod."""

    pod: Pod
    # The hot commands' starters (see ``Starter``); None: the default table's.
    starters: dict[str, Starter] | None = None
    _share_groups: ShareGroups | None = None

    @property
    def authorizer(self) -> Authorizer:
        """The pod's ACL checks (off: every check allows, at no cost)."""
        return self.pod.authorizer

    @property
    def share_groups(self) -> ShareGroups:
        """The share groups' store (SHARE_* commands), built on first use."""
        if self._share_groups is None:
            pod = self.pod
            self._share_groups = ShareGroups(pod.batcher, pod.keys, pod.kafka.bits)
        return self._share_groups


Handler = Callable[[Context, list[str]], Awaitable[str]]
# a hot command's parsed arguments, its topic first (on_topic)
A = TypeVar("A", bound=tuple[Any, ...])


def on_topic(
    parse: Callable[[list[str]], A],
    start: Callable[[Context, TopicConfig, A], Pending[str]],
) -> tuple[Handler, Starter]:
    """A hot command's handler and starter from one definition: ``parse(argv)`` gives its
    arguments as a tuple, the topic first (raising ``BadRequest``), and ``start(context,
    config, parsed)`` queues the work for the topic's settings (the tuple is passed whole: a
    starred call costs a request several times a plain one). The handler looks the topic up
    (creating it on first use); the starter runs only when the pod knows the topic already,
    else it returns None and the handler takes the request. A request that meets a deleted
    topic (the pod's cache not told yet) answers UNKNOWN_TOPIC and the pod forgets the
    topic: the next request looks it up afresh."""

    async def handler(context: Context, argv: list[str]) -> str:
        parsed = parse(argv)
        topic = parsed[0]
        config = await context.pod.topics.topic(topic)
        try:
            return await start(context, config, parsed)
        except BrokerError as exc:
            # Deleted under this pod's cache (the notice not heard yet): forget it. Not
            # retried here: an acks=all PRODUCE may have been appended before the deletion.
            if exc.code == UNKNOWN_TOPIC:
                context.pod.topics.cache.forget(topic)
            raise

    def starter(context: Context, argv: list[str]) -> Pending[str] | None:
        parsed = parse(argv)
        topic = parsed[0]
        config = context.pod.topics.cache.known(topic)
        if config is None:
            return None
        pending = start(context, config, parsed)
        return _ForgetsDeleted(pending.future, pending.finish, context.pod.topics, topic)

    return handler, starter


class _ForgetsDeleted(Pending[str]):
    """A started request on a cached topic: when the scripts refuse it as deleted (the pub/sub
    notice was missed), the pod forgets the topic, so the next request looks it up afresh."""

    __slots__ = ("topics", "topic")

    def __init__(
        self, future: asyncio.Future, finish: Callable, topics: Topics, topic: str
    ) -> None:
        # (no super() calls: this wraps every hot request)
        self.future = future
        self.finish = finish
        self.topics = topics
        self.topic = topic

    def result(self) -> str:
        try:
            return self.finish(self.future.result())
        except BrokerError as exc:
            if exc.code == UNKNOWN_TOPIC:
                self.topics.cache.forget(self.topic)
            raise
