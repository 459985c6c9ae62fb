"""The layout's promises that an import can check."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

BLOCKED = ("anyio", "uvloop", "prometheus_client", "click")


def test_client_imports_nothing_of_the_pod() -> None:
    """An application that only talks to pods needs `adapter.client` and nothing of the pod:
    with anyio, uvloop, prometheus and click made unimportable it still imports and works."""
    code = (
        "import sys\n"
        f"for name in {BLOCKED!r}: sys.modules[name] = None\n"
        "from adapter.client import Client, GroupConsumer, Producer, produce_args\n"
        "from adapter.client.tls import client_context\n"
        "print(produce_args('t', b'k:1', b'v'))\n"
        f"print(sorted(n for n in {BLOCKED!r} if sys.modules.get(n) is not None))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["t k%3A1:v acks=1", "[]"]


def test_replication_modules_import_in_either_order() -> None:
    """`mapping.replicator` and `mapping.replication` no longer import each other."""
    for first, second in (("replicator", "replication"), ("replication", "replicator")):
        code = f"import mapping.{first}, mapping.{second}"
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
        )
        assert result.returncode == 0, result.stderr
    source = open("mapping/replicator.py").read()
    assert "mapping.replication" not in source


# Every package of the project but tests/.
PACKAGES = ("adapter", "bench", "mapping", "spark_connector")
# Keys' names of the topic hash and of the topic index keys (the topics set, the id index).
TOPIC_KEYS = frozenset({"topic", "topics", "topic_ids"})
WRITE_COMMANDS = frozenset({"HSET", "HSETNX", "HDEL", "HINCRBY", "DEL", "UNLINK", "SADD", "SREM"})
WRITE_METHODS = frozenset({"hset", "hsetnx", "hdel", "hincrby", "delete", "unlink", "sadd", "srem"})


def _names_topic_key(node: ast.AST) -> bool:
    """Whether ``node`` spells ``keys.topic(...)``, ``keys.topics`` or ``keys.topic_ids``
    (``keys`` a name or an attribute: ``self.keys``, ``context.keys``...)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and sub.attr in TOPIC_KEYS:
            owner = sub.value
            if (isinstance(owner, ast.Name) and owner.id == "keys") or (
                isinstance(owner, ast.Attribute) and owner.attr == "keys"
            ):
                return True
    return False


def _writes(node: ast.AST) -> bool:
    """Whether ``node`` holds a write: a write method (``client.hset``), a write command
    (``call("HSET", ...)``, ``("SREM", ...)``) or a script call (``.command([keys], ...)``)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute):
            if sub.func.attr in WRITE_METHODS:
                return True
            if sub.func.attr == "command" and sub.args and isinstance(sub.args[0], ast.List):
                return True
        elements = sub.args if isinstance(sub, ast.Call) else getattr(sub, "elts", None)
        if elements and isinstance(elements[0], ast.Constant):
            if elements[0].value in WRITE_COMMANDS:
                return True
    return False


def test_only_mapping_topics_writes_topic_keys() -> None:
    """The topic hash, the topics set and the id index are written by mapping/topics.py alone
    (and the Lua scripts it calls): no other module's function that names one of those keys
    writes anything, so a key held in a variable cannot slip through either."""
    offenders = []
    sources = (p for package in PACKAGES for p in Path(package).rglob("*.py"))
    for path in sorted(sources):
        if path.as_posix() == "mapping/topics.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            body = ast.Module(body=function.body, type_ignores=[])  # (not its decorators)
            if _names_topic_key(body) and _writes(body):
                offenders.append(f"{path}:{function.lineno} {function.name}")
    assert offenders == []
