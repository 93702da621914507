"""`SqlStore`: every Store operation, composed from its areas, each written once.

Each area is a mixin over `StoreCore` (the adapter seam and the in-transaction steps they
share), none over another but the commits over the settles (a group commit settles too), and
the settles over the ledger's writes (every write of history entries counts their calls).
Areas follow the SQL they share; the ports (`_port.py`) follow who calls what. The adapters
subclass `SqlStore` and add only transactions, notices, error translation and their one
dialect-specific statement.
"""

from __future__ import annotations

from ._budgets import BudgetOps
from ._client_tools import ClientToolOps
from ._commits import CommitOps
from ._eventlog import EventLogOps
from ._firing import FiringOps
from ._forks import ForkOps
from ._keys import KeyOps
from ._retention import RetentionOps
from ._runs import RunOps
from ._sessions import SessionOps
from ._traces import TraceOps
from ._usage import UsageOps
from ._webhooks import WebhookOps

__all__ = ["SqlStore"]


class SqlStore(
    FiringOps, ForkOps, SessionOps, EventLogOps, ClientToolOps, RunOps, CommitOps, KeyOps,
    RetentionOps, WebhookOps, TraceOps,
    UsageOps, BudgetOps,
):
    """The shared implementation of every Store port; adapters supply the `StoreCore` seam."""
