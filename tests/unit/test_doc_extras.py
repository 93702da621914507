"""Every example in README.md and docs/*.md that needs a package outlive does not install by
default says how to install it, before the example, on the same page (issue 38: the OpenAI
example ended in `ModuleNotFoundError: openai`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# the optional SDKs: what an example uses of each, and the installs that provide it
EXTRAS: dict[str, tuple[re.Pattern[str], tuple[str, ...]]] = {
    "openai": (re.compile(r"^\s*(from|import) openai\b", re.M),
               ("pip install openai", "pip install 'outlive[openai]'")),
    "anthropic": (re.compile(r"^\s*(from|import) anthropic\b", re.M),
                  ("pip install anthropic", "pip install 'outlive[anthropic]'")),
    "mcp": (re.compile(r"^\s*(from|import) (mcp|outlive\.mcp)\b|\bToolAnnotations\(|FastMCP",
                       re.M),
            ("pip install mcp", "pip install 'outlive[mcp]'")),
    "llama_cpp": (re.compile(r"^\s*(from|import) llama_cpp\b|\bLlama\(", re.M),
                  ("pip install llama-cpp-python", "pip install 'outlive[local]'")),
}
BLOCK = re.compile(r"^ *```(python|py)\n(.*?)^ *```", re.M | re.S)


def needs() -> list[tuple[str, str, int]]:
    """(page, package, offset of the example) for every example that uses an optional SDK."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for block in BLOCK.finditer(text):
            for package, (used, _) in EXTRAS.items():
                if used.search(block.group(2)):
                    found.append((page.name, package, block.start()))
    return found


def test_the_known_examples_are_found() -> None:
    """The scan sees the examples issue 38 names, so an empty scan cannot pass."""
    seen = {(page, package) for page, package, _ in needs()}
    assert ("openai-compatible.md", "openai") in seen
    assert ("mcp.md", "mcp") in seen


@pytest.mark.parametrize(("page", "package", "offset"), needs())
def test_an_example_that_needs_an_sdk_says_how_to_install_it(
        page: str, package: str, offset: int) -> None:
    path = ROOT / "README.md" if page == "README.md" else ROOT / "docs" / page
    before = path.read_text()[:offset]
    installs = EXTRAS[package][1]
    assert any(i in before for i in installs), (
        f"{page}: the example at offset {offset} uses {package}; say `{installs[0]}` "
        "(or the outlive extra) before it")
