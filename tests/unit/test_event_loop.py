"""The event loop choice (`outlive worker --loop`, `outlive serve --loop`): uvloop when
installed (`auto`, the default), asyncio's own on request, a clear error when uvloop is asked
for and missing."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import sys

import pytest

from outlive.cli.event_loop import loop_factory, run
from outlive.cli.worker import worker

HAS_UVLOOP = importlib.util.find_spec("uvloop") is not None


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_asyncio_is_asyncios_own_loop():
    name, factory = loop_factory("asyncio")
    assert (name, factory) == ("asyncio", None)
    assert run(_loop_module(), factory).startswith("asyncio")


@pytest.mark.skipif(not HAS_UVLOOP, reason="uvloop is not installed")
def test_auto_runs_on_uvloop_when_it_is_installed():
    name, factory = loop_factory("auto")
    assert name == "uvloop"
    assert run(_loop_module(), factory).startswith("uvloop")


def test_the_worker_takes_uvloop_when_it_is_installed_by_default():
    default = inspect.signature(worker).parameters["loop"].default
    assert default == "auto"
    assert loop_factory(default)[0] == ("uvloop" if HAS_UVLOOP else "asyncio")


def test_auto_falls_back_to_asyncio_without_uvloop(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as if not installed
    assert loop_factory("auto") == ("asyncio", None)
    with pytest.raises(ValueError, match="uvloop is not installed"):
        loop_factory("uvloop")


def test_an_unknown_loop_is_refused():
    with pytest.raises(ValueError, match="unknown event loop"):
        loop_factory("trio")
