"""pytest fixtures for agentcore, registered through the ``pytest11`` entry point.

The loopback provider fixtures land with the providers work (issue 3).
"""
