"""The `agentcore` command: serve, infer, plugins, settings, demo (docs/cli.md).

Exit codes: 0 success; 1 the inference (or the host) failed; 2 the settings
or plugins are unusable, or the command line is wrong; 130 interrupted.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import click

from agentcore import __version__
from agentcore.cli_output import say as say
from agentcore.inference import HostTurn, Message, Request
from agentcore.log import configure_logging
from agentcore.redaction import shown_setting
from agentcore.signals import StartupSignals

# The kernel and the settings (pydantic) are imported where a command loads them: `serve` has
# its signal handlers in before anything slow. `infer`'s run is `agentcore.cli_infer`, and
# rich (its status line on a terminal) is imported there, at that command only.
if TYPE_CHECKING:
    from agentcore.cli_infer import InferStatus as InferStatus
    from agentcore.cli_infer import WaitLine as WaitLine
    from agentcore.kernel import Kernel

settings_option = click.option(
    "--settings",
    "settings_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The deployment's TOML settings file (default: $AGENTCORE_SETTINGS, else defaults).",
)


def load_kernel(settings_path: Path | None, command: str | None = None, **kwargs: Any) -> Kernel:
    """The kernel of `settings_path` for `command` (`PluginContext.command`); exit 2 on
    settings or plugins that cannot load, saying why."""
    from agentcore.kernel import Kernel, PluginLoadError
    from agentcore.settings import SettingsError

    try:
        kernel = Kernel.load(settings_path, **kwargs)
    except (SettingsError, PluginLoadError) as exc:
        say(f"agentcore: {exc}", err=True)
        raise SystemExit(2) from None
    kernel.command = command
    return kernel


@click.group()
@click.version_option(__version__, prog_name="agentcore")
@click.pass_context
def main(context: click.Context) -> None:
    """agentcore: the kernel every inference of an LLM host runs through."""
    if context.invoked_subcommand == "serve":
        context.obj = StartupSignals.install()  # first: before anything slow (agentcore.signals)
    configure_logging()


@main.command()
@settings_option
def plugins(settings_path: Path | None) -> None:
    """Every plugin found, with its distribution, version, state and the provider kinds
    it contributes."""
    kernel = load_kernel(settings_path, strict=False)
    rows = [("NAME", "DISTRIBUTION", "VERSION", "STATE", "KINDS")]
    rows += [
        (r.name, r.distribution, r.version, r.describe_state(), ",".join(r.kinds))
        for r in kernel.records
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        cells = [cell.ljust(w) for cell, w in zip(row, widths, strict=False)]
        say(("  ".join(cells) + "  " + row[4]).rstrip())


@main.command("settings")
@settings_option
def settings_command(settings_path: Path | None) -> None:
    """The effective settings, secrets redacted, and where each value came from."""
    from agentcore.settings import dotted, flatten

    kernel = load_kernel(settings_path, strict=False)
    loaded = kernel.loaded
    for path, value in flatten(loaded.settings.model_dump(mode="json")):
        shown = json.dumps(shown_setting(path, value))
        say(f"{dotted(path)} = {shown}    # {loaded.source_of(path)}")
    for name, provider in sorted(loaded.settings.providers.items()):
        if provider.api_key_env:
            state = "[REDACTED]" if provider.api_key() else "(not set)"
            say(f"providers.{name}.api_key = {state}    # environment {provider.api_key_env}")


def utf8(context: click.Context, parameter: click.Parameter, value: str | None) -> str | None:
    """`value` as given, refused (exit 2) when it is not valid UTF-8: Python hands on the
    bytes it could not decode as lone surrogates, which no provider or MCPL server takes."""
    if value is None:
        return value
    try:
        value.encode()
    except UnicodeEncodeError:
        raw = os.fsencode(value)
        try:
            raw.decode()
            where = ""
        except UnicodeDecodeError as exc:
            where = f": byte 0x{raw[exc.start]:02x} at offset {exc.start}"
        raise click.BadParameter(f"is not valid UTF-8{where}") from None
    return value


@main.command()
@settings_option
@click.option("--model", required=True, callback=utf8, help="The model reference, NAME:MODEL.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=1024, show_default=True)
@click.option("--stream/--no-stream", default=True, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print only the result object on stdout.")
@click.option(
    "--conversation",
    default=None,
    callback=utf8,
    help="Run the inference as one of the host's own turns in this conversation: the "
    "configured MCPL servers take part (context hooks, inference lifecycle).",
)
@click.option(
    "--turn",
    type=click.IntRange(min=0),
    default=None,
    help="The turn's index in the conversation, from 0 (default 0). Needs --conversation.",
)
@click.argument("prompt", callback=utf8)
def infer(
    settings_path: Path | None,
    model: str,
    max_tokens: int,
    stream: bool,
    as_json: bool,
    conversation: str | None,
    turn: int | None,
    prompt: str,
) -> None:
    """One inference through the kernel, with every plugin applied."""
    if turn is not None and conversation is None:
        raise click.UsageError("--turn needs --conversation")
    if conversation is not None and not conversation:
        raise click.UsageError("--conversation needs a non-empty id")
    from agentcore.cli_infer import InferStatus, run_host_turn, run_inference

    status: dict[str, object] = {}
    if sys.stderr.isatty():
        from rich.console import Console

        status["infer-status"] = InferStatus(Console(stderr=True))
    from agentcore.kernel import PluginLoadError
    from agentcore.settings import model_reference_problem

    kernel = load_kernel(settings_path, "infer", plugins=status)
    problem = model_reference_problem(model, kernel.settings.providers)
    if problem is not None:
        click.echo(f"agentcore: --model: {problem}", err=True)
        raise SystemExit(2)
    request = Request(model, [Message.user(prompt)], max_tokens=max_tokens)
    run = run_inference
    if conversation is not None:
        request.turn = HostTurn(conversation, turn or 0, prompt)
        run = run_host_turn
    try:
        code = asyncio.run(run(kernel, request, stream, as_json))
    except KeyboardInterrupt:
        code = 130
    except PluginLoadError as exc:  # a plugin failed to start, as `serve` says it
        say(f"agentcore: {exc}", err=True)
        code = 2
    raise SystemExit(code)


CONSOLE_LISTEN_ENV = "AGENTCORE_CONSOLE__LISTEN"
"""``[console] listen`` as an override: how ``serve --console ADDR`` turns the page on."""


@main.command()
@settings_option
@click.option(
    "--console",
    "console",
    metavar="ADDR",
    default=None,
    help="Serve the console page at http://ADDR/ for this run (HOST:PORT; [console] listen).",
)
def serve(settings_path: Path | None, console: str | None) -> None:
    """The host: connect to every configured MCPL server and serve it until signalled."""
    startup = click.get_current_context().find_object(StartupSignals) or StartupSignals.install()
    if startup.stopping:  # signalled while starting: nothing is running yet
        raise SystemExit(0)
    from agentcore.kernel import PluginLoadError

    if console is None:
        kernel = load_kernel(settings_path, "serve")
    else:
        environ = {**os.environ, CONSOLE_LISTEN_ENV: console}
        kernel = load_kernel(settings_path, "serve", environ=environ)
        if not any(r.name == "console" and r.state == "active" for r in kernel.records):
            say(
                "agentcore: --console needs the console plugin (package agentcore-console), "
                "which is not installed or is disabled",
                err=True,
            )
            raise SystemExit(2)
    # Imported after the settings are validated, not before: its modules then fill memory
    # that validating the settings freed instead of taking new pages (issue 24: idle RSS).
    from agentcore.mcpl.host import run_host

    try:
        code = asyncio.run(run_host(kernel, startup=startup))
    except PluginLoadError as exc:  # a plugin failed to start (a console with no token, say)
        say(f"agentcore: {exc}", err=True)
        code = 2
    raise SystemExit(code)


@main.group()
def mcpl() -> None:
    """MCPL tools."""


@mcpl.command("digest")
@click.argument("file", required=False, type=click.File("rb"))
def mcpl_digest(file: BinaryIO | None) -> None:
    """The MCPL §17.2 revision of a manifest (the `experimental.mcpl` object as JSON) read
    from FILE, or from stdin without one. A refused input exits 1 saying why."""
    from agentcore.mcpl.digest import DigestRefused, NotJson, manifest_digest, read_json

    source = file if file is not None else sys.stdin.buffer
    data = source.read()
    try:
        manifest = read_json(data)
    except NotJson as exc:  # not JSON, not UTF-8, NaN, a duplicate name, too deep
        say(f"agentcore: mcpl digest: the input is not JSON: {exc}", err=True)
        raise SystemExit(1) from None
    try:
        revision = manifest_digest(manifest)
    except DigestRefused as exc:
        say(f"agentcore: mcpl digest: refused: {exc}", err=True)
        raise SystemExit(1) from None
    say(revision)


@mcpl.command("uri")
@click.argument("uri")
def mcpl_uri(uri: str) -> None:
    """The three values of an MCPL endpoint URI (§18, RFC-004) as JSON: `configuredUri` (as
    written), `canonicalUri` (the mcpl:// form), `resolvedTransport` (what is dialled). A
    refused form exits 1 saying why."""
    from agentcore.mcpl.endpoint import EndpointError, resolve

    try:
        endpoint = resolve(uri)
    except EndpointError as exc:
        say(f"agentcore: mcpl uri: refused: the URI {exc}", err=True)
        raise SystemExit(1) from None
    values = {
        "configuredUri": endpoint.configured,
        "canonicalUri": endpoint.canonical,
        "resolvedTransport": endpoint.resolved,
    }
    say(json.dumps(values, ensure_ascii=False))


@main.command()
def demo() -> None:
    """The self-contained demo: no key, no network."""
    from agentcore.demo import run_demo

    raise SystemExit(asyncio.run(run_demo()))


@main.command()
@settings_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of a table.")
def spend(settings_path: Path | None, as_json: bool) -> None:
    """Spend in the current window per budget (per MCPL server, per provider) and its
    limit, read from the [fleet] store: with Redis, the whole fleet's."""
    kernel = load_kernel(settings_path, "spend")
    reports = asyncio.run(_spend_reports(kernel))
    if as_json:
        say(json.dumps(reports[0] if len(reports) == 1 else {"reports": reports}))
        return
    for report in reports:
        say(f"window: {report.get('window')} (resets at {report.get('resetsAt')})")
        for row in report.get("budgets", []):
            say(
                f"{row['scope']:<28} ${row['spentUsd']:.4f} of ${row['maxUsd']:.4f}"
                + (f" (${row['reservedUsd']:.4f} reserved in flight)" if row["reservedUsd"] else "")
            )
    if not reports:
        say("no budgets: the budget plugin is disabled, or [budget] names none")


async def _spend_reports(kernel: Kernel) -> list[dict[str, Any]]:
    from agentcore.inference import InferenceError, PluginError
    from agentcore.kernel import PluginLoadError

    try:
        await kernel.start()
    except PluginLoadError as exc:  # a plugin failed to start, as `serve` says it
        say(f"agentcore: {exc}", err=True)
        raise SystemExit(2) from None
    try:
        answers = await kernel.hooks.spend_report()
    except (PluginError, InferenceError) as exc:  # the store unreachable, a plugin's bug
        say(f"agentcore: spend: {exc}", err=True)
        raise SystemExit(1) from None
    finally:
        await kernel.stop()
    return [dict(answer) for _, answer in answers if answer]


def __getattr__(name: str) -> Any:
    """`InferStatus` and `WaitLine`, importable from here as before, from `agentcore.cli_infer`."""
    if name in ("InferStatus", "WaitLine"):
        from agentcore import cli_infer

        return getattr(cli_infer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
