"""The layout's promises that an import can check."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT

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


PACKAGES = ("adapter", "mapping", "spark_connector")


def _modules() -> dict[str, Path]:
    """Every module of PACKAGES by dotted name (a package by its own name)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _under_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """What ``name`` imports anywhere (functions included, ``if TYPE_CHECKING:`` left out):
    ``from pkg import mod`` is an import of ``pkg.mod`` when that is a module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    nodes: list[ast.AST] = [ast.parse(path.read_text())]
    while nodes:
        node = nodes.pop()
        if _under_type_checking(node):
            nodes.extend(node.orelse)  # type: ignore[attr-defined]
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in modules else base)
        nodes.extend(ast.iter_child_nodes(node))
    return found


def _import_graph() -> dict[str, set[str]]:
    """Module -> the modules of PACKAGES its imports run. Importing ``a.b.c`` runs the
    ``__init__`` of ``a`` and ``a.b`` too, except for a module inside them: its own packages
    are already in ``sys.modules`` when it runs (set there before their ``__init__`` starts),
    so a package's ``__init__`` importing its own submodules is no cycle by itself; one
    that does and is imported back by name (``from pkg import X`` in ``pkg.sub``) is."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for imported in _imported(name, path, modules):
            parts = imported.split(".")
            packages = {".".join(parts[:end]) for end in range(1, len(parts))}
            targets |= {p for p in packages if not name.startswith(p + ".")} | {imported}
        graph[name] = (targets & modules.keys()) - {name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One import path around each strongly connected group of modules (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(group)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return [_path_around(graph, group) for group in groups]


def _path_around(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """The shortest import path from the group's first module back to itself."""
    start = min(group)
    paths = {start: [start]}
    queue = [start]
    while queue:
        module = queue.pop(0)
        for target in sorted(graph[module] & group):
            if target == start:
                return [*paths[module], start]
            if target not in paths:
                paths[target] = [*paths[module], target]
                queue.append(target)
    raise AssertionError(f"no cycle through {start}")


def test_no_import_cycles() -> None:
    """No two modules of adapter/, mapping/ and spark_connector/ import each other, however
    indirectly and wherever the import sits (an import inside a function is still a cycle:
    it only moves the failure to the first call)."""
    cycles = _cycles(_import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def _package_of(module: str) -> str:
    """The subpackage a module lives in (``mapping.topic.topics`` -> ``mapping.topic``); a
    package's own modules at its top (``adapter.pod``) stand for themselves."""
    return ".".join(module.split(".")[:2])


def test_no_import_cycles_between_subpackages() -> None:
    """Nor do the subpackages of adapter/, mapping/ and spark_connector/ import each other,
    taken as wholes: a change to one finds the rooms it may touch below it only."""
    graph = _import_graph()
    packages: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if module.count(".") < 1:
            continue
        found = packages.setdefault(_package_of(module), set())
        found |= {_package_of(t) for t in targets if t.count(".") >= 1}
    for name, targets in packages.items():
        targets.discard(name)
        for target in targets:
            packages.setdefault(target, set())
    cycles = _cycles(packages)
    assert not cycles, "cycles between subpackages:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_mapping_floors_import_only_the_floors_below() -> None:
    """mapping/ is its subpackages, each importing only the floors below it in
    ``mapping.FLOORS`` (mapping/__init__.py says what each holds); no module sits beside them."""
    from mapping import FLOORS

    modules = _modules()
    top = [m.split(".") for m in modules if m.startswith("mapping.") and m.count(".") == 1]
    loose = [".".join(parts) for parts in top if parts[1] not in FLOORS]
    assert loose == [], "modules of mapping/ on no floor"
    upward = []
    for module, targets in _import_graph().items():
        parts = module.split(".")
        if parts[0] != "mapping" or len(parts) < 2:
            continue
        floor = FLOORS.index(parts[1])
        for target in sorted(targets):
            above = target.split(".")
            if above[0] == "mapping" and len(above) > 1 and FLOORS.index(above[1]) > floor:
                upward.append(f"{module} -> {target}")
    assert upward == [], "imports that run up a floor:\n" + "\n".join(upward)


# Every package of the project but tests/.
PACKAGES = ("adapter", "bench", "mapping", "spark_connector")
# Keys' names of the topic hash and of the topic index keys (the topics set, the id index).
TOPIC_KEYS = frozenset({"topic", "topics", "topic_ids"})
WRITE_COMMANDS = frozenset({"HSET", "HSETNX", "HDEL", "HINCRBY", "DEL", "UNLINK", "SADD", "SREM"})
WRITE_METHODS = frozenset({"hset", "hsetnx", "hdel", "hincrby", "delete", "unlink", "sadd", "srem"})
# mapping/topic/topics.py's builders of the script calls on the topic hash
# (mapping/connection/scripts.py).
TOPIC_KEY_BUILDERS = frozenset({"topic_ensure_call", "topic_grow_call", "topic_delete_call"})


def _called_name(node: ast.AST) -> str:
    """The name a call calls (``f(...)``, ``obj.f(...)``), else ""."""
    if not isinstance(node, ast.Call):
        return ""
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _names_topic_key(node: ast.AST) -> bool:
    """Whether ``node`` spells ``keys.topic(...)``, ``keys.topics`` or ``keys.topic_ids``
    (``keys`` a name or an attribute: ``self.keys``, ``context.keys``...), or builds a script
    call on the topic hash."""
    for sub in ast.walk(node):
        if _called_name(sub) in TOPIC_KEY_BUILDERS:
            return True
        if isinstance(sub, ast.Attribute) and sub.attr in TOPIC_KEYS:
            owner = sub.value
            if (isinstance(owner, ast.Name) and owner.id == "keys") or (
                isinstance(owner, ast.Attribute) and owner.attr == "keys"
            ):
                return True
    return False


def _writes(node: ast.AST) -> bool:
    """Whether ``node`` holds a write: a write method (``client.hset``), a write command
    (``call("HSET", ...)``, ``("SREM", ...)``) or a script call (``.command([keys], ...)``,
    or a builder's: ``<script>_call(...)``)."""
    for sub in ast.walk(node):
        if _called_name(sub).endswith("_call"):
            return True
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
    """The topic hash, the topics set and the id index are written by mapping/topic/topics.py alone
    (and the Lua scripts it calls): no other module's function that names one of those keys
    writes anything, so a key held in a variable cannot slip through either."""
    offenders = []
    sources = (p for package in PACKAGES for p in Path(package).rglob("*.py"))
    for path in sorted(sources):
        if path.as_posix() == "mapping/topic/topics.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            body = ast.Module(body=function.body, type_ignores=[])  # (not its decorators)
            if _names_topic_key(body) and _writes(body):
                offenders.append(f"{path}:{function.lineno} {function.name}")
    assert offenders == []


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
