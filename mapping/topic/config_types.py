"""Kafka's config machinery, as the pods need it: config types, parsing a config's text form,
validators with Kafka's words (``ConfigDef`` and its validators, ``ConfigException``), and the
definition of one config. Pure: the catalogues (mapping/topic/topic_configs.py,
mapping/topic/broker_configs.py) are built from these."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
SHORT_MIN, SHORT_MAX = -(2**15), 2**15 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
_INTEGER = re.compile(r"[+-]?\d+")
_COMMA = re.compile(r"\s*,\s*")


class ConfigType(IntEnum):
    """DescribeConfigs' ``config_type`` codes (DescribeConfigsResponse.ConfigType)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(IntEnum):
    """DescribeConfigs' ``config_source`` codes (DescribeConfigsResponse.ConfigSource)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class InvalidConfig(ValueError):
    """A config Kafka would refuse (INVALID_CONFIG); the message is Kafka's."""


def invalid_value(name: str, value: object, reason: str) -> InvalidConfig:
    """Kafka's ConfigException(name, value, message) text."""
    return InvalidConfig(f"Invalid value {value} for configuration {name}: {reason}")


Validator = Callable[[str, Any], None]


def parse(name: str, text: str, kind: ConfigType) -> Any:
    """``text`` as a value of type ``kind``, as ConfigDef.parseType reads it (trimmed)."""
    trimmed = text.strip()
    if kind == ConfigType.BOOLEAN:
        if trimmed.lower() in ("true", "false"):
            return trimmed.lower() == "true"
        raise invalid_value(name, text, "Expected value to be either true or false")
    if kind in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
        low, high = {
            ConfigType.INT: (INT_MIN, INT_MAX),
            ConfigType.SHORT: (SHORT_MIN, SHORT_MAX),
            ConfigType.LONG: (LONG_MIN, LONG_MAX),
        }[kind]
        if not _INTEGER.fullmatch(trimmed) or not low <= int(trimmed) <= high:
            raise invalid_value(name, text, f"Not a number of type {kind.name}")
        return int(trimmed)
    if kind == ConfigType.DOUBLE:
        try:
            return float(trimmed)
        except ValueError:
            raise invalid_value(name, text, "Not a number of type DOUBLE") from None
    if kind == ConfigType.LIST:
        return [] if not trimmed else _COMMA.split(trimmed)
    return trimmed  # STRING, PASSWORD, CLASS (no class is ever loaded here)


def to_text(value: Any, kind: ConfigType) -> str:
    """A parsed value's text form (ConfigDef.convertToString)."""
    if kind == ConfigType.BOOLEAN:
        return "true" if value else "false"
    if kind == ConfigType.LIST:
        return ",".join(value)
    return str(value)


def at_least(low: float) -> Validator:
    def check(name: str, value: Any) -> None:
        if value < low:
            raise invalid_value(name, value, f"Value must be at least {_number(low)}")

    return check


def between(low: float, high: float) -> Validator:
    def check(name: str, value: Any) -> None:
        if value < low:
            raise invalid_value(name, value, f"Value must be at least {_number(low)}")
        if value > high:
            raise invalid_value(name, value, f"Value must be no more than {_number(high)}")

    return check


def _number(bound: float) -> str:
    # Kafka prints the bound as the Java number it is: 0 and 1 for between(0, 1) of a
    # DOUBLE too (Range.between takes Numbers as given)
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def one_of(*valid: str) -> Validator:
    def check(name: str, value: Any) -> None:
        if value not in valid:
            raise invalid_value(name, value, f"String must be one of: {', '.join(valid)}")

    return check


def list_of(*valid: str) -> Validator:
    """ValidList.in: every element one of ``valid``."""
    element = one_of(*valid)

    def check(name: str, value: Any) -> None:
        for item in value:
            element(name, item)

    return check


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One config: its Kafka name, type, default (text form; None: null), documentation
    line, validator and valid values as Kafka prints them, and what the pods do with it."""

    name: str
    type: ConfigType
    default: str | None
    doc: str
    validator: Validator | None = None
    valid_values: str = ""
    # topic configs: the broker configs that set its default, first wins (Kafka's
    # ServerTopicConfigSynonyms), each with the factor to the topic config's unit
    synonyms: tuple[tuple[str, int], ...] = ()
    # whether the pods act on it (else it is stored and described only: see docs/kafka.md)
    enforced: bool = False
    # broker configs: whether an (Incremental)AlterConfigs may change it cluster-wide
    dynamic: bool = False

    def check(self, text: str | None) -> Any:
        """The parsed value of ``text``; InvalidConfig with Kafka's words when it is not a
        valid value of this config."""
        if text is None:
            raise InvalidConfig(f"Null value not supported for config {self.name}")
        value = parse(self.name, text, self.type)
        if self.validator is not None:
            self.validator(self.name, value)
        return value

    def value(self, text: str | None) -> Any:
        """``text`` (a stored value, None: the default) parsed; a stored text this config
        cannot parse (written by hand) falls back to the default."""
        if text is not None:
            try:
                return parse(self.name, text, self.type)
            except InvalidConfig:
                pass
        return None if self.default is None else parse(self.name, self.default, self.type)


def catalogue(defs: Sequence[ConfigDef]) -> dict[str, ConfigDef]:
    """Configs by name, in the order given."""
    return {d.name: d for d in defs}
