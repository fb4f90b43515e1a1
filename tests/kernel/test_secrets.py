"""Secrets never reach a log line, a trace, or any text that leaves the process."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest
from kernel_support import collect, request
from loguru import logger
from pydantic import SecretStr

from agentcore import hookimpl
from agentcore.inference import Failed, InferenceError
from agentcore.log import REDACTED, configure_logging, register_secret
from agentcore.plugins import PluginContext, SettingsSection
from agentcore.redaction import StreamRedactor, redact, redact_url
from agentcore.settings import ProviderSettings, Section, load_settings
from agentcore.traces import JsonlTraceSink
from agentcore.tracing import TraceEvent

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


# -- the redaction boundary (agentcore.redaction) -------------------------------------------


class FieldRecorder:
    """Keeps each trace's fields exactly as an observer receives them."""

    def __init__(self) -> None:
        self.fields: list[dict[str, object]] = []

    @hookimpl
    def on_trace(self, event: TraceEvent) -> None:
        self.fields.append(event.fields)


async def test_observers_see_trace_fields_already_redacted(make_kernel):
    register_secret(KEY)
    recorder = FieldRecorder()
    kernel = make_kernel(plugins={"recorder": recorder})
    async with kernel:
        await kernel.emit("acme:note", header=f"Bearer {KEY}", nested={"keys": [KEY, "plain"]})
    (note,) = [f for f in recorder.fields if "header" in f]
    assert note == {"header": f"Bearer {REDACTED}", "nested": {"keys": [REDACTED, "plain"]}}


def test_an_inference_error_built_from_an_echoing_body_is_redacted_at_the_source():
    register_secret(KEY)
    error = InferenceError("auth", f"Incorrect API key provided: Bearer {KEY}", status=401)
    assert error.message == f"Incorrect API key provided: Bearer {REDACTED}"
    assert KEY not in str(error) + error.describe() + repr(error)


CONFIGURED = {
    "pw-in-url-9876": "a base_url's password",
    "query-key-5555": "a base_url's ?key=",
    "hdr-bearer-7777": "an Authorization header's token",
    "hdr-xkey-8888": "an x-api-key header",
    "goog-key-6666": "an x-goog-api-key header",
    "cookie-value-4444": "a cookie",
    "custom-token-3333": "a header whose name holds 'token'",
    "ws-token-2222": "a server url's ?access_token=",
    "lone-user-token-1111": "a server url's userinfo with no password",
    "env-token-0000": "a server env variable named *TOKEN",
    "sk-from-environ-9999": "the key api_key_env names",
}
PLAIN = ("agentcore-test/1", "verbose", "llm.example", "region=eu")


def test_every_credential_the_settings_configure_is_registered_when_they_load(tmp_path):
    path = tmp_path / "secrets.toml"
    path.write_text(
        """
[providers.p]
kind = "openai-compatible"
base_url = "https://me:pw-in-url-9876@llm.example/v1?key=query-key-5555&region=eu"
api_key_env = "P_KEY"
[providers.p.headers]
Authorization = "Bearer hdr-bearer-7777"
x-api-key = "hdr-xkey-8888"
x-goog-api-key = "goog-key-6666"
Cookie = "session=cookie-value-4444"
X-Custom-Token = "custom-token-3333"
User-Agent = "agentcore-test/1"

[mcpl.servers.ws]
url = "wss://mcpl.example/ws?access_token=ws-token-2222"
[mcpl.servers.lone]
url = "wss://lone-user-token-1111@mcpl.example/ws"
[mcpl.servers.stdio]
command = ["server"]
env = {MCPL_API_TOKEN = "env-token-0000", MODE = "verbose", AUTH_ENABLED = "true"}
"""
    )
    load_settings(path, environ={"P_KEY": "sk-from-environ-9999"})
    for secret, what in CONFIGURED.items():
        assert redact(f"echoed: {secret}!") == f"echoed: {REDACTED}!", what
    for value in PLAIN:
        assert redact(value) == value
    # A short value is never registered: "true" would otherwise be masked in every frame.
    assert redact('{"stream":true}') == '{"stream":true}'


class VaultSettings(Section):
    token: SecretStr | None = None
    fallbacks: dict[str, SecretStr] = {}
    region: str = "eu-west-1-region"


class VaultPlugin:
    """A plugin whose section declares its credentials `SecretStr`, and which traces a
    message that quotes them (as a careless error message would)."""

    def __init__(self) -> None:
        self.context: PluginContext | None = None

    @hookimpl
    def agentcore_settings(self) -> SettingsSection:
        return SettingsSection("vault", VaultSettings)

    @hookimpl
    def agentcore_start(self, context: PluginContext) -> None:
        self.context = context


