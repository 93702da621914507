"""The server processes' garbage-collection thresholds (`outlive.cli.gc_tuning`)."""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Iterator

import pytest

from outlive.cli.gc_tuning import SERVER_THRESHOLDS, tune_for_server


@pytest.fixture
def thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


def test_tuning_sets_the_server_thresholds(thresholds: None) -> None:
    gc.set_threshold(700, 10, 10)
    tune_for_server()
    assert gc.get_threshold() == SERVER_THRESHOLDS
    young, middle, _ = SERVER_THRESHOLDS
    assert young >= 10 * 700 and middle >= 10  # fewer promotions than CPython's default


def test_serve_and_worker_tune_before_they_run() -> None:
    """Both long-running commands set the thresholds before their loop starts (a stub of
    the loop runner reports them and stops the command there)."""
    probe = (
        "import gc, sys\n"
        "import outlive.cli as cli\n"
        "import outlive.cli.event_loop as event_loop\n"
        "def stop(main, *a, **k):\n"
        "    main.close(); print(gc.get_threshold()); sys.exit(0)\n"
        "event_loop.run = stop\n"
        "sys.argv = ['outlive', *sys.argv[1:]]\n"
        "cli.main()\n"
    )
    for args in (["worker", "--db", "sqlite:///:memory:"],
                 ["serve", "--db", "sqlite:///:memory:", "--port", "0"]):
        out = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip().splitlines()[-1] == str(SERVER_THRESHOLDS), (args, out)
