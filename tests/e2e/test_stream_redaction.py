"""A streamed answer whose text ends in the first characters of a registered secret.

The router holds back a chunk's tail that could begin a secret until the next chunk
(`agentcore.redaction.StreamRedactor`); at the end of the stream there is no next chunk,
and the held-back tail goes out only through the redactor's final `flush()`. Without it
the chunks would stop short of the answer's content. The provider key (`API_KEY`,
``sk-...``) is registered by the loopback settings.
"""

from __future__ import annotations

import pytest
from e2e_rig import RigFactory

from agentcore.testing import API_KEY, Scenario

TAILS = {
    "one character": "s",
    "two characters": "sk",
    "most of the key": API_KEY[:-1],
}


@pytest.mark.parametrize("wire", ["a", "o"])
@pytest.mark.parametrize("tail", list(TAILS.values()), ids=list(TAILS))
async def test_streamed_chunks_join_to_the_content_when_it_ends_in_a_secrets_start(
    rig: RigFactory, wire: str, tail: str
) -> None:
    text = f"The last word is {tail}"
    r = await rig()
    r.provider.script(Scenario.text(text, chunks=("The last word ", f"is {tail}")), provider=wire)
    params = {
        "featureSet": f"fs.{wire}",
        "stream": True,
        "messages": [{"role": "user", "content": "Say it."}],
    }
    rid = await r.server.request("inference/request", params)
    content = (await r.server.answer(rid)).result["content"]
    assert content == text  # a start of a secret is not the secret
    assert "".join(delta for _, _, delta in r.server.chunks(rid)) == content
