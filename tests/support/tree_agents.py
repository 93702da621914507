"""An agents module for worker processes (`outlive worker --agents tests.support.tree_agents
--demo-calls`): `boss`, the demo agent that may delegate to `helper`, the demo agent under
another name. The demo model's `call agent__helper {"task": "..."}` makes the delegation call
(docs/subagents.md), and the child runs the task as the demo model would."""

from __future__ import annotations

from dataclasses import replace
from typing import Any


def register(registry: Any) -> None:
    demo = registry.get("demo")  # the worker's own, at its demo speed
    registry.add(replace(demo, name="helper"))
    registry.add(replace(demo, name="boss", subagents=("helper",)))
