"""Each pod setting is declared once (adapter/settings.py) and ``adapter serve`` takes every
one: an option, an ``ADAPTER_*`` variable, a line in ``--help`` (a field added without an
``option(...)`` fails here unless it is meant to stay off the command line)."""

from __future__ import annotations

import dataclasses
import os

import pytest
from click.testing import CliRunner

from adapter.cli import main
from adapter.cli.serve import serve
from adapter.declare import declared_options, from_options
from adapter.settings import Settings

# Fields the command line does not set (they keep their defaults)
# (the groups' transactional id expiration is the pod's --transactional-id-expiration-ms)
NOT_OPTIONS = {
    "topic_cache_size",
    "kafka_groups.max_metadata_bytes",
    "kafka_groups.transactional_id_expiration_ms",
}


@pytest.fixture(autouse=True)
def _no_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the variables a test sets (tests/conftest.py sets ADAPTER_KAFKA_PORT)."""
    for name in os.environ:
        if name.startswith("ADAPTER_"):
            monkeypatch.delenv(name)


def _fields() -> set[str]:
    """Every field of Settings, a group's as "<group>.<field>"."""
    names = set()
    for setting in dataclasses.fields(Settings):
        if dataclasses.is_dataclass(setting.default):
            names |= {f"{setting.name}.{f.name}" for f in dataclasses.fields(setting.default)}
        else:
            names.add(setting.name)
    return names


def _declared_fields() -> set[str]:
    return {f"{d.group}.{d.field}" if d.group else d.field for d in declared_options(Settings)}


def test_every_setting_is_an_option() -> None:
    assert _fields() - _declared_fields() == NOT_OPTIONS
    assert _declared_fields() <= _fields()


def test_serve_takes_exactly_the_declared_options() -> None:
    declared = [d.name for d in declared_options(Settings)]
    assert len(declared) == len(set(declared))
    assert [p.name for p in serve.params if p.name != "help"] == declared


def test_help_lists_each_option_and_its_variable() -> None:
    result = CliRunner().invoke(main, ["serve", "--help"], terminal_width=1000)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    for declared in declared_options(Settings):
        flag = "--" + declared.name.replace("_", "-")
        assert flag in text
        assert f"[env var: {declared.envvar}]" in text or f"env var: {declared.envvar};" in text
        if declared.option.help:
            assert " ".join(declared.option.help.split()) in text


def test_defaults_are_settings_defaults() -> None:
    context = serve.make_context("serve", [])
    assert from_options(Settings, context.params) == Settings()


@pytest.mark.parametrize(
    ("name", "value", "path", "expected"),
    [
        ("port", "7000", ("port",), 7000),
        ("kafka", "false", ("kafka",), False),
        ("redis_password", "pw", ("redis_password",), "pw"),
        ("default_partitions", "7", ("topic_defaults", "partitions"), 7),
        (
            "kafka_group_consumer_heartbeat_interval_ms",
            "77",
            ("kafka_groups", "consumer_heartbeat_interval_ms"),
            77,
        ),
        ("log_level", "debug", ("log_level",), "DEBUG"),
    ],
)
def test_variables_set_settings(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, path: tuple[str, ...], expected: object
) -> None:
    monkeypatch.setenv("ADAPTER_" + name.upper(), value)
    settings = from_options(Settings, serve.make_context("serve", []).params)
    found: object = settings
    for part in path:
        found = getattr(found, part)
    assert found == expected
    # a group's other fields keep their values
    assert settings.kafka_groups.max_metadata_bytes == Settings().kafka_groups.max_metadata_bytes
