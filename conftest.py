"""What every test of this repository shares, in one process or across xdist's workers.

The tests read agentcore's logs (loguru sinks in their fixtures): turn them on, as the
`agentcore` command does; a library logs nothing by default (agentcore.log). And a secret
one test registers is forgotten after it, so that the tests a worker happens to run
before another never change how that one's text is redacted or where its chunks break.
"""

from collections.abc import Iterator

import pytest

from agentcore.log import enable_logging
from agentcore.redaction import registered_secrets, restore_secrets

enable_logging()


@pytest.fixture(autouse=True)
def _forget_secrets_after_each_test() -> Iterator[None]:
    saved = registered_secrets()
    yield
    restore_secrets(saved)
