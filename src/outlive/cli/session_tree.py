"""A session and its sub-agents' sessions as an indented tree (`outlive sessions tree`,
docs/subagents.md). Pure formatting: the command reads the tree (`GET /v1/sessions?parent_id=`
level by level) and hands it here.

    ses_01J…A  demo    succeeded        Plan the trip
    ├─ ses_01J…B  helper  succeeded     Find trains
    │  └─ ses_01J…D  helper  failed     Check the timetable
    └─ ses_01J…C  helper  waiting for you  Book the hotel
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["TreeNode", "tree_lines"]


@dataclass
class TreeNode:
    id: str
    agent: str
    status: str
    """The status as a person reads it (`status_word`: also what it waits on a person for)."""
    title: str | None = None
    children: list[TreeNode] = field(default_factory=list)
    more: bool = False
    """It has children the tree leaves out (past the depth or the size it was read to)."""


def _row(node: TreeNode) -> str:
    parts = [node.id, node.agent, node.status]
    if node.title:
        parts.append(" ".join(node.title.split()))
    return "  ".join(parts)


def tree_lines(root: TreeNode) -> list[str]:
    """The root's row, then each child's under it, depth first, children in the order given."""
    lines = [_row(root)]

    def walk(node: TreeNode, prefix: str) -> None:
        for i, child in enumerate(node.children):
            last = i == len(node.children) - 1 and not node.more
            lines.append(prefix + ("└─ " if last else "├─ ") + _row(child))
            walk(child, prefix + ("   " if last else "│  "))
        if node.more:
            lines.append(prefix + "└─ …")

    walk(root, "")
    return lines
