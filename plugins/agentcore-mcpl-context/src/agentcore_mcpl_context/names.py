"""The MCPL names the plugins advertise and send (SPEC §10.5, §12), kept apart from
`agentcore_mcpl_context.wire` so that advertising them does not load the wire: a `serve`
whose servers never see a host turn never needs it (issue 24, idle RSS)."""

LIFECYCLE = "inference/lifecycle"
INFERENCE_LIFECYCLE = "inferenceLifecycle"
MODEL_INFO = "modelInfo"
