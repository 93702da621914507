"""The HTTP API (DESIGN §6, §7, §9): FastAPI app factory, routes, SSE streams, auth.

`create_app(store, agents=…, providers=…, settings=ApiSettings(…))` builds the app; the CLI
makes keys with `new_key()` and stores only `hash_key(key)`.
"""

from ._app import create_app
from ._context import ApiSettings
from ._keys import hash_key, new_key

__all__ = ["ApiSettings", "create_app", "hash_key", "new_key"]
