"""``adapter serve --help`` lists its options under headings (Listeners, Redis, ...), each
option exactly once."""

from __future__ import annotations

import re

from click.testing import CliRunner

from adapter.cli import main
from adapter.cli.serve import OTHER, SECTIONS, serve


def _help() -> str:
    result = CliRunner().invoke(main, ["serve", "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    return result.output


def test_options_are_listed_under_their_headings() -> None:
    lines = _help().splitlines()
    headings = [line[:-1] for line in lines if re.fullmatch(r"[A-Z][^:]*:", line)]
    assert headings == [heading for heading, _ in SECTIONS] + [OTHER]
    # each option row starts with its flag, two spaces in, under one heading
    under: dict[str, str] = {}
    heading = ""
    for line in lines:
        if line[:-1] in headings:
            heading = line[:-1]
        found = re.match(r"  (--[a-z0-9-]+)", line)
        if found:
            flag = found.group(1)
            assert flag not in under, f"{flag} is listed twice"
            under[flag] = heading
    for param in serve.params:
        flag = param.opts[0]
        assert flag in under, f"{flag} is not listed"
    assert under["--help"] == OTHER
    assert [flag for flag, h in under.items() if h == OTHER] == ["--help"]  # every option placed
    assert under["--redis-url"] == "Redis" and under["--port"] == "Listeners"
    assert under["--tls-cert"] == "TLS and authentication"


def test_every_section_names_real_options_once() -> None:
    names = [name for _, section in SECTIONS for name in section]
    assert len(names) == len(set(names))
    assert set(names) == {p.name for p in serve.params}
