"""The webhook options of `outlive serve` and `outlive worker` (docs/webhooks.md)."""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = [
    "PrivateWebhooksOption",
    "WebhookBackoffMaxOption",
    "WebhookBackoffOption",
    "WebhookTimeoutOption",
]

PrivateWebhooksOption = Annotated[
    bool,
    typer.Option("--allow-private-webhooks", envvar="OUTLIVE_ALLOW_PRIVATE_WEBHOOKS",
                 help="Let webhooks target loopback, private and link local addresses "
                      "(tests, closed networks). See docs/webhooks.md."),
]
WebhookBackoffOption = Annotated[
    float,
    typer.Option("--webhook-backoff", envvar="OUTLIVE_WEBHOOK_BACKOFF",
                 help="Seconds before a failed webhook's first retry (doubled per attempt)."),
]
WebhookBackoffMaxOption = Annotated[
    float,
    typer.Option("--webhook-backoff-max", envvar="OUTLIVE_WEBHOOK_BACKOFF_MAX",
                 help="Cap on the delay between webhook retries, seconds."),
]

WebhookTimeoutOption = Annotated[
    float,
    typer.Option("--webhook-timeout", envvar="OUTLIVE_WEBHOOK_TIMEOUT",
                 help="Seconds a webhook receiver has to answer one delivery."),
]
