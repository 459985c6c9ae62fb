"""The pod's topic cache (mapping/topic/topic_cache.py): settings read while a config change was
heard are not remembered, so the next command reads them afresh."""

from __future__ import annotations

from mapping.topic.topic_cache import TopicCache
from mapping.topic.topic_config import TopicConfig


def test_a_read_overtaken_by_a_forget_is_not_remembered() -> None:
    cache = TopicCache()
    stale = TopicConfig("t", 1, 1, 1)
    began = cache.generation  # a lookup's read starts...
    cache.forget("t")  # ...a config change is heard while it is in flight...
    cache.remember_read(stale, began)  # ...and its answer, perhaps the old settings, comes
    assert cache.known("t") is None
    fresh = TopicConfig("t", 1, 1, 1, overrides=(("message_timestamp_type", "LogAppendTime"),))
    cache.remember_read(fresh, cache.generation)
    assert cache.known("t") is fresh
    began = cache.generation
    cache.forget_all()
    cache.remember_read(fresh, began)
    assert cache.known("t") is None
