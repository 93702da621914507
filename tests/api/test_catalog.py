"""The API learns agents and model routes only through an `AgentCatalog`: `GET /v1/meta` shows
what the catalog offers and `POST /v1/sessions` accepts what it accepts, whether the catalog
is the runtime's or a stand-in that has nothing to do with the runtime."""

from __future__ import annotations

from dataclasses import dataclass

from outlive.api import AgentCatalog, create_app
from outlive.domain.errors import UnknownRoute
from outlive.providers import default_registry
from outlive.runtime import Agent, AgentRegistry, Catalog, demo_agent
from tests.support.api import FAST, AnyStore, Harness, start_server
from tests.support.inprocess import make_key


def _refused(r, code: str) -> dict:
    assert r.status_code == 400, r.text
    error: dict = r.json()["error"]
    assert error["code"] == code, error
    return error


async def _serve(harness: Harness, catalog: AgentCatalog):
    store: AnyStore = await harness.store_factory()
    server = await start_server(create_app(store, catalog=catalog, settings=FAST), store)
    harness.servers.append(server)
    key, _ = await make_key(store)
    return harness.client(server, key)


async def test_meta_lists_the_runtime_catalog(harness: Harness):
    agents = AgentRegistry([
        Agent("writer", "You write.", model="demo:fast"),
        demo_agent(0),
    ])
    client = await _serve(harness, Catalog(agents, default_registry(demo_speed=0)))
    r = await client.get("/v1/meta")
    assert r.status_code == 200, r.text
    assert r.json() == {
        "agents": [{"name": "demo", "model": "demo:scripted"},
                   {"name": "writer", "model": "demo:fast"}],
        "routes": ["demo:"],
        "default_model": "demo:scripted",
    }
    r = await client.post("/v1/sessions", json={"prompt": "hi", "agent": "writer"})
    assert r.status_code == 202, r.text
    assert (r.json()["agent"], r.json()["model"]) == ("writer", "demo:fast")


@dataclass(frozen=True)
class _Info:
    name: str
    model: str


class _OneAgent:
    """A catalog that is not the runtime's: one agent, one route prefix."""

    default_agent = "helper"
    default_model = "lab:big"

    def agents(self) -> list[_Info]:
        return [_Info("helper", "lab:small")]

    def check_model(self, model: str) -> str:
        prefix, _, name = model.partition(":")
        if prefix.lower() != "lab" or not name:
            raise UnknownRoute(f"unknown model route {model!r}; known routes: lab:",
                               route=model, known=["lab"])
        return f"lab:{name}"

    def model_prefixes(self) -> list[str]:
        return ["lab"]

    def tool_names(self, agent: str) -> frozenset[str]:
        return frozenset()

    def child_limits(self, agent: str) -> tuple[int, int]:
        return 1, 1


async def test_any_catalog_decides_agents_and_models(harness: Harness):
    client = await _serve(harness, _OneAgent())
    r = await client.get("/v1/meta")
    assert r.json() == {"agents": [{"name": "helper", "model": "lab:small"}],
                        "routes": ["lab:"], "default_model": "lab:big"}

    r = await client.post("/v1/sessions", json={"prompt": "hi"})
    assert r.status_code == 202, r.text
    assert (r.json()["agent"], r.json()["model"]) == ("helper", "lab:small")
    r = await client.post("/v1/sessions", json={"prompt": "hi", "model": "LAB:huge"})
    assert r.json()["model"] == "lab:huge"

    r = await client.post("/v1/sessions", json={"prompt": "x", "agent": "demo"})
    assert _refused(r, "UNKNOWN_AGENT")["known"] == ["helper"]
    r = await client.post("/v1/sessions", json={"prompt": "x", "model": "demo:scripted"})
    assert _refused(r, "UNKNOWN_MODEL_ROUTE")["known"] == ["lab"]
