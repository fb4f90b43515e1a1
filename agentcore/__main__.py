"""`python -m agentcore` is the `agentcore` command."""

from agentcore.cli import main

main()
