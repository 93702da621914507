"""Module size: no Python or JavaScript module in src/ is over 500 lines (the vendored
browser libraries in web/vendor excepted). One rule for the whole tree; a module that grows
past it is split by what belongs together, not cut at a line number."""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
MAX_LINES = 500


def oversized(root: Path, limit: int = MAX_LINES) -> list[str]:
    """`path: lines` for every .py and .js module under `root` longer than `limit` lines,
    skipping vendored code and caches."""
    found = []
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".py", ".js") or not path.is_file():
            continue
        parts = path.relative_to(root).parts
        if "vendor" in parts or "__pycache__" in parts or "node_modules" in parts:
            continue
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit:
            found.append(f"{path.relative_to(root)}: {lines}")
    return found


def test_no_module_in_src_is_over_500_lines() -> None:
    assert oversized(SRC) == [], f"split these by cohesion (at most {MAX_LINES} lines)"


def test_the_check_sees_python_and_javascript_but_not_vendored_code(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "web" / "vendor").mkdir(parents=True)
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * 501)
    (tmp_path / "pkg" / "fine.py").write_text("x = 1\n" * 500)
    (tmp_path / "pkg" / "web" / "page.js").write_text("let x;\n" * 501)
    (tmp_path / "pkg" / "web" / "vendor" / "lib.js").write_text("let x;\n" * 5000)
    (tmp_path / "pkg" / "notes.txt").write_text("x\n" * 5000)
    assert oversized(tmp_path) == ["pkg/long.py: 501", "pkg/web/page.js: 501"]
