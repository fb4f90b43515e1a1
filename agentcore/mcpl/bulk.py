"""MCPL SPEC §19 bulk content references: server testimony, the host's private record, the
model-visible stub (RFC-005 revision 3, which §19 incorporates).

A URI-form content block a server sends (a `resource` block by `uri`, an `image` or
`audio` block by `uri`, an MCP `resource_link`) is *testimony* about a payload: every
field is a claim. `read_reference` turns it into a `BulkReference`, the host-private
record (its raw `uri` stays here), applying §19's one invalid-field rule: an optional
field that breaks its schema bound is dropped as if absent, the block stays, and a
`disposition` of ``never`` stays in force (§19 "Schema"). What the model sees is `stub`:
a host-generated reference id, the display label, the claimed type and size marked as
claimed, and one line of provenance; never the URI, never payload bytes (§19 "The
model-visible stub"). Nothing here fetches: receipt never triggers a fetch (§19
"Dereference policy"); `agentcore.mcpl.bulk_fetch` does, only when ``[mcpl.bulk]``
allows it.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import secrets
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

Disposition: TypeAlias = Literal["never", "ref"]

MAX_URI_CHARS = 4096
"""§19's schema bounds (the emitter's outer fence): a longer `uri` rejects the block."""
MAX_NAME_CHARS = 255
MAX_MIME_CHARS = 255
MAX_EXPIRES_CHARS = 64
MAX_SIZE_BYTES = 2**53 - 1
DIGEST = re.compile(r"sha256:[A-Za-z0-9_-]{43}")

LABEL_CHARS = 80
"""The host's display bound for a server-supplied string in a stub (§19: stub size is
independent of every server-supplied field's length)."""
TRUNCATED = "…[truncated]"

REFERENCE_KINDS = frozenset({"resource", "image", "audio", "resource_link"})


@dataclass(frozen=True, slots=True)
class BulkReference:
    """The host-private record of one received reference (§19 "The host-private
    reference record"): never sent anywhere, never model-visible as a whole."""

    id: str
    """Host-generated, opaque, never reused (``ref_`` and 12 random hex digits)."""
    kind: str
    uri: str = field(repr=False)
    """Private: never in a stub, a trace or a log (it can be a bearer capability)."""
    mime_type: str | None
    size_bytes: int | None
    digest: str | None
    expires_at: str | None
    name: str | None
    disposition: Disposition | None
    rejected: tuple[str, ...] = ()
    """Optional fields dropped by the invalid-field rule, by name."""

    def expired(self, now: dt.datetime | None = None) -> bool:
        """§19 "Lifetime": past `expiresAt`, or an `expiresAt` that cannot be read (fail
        closed: never immortal). No `expiresAt`: not expired."""
        if self.expires_at is None:
            return False
        when = parse_instant(self.expires_at)
        return when is None or when <= (now or dt.datetime.now(dt.UTC))

    @property
    def label(self) -> str | None:
        """The `name` as a display label: control and bidi characters stripped, bounded."""
        return None if self.name is None else display(self.name)

    def stub(self, provenance: str) -> str:
        """What the model sees in place of the payload (§19): no URI, no bytes."""
        parts = [f"bulk reference {self.id}"]
        if self.label:
            parts.append(json.dumps(self.label, ensure_ascii=False))
        if self.mime_type is not None:
            parts.append(f"type {display(self.mime_type)} (claimed)")
        if self.size_bytes is not None:
            parts.append(f"{self.size_bytes} bytes (claimed)")
        parts.append(f"not shown; {display(provenance)}")
        return "[" + ", ".join(parts) + "]"


def new_reference_id() -> str:
    return "ref_" + secrets.token_hex(6)


def is_reference(block: Any) -> bool:
    """A URI-form block §19 covers: a `resource` by `uri` (no embedded `resource` object),
    an `image` or `audio` by `uri` without `data`, or an MCP `resource_link`."""
    if not isinstance(block, dict) or block.get("type") not in REFERENCE_KINDS:
        return False
    if "data" in block or isinstance(block.get("resource"), dict):
        return False
    return "uri" in block


def withheld(block: Any) -> str | None:
    """Why an inline block must not reach the model, or None: inline `data` carrying a
    `disposition` (§19: fail closed, vector 2), or `data` and `uri` at once (the schema's
    `oneOf` refuses it)."""
    if not isinstance(block, dict) or "data" not in block:
        return None
    if "uri" in block:
        return "it carries both data and uri (§19: refused, its data withheld)"
    if "disposition" in block:
        return "inline data with a disposition (§19: fail closed, its data withheld)"
    return None


