"""The ranges each provider kind documents for its sampling parameters.

A value outside them is refused by the provider after a round trip (a 400 the retry
policy will not retry) or, worse, taken as something else; a caller that takes
parameters from someone untrusted (an MCPL server's `preferences`) checks them here
first and names the range. Sources: Anthropic Messages API (``temperature`` 0 to 1),
OpenAI chat completions and Responses (0 to 2; OpenRouter and OpenAI-compatible servers
take OpenAI's), Gemini ``generationConfig`` (0 to 2). A kind not listed (``echo``, one
a plugin adds) is held only to what no provider takes: a negative temperature.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Range:
    low: float
    high: float = math.inf

    def __contains__(self, value: float) -> bool:
        return self.low <= value <= self.high

    def __str__(self) -> str:
        if math.isinf(self.high):
            return f"{self.low:g} or more"
        return f"{self.low:g} to {self.high:g}"


_OPENAI = {"temperature": Range(0.0, 2.0)}
SAMPLING_RANGES: Mapping[str, Mapping[str, Range]] = {
    "anthropic": {"temperature": Range(0.0, 1.0)},
    "openai": _OPENAI,
    "openrouter": _OPENAI,
    "openai-compatible": _OPENAI,
    "openai-responses": _OPENAI,
    "gemini": {"temperature": Range(0.0, 2.0)},
}
ANY_KIND: Mapping[str, Range] = {"temperature": Range(0.0)}
"""What holds for a kind `SAMPLING_RANGES` does not list."""


def sampling_range(kind: str, parameter: str) -> Range | None:
    """The range `parameter` (``temperature``) takes on provider `kind`; None: unknown."""
    return SAMPLING_RANGES.get(kind, ANY_KIND).get(parameter)


__all__ = ["ANY_KIND", "SAMPLING_RANGES", "Range", "sampling_range"]
