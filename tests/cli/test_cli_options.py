"""Every command line that talks to the deployment's Redis takes the same login options,
read from the same variables, so ADAPTER_REDIS_PASSWORD reaches each one (a command added
with ``--redis-url`` alone fails here)."""

from __future__ import annotations

from collections.abc import Iterator

import click

from adapter.cli import main

LOGIN = {
    "redis_username": "ADAPTER_REDIS_USERNAME",
    "redis_password": "ADAPTER_REDIS_PASSWORD",
    "redis_tls_ca": "ADAPTER_REDIS_TLS_CA",
    "redis_tls_cert": "ADAPTER_REDIS_TLS_CERT",
    "redis_tls_key": "ADAPTER_REDIS_TLS_KEY",
    # Redis Sentinel instead of --redis-url (mapping/connection/sentinel.py)
    "redis_sentinel": "ADAPTER_REDIS_SENTINEL",
    "redis_sentinel_master": "ADAPTER_REDIS_SENTINEL_MASTER",
    "redis_sentinel_username": "ADAPTER_REDIS_SENTINEL_USERNAME",
    "redis_sentinel_password": "ADAPTER_REDIS_SENTINEL_PASSWORD",
}


def _commands(group: click.Group, path: str = "adapter") -> Iterator[tuple[str, click.Command]]:
    context = click.Context(group)
    for name in group.list_commands(context):  # (subcommands are imported when named)
        command = group.get_command(context, name)
        assert command is not None, (path, name)
        if isinstance(command, click.Group):
            yield from _commands(command, f"{path} {name}")
        else:
            yield f"{path} {name}", command


def test_every_redis_command_takes_the_login_options() -> None:
    checked = []
    for path, command in _commands(main):
        params = {p.name: p for p in command.params}
        if "redis_url" not in params:
            continue
        checked.append(path)
        for name, variable in LOGIN.items():
            assert name in params, f"{path} lacks --{name.replace('_', '-')}"
            assert params[name].envvar == variable, (path, name, params[name].envvar)
    # the commands this suite knows take them (others may join, none may leave)
    expected = {"adapter serve", "adapter topic create", "adapter topic alter",
                "adapter topic describe", "adapter topic trim", "adapter inspect topics",
                "adapter inspect topic", "adapter inspect groups", "adapter inspect group",
                "adapter user add", "adapter user remove", "adapter user list",
                "adapter group list", "adapter group describe", "adapter group reset-offsets",
                "adapter topic tail", "adapter topic list"}  # fmt: skip
    assert expected <= set(checked), expected - set(checked)
