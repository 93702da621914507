"""What the tests share: plain modules, no tests.

Fixtures live in the `conftest.py` files and build on these modules (`pg_dsn_fixture` makes
the one fixture a conftest picks the scope of); test modules import from here, never from a
conftest (tests/unit/test_test_layout.py keeps that true).

* `databases` - the migrated PostgreSQL template, clones of it, emptying, raw SQL.
* `processes` - `outlive worker` and `outlive serve` as real, logged subprocesses.
* `chaos` - the chaos tests' machinery: workers killed and replaced on a schedule, the stored
  log read back and checked against every session's invariants.
* `waiting` - `eventually`: poll until a condition holds.
* `inprocess` - the demo app, an in-process demo worker and owner keys.
* `sessions`, `store_suite` - reading sessions and events back from a Store.
* `api`, `live`, `browser`, `pages`, `providers`, `fakeserver`, `watcher_fakes`,
  `ledger_agent` - what one area's tests share.
"""