@pytest.mark.parametrize("where", ["file", "environment"])
async def test_a_plugin_setting_declared_secret_is_registered_when_the_settings_load(
    make_kernel, where
):
    token, fallback = f"vault-token-{where}-8181", f"vault-fallback-{where}-2727"
    env, toml = {}, None
    if where == "file":
        toml = f'[vault]\ntoken = "{token}"\nfallbacks = {{ b = "{fallback}" }}\n'
    else:
        fallbacks = json.dumps({"b": fallback})
        env = {"AGENTCORE_VAULT__TOKEN": token, "AGENTCORE_VAULT__FALLBACKS": fallbacks}
    vault, recorder = VaultPlugin(), FieldRecorder()
    async with make_kernel(plugins={"vault": vault, "recorder": recorder}, env=env, toml=toml):
        assert vault.context is not None
        assert vault.context.settings.token.get_secret_value() == token  # read as given
        await vault.context.emit("vault:refused", error=f"token {token} refused, {fallback} too")
    (refused,) = [f for f in recorder.fields if "error" in f]
    assert refused["error"] == f"token {REDACTED} refused, {REDACTED} too"
    # A plain string in the same section is not a secret.
    assert redact("eu-west-1-region") == "eu-west-1-region"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "https://me:pw@host/v1?key=k1&region=eu",
            "https://[REDACTED]@host/v1?key=[REDACTED]&region=eu",
        ),
        ("wss://tok@host/ws", "wss://[REDACTED]@host/ws"),
        (
            "https://host/v1?api_key=a&sig=b&apikey=c&x=1",
            "https://host/v1?api_key=[REDACTED]&sig=[REDACTED]&apikey=[REDACTED]&x=1",
        ),
        ("https://host:8443/v1", "https://host:8443/v1"),
    ],
)
def test_a_url_is_shown_with_only_its_secret_parts_masked(url, shown):
    assert redact_url(url) == shown


def test_a_secret_is_found_inside_json_whatever_characters_it_holds():
    secret = 'p"ss\\wörd-12345'
    register_secret(secret)
    for encoded in (json.dumps({"m": secret}), json.dumps({"m": secret}, ensure_ascii=False)):
        assert secret not in json.loads(redact(encoded))["m"]
        assert json.loads(redact(encoded)) == {"m": REDACTED}


# -- streamed text ---------------------------------------------------------------------------

STREAM_KEY = "sk-stream-7c1e5a93b2d4"


def streamed(chunks: list[str]) -> list[str]:
    """What a `StreamRedactor` lets out for each chunk, then its flush."""
    redactor = StreamRedactor()
    return [redactor.feed(chunk) for chunk in chunks] + [redactor.flush()]


@pytest.mark.parametrize("split", range(1, len(STREAM_KEY)))
def test_a_secret_split_across_two_chunks_is_masked(split):
    register_secret(STREAM_KEY)
    out = streamed(["key: ", STREAM_KEY[:split], STREAM_KEY[split:], " end"])
    assert "".join(out) == "key: [REDACTED] end"
    # Nothing waits longer than the secret's start: the masked key goes out with its end.
    assert out[:3] == ["key: ", "", "[REDACTED]"]


def test_a_secret_in_many_chunks_with_text_around_is_masked():
    register_secret(STREAM_KEY)
    text = f"a {STREAM_KEY}, then {STREAM_KEY}{STREAM_KEY}. sk- and s are not keys"
    chunks = [text[i : i + 3] for i in range(0, len(text), 3)]
    out = streamed(chunks)
    assert "".join(out) == redact(text)
    assert STREAM_KEY not in "".join(out)


def test_only_a_tail_that_starts_a_secret_is_held_and_never_longer():
    register_secret(STREAM_KEY)
    redactor = StreamRedactor()
    # (Each chunk ends in a "!" and a newline: no secret the other tests register holds a
    # "!", and a start of one would be held with the whitespace after it.)
    assert redactor.feed("no key here!\n") == "no key here!\n"
    assert redactor.feed("almost: sk-str") == "almost: "
    # The held tail goes out with the next chunk once it is clearly no key.
    assert redactor.feed("ange!\n") == "sk-strange!\n"
    # The most held back: the key but for its last character, let out at the end.
    assert redactor.feed("x" + STREAM_KEY[:-1]) == "x"
    assert redactor.flush() == STREAM_KEY[:-1]
    assert redactor.flush() == ""


def variants(key: str) -> list[str]:
    """`key` upper-cased, title-cased, and split by whitespace at every place."""
    found = [key.upper(), key.title()]
    for at in range(1, len(key)):
        for gap in (" ", "\n", " \n  "):
            found.append(key[:at] + gap + key[at:])
    found.append(key[:5].upper() + "\t" + key[5:])
    return found


@pytest.mark.parametrize("variant", variants(STREAM_KEY))
def test_a_secret_in_another_case_or_split_by_whitespace_is_masked_in_whole_text(variant):
    register_secret(STREAM_KEY)
    assert redact(f"key: {variant} end") == "key: [REDACTED] end"
    # Inside a JSON frame, a line break is an escape.
    frame = json.dumps({"delta": f"key: {variant} end"})
    assert json.loads(redact(frame)) == {"delta": "key: [REDACTED] end"}


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8])
def test_a_secret_in_another_case_or_split_by_whitespace_is_masked_in_streamed_text(size):
    register_secret(STREAM_KEY)
    for variant in variants(STREAM_KEY):
        text = f"key: {variant} end"
        chunks = [text[i : i + size] for i in range(0, len(text), size)]
        assert "".join(streamed(chunks)) == "key: [REDACTED] end", (variant, size)


def test_text_that_only_shares_a_piece_with_a_secret_is_left_as_it_is():
    register_secret(STREAM_KEY)
    text = f"{STREAM_KEY[:9]} and {STREAM_KEY[9:]} are halves, apart"
    assert redact(text) == text
    assert "".join(streamed([text[i : i + 4] for i in range(0, len(text), 4)])) == text
