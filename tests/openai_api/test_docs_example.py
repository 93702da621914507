"""docs/openai-compatible.md's Python example runs against a real server and prints what the
page says it prints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .harness import Server

DOC = Path(__file__).resolve().parents[2] / "docs" / "openai-compatible.md"


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_page_has_one_example_and_its_output() -> None:
    examples = [b for b in blocks("python") if "from openai import OpenAI" in b]
    assert len(examples) == 1
    compile(examples[0], "docs example", "exec")
    assert len(blocks("text")) == 1, "the printed output follows the example"


@pytest.mark.parametrize("db_backend", ["sqlite"])
@pytest.mark.parametrize("speed", [60.0])
def test_the_example_runs_and_prints_what_the_page_shows(
    server: Server, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OUTLIVE_URL", server.base_url.removesuffix("/openai/v1"))
    monkeypatch.setenv("OUTLIVE_API_KEY", server.key)
    (example,) = [b for b in blocks("python") if "from openai import OpenAI" in b]
    exec(compile(example, "docs example", "exec"), {"__name__": "__main__"})
    (printed,) = blocks("text")
    assert capsys.readouterr().out == printed
