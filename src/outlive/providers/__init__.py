"""Model providers behind one port: routes (`provider:model`), the registry and the adapters.

`demo:` is built in; `openai:`, `anthropic:`, `local:` and extra OpenAI-compatible prefixes
come from configuration (`configured_registry`, see `_config`). Adapter modules import their
SDK only when a provider is first built, so importing this package stays cheap.
"""

from ._config import (
    RouteConfig,
    RouteConfigError,
    configured_registry,
    load_routes,
)
from ._demo_texts import HELPER_AGENT as DEMO_HELPER_AGENT
from ._port import (
    Completion,
    ContextOverflow,
    Finish,
    Message,
    ModelProvider,
    ModelSettings,
    PermanentProviderError,
    ProviderError,
    ProviderEvent,
    ReasoningBlock,
    StopReason,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallEvent,
    ToolChoice,
    ToolSpec,
    TransientProviderError,
    Usage,
    collect,
    provider_error_for_status,
)
from ._routes import (
    DEFAULT_ROUTE,
    ContextLimits,
    ProviderFactory,
    ProviderRegistry,
    Route,
    default_registry,
    parse_route,
)
from .anthropic import AnthropicProvider
from .demo import CALLS_EXTRA as DEMO_CALLS_EXTRA
from .demo import DEMO_WORDS, DemoProvider
from .local import LocalProvider
from .openai import OpenAIProvider

__all__ = [
    "DEFAULT_ROUTE",
    "DEMO_CALLS_EXTRA",
    "DEMO_HELPER_AGENT",
    "DEMO_WORDS",
    "AnthropicProvider",
    "Completion",
    "ContextLimits",
    "ContextOverflow",
    "DemoProvider",
    "Finish",
    "LocalProvider",
    "Message",
    "ModelProvider",
    "ModelSettings",
    "OpenAIProvider",
    "PermanentProviderError",
    "ProviderError",
    "ProviderEvent",
    "ProviderFactory",
    "ProviderRegistry",
    "ReasoningBlock",
    "Route",
    "RouteConfig",
    "RouteConfigError",
    "StopReason",
    "TextDelta",
    "ThinkingDelta",
    "ToolCall",
    "ToolCallEvent",
    "ToolChoice",
    "ToolSpec",
    "TransientProviderError",
    "Usage",
    "collect",
    "configured_registry",
    "default_registry",
    "load_routes",
    "parse_route",
    "provider_error_for_status",
]
