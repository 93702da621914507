"""The dependency arrows of `src/outlive`, read from the source and checked against the design.

Every module is parsed with `ast` (nothing is imported), relative imports are resolved to
module names, and each outlive-to-outlive import becomes an edge `module -> module` with its
line. Three things fail the test, each reported as `path:line: message`:

* an edge between units that `MAY_IMPORT` below does not allow;
* a private name (`_x`, a module or an attribute) imported from outside the package that owns
  it, and any absolute `outlive...` import (inside the package, imports are relative);
* an import cycle between modules;
* a module of the API or the runtime naming a Store port its unit's role (`PORT_ROLES`) is not
  made of, or the whole `Store` (only composition roots hold that): each names the ports it uses.

What counts as an edge:

* Imports under `if TYPE_CHECKING:` are skipped: they never execute.
* Imports inside a function are edges like any other: they still execute, just later, so
  they may neither cross a forbidden arrow nor close a cycle.
* `from pkg import name` points at `pkg.name` when that is a module, else at `pkg`.
* Importing `a.b.c` also runs `a/__init__` and `a/b/__init__`; those implicit edges are left
  out, otherwise every package that re-exports its own modules would be a cycle.
"""

from __future__ import annotations

import ast
import functools
import itertools
import shutil
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = "outlive"

ANY = frozenset({"*"})
"""A composition root: it wires the units together, so it may import every one of them."""

SPLIT = frozenset({"cli"})
"""Packages whose modules are units of their own (`cli.serve`, `cli.transcript`; `cli` is the
package's `__init__`): the command line is a composition root, but some of its modules are
leaves that must stay narrow, and a rule per module is what keeps them so."""

# The design. A unit is a subpackage of `outlive`, a top-level module, or a module of a package
# in SPLIT; `outlive` is the package's own `__init__`. A unit may always import itself; anything
# not listed is forbidden.
MAY_IMPORT: dict[str, frozenset[str]] = {
    # unit            may import                                    why
    "domain":         frozenset(),                                # pure: no I/O, nothing of ours
    "outlive":        frozenset(),                                # only `__version__`
    "web":            frozenset(),                                # the workbench page + mount
    "metrics":        frozenset(),                                # process-wide counters
    # supervision: the long-lived loops of runtime and api alike, crashes counted in metrics
    "supervision":    frozenset({"metrics"}),
    "client":         frozenset({"domain"}),                      # HTTP + the pure reducer
    "store":          frozenset({"domain"}),                      # the Store port and SQL
    # tracing: the only importer of OpenTelemetry (when on); spans of domain sessions
    "tracing":        frozenset({"domain"}),
    "providers":      frozenset({"domain", "_ticks", "tracing"}),  # the ModelProvider port
    "tools":          frozenset({"domain"}),                      # tool calls live in domain
    # mcp: an adapter like providers: MCP servers' tools as registry tools, nothing more
    "mcp":            frozenset({"domain", "tools", "tracing"}),
    "runtime":        frozenset({"domain", "store", "providers", "tools", "metrics", "mcp",
                                 "_ticks", "supervision", "tracing"}),
    # api: agents and model routes come in through its AgentCatalog protocol, not the runtime
    "api":            frozenset({"domain", "store", "web", "metrics", "outlive",
                                 "supervision"}),
    "config":         ANY,                                        # builds agents and routes
    "__main__":       ANY,                                        # `python -m outlive`
    "_ticks":         frozenset(),                                # shared timers (demo, flushes)
    # cli: the command line. Its commands are composition roots; its leaves stay narrow.
    "cli":            frozenset({"cli.app"}),                     # re-exports `app`, `main`
    "cli.app":        ANY,                                        # the typer app, `migrate`, `demo`
    "cli.serve":      ANY,                                        # `outlive serve`
    "cli.worker":     ANY,                                        # `outlive worker`
    "cli.admin":      ANY,                                        # `outlive keys|owners ...`
    "cli.sessions":   ANY,                                        # `outlive sessions ...`
    "cli.usage":      ANY,                                        # `outlive usage`
    "cli.schedules":  ANY,                                        # `outlive schedules ...`
    "cli.embedded":   ANY,                                        # API+worker+store in-process
    "cli.tour":       frozenset({"client", "domain", "cli.embedded"}),  # `outlive demo`
    "cli.local_key":  ANY,                                        # serve's key of owner `local`
    "cli.secrets":    ANY,                                        # `outlive secrets ...`
    "cli.secret_key": ANY,                                        # the key sealing webhook secrets
    "cli.options":    frozenset({"runtime", "cli.event_loop",     # options shared by commands
                                 "cli.settings"}),
    "cli.settings":   frozenset({"config", "runtime"}),           # options -> RuntimeSettings
    "cli.errors":     frozenset({"client", "domain"}),            # errors as one line
    "cli.port":       frozenset(),                                # who holds a TCP port
    "cli.event_loop": frozenset(),                                # the event loop (uvloop)
    "cli.gc_tuning":  frozenset(),                                # server GC thresholds
    "cli.transcript": frozenset({"domain"}),                     # events (payloads) as text
    "cli.session_tree": frozenset(),                              # a session tree as text
    "cli.status_words": frozenset(),                              # statuses as people read them
    "cli.answers":    frozenset(),                                # an option's number -> text
    "cli.traces":     frozenset({"tracing"}),                     # OTEL_* at start, flush at end
}

