"""How a Bedrock call proves who sends it: SigV4 (botocore's signer and its standard
credential chain), or a Bedrock API key as a bearer token.

The chain is botocore's own: ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/
``AWS_SESSION_TOKEN``, ``AWS_PROFILE`` and the shared files, ``credential_process``, SSO,
role assumption, container and instance roles. Temporary credentials are
`RefreshableCredentials`: `get_frozen_credentials` refreshes them before they expire, so
every call is signed with a live set. Each set's secret key and session token are
registered with the redaction boundary the moment they are read.
"""

from __future__ import annotations

from collections.abc import Mapping

import botocore.session
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials, ReadOnlyCredentials

from agentcore.api import InferenceError, register_secret

SERVICE = "bedrock"
_SIGNED = ("Authorization", "X-Amz-Date", "X-Amz-Security-Token")


def aws_session(profile: str | None) -> botocore.session.Session:
    return botocore.session.Session(profile=profile)


class SigV4Signer:
    """Signs one provider's calls; the credentials are looked up at the first call."""

    def __init__(self, provider: str, session: botocore.session.Session, region: str) -> None:
        self.provider = provider
        self.region = region
        self._session = session
        self._credentials: Credentials | None = None
        self._registered: tuple[str | None, str | None] | None = None

    def _frozen(self) -> ReadOnlyCredentials:
        if self._credentials is None:
            self._credentials = self._session.get_credentials()
        if self._credentials is None:
            raise InferenceError(
                "auth",
                f"provider {self.provider!r} found no AWS credentials (the environment's "
                "AWS_ACCESS_KEY_ID, AWS_PROFILE, the shared files, a role): set them, or "
                'auth = "api_key"',
                retryable=False,
                provider=self.provider,
            )
        frozen = self._credentials.get_frozen_credentials()
        if self._registered != (frozen.secret_key, frozen.token):
            register_secret(frozen.secret_key)
            register_secret(frozen.token)
            self._registered = (frozen.secret_key, frozen.token)
        return frozen

    def sign(self, url: str, body: bytes, headers: Mapping[str, str]) -> dict[str, str]:
        """The ``Authorization``, ``X-Amz-Date`` (and ``X-Amz-Security-Token``) of one call."""
        credentials = self._frozen()
        request = AWSRequest(
            method="POST",
            url=url,
            data=body,
            headers={"content-type": headers.get("content-type", "application/json")},
        )
        SigV4Auth(credentials, SERVICE, self.region).add_auth(request)
        return {name: request.headers[name] for name in _SIGNED if name in request.headers}
