"""The test suite's own layout: helpers live in tests/support, where every test package
finds them; a conftest file holds the fixtures of its directory and nothing a test imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _modules(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def conftest_imports(root: Path) -> list[str]:
    """Every `import`/`from ... import` under `root` that names a conftest module."""
    found = []
    for path in _modules(root):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module or ''}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            if any("conftest" in name.split(".") for name in names):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return found


def _is_fixture(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return isinstance(target, ast.Attribute) and target.attr == "fixture"


def conftest_non_fixtures(root: Path) -> list[str]:
    """Classes and plain functions defined in conftest files (fixtures and pytest hooks are
    what belongs there)."""
    found = []
    for path in _modules(root):
        if path.name != "conftest.py":
            continue
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.ClassDef) or (
                isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                and not node.name.startswith("pytest_")
                and not any(_is_fixture(d) for d in node.decorator_list)
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {node.name}")
    return found


def test_no_module_imports_from_a_conftest() -> None:
    assert conftest_imports(TESTS) == [], "import it from tests.support instead"


def test_conftest_files_define_only_fixtures() -> None:
    assert conftest_non_fixtures(TESTS) == [], "move it to tests/support"


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(
        "import pytest\n\n\ndef helper():\n    pass\n\n\nclass Thing:\n    pass\n\n\n"
        "@pytest.fixture\ndef fine():\n    pass\n\n\ndef pytest_configure(config):\n    pass\n"
    )
    (tmp_path / "test_a.py").write_text("from .conftest import helper\n")
    (tmp_path / "test_b.py").write_text("from .. import conftest\nimport tests.conftest\n")
    (tmp_path / "test_c.py").write_text("from tests.support.waiting import eventually\n")
    assert conftest_imports(tmp_path) == [
        "test_a.py:1: from .conftest import helper",
        "test_b.py:1: from .. import conftest",
        "test_b.py:2: import tests.conftest",
    ]
    assert conftest_non_fixtures(tmp_path) == ["conftest.py:4: helper", "conftest.py:8: Thing"]
