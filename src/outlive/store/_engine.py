"""`SqlStore`: every Store operation, composed from its areas, each written once.

Areas follow the Store port's own sections; each is a mixin over `StoreCore` (the adapter
seam and the in-transaction steps they share). The adapters subclass `SqlStore` and add only
transactions, notices, error translation and their one dialect-specific statement.
"""

from __future__ import annotations

from ._approvals import ApprovalOps
from ._eventlog import EventLogOps
from ._keys import KeyOps
from ._retention import RetentionOps
from ._runs import RunOps
from ._sessions import SessionOps
from ._webhooks import WebhookOps

__all__ = ["SqlStore"]


class SqlStore(SessionOps, EventLogOps, ApprovalOps, RunOps, KeyOps, RetentionOps, WebhookOps):
    """The shared implementation of the Store port; adapters supply the `StoreCore` seam."""
