"""Route configuration: built-ins, the TOML routes file and OUTLIVE_ROUTE_* variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from outlive.config import build_providers
from outlive.domain.errors import UnknownRoute
from outlive.providers import _config
from outlive.providers._config import (
    RouteConfig,
    RouteConfigError,
    configured_registry,
    load_routes,
)


@pytest.fixture
def no_local(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_config, "_installed", lambda module: module in ("openai", "anthropic"))


@pytest.fixture
def with_local(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_config, "_installed", lambda module: True)


def test_nothing_configured_refuses_openai_and_anthropic_with_what_is_missing(
    no_local: None,
) -> None:
    registry = configured_registry(environ={})
    assert registry.prefixes() == ["demo"]
    with pytest.raises(UnknownRoute) as info:
        registry.check("openai:gpt-4o-mini")
    assert str(info.value) == (
        "model route 'openai:gpt-4o-mini' is not configured: set OPENAI_API_KEY (or "
        "OPENAI_BASE_URL for a compatible server); known routes: demo:")
    with pytest.raises(UnknownRoute, match="set ANTHROPIC_API_KEY"):
        registry.check("anthropic:claude-x")
    with pytest.raises(UnknownRoute, match=r"pip install 'outlive\[local\]'"):
        registry.check("local:smollm2")
    with pytest.raises(UnknownRoute, match=r"unknown model route 'ollama:llama3'; known routes: "
                                           r"demo:"):
        registry.check("ollama:llama3")


def test_keys_make_routes_available(no_local: None) -> None:
    registry = configured_registry(environ={"OPENAI_API_KEY": "sk-1",
                                            "ANTHROPIC_API_KEY": "sk-ant"})
    assert registry.prefixes() == ["anthropic", "demo", "openai"]
    assert registry.check("openai:gpt-4o-mini").model == "gpt-4o-mini"
    provider, model = registry.resolve("anthropic:claude-x")
    assert type(provider).__name__ == "AnthropicProvider" and model == "claude-x"
    provider, _ = registry.resolve("openai:o")
    assert type(provider).__name__ == "OpenAIProvider"
    assert provider.base_url is None  # type: ignore[attr-defined]


def test_openai_base_url_alone_serves_a_keyless_compatible_server(no_local: None) -> None:
    registry = configured_registry(environ={"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"})
    provider, _ = registry.resolve("openai:qwen2.5")
    assert provider.base_url == "http://127.0.0.1:8000/v1"  # type: ignore[attr-defined]


def test_env_route_maps_a_prefix_to_an_openai_compatible_endpoint(no_local: None) -> None:
    env = {"OUTLIVE_ROUTE_OLLAMA": "http://127.0.0.1:11434/v1"}
    registry = configured_registry(environ=env)
    assert "ollama" in registry
    provider, model = registry.resolve("ollama:llama3.2")
    assert model == "llama3.2"
    assert type(provider).__name__ == "OpenAIProvider"
    assert provider.base_url == "http://127.0.0.1:11434/v1"  # type: ignore[attr-defined]
    assert provider.name == "ollama"  # type: ignore[attr-defined]


def test_env_route_key_variable_must_be_set(no_local: None) -> None:
    env = {"OUTLIVE_ROUTE_VLLM": "http://127.0.0.1:8000/v1",
           "OUTLIVE_ROUTE_VLLM_API_KEY_ENV": "VLLM_KEY",
           "OUTLIVE_ROUTE_VLLM_MODELS": "qwen2.5, llama3"}
    with pytest.raises(UnknownRoute) as info:
        configured_registry(environ=env).check("vllm:qwen2.5")
    assert "set VLLM_KEY (the API key of 'vllm:')" in str(info.value)
    registry = configured_registry(environ={**env, "VLLM_KEY": "secret"})
    assert registry.check("vllm:qwen2.5").provider == "vllm"
    with pytest.raises(UnknownRoute, match=r"available: vllm:llama3, vllm:qwen2\.5"):
        registry.check("vllm:mistral")


def test_routes_file(tmp_path: Path, no_local: None) -> None:
    path = tmp_path / "routes.toml"
    path.write_text(
        '[routes.ollama]\nbase_url = "http://127.0.0.1:11434/v1"\nmodels = ["llama3.2"]\n'
        "timeout = 120\n\n"
        '[routes.claude-proxy]\nkind = "anthropic"\nbase_url = "http://127.0.0.1:9000"\n'
        'api_key_env = "PROXY_KEY"\n\n'
        '[routes.openai]\nbase_url = "http://127.0.0.1:8080/v1"\n'
    )
    env = {"OUTLIVE_ROUTES": str(path), "PROXY_KEY": "k"}
    routes = load_routes(environ=env)
    assert routes["ollama"] == RouteConfig("ollama", "openai", "http://127.0.0.1:11434/v1",
                                           models=("llama3.2",), timeout=120.0)
    registry = configured_registry(environ=env)
    assert registry.prefixes() == ["claude-proxy", "demo", "ollama", "openai"]
    provider, _ = registry.resolve("claude-proxy:claude-x")
    assert type(provider).__name__ == "AnthropicProvider"
    assert provider.base_url == "http://127.0.0.1:9000"  # type: ignore[attr-defined]
    provider, _ = registry.resolve("ollama:llama3.2")
    assert provider.timeout == 120.0  # type: ignore[attr-defined]
    # The environment overrides the file, field by field.
    env["OUTLIVE_ROUTE_OLLAMA"] = "http://10.0.0.9:11434/v1"
    assert load_routes(environ=env)["ollama"].base_url == "http://10.0.0.9:11434/v1"
    assert load_routes(environ=env)["ollama"].models == ("llama3.2",)


def test_routes_file_argument_wins_over_env(tmp_path: Path, no_local: None) -> None:
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_text('[routes.aa]\nbase_url = "http://127.0.0.1:1/v1"\n')
    b.write_text('[routes.bb]\nbase_url = "http://127.0.0.1:2/v1"\n')
    registry = configured_registry(environ={"OUTLIVE_ROUTES": str(a)}, routes_file=str(b))
    assert registry.prefixes() == ["bb", "demo"]


def test_configured_route_without_base_url_is_refused_with_the_fix(
    tmp_path: Path, no_local: None
) -> None:
    path = tmp_path / "routes.toml"
    path.write_text('[routes.groq]\napi_key_env = "GROQ_API_KEY"\n')
    registry = configured_registry(environ={"GROQ_API_KEY": "x"}, routes_file=str(path))
    with pytest.raises(UnknownRoute) as info:
        registry.check("groq:llama")
    assert "no base URL: set OUTLIVE_ROUTE_GROQ=<url> or base_url in [routes.groq]" in str(
        info.value)


@pytest.mark.parametrize(("text", "message"), [
    ("[routes.x\n", "not valid TOML"),
    ('[routes.x]\nbase_url = "ftp://h"\n', "must start with http"),
    ('[routes.x]\nbase = "http://h"\n', "unknown field 'base'"),
    ('[routes.x]\nkind = "gemini"\nbase_url = "http://h"\n', "use 'openai' or 'anthropic'"),
    ('[routes."Bad!"]\nbase_url = "http://h"\n', "invalid route prefix"),
    ('[routes.demo]\nbase_url = "http://h"\n', "built in"),
    ('[routes.local]\nbase_url = "http://h"\n', "installing outlive"),
    ('[servers.x]\nbase_url = "http://h"\n', "unknown table"),
    ('[routes.x]\nmodels = "a"\ntimeout = -1\nbase_url = "http://h"\n', "must be positive"),
    ('[routes.x]\nbase_url = "http://h"\ncontext_window = "big"\n', "whole number of tokens"),
    ('[routes.x]\nbase_url = "http://h"\ncontext_window = 100\n', "too small"),
    ('[routes.demo]\ncontext_window = 4000\nbase_url = "http://h"\n', "takes only"),
])
def test_bad_routes_files_fail_at_startup(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "routes.toml"
    path.write_text(text)
    with pytest.raises(RouteConfigError, match=message):
        load_routes(environ={}, routes_file=str(path))


def test_missing_routes_file_is_an_error() -> None:
    with pytest.raises(RouteConfigError, match="does not exist"):
        load_routes(environ={"OUTLIVE_ROUTES": "/nonexistent/routes.toml"})


def test_a_missing_sdk_is_refused_with_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_config, "_installed", lambda module: module != "anthropic")
    registry = configured_registry(environ={"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"})
    assert registry.check("openai:gpt-4o").provider == "openai"
    with pytest.raises(UnknownRoute) as info:
        registry.check("anthropic:claude-x")
    assert "the anthropic SDK is not installed: pip install 'outlive[anthropic]'" in str(
        info.value)


def test_local_route_when_installed(with_local: None) -> None:
    registry = configured_registry(environ={})
    assert registry.prefixes() == ["demo", "local"]
    with pytest.raises(UnknownRoute, match="available: local:smollm2"):
        registry.check("local:llama")
    assert registry.check("local:smollm2").model == "smollm2"


def test_build_providers_reads_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_local: None
) -> None:
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL",
                "OUTLIVE_ROUTES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OUTLIVE_ROUTE_LMSTUDIO", "http://127.0.0.1:1234/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    path = tmp_path / "r.toml"
    path.write_text('[routes.vllm]\nbase_url = "http://127.0.0.1:8000/v1"\n')
    registry = build_providers(demo_speed=0, routes_file=str(path))
    assert registry.prefixes() == ["demo", "lmstudio", "openai", "vllm"]
    assert build_providers().check("demo:scripted").provider == "demo"


def test_context_windows_come_from_the_file_and_the_environment(
    tmp_path: Path, no_local: None
) -> None:
    path = tmp_path / "routes.toml"
    path.write_text('[routes.ollama]\nbase_url = "http://h/v1"\ncontext_window = 8192\n'
                    'output_reserve = 512\n[routes.demo]\ncontext_window = 1500\n')
    env = {"OUTLIVE_ROUTE_OTHER": "http://o/v1", "OUTLIVE_ROUTE_OTHER_CONTEXT_WINDOW": "32000",
           "OUTLIVE_ROUTE_LOCAL_CONTEXT_WINDOW": "2048"}
    routes = load_routes(environ=env, routes_file=str(path))
    assert (routes["ollama"].context_window, routes["ollama"].output_reserve) == (8192, 512)
    assert routes["other"].context_window == 32000
    assert routes["local"].context_window == 2048 and routes["local"].kind == "local"
    registry = configured_registry(environ=env, routes_file=str(path))
    assert registry.limits("ollama:llama3.2").window == 8192
    assert registry.limits("ollama:llama3.2").reserve == 512
    assert registry.limits("demo:scripted").window == 1500
    assert registry.limits("other:m").window == 32000
    assert registry.limits("openai:gpt-4o").window is None  # the model's known default then
    # one object per route: a window learned from a refusal is seen by every later run
    registry.limits("other:m").learn(16000)
    assert registry.limits("other:m").learned == 16000
    assert registry.limits("other:n").learned is None


def test_the_demo_route_takes_a_window_from_the_environment_or_the_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_local: None
) -> None:
    """What `OUTLIVE_ROUTE_DEMO_CONTEXT_WINDOW=1500 make run` (`outlive serve`) relies on to
    show compaction without a key."""
    monkeypatch.delenv("OUTLIVE_ROUTES", raising=False)
    assert build_providers(demo_speed=0).limits("demo:scripted").window is None
    monkeypatch.setenv("OUTLIVE_ROUTE_DEMO_CONTEXT_WINDOW", "1500")
    limits = build_providers(demo_speed=0).limits("demo:scripted")
    assert (limits.window, limits.reserve) == (1500, None)
    monkeypatch.delenv("OUTLIVE_ROUTE_DEMO_CONTEXT_WINDOW")
    path = tmp_path / "r.toml"
    path.write_text("[routes.demo]\ncontext_window = 4000\noutput_reserve = 300\n")
    limits = build_providers(demo_speed=0, routes_file=str(path)).limits("demo:scripted")
    assert (limits.window, limits.reserve) == (4000, 300)
    path.write_text('[routes.demo]\nbase_url = "http://127.0.0.1:1/v1"\n')
    with pytest.raises(RouteConfigError, match="built in"):
        build_providers(demo_speed=0, routes_file=str(path))
