"""The Store ports: each operation in exactly one port, `Store` their union, and both adapters
implementing every member of every port with the port's own signature.

Read from the classes (nothing is opened), so it needs no database: what the behaviour of each
operation is, the rest of tests/store proves on both backends.
"""

from __future__ import annotations

import inspect
from typing import Any, Protocol

import pytest

from outlive.store import (
    PORTS,
    ApiStore,
    PostgresStore,
    RunnerStore,
    SqliteStore,
    Store,
    WorkerStore,
)

ADAPTERS = (SqliteStore, PostgresStore)

ADAPTER_ONLY = {"open", "from_url", "on_query", "quotas"}
"""Public names of an adapter that are not Store operations: how it is made, a test hook,
the server's quotas it is given (docs/quotas.md)."""


def own_members(port: type[Any]) -> set[str]:
    """The operations a Protocol declares itself (not those of the ports it extends)."""
    return {name for name in vars(port) if not name.startswith("_")}


def members(proto: type[Any]) -> set[str]:
    """Every operation of a Protocol, its own and its bases'."""
    found: set[str] = set()
    for cls in proto.__mro__:
        if cls in (Protocol, object) or not getattr(cls, "_is_protocol", False):
            continue
        found |= own_members(cls)
    return found


def ports_of(role: type[Any]) -> set[type[Any]]:
    """The ports a union is made of (through unions of unions)."""
    return {cls for cls in role.__mro__ if cls in PORTS}


def test_every_operation_is_in_exactly_one_port() -> None:
    seen: dict[str, str] = {}
    for port in PORTS:
        assert own_members(port), f"{port.__name__} declares nothing"
        assert members(port) == own_members(port), f"{port.__name__} extends another port"
        for name in own_members(port):
            assert name not in seen, f"{name} is in {seen[name]} and {port.__name__}"
            seen[name] = port.__name__


def test_store_is_the_union_of_the_ports_and_loses_no_member() -> None:
    assert set(Store.__bases__) - {Protocol} == set(PORTS)
    assert own_members(Store) == set(), "Store declares operations of its own"
    assert members(Store) == set().union(*(own_members(p) for p in PORTS))


def test_every_public_operation_of_an_adapter_is_in_a_port() -> None:
    for adapter in ADAPTERS:
        public = {n for n in dir(adapter) if not n.startswith("_")} - ADAPTER_ONLY
        assert public == members(Store), (adapter.__name__, public ^ members(Store))


def test_the_roles_are_unions_of_ports() -> None:
    assert ports_of(RunnerStore) < ports_of(WorkerStore)
    for role in (RunnerStore, WorkerStore, ApiStore):
        assert own_members(role) == set(), f"{role.__name__} declares operations of its own"
        assert members(role) == set().union(*(own_members(p) for p in ports_of(role)))
    assert not {"claim", "commit", "settle", "take_deliveries", "purge_due",
                "ensure_owner", "migrate"} & members(ApiStore), "the API gets no run writes"
    assert not {"create_session", "owner_for_key", "create_webhook", "migrate"} \
        & members(WorkerStore), "the worker gets no owner's operations"


def _shape(fn: Any) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.__name__)
@pytest.mark.parametrize("port", PORTS, ids=lambda p: p.__name__)
def test_the_adapter_implements_every_member_of_the_port(
    adapter: type[Any], port: type[Any]
) -> None:
    for name in sorted(own_members(port)):
        declared = vars(port)[name]
        assert hasattr(adapter, name), f"{adapter.__name__} lacks {port.__name__}.{name}"
        impl = inspect.getattr_static(adapter, name)
        where = f"{adapter.__name__}.{name} ({port.__name__})"
        if isinstance(declared, property):
            assert isinstance(impl, property), f"{where} is not a property"
            continue
        assert callable(impl), f"{where} is not a method"
        assert inspect.iscoroutinefunction(impl) == inspect.iscoroutinefunction(declared), \
            f"{where}: async in one, not in the other"
        assert _shape(impl) == _shape(declared), f"{where}: parameters differ from the port's"
