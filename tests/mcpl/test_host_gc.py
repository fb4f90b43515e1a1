"""The serving host keeps what startup built out of the collector's passes."""

from __future__ import annotations

import gc

from agentcore.mcpl.host import YOUNG_GENERATION, settle_garbage_collector


def test_startup_objects_leave_every_generation_the_collector_walks() -> None:
    built_at_startup = {"plugin": ["settings", "and", "modules"]}
    assert any(o is built_at_startup for o in gc.get_objects())
    thresholds = gc.get_threshold()
    try:
        settle_garbage_collector()
        assert gc.get_freeze_count() > 0
        # Frozen objects sit in the permanent generation, which no collection walks.
        assert not any(o is built_at_startup for o in gc.get_objects())
        made_later = {"stream": ["chunk"]}
        assert any(o is made_later for o in gc.get_objects())
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def test_serving_makes_the_young_generation_large_and_keeps_the_others() -> None:
    """A stream's per-chunk objects should die by reference count, not be promoted."""
    thresholds = gc.get_threshold()
    gc.set_threshold(700, 7, 9)
    try:
        settle_garbage_collector()
        assert gc.get_threshold() == (YOUNG_GENERATION, 7, 9)
        gc.set_threshold(10 * YOUNG_GENERATION, 7, 9)  # a host that chose more keeps it
        settle_garbage_collector()
        assert gc.get_threshold() == (10 * YOUNG_GENERATION, 7, 9)
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