def read_reference(block: dict[str, Any]) -> BulkReference | str:
    """The record of a URI-form block (`is_reference`), or why the block is rejected whole
    (its `uri`, the one required field, breaks the schema)."""
    uri = block.get("uri")
    if not isinstance(uri, str) or not uri:
        return "its uri is not a non-empty string"
    if len(uri) > MAX_URI_CHARS:
        return f"its uri is over {MAX_URI_CHARS} characters"
    kind = str(block["type"])
    rejected: list[str] = []
    size_field = "size" if kind == "resource_link" else "sizeBytes"  # §19: MCP's ResourceLink
    return BulkReference(
        id=new_reference_id(),
        kind=kind,
        uri=uri,
        mime_type=_text(block, "mimeType", MAX_MIME_CHARS, rejected),
        size_bytes=_size(block, size_field, rejected),
        digest=_digest(block, rejected),
        expires_at=_text(block, "expiresAt", MAX_EXPIRES_CHARS, rejected),
        name=_text(block, "name", MAX_NAME_CHARS, rejected),
        # §19: a ResourceLink carries no disposition: absent testimony, host policy.
        disposition=None if kind == "resource_link" else _disposition(block, rejected),
        rejected=tuple(rejected),
    )


def _text(block: dict[str, Any], field: str, limit: int, rejected: list[str]) -> str | None:
    value = block.get(field)
    if value is None and field not in block:
        return None
    if isinstance(value, str) and len(value) <= limit:
        return value
    rejected.append(field)
    return None


def _size(block: dict[str, Any], field: str, rejected: list[str]) -> int | None:
    if field not in block:
        return None
    value = block[field]
    # An integer within 0..2**53-1; a bool, 3.5, -1, 2**53 are rejected as a field (vector 15).
    if type(value) is int and 0 <= value <= MAX_SIZE_BYTES:
        return value
    rejected.append(field)
    return None


def _digest(block: dict[str, Any], rejected: list[str]) -> str | None:
    if "digest" not in block:
        return None
    value = block["digest"]
    if isinstance(value, str) and DIGEST.fullmatch(value):
        return value
    rejected.append("digest")
    return None


def _disposition(block: dict[str, Any], rejected: list[str]) -> Disposition | None:
    if "disposition" not in block:
        return None
    value = block["disposition"]
    if value == "never":
        return "never"
    if value == "ref":
        return "ref"
    # Unknown testimony: treated as absent, never as wider than `ref` (§19: subtractive only).
    rejected.append("disposition")
    return None


def model_content(
    blocks: list[Any], provenance: str
) -> tuple[tuple[Any, ...], tuple[BulkReference, ...]]:
    """Content blocks a server sent, as they may reach a model (§19: applied before any
    wake or context assembly): each reference as a text block holding its stub, a block
    whose inline data must be withheld left out, the rest as sent; and the references'
    records, in order. A reference whose `uri` rejects it whole is left out too."""
    out: list[Any] = []
    references: list[BulkReference] = []
    for block in blocks:
        if withheld(block) is not None:
            continue
        if is_reference(block):
            reference = read_reference(block)
            if isinstance(reference, str):
                continue
            references.append(reference)
            block = {"type": "text", "text": reference.stub(provenance)}
        out.append(block)
    return tuple(out), tuple(references)


def display(text: str, limit: int = LABEL_CHARS) -> str:
    """A server-supplied string as it may appear in a stub: control, format (bidi
    overrides, zero-width) and separator characters removed, then cut to `limit`
    characters with the truncation marked (§19 "Stub bounds", vectors 17, 18)."""
    import unicodedata  # here: an idle host that shows no stub never loads its table

    head = text[: limit * 4]  # bounded work whatever the input's length
    clean = "".join(ch for ch in head if unicodedata.category(ch)[0] not in "CZ" or ch == " ")
    if len(clean) > limit or len(text) > len(head):
        return clean[:limit] + TRUNCATED
    return clean


def parse_instant(text: str) -> dt.datetime | None:
    """An ISO-8601 instant (a date alone is midnight UTC; no offset is UTC), or None."""
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)


__all__ = [
    "LABEL_CHARS",
    "MAX_URI_CHARS",
    "TRUNCATED",
    "BulkReference",
    "Disposition",
    "display",
    "is_reference",
    "model_content",
    "new_reference_id",
    "parse_instant",
    "read_reference",
    "withheld",
]
