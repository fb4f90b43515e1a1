"""Secrets never reach a log line or a trace line."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest
from kernel_support import collect, request
from loguru import logger

from agentcore import hookimpl
from agentcore.inference import Failed, InferenceError
from agentcore.log import REDACTED, configure_logging, register_secret
from agentcore.settings import ProviderSettings
from agentcore.traces import JsonlTraceSink, TraceEvent

KEY = "sk-test-3f9a8c7e6d5b4a39"


@pytest.fixture
def stderr_logs(capsys: pytest.CaptureFixture[str]) -> Iterator[pytest.CaptureFixture[str]]:
    """agentcore's own log setup (stderr, redacted), restored to loguru's default after."""
    configure_logging("DEBUG")
    yield capsys
    logger.remove()
    logger.add(sys.stderr)


def test_a_registered_secret_never_appears_in_a_log_line(stderr_logs):
    register_secret(KEY)
    logger.info("calling the provider with key {}", KEY)
    logger.warning(f"retrying with {KEY!r}")
    try:
        raise RuntimeError(f"the provider rejected {KEY}")
    except RuntimeError:
        logger.exception("the attempt failed")
    err = stderr_logs.readouterr().err
    assert "calling the provider with key" in err
    assert "RuntimeError: the provider rejected" in err  # the traceback is there...
    assert KEY not in err  # ...without the key
    assert err.count(REDACTED) >= 3


def test_header_shaped_secrets_are_redacted_even_unregistered(stderr_logs):
    logger.info("sent Authorization: Bearer abc-unregistered-123 and x-api-key=zz-unregistered")
    err = stderr_logs.readouterr().err
    assert "abc-unregistered-123" not in err
    assert "zz-unregistered" not in err
    assert f"Authorization: {REDACTED}" in err


def test_a_key_resolved_from_api_key_env_is_registered(stderr_logs):
    key = "sk-resolved-77aa88bb99cc"
    ProviderSettings(kind="echo", api_key_env="ACME_KEY").api_key({"ACME_KEY": key})
    logger.info("the key is {}", key)
    err = stderr_logs.readouterr().err
    assert key not in err
    assert "the key is [REDACTED]" in err


def test_the_log_level_comes_from_agentcore_log_level(stderr_logs, monkeypatch):
    monkeypatch.setenv("AGENTCORE_LOG_LEVEL", "warning")
    configure_logging()
    logger.info("quiet")
    logger.warning("loud")
    err = stderr_logs.readouterr().err
    assert "quiet" not in err
    assert "loud" in err


class LeakyObserver:
    """Raises with the key in its message, as a careless plugin would."""

    @hookimpl
    def on_trace(self, event):
        if event.type == "inference:fail":
            raise RuntimeError(f"could not forward {event.type} with {KEY}")


async def test_a_registered_secret_never_appears_in_a_trace_line_or_log(
    make_kernel, scripted, tmp_path, stderr_logs
):
    register_secret(KEY)
    path = tmp_path / "traces.jsonl"
    scripted([InferenceError("auth", f"key {KEY} was refused", status=401)])
    kernel = make_kernel(
        plugins={"jsonl-traces": JsonlTraceSink, "leaky": LeakyObserver()},
        env={"AGENTCORE_TRACES__JSONL": str(path)},
    )
    async with kernel:
        (failed,) = await collect(kernel.stream(request()))
        await kernel.emit("acme:note", header=f"Authorization: Bearer {KEY}", key=KEY)
    assert isinstance(failed, Failed)
    text = path.read_text()
    assert KEY not in text
    lines = [json.loads(line) for line in text.splitlines()]
    assert [x["type"] for x in lines] == ["inference:start", "inference:fail", "acme:note"]
    assert lines[1]["error"] == f"auth 401: key {REDACTED} was refused"
    assert lines[2]["key"] == REDACTED
    err = stderr_logs.readouterr().err
    assert "plugin 'leaky' failed in on_trace" in err
    assert KEY not in err


def test_trace_to_json_redacts():
    register_secret(KEY)
    line = TraceEvent("x", {"nested": {"deep": [KEY]}}).to_json()
    assert KEY not in line
    assert json.loads(line)["nested"] == {"deep": [REDACTED]}
