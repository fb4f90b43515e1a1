"""agentcore: a small asyncio kernel through which every inference of an LLM host runs.

Plugins implement the hooks of `agentcore.hookspecs`, marked with `hookimpl`::

    from agentcore import hookimpl

    @hookimpl
    def on_trace(event):
        print(event.to_json())
"""

from loguru import logger

from agentcore.markers import hookimpl

# A library configures no logging: agentcore is silent until the application asks
# (`agentcore.log.enable_logging`; the `agentcore` command does).
logger.disable("agentcore")

__version__ = "0.1.0"
__all__ = ["__version__", "hookimpl"]
