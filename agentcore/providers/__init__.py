"""Provider adapters, one per wire format, all speaking the normalized model; and the
registry of provider kinds that each kernel keeps.

A provider kind (what ``[providers.NAME] kind`` names) is contributed by a plugin
through the `agentcore_provider_kinds` hook, as a factory. agentcore's own kinds come
the same way, from its built-in plugin (`agentcore.default_plugins.provider_kinds`).
Every kernel builds its own `ProviderKinds` from its plugins: nothing is registered
process-wide, so two kernels with different plugins see different kinds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from agentcore.inference import InferenceError
from agentcore.providers.base import Provider, normalize_stop
from agentcore.settings import InferenceSettings, ProviderSettings

ProviderFactory = Callable[[str, ProviderSettings, InferenceSettings], Provider]
"""Makes the provider of one ``[providers.NAME]`` section: (NAME, its section, ``[inference]``)."""


class KindClash(ValueError):
    """Two plugins contribute one kind; the message names both."""


class ProviderKinds:
    """One kernel's provider kinds: each kind's factory and the plugin that contributed it."""

    def __init__(self) -> None:
        self._factories: dict[str, ProviderFactory] = {}
        self._plugins: dict[str, str] = {}
        self.settings: dict[str, type[ProviderSettings]] = {}
        """Each kind's own settings model: its factory's ``settings_model``, a subclass of
        `ProviderSettings` that declares the kind's keys (``region`` ...), when it has one."""

    def add(self, plugin: str, kinds: Mapping[str, ProviderFactory]) -> None:
        """Take a plugin's kinds, all or none: a kind another plugin contributed is a
        `KindClash` naming both (one of them must be disabled or replace the other)."""
        for kind, factory in kinds.items():
            if not isinstance(kind, str) or not kind:
                raise TypeError(f"a provider kind must be a non-empty string, not {kind!r}")
            if not callable(factory):
                raise TypeError(f"the factory of provider kind {kind!r} is not callable")
            model = getattr(factory, "settings_model", None)
            if model is not None and not (
                isinstance(model, type) and issubclass(model, ProviderSettings)
            ):
                raise TypeError(
                    f"the settings_model of provider kind {kind!r} must be a subclass of "
                    "ProviderSettings"
                )
            other = self._plugins.get(kind)
            if other is not None:
                raise KindClash(
                    f"provider kind {kind!r} is contributed by both {other!r} and {plugin!r}; "
                    "disable one, or replace one by its name"
                )
        for kind, factory in kinds.items():
            self._factories[kind] = factory
            self._plugins[kind] = plugin
            model = getattr(factory, "settings_model", None)
            if model is not None:
                self.settings[kind] = model

    def __contains__(self, kind: object) -> bool:
        return kind in self._factories

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._factories))

    def __len__(self) -> int:
        return len(self._factories)

    def plugin(self, kind: str) -> str | None:
        """The plugin that contributed `kind`."""
        return self._plugins.get(kind)

    def create(self, name: str, config: ProviderSettings, inference: InferenceSettings) -> Provider:
        """The provider of ``[providers.NAME]``, made by its kind's factory."""
        factory = self._factories.get(config.kind)
        if factory is None:
            raise InferenceError(
                "invalid_request",
                f"provider {name!r}: kind {config.kind!r} is not available "
                f"(known kinds: {', '.join(self) or 'none'})",
                retryable=False,
            )
        return factory(name, config, inference)


__all__ = [
    "KindClash",
    "Provider",
    "ProviderFactory",
    "ProviderKinds",
    "normalize_stop",
]
