"""The Lua scripts: one ``.lua`` file each under ``lua/<family>/``, loaded once and called by SHA.

A script's name is its path under ``lua/`` without ``.lua`` (``partition/consume``). Each is
loaded by one module constant named after it beside the Python that calls it
(``PARTITION_CONSUME = scripts.load("partition/consume")`` in mapping/partition/partitions.py), and
called through the one typed builder there, ``partition_consume_call``, which spells its KEYS
and ARGV in the order the script's header declares::

    -- KEYS: log, state, hw_channel, appended
    -- ARGV: sequence_bits, replication_factor, replica_lag_max_ms, start_id, [durable], ...

Names are comma-separated; ``[name]`` is optional (after the required ones), a final ``...``
a variadic tail (the script's comments say what it holds), ``none`` no item at all. A line
ending with a comma goes on in the next comment line.

The source sent to Redis is the prelude, then the includes, then the script:

- ``--! include lib/<file>.lua`` lines name shared helpers (``lua/lib/``); they are resolved
  transitively, each file at most once per script, an include before whatever includes it;
- the prelude is ``local K = {...}`` holding the constants the script (with its includes)
  reads as ``K.<NAME>``, from ``mapping/connection/script_constants.py`` (one local: Redis allows a
  function 200).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from redis.cluster import RedisCluster
from redis.exceptions import NoScriptError

from mapping.connection.script_constants import LUA_CONSTANTS

LUA_DIR = Path(__file__).parent.parent / "lua"
# The shared helpers: included by scripts, never called on their own.
LIB = "lib"
_INCLUDE = "--! include "
_HEADER = re.compile(r"-- (KEYS|ARGV):(.*)$")
_CONSTANT = re.compile(r"\bK\.([A-Z][A-Z0-9_]*)\b")
_COMMENT = re.compile(r"--.*")
_VARIADIC = "..."


@dataclass(frozen=True, slots=True)
class Declared:
    """One header line: ``required`` names, then ``optional`` ones; ``variadic``: any number
    more may follow."""

    required: tuple[str, ...]
    optional: tuple[str, ...]
    variadic: bool

    def accepts(self, count: int) -> bool:
        """Whether a call passing ``count`` items matches the declaration."""
        if count < len(self.required):
            return False
        return self.variadic or count <= len(self.required) + len(self.optional)


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    source: str
    sha: str
    keys: Declared
    argv: Declared

    def command(self, keys: list[str] | tuple[str, ...], args: list | tuple) -> tuple:
        """The EVALSHA command tuple, ready for a pipeline or ``execute_command``."""
        return ("EVALSHA", self.sha, len(keys), *keys, *args)


def _declared(name: str, line: str, text: str) -> Declared:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if items == ["none"]:
        items = []
    variadic = bool(items) and items[-1] == _VARIADIC
    if variadic:
        items.pop()
    required = [item for item in items if not item.startswith("[")]
    optional = [item[1:-1] for item in items if item.startswith("[") and item.endswith("]")]
    if items != [*required, *(f"[{item}]" for item in optional)] or _VARIADIC in items:
        raise ValueError(f"{name}.lua: a malformed header line: {line!r}")
    return Declared(tuple(required), tuple(optional), variadic)


def header(name: str, text: str) -> dict[str, Declared]:
    """The ``-- KEYS:`` and ``-- ARGV:`` declarations of script ``name`` (its own text)."""
    found: dict[str, Declared] = {}
    lines = text.splitlines()
    for index, line in enumerate(lines):
        match = _HEADER.match(line)
        if match is None:
            continue
        kind, value = match.groups()
        for more in lines[index + 1 :]:  # a line ending with a comma goes on
            if not value.rstrip().endswith(",") or not more.startswith("--"):
                break
            value += more[2:]
        if kind in found:
            raise ValueError(f"{name}.lua declares {kind} twice")
        found[kind] = _declared(name, line, value)
    missing = {"KEYS", "ARGV"} - found.keys()
    if missing:
        raise ValueError(f"{name}.lua has no header line for {', '.join(sorted(missing))}")
    return found


def _includes(root: Path, path: Path) -> list[Path]:
    return [
        root / line[len(_INCLUDE) :].strip()
        for line in path.read_text().splitlines()
        if line.startswith(_INCLUDE)
    ]


def _in_order(root: Path, path: Path, done: list[Path], open_: tuple[Path, ...] = ()) -> None:
    """Appends to ``done`` what ``path`` includes (transitively, each once, an include before
    whatever includes it), then ``path`` itself."""
    if path in open_:
        raise ValueError(f"include cycle: {' -> '.join(p.name for p in (*open_, path))}")
    for included in _includes(root, path):
        if included not in done:
            _in_order(root, included, done, (*open_, path))
    done.append(path)


def _without_includes(path: Path) -> str:
    lines = path.read_text().splitlines(keepends=True)
    return "".join(line for line in lines if not line.startswith(_INCLUDE))


def _lua_value(name: str, value: int | str) -> str:
    if isinstance(value, int):
        return str(value)
    if not re.fullmatch(r"[A-Za-z0-9_. -]*", value):
        raise ValueError(f"constant {name} = {value!r} needs quoting that the prelude lacks")
    return f"'{value}'"


def prelude(name: str, code: str) -> str:
    """``local K = {...}`` with the constants ``code`` reads (none: nothing)."""
    used = sorted(set(_CONSTANT.findall(_COMMENT.sub("", code))))
    unknown = [constant for constant in used if constant not in LUA_CONSTANTS]
    if unknown:
        raise ValueError(f"{name}.lua reads K.{', K.'.join(unknown)}: not in LUA_CONSTANTS")
    if not used:
        return ""
    items = ", ".join(f"{c} = {_lua_value(c, LUA_CONSTANTS[c])}" for c in used)
    return f"local K = {{{items}}}\n"


def expand(name: str, root: Path = LUA_DIR) -> str:
    """The source of script ``name`` (``root/<name>.lua``) as Redis runs it."""
    order: list[Path] = []
    _in_order(root, root / f"{name}.lua", order)
    code = "".join(_without_includes(path) for path in order)
    return prelude(name, code) + code


@cache
def load(name: str) -> Script:
    """The script ``mapping/lua/<name>.lua``, expanded and declared."""
    source = expand(name)
    declared = header(name, (LUA_DIR / f"{name}.lua").read_text())
    sha = hashlib.sha1(source.encode()).hexdigest()
    return Script(name, source, sha, declared["KEYS"], declared["ARGV"])


def names() -> list[str]:
    """Every script's name (the helpers under ``lib/`` are none)."""
    return sorted(
        path.relative_to(LUA_DIR).with_suffix("").as_posix()
        for path in LUA_DIR.glob("*/*.lua")
        if path.parent.name != LIB
    )


