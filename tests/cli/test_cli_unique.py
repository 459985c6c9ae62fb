"""Every command line's options are defined once (click only warns about a duplicate, and
the later definition silently shadows the earlier one's help and default)."""

from __future__ import annotations

import click

from adapter.cli import main


def _commands(group: click.Group) -> list[click.Command]:
    found: list[click.Command] = []
    context = click.Context(group)
    for name in group.list_commands(context):  # (subcommands are imported when named)
        command = group.get_command(context, name)
        assert command is not None, name
        found.append(command)
        if isinstance(command, click.Group):
            found += _commands(command)
    return found


def test_no_option_is_defined_twice() -> None:
    for command in _commands(main):
        names = [opt for param in command.params for opt in param.opts + param.secondary_opts]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        assert duplicates == [], f"{command.name}: {duplicates}"
