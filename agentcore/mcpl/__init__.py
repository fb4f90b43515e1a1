"""MCPL (MCP Live) host: JSON-RPC connections to servers, transports, grants."""
