"""The house's structure, checked on every `make test` (issue 24): no module in agentcore/
over 600 lines, none in agentcore/providers/ over 400, no function over 60 lines (bench and
tests excepted), and no import circle among agentcore's modules.

Sizes are read from the source (ast: a function from its ``def`` to its last line). There
are no exceptions: a function over the limit is split by what it does.

Import circles: every module stands on one floor, above what it imports. The graph is read
from the source (ast), so an import counts wherever it is written: at the top, inside a
function (a "late" import), or under TYPE_CHECKING.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import agentcore

ROOT = Path(agentcore.__file__).parent
REPO = ROOT.parent

MODULE_LINES = 600
PROVIDER_MODULE_LINES = 400
FUNCTION_LINES = 60


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


# -- sizes -------------------------------------------------------------------------------


def line_count(path: Path) -> int:
    return len(path.read_text().splitlines())


def module_limit(relative: str) -> int:
    return PROVIDER_MODULE_LINES if relative.startswith("agentcore/providers/") else MODULE_LINES


def long_modules(root: Path = REPO) -> dict[str, int]:
    """Every module of agentcore over its room's limit, by its path from `root`."""
    found = {}
    for path in sorted((root / "agentcore").rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if (lines := line_count(path)) > module_limit(relative):
            found[relative] = lines
    return found


def function_lengths(path: Path) -> Iterator[tuple[str, int]]:
    """Each function's qualified name and length in lines, from its ``def`` (a command's
    click options are its declaration, not its body)."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    yield name, (child.end_lineno or child.lineno) - child.lineno + 1
                yield from walk(child, name + ".")
            else:
                yield from walk(child, prefix)

    yield from walk(ast.parse(path.read_text(), str(path)), "")


def source_files(root: Path = REPO) -> Iterable[Path]:
    """The code the function limit holds: agentcore and each plugin's package (bench and
    tests excepted)."""
    yield from sorted((root / "agentcore").rglob("*.py"))
    yield from sorted(root.glob("plugins/*/src/**/*.py"))


def long_functions(root: Path = REPO) -> dict[str, int]:
    return {
        f"{path.relative_to(root).as_posix()}:{name}": lines
        for path in source_files(root)
        for name, lines in function_lengths(path)
        if lines > FUNCTION_LINES
    }


def test_no_module_is_over_its_limit() -> None:
    over = long_modules()
    assert not over, f"modules over {MODULE_LINES} lines ({PROVIDER_MODULE_LINES} in " + (
        f"agentcore/providers/): {over}; split them by what they do"
    )


def test_no_function_is_over_the_limit() -> None:
    over = long_functions()
    assert not over, f"functions over {FUNCTION_LINES} lines: {over}; split them"


def test_the_size_checks_can_fail(tmp_path: Path) -> None:
    """A long provider module, a long module elsewhere and a long method are all found."""
    providers = tmp_path / "agentcore" / "providers"
    providers.mkdir(parents=True)
    (providers / "wide.py").write_text("x = 1\n" * (PROVIDER_MODULE_LINES + 1))
    (tmp_path / "agentcore" / "fine.py").write_text("x = 1\n" * MODULE_LINES)
    body = "".join(f"        x = {i}\n" for i in range(FUNCTION_LINES - 1))
    method = f"class A:\n    @staticmethod\n    def long() -> None:\n{body}"  # 60 from def
    (tmp_path / "agentcore" / "long.py").write_text("\n" * MODULE_LINES + method)
    assert long_modules(tmp_path) == {
        "agentcore/long.py": MODULE_LINES + 2 + FUNCTION_LINES,
        "agentcore/providers/wide.py": PROVIDER_MODULE_LINES + 1,
    }
    assert long_functions(tmp_path) == {}  # exactly the limit is within it
    (tmp_path / "agentcore" / "long.py").write_text(method + "        x = -1\n")
    assert long_functions(tmp_path) == {"agentcore/long.py:A.long": FUNCTION_LINES + 1}
