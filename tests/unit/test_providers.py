"""The provider port types, error classification and model routes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from outlive.domain.errors import InvalidInput, OutliveError, UnknownRoute
from outlive.providers import (
    DEFAULT_ROUTE,
    DemoProvider,
    Finish,
    Message,
    ModelProvider,
    ModelSettings,
    PermanentProviderError,
    ProviderError,
    ProviderEvent,
    ProviderRegistry,
    Route,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallEvent,
    ToolSpec,
    TransientProviderError,
    Usage,
    collect,
    default_registry,
    parse_route,
    provider_error_for_status,
)


class FakeProvider:
    def __init__(self, events: list[ProviderEvent]) -> None:
        self.events = events
        self.closed = False

    async def stream(
        self, messages: list[Message], tools: list[ToolSpec], settings: ModelSettings
    ) -> AsyncIterator[ProviderEvent]:
        try:
            for e in self.events:
                yield e
        finally:
            self.closed = True


# --- routes -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "provider", "model"),
    [
        ("openai:gpt-4o-mini", "openai", "gpt-4o-mini"),
        ("anthropic:claude-sonnet-4-5", "anthropic", "claude-sonnet-4-5"),
        ("demo:scripted", "demo", "scripted"),
        ("Demo:Scripted", "demo", "Scripted"),
        (" local:smollm2 ", "local", "smollm2"),
        ("openai:ft:gpt-4o:org:abc", "openai", "ft:gpt-4o:org:abc"),
    ],
)
def test_parse_route(text: str, provider: str, model: str) -> None:
    route = parse_route(text)
    assert route == Route(provider, model)
    assert str(route) == f"{provider}:{model}"


@pytest.mark.parametrize("text", ["", "demo", "scripted", ":model", "demo:", "demo:  ", "1x:y"])
def test_parse_route_refuses_malformed(text: str) -> None:
    with pytest.raises(UnknownRoute):
        parse_route(text)


def registry_with_openai() -> ProviderRegistry:
    registry = default_registry(demo_speed=0)
    registry.register("openai", lambda: DemoProvider(speed=0))
    return registry


def test_unknown_prefix_names_known_routes() -> None:
    registry = registry_with_openai()
    with pytest.raises(UnknownRoute) as info:
        registry.check("foo:bar")
    err = info.value
    assert str(err) == "unknown model route 'foo:bar'; known routes: demo:, openai:"
    assert err.code == "UNKNOWN_MODEL_ROUTE"
    assert err.http_status == 400
    assert isinstance(err, InvalidInput)
    assert err.details["known"] == ["demo", "openai"]


def test_route_without_colon_names_known_routes() -> None:
    with pytest.raises(UnknownRoute) as info:
        default_registry().check("gpt-4o")
    assert "must look like 'provider:model'" in str(info.value)
    assert str(info.value).endswith("known routes: demo:")


def test_unavailable_prefix_explains_and_is_not_listed() -> None:
    registry = default_registry()
    registry.register_unavailable("openai", "set OPENAI_API_KEY")
    with pytest.raises(UnknownRoute) as info:
        registry.check("openai:gpt-4o-mini")
    assert str(info.value) == (
        "model route 'openai:gpt-4o-mini' is not configured: set OPENAI_API_KEY; "
        "known routes: demo:"
    )
    assert registry.prefixes() == ["demo"]
    assert "openai" not in registry


def test_model_allow_list() -> None:
    registry = ProviderRegistry()
    registry.register("local", lambda: DemoProvider(speed=0), models=["smollm2"])
    assert registry.check("local:smollm2") == Route("local", "smollm2")
    with pytest.raises(UnknownRoute, match="available: local:smollm2"):
        registry.check("local:llama")


def test_empty_registry_says_none_configured() -> None:
    with pytest.raises(UnknownRoute, match=r"known routes: \(none configured\)"):
        ProviderRegistry().check("demo:scripted")


def test_resolve_builds_each_provider_once() -> None:
    built: list[DemoProvider] = []

    def factory() -> DemoProvider:
        built.append(DemoProvider(speed=0))
        return built[-1]

    registry = ProviderRegistry()
    registry.register("demo", factory)
    first, model = registry.resolve("demo:scripted")
    second, other = registry.resolve("DEMO:other")
    assert first is second is built[0]
    assert (model, other) == ("scripted", "other")
    assert len(built) == 1


def test_register_twice_needs_replace() -> None:
    registry = default_registry(demo_speed=0)
    old, _ = registry.resolve("demo:scripted")
    with pytest.raises(ValueError, match="already registered"):
        registry.register("demo", lambda: DemoProvider(speed=0))
    registry.register("demo:", lambda: DemoProvider(speed=2), replace=True)
    new, _ = registry.resolve("demo:scripted")
    assert new is not old
    assert isinstance(new, DemoProvider) and new.speed == 2


def test_register_refuses_bad_prefix() -> None:
    with pytest.raises(ValueError, match="invalid route prefix"):
        ProviderRegistry().register("no spaces", lambda: DemoProvider())


def test_default_registry_serves_the_default_route() -> None:
    registry = default_registry(demo_speed=0.5)
    assert DEFAULT_ROUTE == "demo:scripted"
    provider, model = registry.resolve(DEFAULT_ROUTE)
    assert isinstance(provider, DemoProvider)
    assert provider.speed == 0.5
    assert model == "scripted"
    assert list(registry) == ["demo"]
    assert registry.known_routes() == "demo:"


# --- port types ---------------------------------------------------------------------------


def test_demo_provider_satisfies_the_port() -> None:
    provider: ModelProvider = DemoProvider(speed=0)
    assert isinstance(provider, ModelProvider)


def test_message_constructors() -> None:
    call = ToolCall("c1", "lookup", {"query": "x"})
    assert Message.assistant("hi", [call]).tool_calls == [call]
    result = Message.tool_result("c1", '{"error": "x"}', is_error=True)
    assert (result.role, result.tool_call_id, result.is_error) == ("tool", "c1", True)
    assert Message.system("s").role == "system"
    assert Message.user("u").tool_calls == []


@pytest.mark.parametrize(
    "build",
    [
        lambda: Message(role="tool", text="x"),
        lambda: Message(role="user", text="x", tool_calls=[ToolCall("c", "t", {})]),
        lambda: Message(role="user", text="x", tool_call_id="c"),
        lambda: Message(role="robot", text="x"),  # type: ignore[arg-type]
    ],
)
def test_message_refuses_inconsistent_fields(build: object) -> None:
    with pytest.raises(InvalidInput):
        build()  # type: ignore[operator]


def test_finish_refuses_unknown_stop_reason() -> None:
    with pytest.raises(InvalidInput):
        Finish("done")  # type: ignore[arg-type]


@pytest.mark.parametrize("status", [None, 408, 429, 500, 502, 503, 529])
def test_transient_statuses(status: int | None) -> None:
    err = provider_error_for_status(status, "boom")
    assert isinstance(err, TransientProviderError)
    assert err.transient and err.status == status


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_permanent_statuses(status: int) -> None:
    err = provider_error_for_status(status, "boom")
    assert isinstance(err, PermanentProviderError)
    assert not err.transient and err.status == status


def test_provider_errors_are_outlive_errors() -> None:
    err = TransientProviderError("slow down", status=429)
    assert isinstance(err, ProviderError) and isinstance(err, OutliveError)
    assert err.code == "PROVIDER_ERROR"
    assert err.details["status"] == 429
    assert str(err) == "slow down"


async def test_collect_folds_a_stream() -> None:
    call = ToolCall("c1", "lookup", {"query": "x"})
    fake = FakeProvider(
        [
            ThinkingDelta("hm "),
            ThinkingDelta("ok"),
            TextDelta("Hel"),
            TextDelta("lo"),
            ToolCallEvent(call),
            Finish("tool_calls", Usage(3, 4)),
        ]
    )
    done = await collect(fake.stream([Message.user("x")], [], ModelSettings("m")))
    assert (done.text, done.thinking, done.tool_calls) == ("Hello", "hm ok", [call])
    assert done.stop_reason == "tool_calls" and done.usage == Usage(3, 4)
    assert done.as_message() == Message.assistant("Hello", [call])
    assert fake.closed


async def test_collect_refuses_a_stream_without_finish() -> None:
    fake = FakeProvider([TextDelta("cut")])
    with pytest.raises(TransientProviderError, match="without a finish"):
        await collect(fake.stream([], [], ModelSettings("m")))


async def test_collect_refuses_events_after_finish() -> None:
    fake = FakeProvider([Finish("stop"), TextDelta("late")])
    with pytest.raises(PermanentProviderError, match="after Finish"):
        await collect(fake.stream([], [], ModelSettings("m")))
    assert fake.closed
