"""An answer to a question as the CLI shows it: `sessions show` numbers a question's options
(1., 2., …), so `sessions send ID 2` means the second option, and it is the CLI that turns
the number back into the option's text."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["chosen_option"]


def chosen_option(text: str, question: Mapping[str, Any] | None) -> tuple[int, str] | None:
    """(number, option text) when `text` is the number of one of the open `question`'s
    options (the snapshot's `question`: {"question", "options"}); None when there is no open
    question, it has no options, or `text` is not such a number: then it is sent as typed."""
    if not question:
        return None
    options = question.get("options")
    word = text.strip()
    if not isinstance(options, list) or not options or not word.isdecimal():
        return None
    number = int(word)
    if not 1 <= number <= len(options):
        return None
    option = options[number - 1]
    return number, option if isinstance(option, str) else str(option)
