"""Tables as kafka-consumer-groups prints them: a header of column names, then one row per
line, each column left-aligned to its widest cell."""

from __future__ import annotations

import click


def echo_columns(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        click.echo(
            " ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


def cell(value: object) -> str:
    """A value as a cell: ``-`` for none (Kafka's tool prints ``-`` too)."""
    return "-" if value is None or value == "" else str(value)
