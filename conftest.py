"""The repository's tests read agentcore's logs (loguru sinks in their fixtures): turn them
on, as the `agentcore` command does. A library logs nothing by default (agentcore.log)."""

from agentcore.log import enable_logging

enable_logging()
