"""Test helpers shipped with agentcore: a scripted loopback provider server and pytest fixtures."""
