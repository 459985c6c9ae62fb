"""``--config NAME=VALUE`` (repeatable) and ``--delete-config NAME`` of ``adapter topic
create/alter``: Kafka topic configs, validated by the same catalogue as the Kafka admin APIs
(mapping/topic/topic_configs.py), stored by mapping/topic/topics.py like those."""

from __future__ import annotations

from collections.abc import Callable

import click

from mapping.topic.config_types import InvalidConfig
from mapping.topic.topic_config import STRUCTURAL_FIELDS, config_field
from mapping.topic.topic_configs import MIN_INSYNC_REPLICAS, TOPIC_CONFIGS, check_topic_configs


def config_option(f: Callable) -> Callable:
    return click.option(
        "--config",
        "configs",
        multiple=True,
        metavar="NAME=VALUE",
        help="A Kafka topic config (cleanup.policy=compact, max.message.bytes=2000000, ...); "
        "repeatable. Validated as Kafka does.",
    )(f)


def delete_config_option(f: Callable) -> Callable:
    return click.option(
        "--delete-config",
        "deleted",
        multiple=True,
        metavar="NAME",
        help="Put a topic config back to its default; repeatable.",
    )(f)


def parse_configs(given: tuple[str, ...]) -> dict[str, str]:
    """``NAME=VALUE`` options as Kafka names -> text, validated (BadParameter otherwise)."""
    configs: dict[str, str] = {}
    for item in given:
        name, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", param_hint="--config")
        configs[name.strip()] = value
    try:
        check_topic_configs(configs)
    except InvalidConfig as exc:
        raise click.BadParameter(str(exc), param_hint="--config") from None
    return configs


def deleted_fields(names: tuple[str, ...]) -> dict[str, None]:
    """``--delete-config`` names as topic hash changes (BadParameter for an unknown name, or
    min.insync.replicas, which every topic keeps)."""
    for name in names:
        if name not in TOPIC_CONFIGS:
            raise click.BadParameter(
                f"Unknown topic config name: {name}", param_hint="--delete-config"
            )
        if name == MIN_INSYNC_REPLICAS:
            raise click.BadParameter(
                "min.insync.replicas always has a value: set it", param_hint="--delete-config"
            )
    return {config_field(name): None for name in names}


def stored_fields(configs: dict[str, str]) -> dict[str, str | int | None]:
    return {config_field(name): value for name, value in configs.items()}


def describe_configs(settings: dict[str, str]) -> str:
    """The configs set on a topic (its hash's non-structural fields), Kafka names."""
    by_field = {config_field(name): name for name in TOPIC_CONFIGS}
    shown = [
        f"{by_field.get(field, field)}={value}"
        for field, value in sorted(settings.items())
        if field not in STRUCTURAL_FIELDS
    ]
    return f"configs=[{' '.join(shown)}]"
