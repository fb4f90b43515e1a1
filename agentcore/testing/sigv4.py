"""The loopback server's check of an AWS request: each SigV4 signature recomputed with
botocore's own signer, as AWS checks it; a bearer token (a Bedrock API key) is taken as
it comes. A request that fails is answered 403 in AWS's shape (``x-amzn-ErrorType``)."""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable, Mapping

from aiohttp import web

AwsCredentials = Mapping[str, str] | Callable[[str], str | None]
"""The keys the server knows: access key id -> secret key (or a function answering it)."""

_SCHEME = "AWS4-HMAC-SHA256 "


def _deny(name: str, message: str) -> web.Response:
    headers = {"x-amzn-errortype": f"{name}:http://internal.amazon.com/coral/com.amazon.coral/"}
    body = json.dumps({"message": message}).encode()
    return web.Response(status=403, body=body, headers=headers, content_type="application/json")


def refusal(request: web.Request, body: bytes, known: AwsCredentials | None) -> web.Response | None:
    """None when `request` may pass; else the 403 AWS would answer."""
    auth = request.headers.get("authorization", "")
    if auth[:7].lower() == "bearer " and auth[7:].strip():
        return None
    if not auth.startswith(_SCHEME):
        return _deny("MissingAuthenticationTokenException", "Missing Authentication Token")
    try:
        fields = dict(p.strip().split("=", 1) for p in auth[len(_SCHEME) :].split(","))
        access, _, region, service, _ = fields["Credential"].split("/")
        signed = fields["SignedHeaders"].split(";")
        stamp = request.headers["x-amz-date"]
    except (KeyError, ValueError):
        return _deny("IncompleteSignatureException", "The request signature is incomplete")
    secret = known(access) if callable(known) else (known or {}).get(access)
    if secret is None:
        return _deny(
            "UnrecognizedClientException", "The security token included in the request is invalid."
        )
    expected = signature(request, body, signed, stamp, (access, secret), (region, service))
    if not hmac.compare_digest(expected, fields.get("Signature", "")):
        return _deny(
            "InvalidSignatureException",
            "The request signature we calculated does not match the signature you provided.",
        )
    return None


def signature(
    request: web.Request,
    body: bytes,
    signed: list[str],
    stamp: str,
    key: tuple[str, str],
    scope: tuple[str, str],
) -> str:
    """The signature botocore computes for the request as received, at its own date."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import ReadOnlyCredentials

    headers = {name: request.headers.get(name, "") for name in signed}
    url = f"{request.scheme}://{request.host}{request.raw_path}"
    aws = AWSRequest(method=request.method, url=url, data=body, headers=headers)
    aws.context["timestamp"] = stamp
    token = request.headers.get("x-amz-security-token")
    signer = SigV4Auth(ReadOnlyCredentials(key[0], key[1], token), scope[1], scope[0])
    canonical = signer.canonical_request(aws)
    return signer.signature(signer.string_to_sign(aws, canonical), aws)
