"""Model routes (`provider:model`) and the registry that turns a route into a provider.

Routes are checked when a session is created, so a typo is refused with a message naming the
routes that would work, instead of failing later inside a worker. Adapters that need an SDK or
a key (openai, anthropic, local) register themselves here from configuration; the registry
itself only knows `demo:`, which needs neither.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass

from ..domain.errors import UnknownRoute
from ..domain.prices import FREE, Price, lookup_price
from ._port import ModelProvider
from .demo import DemoProvider

__all__ = [
    "DEFAULT_ROUTE",
    "ContextLimits",
    "ProviderFactory",
    "ProviderRegistry",
    "Route",
    "default_registry",
    "parse_route",
]

DEFAULT_ROUTE = "demo:scripted"

ProviderFactory = Callable[[], ModelProvider]
"""Builds a provider on first use, so an unused adapter never imports its SDK."""

_PREFIX = re.compile(r"^[a-z][a-z0-9_.-]{0,31}$")


@dataclass(frozen=True)
class Route:
    """A parsed route. The model part may itself contain colons (`openai:ft:gpt-4o:org`)."""

    provider: str
    model: str

    def __str__(self) -> str:
        return f"{self.provider}:{self.model}"


def parse_route(route: str) -> Route:
    """Split `provider:model` at the first colon; the prefix is case-insensitive."""
    text = route.strip() if isinstance(route, str) else ""
    prefix, sep, model = text.partition(":")
    prefix = prefix.strip().lower()
    model = model.strip()
    if not sep:
        raise UnknownRoute(f"model route {route!r} must look like 'provider:model'", route=route)
    if not _PREFIX.match(prefix):
        raise UnknownRoute(f"model route {route!r} has an invalid provider prefix", route=route)
    if not model:
        raise UnknownRoute(f"model route {route!r} names no model", route=route)
    return Route(prefix, model)


@dataclass
class ContextLimits:
    """What is known of one route's context window: configured (routes file, environment),
    or learned from the provider's own refusal of a request that was too long. One object per
    route in a process, shared by its runs, so one refusal teaches them all."""

    window: int | None = None
    """Configured tokens (None: the model's known default, or the provider's own)."""
    reserve: int | None = None
    """Configured tokens kept for the answer (None: the default)."""
    learned: int | None = None
    """The window a refusal named (or implied), if one came."""

    def learn(self, window: int) -> None:
        if window > 0 and (self.learned is None or window < self.learned):
            self.learned = window


@dataclass(frozen=True)
class _Registration:
    factory: ProviderFactory | None
    models: frozenset[str] | None
    unavailable: str | None


class ProviderRegistry:
    """Maps route prefixes to provider factories and caches one provider per prefix.

    A prefix can also be registered as *unavailable* (known, but e.g. missing its API key) so
    the refusal explains how to enable it rather than pretending the route does not exist.
    """

    def __init__(self) -> None:
        self._entries: dict[str, _Registration] = {}
        self._instances: dict[str, ModelProvider] = {}
        self._windows: dict[str, tuple[int | None, int | None]] = {}
        self._limits: dict[str, ContextLimits] = {}
        self._prices: dict[str, Price] = {}
        self._lock = threading.Lock()

    def register(
        self,
        prefix: str,
        factory: ProviderFactory,
        *,
        models: Collection[str] | None = None,
        replace: bool = False,
    ) -> None:
        """Serve `prefix:*` with providers from `factory`.

        `models` restricts the accepted model names (None accepts any, as OpenAI-compatible
        endpoints serve whatever they serve). Registering a taken prefix needs `replace=True`.
        """
        self._add(
            prefix,
            _Registration(factory, frozenset(models) if models is not None else None, None),
            replace,
        )

    def register_unavailable(self, prefix: str, reason: str, *, replace: bool = False) -> None:
        """Know `prefix` but refuse it with `reason` (e.g. "set OPENAI_API_KEY")."""
        self._add(prefix, _Registration(None, None, reason), replace)

    def _add(self, prefix: str, entry: _Registration, replace: bool) -> None:
        key = prefix.strip().lower().rstrip(":")
        if not _PREFIX.match(key):
            raise ValueError(f"invalid route prefix {prefix!r}")
        with self._lock:
            if key in self._entries and not replace:
                raise ValueError(f"route prefix {key!r} is already registered")
            self._entries[key] = entry
            self._instances.pop(key, None)

    def set_window(self, prefix: str, window: int | None, reserve: int | None = None) -> None:
        """Configure the context window (and answer reserve) of every `prefix:` model."""
        key = prefix.strip().lower().rstrip(":")
        with self._lock:
            self._windows[key] = (window, reserve)
            self._limits = {r: v for r, v in self._limits.items() if not r.startswith(key + ":")}

    def set_price(self, prefix: str, price: Price) -> None:
        """Price every `prefix:` model at `price` (the routes file's `price`), rather than
        by the shipped table."""
        self._prices[prefix.strip().lower().rstrip(":")] = price

    def price(self, route: str) -> Price | None:
        """What `route`'s calls cost per million tokens: its prefix's configured price, else
        the shipped table's for its model (`domain.prices`); None when neither knows."""
        try:
            parsed = parse_route(route)
        except UnknownRoute:
            return None
        configured = self._prices.get(parsed.provider)
        return configured if configured is not None else lookup_price(parsed.model)

    def limits(self, route: str) -> ContextLimits:
        """The context limits of `route` (the same object for the process's life)."""
        parsed = parse_route(route)
        key = str(parsed)
        with self._lock:
            got = self._limits.get(key)
            if got is None:
                window, reserve = self._windows.get(parsed.provider, (None, None))
                got = self._limits[key] = ContextLimits(window, reserve)
            return got

    def prefixes(self) -> list[str]:
        """Prefixes that can serve a session now, sorted."""
        return sorted(k for k, e in self._entries.items() if e.unavailable is None)

    def known_routes(self) -> str:
        """Human list for error messages: `demo:, openai:`."""
        names = self.prefixes()
        return ", ".join(f"{p}:" for p in names) if names else "(none configured)"

    def __contains__(self, prefix: object) -> bool:
        return isinstance(prefix, str) and prefix.lower().rstrip(":") in self.prefixes()

    def __iter__(self) -> Iterator[str]:
        return iter(self.prefixes())

    def check(self, route: str) -> Route:
        """Validate a route without building a provider; raises `UnknownRoute` naming the
        configured routes. Use when a session is created."""
        try:
            parsed = parse_route(route)
        except UnknownRoute as exc:
            raise UnknownRoute(
                f"{exc.message}; known routes: {self.known_routes()}",
                route=route,
                known=self.prefixes(),
            ) from None
        entry = self._entries.get(parsed.provider)
        if entry is None:
            raise UnknownRoute(
                f"unknown model route {route!r}; known routes: {self.known_routes()}",
                route=route,
                known=self.prefixes(),
            )
        if entry.unavailable is not None:
            raise UnknownRoute(
                f"model route {route!r} is not configured: {entry.unavailable}; "
                f"known routes: {self.known_routes()}",
                route=route,
                known=self.prefixes(),
            )
        if entry.models is not None and parsed.model not in entry.models:
            choices = ", ".join(f"{parsed.provider}:{m}" for m in sorted(entry.models))
            raise UnknownRoute(
                f"unknown model {parsed.model!r} for route prefix '{parsed.provider}:'; "
                f"available: {choices}",
                route=route,
                known=self.prefixes(),
            )
        return parsed

    def resolve(self, route: str) -> tuple[ModelProvider, str]:
        """The (shared) provider for `route` and the model name to pass in `ModelSettings`."""
        parsed = self.check(route)
        with self._lock:
            provider = self._instances.get(parsed.provider)
            if provider is None:
                factory = self._entries[parsed.provider].factory
                assert factory is not None  # check() refused unavailable prefixes
                provider = factory()
                self._instances[parsed.provider] = provider
        return provider, parsed.model


def default_registry(*, demo_speed: float = 1.0, demo_calls: bool = False) -> ProviderRegistry:
    """A registry that knows `demo:`; configuration adds openai/anthropic/local adapters with
    `register` (or `register_unavailable` when their key or extra is missing). `demo_calls`:
    the demo model's `call <tool>` runs for every agent (`DemoProvider.calls`)."""
    registry = ProviderRegistry()
    registry.register("demo", lambda: DemoProvider(speed=demo_speed, calls=demo_calls))
    registry.set_price("demo", FREE)  # it runs in the server: a known price of nothing
    return registry
