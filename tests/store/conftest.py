"""Store-suite fixtures.

`pg_dsn` overrides the module-scoped one in tests/conftest.py with one database for the whole
store package: every test empties it first anyway (`db_url`), and cloning and dropping a
database per module costs a checkpoint each (1–3 s on a busy machine, for fourteen modules).

"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.conftest import _admin, dsn_for


@pytest.fixture(scope="package")
def pg_dsn(pg_template: str) -> Iterator[str]:
    """One database for tests/store, cloned from the migrated template."""
    name = f"outlive_store_{uuid.uuid4().hex[:12]}"
    _admin(f'CREATE DATABASE "{name}" TEMPLATE "{pg_template}" STRATEGY FILE_COPY')
    yield dsn_for(name)
    _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
