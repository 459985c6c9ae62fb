"""One topic config set or put back to its default (the console's config form), as Kafka's
IncrementalAlterConfigs SET / DELETE does it (adapter/kafka/configs.py ``_alter_topic``):
the name must be in the catalogue, the changed value and the whole set after the change are
validated by ``check_topic_configs`` (Kafka's messages), and the change is stored by
``Topics.alter_configs``, which tells every pod."""

from __future__ import annotations

from mapping.topic.config_types import InvalidConfig
from mapping.topic.topic_config import TopicConfig, config_field
from mapping.topic.topic_configs import MIN_INSYNC_REPLICAS, TOPIC_CONFIGS, check_topic_configs
from mapping.topic.topics import Topics


async def alter_topic_config(
    topics: Topics, config: TopicConfig, name: str, value: str | None
) -> None:
    """Set topic config ``name`` of topic ``config`` to ``value`` (None: its default);
    ``InvalidConfig`` with Kafka's message when refused."""
    if name not in TOPIC_CONFIGS:
        raise InvalidConfig(f"Unknown topic config name: {name}")
    by_field = {config_field(n): n for n in TOPIC_CONFIGS}
    current = {by_field[f]: v for f, v in config.overrides if f in by_field}
    current[MIN_INSYNC_REPLICAS] = str(config.min_insync_replicas)
    updated = dict(current)
    if value is None:
        updated.pop(name, None)
    else:
        updated[name] = value
    if MIN_INSYNC_REPLICAS not in updated:  # structural: back to the cluster's default
        default = topics.default_min_isr()
        updated[MIN_INSYNC_REPLICAS] = str(min(default, config.replication_factor))
    check_topic_configs({n: v for n, v in updated.items() if current.get(n) != v})
    check_topic_configs(updated)  # and the rules across configs
    changes: dict[str, str | int | None] = {
        config_field(n): v for n, v in updated.items() if current.get(n) != v
    }
    changes.update({config_field(n): None for n in current if n not in updated})
    if changes:
        await topics.alter_configs(config.name, changes)