FORBIDDEN = {
    "domain": set(MAY_IMPORT) - {"domain"},
    "store": {"runtime", "api"},
    "client": {"store", "runtime", "api"},
    "providers": {"store"},
    "api": {"runtime"},
    "tools": {"providers"},
    "mcp": {"store", "runtime", "api", "providers"},
    "cli.transcript": set(MAY_IMPORT) - {"cli.transcript", "domain"},
    "cli.port": set(MAY_IMPORT) - {"cli.port"},
    "cli.errors": {"store", "runtime", "api", "config"},
    "cli.settings": {"store", "api", "cli.serve", "cli.worker", "cli.embedded"},
}
"""The arrows the design names explicitly; `MAY_IMPORT` must exclude every one of them."""

PORT_ROLES: dict[str, str] = {
    "api": "ApiStore",
    "runtime": "WorkerStore",
}
"""The Store role (a union of ports in `store/_port.py`) each non-root unit that imports the
store works with: its modules may name that role and the ports and roles it is made of, never
the whole `Store` (its union with every other port) nor a port outside the role."""

WHOLE_STORE = "Store"


@dataclass(frozen=True)
class Import:
    source: str
    """The importing module, e.g. `outlive.api._app`."""
    target: str
    """The imported module (`outlive.store`), or the package a name was taken from."""
    names: tuple[str, ...]
    """For `from target import a, b`: `("a", "b")`; empty for `import target`."""
    path: Path
    line: int
    absolute: bool
    in_function: bool

    def where(self, root: Path) -> str:
        return f"{self.path.relative_to(root.parent)}:{self.line}"


def modules(root: Path) -> dict[str, Path]:
    """Module name -> file, for every `.py` under the package directory `root`."""
    found: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, in_function: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield from _walk_one(other, in_function)
            continue
        yield from _walk_one(child, in_function)


def _walk_one(
    node: ast.AST, in_function: bool
) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node, in_function
        return
    inner = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
    yield from _walk(node, inner)


@functools.cache
def _parsed(text: str) -> ast.Module:
    """A module's tree, by its text: the checker tests run it on copies of the package that
    differ in a file or two, so each unchanged module is parsed once per process."""
    return ast.parse(text)


@functools.cache
def _import_nodes(text: str) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    return list(_walk(_parsed(text), False))


