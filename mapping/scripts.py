"""The Lua scripts: one ``.lua`` file each, loaded once and called by SHA.

A script may start with ``--! include <file>`` lines; the named files (shared helpers such as
``_partition.lua``) are prepended before the SHA is computed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from redis.exceptions import NoScriptError

LUA_DIR = Path(__file__).with_name("lua")
_INCLUDE = "--! include "


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    source: str
    sha: str

    def command(self, keys: list[str] | tuple[str, ...], args: list | tuple) -> tuple:
        """The EVALSHA command tuple, ready for a pipeline or ``execute_command``."""
        return ("EVALSHA", self.sha, len(keys), *keys, *args)


def _expand(path: Path) -> str:
    parts: list[str] = []
    body: list[str] = []
    for line in path.read_text().splitlines(keepends=True):
        if line.startswith(_INCLUDE):
            parts.append(_expand(LUA_DIR / line[len(_INCLUDE) :].strip()))
        else:
            body.append(line)
    return "".join(parts) + "".join(body)


@cache
def load(name: str) -> Script:
    """The script ``mapping/lua/<name>.lua`` with its includes expanded."""
    source = _expand(LUA_DIR / f"{name}.lua")
    return Script(name, source, hashlib.sha1(source.encode()).hexdigest())


def by_sha(sha: str) -> Script | None:
    """A script already loaded in this process, by SHA (to answer NOSCRIPT)."""
    for path in LUA_DIR.glob("[!_]*.lua"):
        script = load(path.stem)
        if script.sha == sha:
            return script
    return None


def call_sync(client: Any, command: tuple) -> Any:
    """Run ``command`` on a synchronous client (the command line, a Spark task); an EVALSHA
    of a script this Redis has not loaded yet (NOSCRIPT) loads it and runs again."""
    try:
        return client.execute_command(*command)
    except NoScriptError:
        script = by_sha(command[1]) if command[0] == "EVALSHA" else None
        if script is None:
            raise
        client.script_load(script.source)
        return client.execute_command(*command)
