"""The command table: command name -> its handler, and the hot commands' starters."""

from __future__ import annotations

from adapter.v1.handlers import Handler, Starter, core, groups, replication, share


def build_table() -> dict[str, Handler]:
    table: dict[str, Handler] = {}
    for module in (core, groups, replication, share):
        table.update(module.HANDLERS)
    return table


def build_starters() -> dict[str, Starter]:
    return {**core.STARTERS, **groups.STARTERS}
