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


def test_tests_share_code_through_support_only() -> None:
    """Fixtures reach tests through pytest, never through an import of a conftest; a test
    folder imports its own modules and `tests/support` only, and `tests/support` (which the
    benchmarks use too) imports no test folder."""
    found = []
    for path in sorted([*Path("tests").rglob("*.py"), *Path("bench").rglob("*.py")]):
        in_a_folder = path.parts[0] == "tests" and len(path.parts) > 2
        allowed = {"support", path.parts[1] if in_a_folder else "support"}
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                parts = name.split(".")
                elsewhere = parts[0] == "tests" and len(parts) > 1 and parts[1] not in allowed
                if parts[-1] == "conftest" or elsewhere:
                    found.append(f"{path}: {name}")
    assert found == []
