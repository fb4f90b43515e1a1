"""No import circle in agentcore: every module stands on one floor, above what it imports.

The graph is read from the source (ast), so an import counts wherever it is
written: at the top, inside a function (a "late" import), or under TYPE_CHECKING.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import agentcore

ROOT = Path(agentcore.__file__).parent


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the agentcore modules it imports (``from pkg import mod`` names the module)."""
    files = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names if a.name in files)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                for alias in node.names:
                    target = f"{base}.{alias.name}"
                    if target in files:
                        graph[name].add(target)
                    elif base in files:
                        graph[name].add(base)
    return graph


def circles(graph: Mapping[str, set[str]]) -> Iterator[list[str]]:
    """One circle (a -> b -> ... -> a) through each strongly connected set of modules."""
    seen: set[str] = set()
    for start in sorted(graph):
        if start in seen:
            continue
        path = _circle_from(start, graph)
        if path is not None:
            seen.update(path)
            yield path


def _circle_from(start: str, graph: Mapping[str, set[str]]) -> list[str] | None:
    """The shortest way from `start` back to itself, breadth first."""
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for module in frontier:
            for target in sorted(graph[module]):
                if target == start:
                    path = [module]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if target not in parents:
                    parents[target] = module
                    following.append(target)
        frontier = following
    return None


def test_agentcore_has_no_import_circle() -> None:
    found = [" -> ".join(circle) for circle in circles(import_graph())]
    assert not found, "import circles in agentcore:\n  " + "\n  ".join(found)


def test_a_circle_is_found_and_named(tmp_path: Path) -> None:
    """The check itself can fail: a late import and a TYPE_CHECKING one make a circle."""
    package = tmp_path / "agentcore"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "settings.py").write_text("def kinds():\n    from agentcore import providers\n")
    type_checking = "if TYPE_CHECKING:\n    from agentcore.settings import X\n"
    (package / "providers.py").write_text("from typing import TYPE_CHECKING\n" + type_checking)
    (package / "alone.py").write_text("from . import settings\n")
    found = list(circles(import_graph(package)))
    assert found == [["agentcore.providers", "agentcore.settings", "agentcore.providers"]]
