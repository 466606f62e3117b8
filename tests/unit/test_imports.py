"""The package's import graph has no circle: every import, at module level or inside a function,
read from the sources (imports under ``if TYPE_CHECKING:`` never run and are left out); and no
module uses another's private names."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import dockerarch

PACKAGE = Path(dockerarch.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, modules: set[str]) -> set[str]:
    """The dockerarch modules ``path`` imports, wherever in it the import is."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            test = node.test
            if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
                isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
            ):
                for statement in node.orelse:
                    self.visit(statement)
                return
            self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:
            found.update(a.name for a in node.names)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:  # `from dockerarch import farm` imports the module farm
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)

    Visitor().visit(ast.parse(path.read_text(encoding="utf-8")))
    return {m for m in found if m in modules and m != name}


def import_graph() -> dict[str, set[str]]:
    files = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(f) for f in files}
    return {module_name(f): imported(f, modules) for f in files}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            part = []
            while True:
                other = stack.pop()
                part.append(other)
                if other == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_walk_finds_a_circle_where_there_is_one() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_function_level_imports_count_and_type_checking_ones_do_not(tmp_path: Path) -> None:
    source = PACKAGE / "farm.py"
    graph = import_graph()
    assert "dockerarch.engine" in graph["dockerarch.farm"]  # imported inside functions only
    assert "from dockerarch import engine" not in source.read_text().split("\ndef ", 1)[0]
    assert "dockerarch.render" in graph["dockerarch.farm"]


def test_the_package_imports_in_no_circle() -> None:
    graph = import_graph()
    assert len(graph) > 50
    assert circles(graph) == []
    graphlib.TopologicalSorter(graph).prepare()  # raises CycleError on a circle


def private_uses(path: Path, modules: set[str]) -> list[str]:
    """``module._name`` and ``from module import _name`` where module is another dockerarch
    module."""
    name = module_name(path)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    aliases: dict[str, str] = {}  # local name -> dockerarch module
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dockerarch"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if full in modules:
                    aliases[alias.asname or alias.name] = full
                elif (
                    alias.name.startswith("_")
                    and not alias.name.startswith("__")
                    and node.module != name
                ):
                    found.append(f"{name}: from {node.module} import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules and alias.asname:
                    aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases and node.attr.startswith("_")
                and not node.attr.startswith("__") and aliases[node.value.id] != name):  # fmt: skip
            found.append(f"{name}: {aliases[node.value.id]}.{node.attr}")
    return found


def test_no_module_uses_another_s_private_names() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(f) for f in files}
    assert [u for f in files for u in private_uses(f, modules)] == []
