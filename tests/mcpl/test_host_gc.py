"""The serving host keeps what startup built out of the collector's passes."""

from __future__ import annotations

import gc

from agentcore.mcpl.host import settle_garbage_collector


def test_startup_objects_leave_every_generation_the_collector_walks() -> None:
    built_at_startup = {"plugin": ["settings", "and", "modules"]}
    assert any(o is built_at_startup for o in gc.get_objects())
    try:
        settle_garbage_collector()
        assert gc.get_freeze_count() > 0
        # Frozen objects sit in the permanent generation, which no collection walks.
        assert not any(o is built_at_startup for o in gc.get_objects())
        made_later = {"stream": ["chunk"]}
        assert any(o is made_later for o in gc.get_objects())
    finally:
        gc.unfreeze()
