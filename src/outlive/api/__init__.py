"""The HTTP API (docs/http-api.md; docs/architecture.md §6): FastAPI app factory, routes, SSE
streams, auth.

`create_app(store, catalog=…, settings=ApiSettings(…))` builds the app; the catalog (any
`AgentCatalog`, e.g. `outlive.runtime.Catalog`) says which agents and model routes sessions
may use. The CLI makes keys with `new_key()` and stores only `hash_key(key)`.
"""

from ._app import create_app
from ._catalog import AgentCatalog, AgentInfo
from ._context import ApiSettings
from ._keys import hash_key, new_key
from ._metrics import metrics_app

__all__ = ["AgentCatalog", "AgentInfo", "ApiSettings", "create_app", "hash_key", "metrics_app",
           "new_key"]
