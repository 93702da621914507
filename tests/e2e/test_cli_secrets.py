"""The server key that seals webhook secrets, as the command line keeps it: a 0600 file made
on first need, `outlive migrate` sealing plain rows, a process without the key refusing to
start (saying what to set), and `outlive secrets rotate` with a key file or the variables."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from pathlib import Path

from outlive.cli.secret_key import KeySource
from outlive.domain.secret_box import SecretBox, key_id, key_of, new_key, parse_key
from outlive.domain.webhooks import new_secret
from outlive.store import open_store
from tests.support.processes import child_env, free_port
from tests.support.secrets import TEST_SECRET_KEY, shared_box


def outlive(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "outlive", *args], cwd=cwd,
                          env=child_env(**env), capture_output=True, text=True, timeout=60)


def hooks(db: Path, box: SecretBox, n: int = 2) -> dict[str, str]:
    """`n` webhooks, each with a pending delivery, made with `box`: their secrets by id."""

    async def go() -> dict[str, str]:
        store = await open_store(f"sqlite:///{db}", secrets=box)
        try:
            owner = await store.ensure_owner("hooks")
            made = {}
            for i in range(n):
                secret = new_secret()
                h = await store.create_webhook(owner.id, url=f"https://h{i}.example/",
                                               events=["session.cancelled"], secret=secret)
                made[h.id] = secret
            s = await store.create_session(owner.id, agent="demo", model="demo:scripted")
            await store.request_cancel(owner.id, s.id)
            return made
        finally:
            await store.close()

    return asyncio.run(go())


def taken(db: Path, box: SecretBox) -> dict[str, str]:
    async def go() -> dict[str, str]:
        store = await open_store(f"sqlite:///{db}", secrets=box)
        try:
            return {t.webhook_id: t.secret
                    for t in await store.take_deliveries(limit=50, lease=0)}
        finally:
            await store.close()

    return asyncio.run(go())


def stored(db: Path) -> dict[str, str]:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT id, secret FROM webhooks").fetchall())


def test_migrate_makes_the_key_file_0600_and_seals_plain_secrets(tmp_path: Path) -> None:
    db = tmp_path / "outlive.db"
    done = outlive("migrate", cwd=tmp_path, OUTLIVE_SECRET_KEY="")
    assert done.returncode == 0, done.stderr
    key_file = tmp_path / "outlive.db.secret-key"
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    [line] = key_file.read_text().splitlines()
    box, created = KeySource(key_file).box()
    assert not created and box.current == key_id(parse_key(line))

    secrets = hooks(db, box)
    with sqlite3.connect(db) as conn:  # as a version before sealing wrote them
        conn.executemany("UPDATE webhooks SET secret = ? WHERE id = ?",
                         [(s, w) for w, s in secrets.items()])
    done = outlive("migrate", cwd=tmp_path, OUTLIVE_SECRET_KEY="")
    assert done.returncode == 0, done.stderr
    assert "encrypted 2 webhook secret(s) kept in plain text" in done.stderr
    assert {key_of(v) for v in stored(db).values()} == {box.current}
    assert not any(s in v for s in secrets.values() for v in stored(db).values())
    assert taken(db, box) == secrets
    again = outlive("migrate", cwd=tmp_path, OUTLIVE_SECRET_KEY="")
    assert again.returncode == 0 and "encrypted" not in again.stderr  # once


def test_a_process_without_the_key_fails_at_start_saying_what_to_set(tmp_path: Path) -> None:
    db = tmp_path / "outlive.db"
    hooks(db, shared_box())
    before = stored(db)
    url = f"sqlite:///{db}"
    for argv in (["worker", "--db", url], ["serve", "--db", url, "--port", str(free_port())],
                 ["migrate", "--db", url]):
        done = outlive(*argv, cwd=tmp_path, OUTLIVE_SECRET_KEY="")
        assert done.returncode == 1, done.stdout + done.stderr
        assert shared_box().current in done.stderr
        assert "--secret-key-file" in done.stderr and "OUTLIVE_SECRET_KEY" in done.stderr
        assert not (tmp_path / "outlive.db.secret-key").exists()  # no useless key left
        other = outlive(*argv, cwd=tmp_path, OUTLIVE_SECRET_KEY=new_key())
        assert other.returncode == 1, other.stdout + other.stderr
        assert "set OUTLIVE_SECRET_KEY" in other.stderr
    assert stored(db) == before


def test_rotate_with_a_key_file_moves_every_secret_to_a_new_key(tmp_path: Path) -> None:
    db = tmp_path / "outlive.db"
    key_file = tmp_path / "keys"
    outlive("migrate", "--db", f"sqlite:///{db}", "--secret-key-file", str(key_file),
            cwd=tmp_path)
    first, _ = KeySource(key_file).box()
    secrets = hooks(db, first, 3)
    for _ in range(2):  # and again: a second run is a rotation like the first
        before = KeySource(key_file).box()[0].current
        done = outlive("secrets", "rotate", "--db", f"sqlite:///{db}", "--secret-key-file",
                       str(key_file), "--batch", "2", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        [line] = key_file.read_text().splitlines()
        now = key_id(parse_key(line))
        assert now != before
        assert f"re-encrypted 3 webhook secret(s) with key {now}" in done.stderr
        assert f"dropped old keys {before}" in done.stderr
        assert {key_of(v) for v in stored(db).values()} == {now}
        assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    assert taken(db, KeySource(key_file).box()[0]) == secrets


def test_rotate_with_the_variables_moves_every_secret_to_the_new_key(tmp_path: Path) -> None:
    db = tmp_path / "outlive.db"
    secrets = hooks(db, shared_box())
    fresh = new_key()
    done = outlive("secrets", "rotate", "--db", f"sqlite:///{db}", cwd=tmp_path,
                   OUTLIVE_SECRET_KEY=fresh, OUTLIVE_SECRET_KEY_OLD=TEST_SECRET_KEY)
    assert done.returncode == 0, done.stderr
    assert "OUTLIVE_SECRET_KEY_OLD can now be removed" in done.stderr
    new = SecretBox([parse_key(fresh)])
    assert {key_of(v) for v in stored(db).values()} == {new.current}
    assert taken(db, new) == secrets
    printed = outlive("secrets", "new-key", cwd=tmp_path)
    assert len(parse_key(printed.stdout.strip())) == 32