def imports(root: Path) -> list[Import]:
    """Every import of an outlive module by an outlive module under `root`."""
    known = modules(root)
    found: list[Import] = []
    for name, path in known.items():
        is_package = path.name == "__init__.py"
        for node, in_function in _import_nodes(path.read_text()):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                        found.append(Import(name, alias.name, (), path, node.lineno, True,
                                            in_function))
                continue
            if node.level:
                here = name.split(".") if is_package else name.split(".")[:-1]
                base = here[: len(here) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target != PACKAGE and not target.startswith(PACKAGE + "."):
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in known:
                    found.append(Import(name, sub, (), path, node.lineno, not node.level,
                                        in_function))
                else:
                    found.append(Import(name, target, (alias.name,), path, node.lineno,
                                        not node.level, in_function))
    return found


def unit(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 2 and parts[1] in SPLIT:
        return f"{parts[1]}.{parts[2]}"
    return parts[1] if len(parts) > 1 else parts[0]


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _note(imp: Import) -> str:
    return " (inside a function)" if imp.in_function else ""


def arrow_violations(root: Path, found_imports: list[Import]) -> list[str]:
    found = []
    for imp in found_imports:
        src, dst = unit(imp.source), unit(imp.target)
        allowed = MAY_IMPORT.get(src, frozenset())
        if src == dst or allowed is ANY:
            continue
        if dst not in allowed:
            found.append(f"{imp.where(root)}: {imp.source} imports {imp.target}{_note(imp)}: "
                         f"{src} may not import {dst}")
    return found


def privacy_violations(root: Path, found_imports: list[Import]) -> list[str]:
    found = []
    for imp in found_imports:
        if imp.absolute:
            found.append(f"{imp.where(root)}: {imp.source} imports {imp.target} by its "
                         f"absolute name; inside {PACKAGE} imports are relative")
        parts = [*imp.target.split("."), *imp.names]
        for i, part in enumerate(parts):
            if not _private(part):
                continue
            owner = ".".join(parts[:i])
            if imp.source != owner and not imp.source.startswith(owner + "."):
                found.append(f"{imp.where(root)}: {imp.source} imports "
                             f"{'.'.join(parts[: i + 1])}{_note(imp)}, private to {owner}")
            break
    return found


def cycles(root: Path, found_imports: list[Import]) -> list[str]:
    """One message per import cycle (a strongly connected group of modules), naming a loop
    through it edge by edge."""
    edges: dict[str, dict[str, Import]] = {}
    for imp in found_imports:
        if imp.target != imp.source:
            edges.setdefault(imp.source, {}).setdefault(imp.target, imp)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def connect(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in edges.get(node, {}):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(modules(root)):
        if node not in index:
            connect(node)
    found = []
    for group in groups:
        members = set(group)
        loop = [group[0]]
        while True:  # follow edges inside the group until a module repeats
            nxt = min(t for t in edges[loop[-1]] if t in members)
            if nxt in loop:
                loop = [*loop[loop.index(nxt):], nxt]
                break
            loop.append(nxt)
        steps = [
            f"{edges[a][b].where(root)} {a} -> {b}{_note(edges[a][b])}"
            for a, b in itertools.pairwise(loop)
        ]
        found.append("import cycle: " + "; ".join(steps))
    return found


def store_ports(root: Path) -> dict[str, set[str]]:
    """Every Store port and role in `store/_port.py` -> the ports and roles it extends: the
    Protocols `Store` is made of, and the Protocols made only of those (the roles)."""
    source = root / "store" / "_port.py"
    if not source.exists():
        return {}
    tree = ast.parse(source.read_text())
    bases = {
        node.name: {b.id for b in node.bases if isinstance(b, ast.Name)} - {"Protocol"}
        for node in tree.body if isinstance(node, ast.ClassDef)
    }
    ports = {name: set() for name in bases.get(WHOLE_STORE, set())}
    ports[WHOLE_STORE] = set(bases.get(WHOLE_STORE, set()))
    grew = True
    while grew:  # roles: unions of ports and of other roles
        grew = False
        for name, extends in bases.items():
            if name not in ports and extends and extends <= ports.keys():
                ports[name] = extends
                grew = True
    return ports


def _made_of(ports: dict[str, set[str]], role: str) -> set[str]:
    found = {role}
    for base in ports.get(role, set()):
        found |= _made_of(ports, base)
    return found


def _names_used(path: Path) -> Iterator[tuple[str, int]]:
    """Every name a module imports from anywhere (type-checking imports too: an annotation
    names a port whether or not the import runs) and every attribute it reads (`store.X`)."""
    for node in ast.walk(_parsed(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(
                PACKAGE)):
            yield from ((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.Attribute):
            yield node.attr, node.lineno


def port_violations(root: Path) -> list[str]:
    ports = store_ports(root)
    found = []
    for name, path in modules(root).items():
        role = PORT_ROLES.get(unit(name))
        if role is None:
            continue
        allowed = _made_of(ports, role) - {WHOLE_STORE}
        for used, line in _names_used(path):
            if used not in ports or used in allowed:
                continue
            where = f"{path.relative_to(root.parent)}:{line}: {name} names {used}"
            if used == WHOLE_STORE:
                found.append(f"{where}, the whole Store: {unit(name)} names the ports it uses")
            else:
                found.append(f"{where}: not a port of {unit(name)}'s role {role}")
    return found


def violations(root: Path) -> list[str]:
    """Every broken rule once (`from x import a, b` is one message, not two)."""
    found_imports = imports(root)
    found = [
        *arrow_violations(root, found_imports),
        *privacy_violations(root, found_imports),
        *cycles(root, found_imports),
        *port_violations(root),
    ]
    return list(dict.fromkeys(found))


# --- the real tree -----------------------------------------------------------------------------


def test_the_rules_table_forbids_every_arrow_the_design_names() -> None:
    for src, banned in FORBIDDEN.items():
        assert not MAY_IMPORT[src] & banned, (src, MAY_IMPORT[src] & banned)
    units = {unit(m) for m in modules(SRC / PACKAGE)}
    assert units == set(MAY_IMPORT), "every unit needs a row in MAY_IMPORT, and only those"


def test_every_unit_that_may_use_the_store_has_a_role_made_of_its_ports() -> None:
    ports = store_ports(SRC / PACKAGE)
    assert len(ports[WHOLE_STORE]) > 1, "the Store is one port again, or the parse broke"
    users = {src for src, allowed in MAY_IMPORT.items()
             if allowed is not ANY and "store" in allowed}
    assert users == set(PORT_ROLES), "every non-root unit that uses the store needs a role"
    for role in PORT_ROLES.values():
        assert role in ports and WHOLE_STORE not in _made_of(ports, role), role


def test_the_import_graph_is_well_formed() -> None:
    assert imports(SRC / PACKAGE), "the checker found no imports at all"
    found = violations(SRC / PACKAGE)
    assert not found, "imports that break the design:\n" + "\n".join(found)


# --- the checker catches what it should ---------------------------------------------------------


class Copy:
    """A copy of the package to break on purpose; `added()` is what the breakage reports
    (so these tests prove the checker, whatever the state of the real tree)."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / PACKAGE
        shutil.copytree(SRC / PACKAGE, self.root, ignore=shutil.ignore_patterns("__pycache__"))
        self.before = violations(self.root)

    def append(self, module: str, text: str) -> int:
        """Add `text` at the end of `module` (a path under the package, created if missing);
        returns the line `text` starts on."""
        path = self.root / module
        lines = path.read_text().splitlines() if path.exists() else ['"""A probe."""']
        path.write_text("\n".join([*lines, textwrap.dedent(text).strip("\n")]) + "\n")
        return len(lines) + 1

    def added(self) -> list[str]:
        return [v for v in violations(self.root) if v not in self.before]


def test_a_forbidden_arrow_is_reported_with_its_module_and_line(tmp_path: Path) -> None:
    tree = Copy(tmp_path)
    line = tree.append("api/_meta.py", "from ..runtime import worker")
    assert tree.added() == [
        f"outlive/api/_meta.py:{line}: outlive.api._meta imports outlive.runtime.worker: "
        "api may not import runtime"
    ]


def test_a_leaf_of_the_command_line_is_held_to_its_own_row(tmp_path: Path) -> None:
    """The cli package is a composition root, its leaves are not: the store in the
    transcript, or a command in the port check, is reported; the store in `serve` is not."""
    tree = Copy(tmp_path)
    tree.append("cli/serve.py", "from ..store import Store as _Store")
    assert tree.added() == []
    line = tree.append("cli/transcript.py", "from ..store import Store")
    other = tree.append("cli/port.py", "from .sessions import sessions_app")
    assert tree.added() == [
        f"outlive/cli/port.py:{other}: outlive.cli.port imports outlive.cli.sessions: "
        "cli.port may not import cli.sessions",
        f"outlive/cli/transcript.py:{line}: outlive.cli.transcript imports outlive.store: "
        "cli.transcript may not import store",
    ]


def test_a_new_module_of_the_command_line_needs_its_own_row(tmp_path: Path) -> None:
    tree = Copy(tmp_path)
    tree.append("cli/probe.py", "X = 1")
    units = {unit(m) for m in modules(tree.root)}
    assert units - set(MAY_IMPORT) == {"cli.probe"}


def test_a_function_level_import_counts_and_type_checking_imports_do_not(
    tmp_path: Path,
) -> None:
    tree = Copy(tmp_path)
    tree.append("domain/_probe.py", """
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from ..store import Store
    """)
    assert tree.added() == []
    line = tree.append("tools/_probe.py", """
        def late() -> None:
            from ..providers import ToolCall
    """)
    assert tree.added() == [
        f"outlive/tools/_probe.py:{line + 1}: outlive.tools._probe imports outlive.providers "
        "(inside a function): tools may not import providers"
    ]


def test_private_names_and_absolute_imports_are_reported(tmp_path: Path) -> None:
    tree = Copy(tmp_path)
    line = tree.append("runtime/_probe.py", "from outlive.providers._port import Usage")
    assert tree.added() == [
        f"outlive/runtime/_probe.py:{line}: outlive.runtime._probe imports "
        "outlive.providers._port by its absolute name; inside outlive imports are relative",
        f"outlive/runtime/_probe.py:{line}: outlive.runtime._probe imports "
        "outlive.providers._port, private to outlive.providers",
    ]
    tree = Copy(tmp_path / "again")
    line = tree.append("runtime/_probe.py", "from ..store import RunStore, _internals")
    assert tree.added() == [
        f"outlive/runtime/_probe.py:{line}: outlive.runtime._probe imports "
        "outlive.store._internals, private to outlive.store"
    ]


def test_an_import_cycle_is_reported_edge_by_edge(tmp_path: Path) -> None:
    root = tmp_path / PACKAGE
    (root / "domain").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "domain" / "__init__.py").write_text("")
    (root / "domain" / "a.py").write_text("from . import b\n")
    (root / "domain" / "b.py").write_text('"""doc"""\n\nfrom .c import thing\n')
    (root / "domain" / "c.py").write_text("def f() -> None:\n    from .a import x\n")
    assert violations(root) == [
        "import cycle: outlive/domain/a.py:1 outlive.domain.a -> outlive.domain.b; "
        "outlive/domain/b.py:3 outlive.domain.b -> outlive.domain.c; "
        "outlive/domain/c.py:2 outlive.domain.c -> outlive.domain.a (inside a function)"
    ]


def test_naming_the_whole_store_or_another_roles_port_is_reported(tmp_path: Path) -> None:
    tree = Copy(tmp_path)
    line = tree.append("api/_meta.py", "from ..store import EventLogStore, Store")
    assert tree.added() == [
        f"outlive/api/_meta.py:{line}: outlive.api._meta names Store, the whole Store: "
        "api names the ports it uses"
    ]
    tree = Copy(tmp_path / "again")
    line = tree.append("runtime/_probe.py", """
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from ..store import SessionStore
        from .. import store
        def later(s: store.Store) -> None: ...
    """)
    assert tree.added() == [
        f"outlive/runtime/_probe.py:{line + 2}: outlive.runtime._probe names SessionStore: "
        "not a port of runtime's role WorkerStore",
        f"outlive/runtime/_probe.py:{line + 4}: outlive.runtime._probe names Store, the whole "
        "Store: runtime names the ports it uses",
    ]


def test_a_composition_root_may_hold_the_whole_store(tmp_path: Path) -> None:
    tree = Copy(tmp_path)
    tree.append("cli/embedded.py", "from ..store import RunStore, SessionStore, Store")
    assert tree.added() == []
