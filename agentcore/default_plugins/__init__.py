"""agentcore's own plugins: ordinary plugins, loaded in every kernel.

Each is registered under its name before any installed plugin, whether or not
entry points are searched, and behaves exactly as an installed plugin would: it is
listed by `agentcore plugins`, ``[plugins] disabled`` blocks it, and a package whose
entry point takes its name replaces it.
"""

BUILTIN: dict[str, str] = {"providers": "agentcore.default_plugins.provider_kinds"}
"""Plugin name -> the module that is the plugin."""
