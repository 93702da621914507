"""Model providers behind one port: routes (`provider:model`), the registry and the demo model.

Adapters for openai, anthropic and local models plug in with `ProviderRegistry.register`.
"""

from ._port import (
    Completion,
    Finish,
    Message,
    ModelProvider,
    ModelSettings,
    PermanentProviderError,
    ProviderError,
    ProviderEvent,
    StopReason,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallEvent,
    ToolSpec,
    TransientProviderError,
    Usage,
    collect,
    provider_error_for_status,
)
from ._routes import (
    DEFAULT_ROUTE,
    ProviderFactory,
    ProviderRegistry,
    Route,
    default_registry,
    parse_route,
)
from .demo import DemoProvider

__all__ = [
    "DEFAULT_ROUTE",
    "Completion",
    "DemoProvider",
    "Finish",
    "Message",
    "ModelProvider",
    "ModelSettings",
    "PermanentProviderError",
    "ProviderError",
    "ProviderEvent",
    "ProviderFactory",
    "ProviderRegistry",
    "Route",
    "StopReason",
    "TextDelta",
    "ThinkingDelta",
    "ToolCall",
    "ToolCallEvent",
    "ToolSpec",
    "TransientProviderError",
    "Usage",
    "collect",
    "default_registry",
    "parse_route",
    "provider_error_for_status",
]
