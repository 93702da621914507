"""The workbench's New-session hint names every word the demo model reacts to: the page is
static, so its copy of the list is held to the demo provider's own (`DEMO_WORDS`)."""

from __future__ import annotations

import html
import re
from pathlib import Path

from outlive.providers._demo_texts import DEMO_WORDS

PAGE = Path(__file__).resolve().parents[2] / "src" / "outlive" / "web" / "index.html"


def test_the_new_session_hint_lists_every_demo_word() -> None:
    hint = re.search(r'data-testid="demo-words">(.*?)</p>', PAGE.read_text(), re.S)
    assert hint is not None
    quoted = re.findall(r"“([^”]+)”", html.unescape(" ".join(hint.group(1).split())))
    assert len(quoted) == len(DEMO_WORDS)
    for word, shown in zip(DEMO_WORDS, quoted, strict=True):
        assert shown.startswith(word), (word, shown)
