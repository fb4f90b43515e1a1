"""Where every line the `agentcore` command prints goes out: through the redaction boundary.
Its own module so that `agentcore.cli` and the commands' modules it imports late
(`agentcore.cli_infer`) share it without an import circle."""

from __future__ import annotations

import click

from agentcore.redaction import redact


def say(text: str, *, err: bool = False) -> None:
    """Every line the command prints goes out here, through the redaction boundary: an
    error message may quote a provider's reply, and some providers echo the key."""
    click.echo(redact(text), err=err)
