"""Store-suite fixtures.

`pg_dsn` is one database for the whole store package instead of one per module (see
tests/conftest.py): every test empties it first anyway (`db_url`), and cloning and dropping a
database costs a checkpoint each (1–3 s on a busy machine, for every module).
"""

from __future__ import annotations

from tests.support.databases import pg_dsn_fixture

pg_dsn = pg_dsn_fixture("package", "outlive_store")
