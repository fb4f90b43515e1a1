"""`deadline.Scope`, a request's deadline: by `asyncio.timeout_at`'s rules, each case played
against asyncio's own, with less held per request in flight (every stream holds one)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from agentcore.inference.watchdog import TIMER_CONTEXT
from agentcore.mcpl.deadline import Scope

MakeScope = Callable[[float], Any]
SCOPES: dict[str, MakeScope] = {"asyncio": asyncio.timeout_at, "Scope": Scope}


async def run(make: MakeScope, in_s: float, body: Callable[[], Any]) -> tuple[str, bool, int]:
    """The body under a deadline `in_s` from now, in a task of its own: how it ended, whether
    the scope expired, and the task's cancellation count after it."""
    outcome, expired = "", False

    async def handler() -> None:
        nonlocal outcome, expired
        scope = make(asyncio.get_running_loop().time() + in_s)
        try:
            async with scope:
                await body()
            outcome = "returned"
        except TimeoutError:
            outcome = "TimeoutError"
        except asyncio.CancelledError:
            outcome = "CancelledError"
            raise
        finally:
            expired = scope.expired()
            cancelling[0] = asyncio.current_task().cancelling()  # type: ignore[union-attr]

    cancelling = [-1]
    await asyncio.gather(asyncio.create_task(handler()), return_exceptions=True)
    return outcome, expired, cancelling[0]


async def forever() -> None:
    await asyncio.Event().wait()


async def quick() -> None:
    await asyncio.sleep(0)


async def own_timeout() -> None:
    async with asyncio.timeout(0):
        await asyncio.Event().wait()


async def cancelled_from_outside() -> None:
    current = asyncio.current_task()
    assert current is not None
    asyncio.get_running_loop().call_soon(current.cancel)
    await asyncio.Event().wait()


async def cancelled_as_the_deadline_passes() -> None:
    """Another cancellation and the deadline's land in the same turn: the other one wins."""
    current = asyncio.current_task()
    assert current is not None
    asyncio.get_running_loop().call_soon(current.cancel)
    time.sleep(0.05)  # the loop blocked past the deadline (not a timing: any block does)
    await asyncio.Event().wait()


CASES = [
    ("expires", 0.01, forever),
    ("already past", -1.0, forever),
    ("in time", 60.0, quick),
    ("the handler's own timeout", 60.0, own_timeout),
    ("cancelled from outside", 60.0, cancelled_from_outside),
    ("cancelled from outside as it expires", 0.01, cancelled_as_the_deadline_passes),
]


@pytest.mark.parametrize(("case", "in_s", "body"), CASES, ids=[c[0] for c in CASES])
async def test_a_scope_ends_as_asyncio_timeout_at_ends(
    case: str, in_s: float, body: Callable[[], Any]
) -> None:
    expected = await run(SCOPES["asyncio"], in_s, body)
    assert await run(SCOPES["Scope"], in_s, body) == expected
    assert (
        expected
        == {
            "expires": ("TimeoutError", True, 0),
            "already past": ("TimeoutError", True, 0),
            "in time": ("returned", False, 0),
            "the handler's own timeout": ("TimeoutError", False, 0),
            "cancelled from outside": ("CancelledError", False, 1),
            "cancelled from outside as it expires": ("CancelledError", True, 1),
        }[case]
    )


async def test_a_scope_holds_no_dict_no_method_and_no_context_copy() -> None:
    loop = asyncio.get_running_loop()
    scope = Scope(loop.time() + 60)
    assert not hasattr(scope, "__dict__")
    async with scope:
        live = [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
        assert [(h._callback, h._context) for h in live] == [(scope, TIMER_CONTEXT)]
    assert not [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
