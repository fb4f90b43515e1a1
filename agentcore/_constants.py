"""Every tunable default of agentcore, written once (as anthropic-sdk-python's
`_constants.py`): the settings' defaults and the fixed bounds the code holds to. A module
that uses one imports it from here; the settings reference (docs/settings.md) states the
defaults a deployment can change. It imports nothing, so any module may use it.

Fixed bounds that are no deployment's business stay beside the code they bound (the hooks'
observer backlog, the fleet stores' pool and poll, the JSON-RPC peer's close drain).
"""

from __future__ import annotations

MIB = 1024 * 1024

# -- settings file ------------------------------------------------------------------------

MAX_SETTINGS_BYTES = 1 * MIB
"""The largest settings file read (1 MiB; docs/settings.md). A deployment's is a few kB."""

# -- [inference] ----------------------------------------------------------------------------

PROGRESS_TIMEOUT_S = 120.0
"""``[inference] progress_timeout_s``: the longest a provider may go without visible output."""
REQUEST_TIMEOUT_S = 600.0
"""``[inference] request_timeout_s``: one attempt, whole."""
MAX_STATED_WAIT_S = 600.0
"""``[inference] max_stated_wait_s``: the longest Retry-After a provider is believed."""
STOP_GRACE_S = 5.0
"""How long `Kernel.stop()` waits for in-flight provider calls to end."""

# -- [providers.NAME] -----------------------------------------------------------------------

PROVIDER_CONNECT_TIMEOUT_S = 10.0
PROVIDER_READ_TIMEOUT_S = 300.0
MAX_KEEPALIVE_CONNECTIONS = 20

# -- [fleet] and the stores -------------------------------------------------------------------

FLEET_TIMEOUT_S = 1.0
"""``[fleet] timeout_s``: how long one Redis command may take before the store counts as
unreachable."""

# -- [mcpl] -----------------------------------------------------------------------------------

MCPL_REQUEST_TIMEOUT_S = 30.0
"""``[mcpl] request_timeout_s``: how long the host waits for a server's answer to a request
the host sends (``initialize``, ``featureSets/update``, ``mcpl/manifest``)."""
MCPL_REQUEST_DEADLINE_S = 120.0
"""``[mcpl] request_deadline_s``: four times mcpl-core-ts's own 30 s request timeout, and
room for a long answer from a slow model."""
MAX_MCPL_REQUEST_DEADLINE_S = 86_400.0
"""The most a request deadline may say: a day (and never infinity)."""
MCPL_MAX_FRAME_BYTES = 4 * MIB
"""``[mcpl.servers.NAME] max_frame_bytes``: the largest message a server may send."""
MCPL_SHUTDOWN_GRACE_S = 5.0
"""``[mcpl.servers.NAME] shutdown_grace_s``: stdin closed, how long a server has to exit by
itself."""
MCPL_TERM_GRACE_S = 2.0
"""After SIGTERM, before SIGKILL."""
MCPL_MANIFEST_FETCH_INTERVAL_S = 1.0
"""§17.8: the least time between two `mcpl/manifest` fetches from one server."""
MCPL_HEARTBEAT_S = 20.0
MCPL_CONNECT_TIMEOUT_S = 10.0
RECONNECT_INITIAL_DELAY_S = 0.5
RECONNECT_MAX_DELAY_S = 30.0
RECONNECT_RESET_AFTER_S = 60.0
RECONNECT_CRASH_LOOP_AFTER = 5
PUSH_DEDUP_WINDOW_S = 600.0
"""How long an `eventId`'s answer is remembered (§9.4: servers retry with stable ids)."""
