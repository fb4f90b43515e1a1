"""The MCPL host stays split by concern: no module over 600 lines, no function over 60."""

from __future__ import annotations

import ast
from pathlib import Path

import agentcore.mcpl

ROOT = Path(agentcore.mcpl.__file__).parent
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60


def modules() -> list[Path]:
    return sorted(ROOT.glob("*.py"))


def test_no_mcpl_module_is_over_600_lines() -> None:
    sizes = {path.name: len(path.read_text().splitlines()) for path in modules()}
    assert {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES} == {}


def test_no_mcpl_function_is_over_60_lines() -> None:
    long: dict[str, int] = {}
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.name}:{node.name}"] = lines
    assert long == {}
