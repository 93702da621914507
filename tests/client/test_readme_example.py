"""The README's client example (the ```python block of README.md that contains
`from outlive.client import`) runs against a real server and prints what it promises."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from tests.support.live import Live
from tests.support.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
MARKER = "from outlive.client import"


def example_source() -> str:
    blocks = [str(b) for b in re.findall(r"```python\n(.*?)```",
                                         (ROOT / "README.md").read_text(), flags=re.S)
              if MARKER in b]
    assert len(blocks) == 1, f"README.md has {len(blocks)} python blocks with {MARKER!r}"
    return blocks[0]


def test_the_example_is_short_and_uses_the_public_surface():
    source = example_source()
    assert MARKER in source
    assert len(source.strip().splitlines()) <= 25
    compile(source, "README example", "exec")


@pytest.mark.parametrize("key_from", ["environment", "key file"])
async def test_the_example_runs(live: Live, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                key_from: str):
    """With OUTLIVE_API_KEY, or (as after `make run`) with nothing exported but the key file
    `serve` wrote in the current directory, ./outlive.db.key."""
    monkeypatch.setenv("OUTLIVE_URL", live.server.url)
    monkeypatch.chdir(tmp_path)
    if key_from == "environment":
        monkeypatch.setenv("OUTLIVE_API_KEY", live.key)
    else:
        monkeypatch.delenv("OUTLIVE_API_KEY", raising=False)
        (tmp_path / "outlive.db.key").write_text(live.key + "\n")
    source = example_source()
    code = compile(source, "README example", "exec")
    # The example calls asyncio.run(), so it gets its own thread (and loop); the server
    # runs in this test's loop.
    await asyncio.wait_for(asyncio.to_thread(exec, code, {"__name__": "__main__"}), 60)
    out = capsys.readouterr().out

    sessions = await live.client.list_all_sessions()
    assert len(sessions) == 2
    streamed, other = sessions  # newest first
    events = await live.client.all_events(streamed.id)
    text = "".join(e.data["text"] for e in events if e.type == "text_delta")
    assert text and events[-1].type == "session_end"
    assert out.startswith(text + "\n")
    last = out[len(text) + 1:]
    assert last in ("cancel requested\n", "already succeeded\n", "already cancelled\n")

    async def other_ended() -> bool:
        return (await live.client.get_session(other.id)).session.terminal

    await eventually(other_ended, what="the other session ended")
    if last == "cancel requested\n":
        assert (await live.client.get_session(other.id)).session.status == "cancelled"
