"""A plugin imports `agentcore.api` only (its tests `agentcore.testing` as well): the public
surface is one module (docs/plugins.md), and the paths plugins used before still work,
with a DeprecationWarning where a name moved.

The imports are read from the source (ast), wherever they are written: at the top,
inside a function, or under TYPE_CHECKING.
"""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import pytest

import agentcore.api

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
SOURCE = ("agentcore.api",)
TESTS = ("agentcore.api", "agentcore.testing")


def agentcore_imports(source: str) -> list[tuple[int, str]]:
    """(line, module) of every import of agentcore or a module beneath it."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module == "agentcore":  # `from agentcore import traces` names a module
                found += [(node.lineno, f"agentcore.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, node.module))
    return sorted((line, m) for line, m in found if m.split(".")[0] == "agentcore")


def refused(source: str, allowed: tuple[str, ...]) -> list[str]:
    return [
        f"line {line}: {module}"
        for line, module in agentcore_imports(source)
        if not any(module == a or module.startswith(a + ".") for a in allowed)
    ]


def plugin_files() -> list[Path]:
    files = sorted(PLUGINS.glob("*/src/**/*.py")) + sorted(PLUGINS.glob("*/tests/**/*.py"))
    assert len({p.relative_to(PLUGINS).parts[0] for p in files}) >= 8, "the plugins moved?"
    return files


@pytest.mark.parametrize("path", plugin_files(), ids=lambda p: str(p.relative_to(PLUGINS)))
def test_a_plugin_imports_only_the_api(path: Path) -> None:
    allowed = SOURCE if "src" in path.relative_to(PLUGINS).parts else TESTS
    assert refused(path.read_text(), allowed) == []


def test_the_check_refuses_every_other_agentcore_module() -> None:
    source = (
        "from agentcore.api import hookimpl\n"
        "import agentcore.kernel\n"
        "from agentcore import hookimpl, traces\n"
        "def late():\n"
        "    from agentcore.mcpl.connection import ServerConnection\n"
        "from agentcore.testing import Kernel\n"
        "from agentcore.apis import nothing\n"
        "from . import sibling\n"
        "import agentcore_retry\n"
    )
    assert refused(source, SOURCE) == [
        "line 2: agentcore.kernel",
        "line 3: agentcore.hookimpl",
        "line 3: agentcore.traces",
        "line 5: agentcore.mcpl.connection",
        "line 6: agentcore.testing",
        "line 7: agentcore.apis",
    ]
    assert refused(source, TESTS)[-1] == "line 7: agentcore.apis"


def test_every_name_of_the_api_is_there() -> None:
    missing = [name for name in agentcore.api.__all__ if not hasattr(agentcore.api, name)]
    assert missing == []


def test_trace_event_moved_and_its_old_path_warns() -> None:
    with pytest.warns(DeprecationWarning, match="import TraceEvent from agentcore.api"):
        from agentcore.traces import TraceEvent
    assert TraceEvent is agentcore.api.TraceEvent
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from agentcore.traces import JsonlTraceSink  # what stays there does not warn
    assert JsonlTraceSink.__module__ == "agentcore.traces"


def test_the_context_wire_moved_into_its_plugin_and_its_old_path_warns() -> None:
    from agentcore_mcpl_context import wire

    with pytest.warns(DeprecationWarning, match="agentcore_mcpl_context.wire"):
        from agentcore.mcpl.context import authorize_injections
    assert authorize_injections is wire.authorize_injections
    with pytest.raises(ImportError), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from agentcore.mcpl.context import no_such_name  # noqa: F401
