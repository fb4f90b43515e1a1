"""Example MCPL servers shipped inside the package, so `agentcore demo` runs from a wheel.

Each is a standalone script (standard library only) that a host starts over stdio by path,
e.g. `command = ["python3", "agentcore/examples/memory_server.py"]` in a source checkout.
"""
