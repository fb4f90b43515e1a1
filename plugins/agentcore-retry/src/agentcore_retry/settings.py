"""``[retry]``: the schedule for all providers, ``[retry.overloaded]`` for overload, and
``[retry.providers.NAME]`` (and ``[retry.providers.NAME.overloaded]``) for one provider."""

from __future__ import annotations

from pydantic import Field, field_validator

from agentcore.api import ProviderName, Section


class Schedule(Section):
    """One retry schedule: how many attempts, and the exponential backoff between them."""

    max_attempts: int = Field(default=4, ge=1)
    """Attempts in all, the first included: 1 means never retry."""
    initial_delay_s: float = Field(default=1.0, ge=0)
    """The backoff after the first failure; it doubles after each further one."""
    max_delay_s: float = Field(default=30.0, ge=0)
    """The backoff (jitter included) never exceeds this; a stated wait may."""
    jitter_s: float = Field(default=1.0, ge=0)
    """Up to this much, drawn at random, is added so that clients do not retry in step."""


class OverloadedSchedule(Schedule):
    """``[retry.overloaded]``: an overloaded provider recovers in tens of seconds, not one,
    so wait longer and try more. Keys a partial table leaves out keep these defaults."""

    max_attempts: int = Field(default=6, ge=1)
    initial_delay_s: float = Field(default=5.0, ge=0)
    max_delay_s: float = Field(default=60.0, ge=0)
    jitter_s: float = Field(default=2.0, ge=0)


class ScheduleOverride(Section):
    """Keys of `Schedule` one provider sets; unset keys keep the general value."""

    max_attempts: int | None = Field(default=None, ge=1)
    initial_delay_s: float | None = Field(default=None, ge=0)
    max_delay_s: float | None = Field(default=None, ge=0)
    jitter_s: float | None = Field(default=None, ge=0)

    def apply(self, base: Schedule) -> Schedule:
        return base.model_copy(update=self.model_dump(exclude_none=True))


class ProviderOverride(ScheduleOverride):
    """``[retry.providers.NAME]``; its ``overloaded`` table overrides ``[retry.overloaded]``."""

    overloaded: ScheduleOverride = Field(default_factory=ScheduleOverride.model_construct)


class RetrySettings(Schedule):
    """``[retry]``: the general schedule, plus the overloaded one and per-provider overrides."""

    overloaded: OverloadedSchedule = Field(default_factory=OverloadedSchedule.model_construct)
    """Used when the error's kind is ``overloaded`` (HTTP 529, ``overloaded_error``); its
    ``max_attempts``, not the general one, caps those retries."""
    providers: dict[ProviderName, ProviderOverride] = Field(default_factory=dict)
    """Keyed by the ``[providers.NAME]`` name; a name no provider has is an error."""
    max_stated_wait_s: None = Field(default=None, exclude=True)
    """Moved to ``[inference] max_stated_wait_s`` (one limit for every policy that waits);
    setting it here is an error that says so."""

    @field_validator("max_stated_wait_s", mode="before")
    @classmethod
    def _moved(cls, value: object) -> None:
        if value is not None:
            raise ValueError("this key moved to [inference] max_stated_wait_s")
        return None

    def schedule_for(self, provider: str, overloaded: bool) -> Schedule:
        """The schedule for this provider and error: general, then the provider's override."""
        general = Schedule.model_validate(self.model_dump(include=set(Schedule.model_fields)))
        base = self.overloaded if overloaded else general
        override = self.providers.get(provider)
        if override is None:
            return base
        return (override.overloaded if overloaded else override).apply(base)