def by_sha(sha: str) -> Script | None:
    """A script by SHA (to answer NOSCRIPT)."""
    for name in names():
        script = load(name)
        if script.sha == sha:
            return script
    return None


def as_eval(command: tuple) -> tuple:
    """An EVALSHA ``command`` as the EVAL of its source: for a call that must not meet
    NOSCRIPT (a lease given back on the way out, with no second round trip to spare)."""
    script = by_sha(command[1])
    if script is None:
        raise ValueError(f"no script has SHA {command[1]}")
    return ("EVAL", script.source, *command[2:])


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


def load_sync(client: Any, shas: set[str]) -> None:
    """SCRIPT LOAD the scripts of ``shas`` (on a cluster: on every primary)."""
    for sha in sorted(shas):
        script = by_sha(sha)
        if script is not None:
            client.script_load(script.source)


def call_many_sync(client: Any, commands: list[tuple]) -> list[Any]:
    """Run ``commands`` in one pipeline on a synchronous client; after a NOSCRIPT the scripts
    they call are loaded and the whole pipeline is sent again, so only for commands that may
    run twice (reads)."""
    if isinstance(client, RedisCluster) and any(c[0] == "EVALSHA" for c in commands):
        # redis-py queues no EVALSHA in a cluster pipeline: one call each
        return [call_sync(client, command) for command in commands]
    try:
        return _pipeline_sync(client, commands)
    except NoScriptError:
        load_sync(client, {c[1] for c in commands if c[0] == "EVALSHA"})
        return _pipeline_sync(client, commands)


def _pipeline_sync(client: Any, commands: list[tuple]) -> list[Any]:
    pipe = client.pipeline(transaction=False)
    for command in commands:
        pipe.execute_command(*command)
    return pipe.execute()


def ensure_loaded_sync(client: Any) -> int:
    """Load every script this Redis lacks (SCRIPT EXISTS, then SCRIPT LOAD of the missing:
    after a restart without its script cache); how many were missing."""
    every = [load(name) for name in names()]
    found = client.script_exists(*(script.sha for script in every))
    missing = [script for script, there in zip(every, found, strict=True) if not there]
    for script in missing:
        client.script_load(script.source)
    return len(missing)
