"""A store outage is 503 `STORE_UNAVAILABLE` with `Retry-After` on every route, and the same
API process serves again once the database is back; any other failure is a bare 500.

The PostgreSQL outage is real: a private cluster, started by this module in a temporary
directory as the `postgres` user on its own port, is stopped and started again (the shared
server is never touched). The SQLite outage is real too: another process holds every WAL read
lock of the database, so a read transaction cannot begin.
"""

from __future__ import annotations

import asyncio
import contextlib
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from outlive.api._errors import RETRY_AFTER_SECONDS
from outlive.domain import OutliveError
from outlive.store import PostgresStore, SqliteStore
from tests.support.api import FAST, SSE, AnyStore, Server, start_server, stop_server
from tests.support.inprocess import demo_app, make_key
from tests.support.waiting import eventually


class PrivateCluster:
    """A throwaway PostgreSQL server: trust auth, no fsync, its own port and socket dir."""

    def __init__(self) -> None:
        versions = sorted(Path("/usr/lib/postgresql").iterdir(), key=lambda p: p.name)
        assert versions, "PostgreSQL server binaries are not installed"
        self.bin = versions[-1] / "bin"
        self.root = Path(tempfile.mkdtemp(prefix="outlive-pg-"))
        user = pwd.getpwnam("postgres")
        shutil.chown(self.root, user.pw_uid, user.pw_gid)
        self.data = self.root / "data"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._as_postgres(["initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres",
                           "--no-sync", "--no-instructions"])

    def _as_postgres(self, args: list[str]) -> None:
        cmd = ["runuser", "-u", "postgres", "--", str(self.bin / args[0]), *args[1:]]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} "
                   "-c fsync=off -c full_page_writes=off -c synchronous_commit=off")
        self._as_postgres(["pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"),
                           "-o", options, "-w", "-t", "60", "start"])

    def stop(self) -> None:
        self._as_postgres(["pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop"])

    def remove(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster() -> Iterator[PrivateCluster]:
    c = PrivateCluster()
    try:
        c.start()
        yield c
    finally:
        c.remove()


@contextlib.asynccontextmanager
async def serving(store: AnyStore) -> AsyncIterator[tuple[Server, httpx.AsyncClient]]:
    """A real uvicorn on 127.0.0.1 over `store`, no worker, and a client with an owner's key."""
    await store.migrate()
    key, _ = await make_key(store)
    server = await start_server(demo_app(store, 0, FAST), store)
    client = httpx.AsyncClient(base_url=server.url, timeout=httpx.Timeout(30.0),
                               headers={"Authorization": f"Bearer {key}"})
    try:
        yield server, client
    finally:
        await client.aclose()
        await stop_server(server)
        await store.close()


def assert_unavailable(r: httpx.Response) -> None:
    assert r.status_code == 503, r.text
    assert r.headers["retry-after"] == str(RETRY_AFTER_SECONDS)
    assert r.json()["error"]["code"] == "STORE_UNAVAILABLE"
    assert "postgres" not in r.text.lower() and "sqlite" not in r.text.lower()  # no detail


async def routes(client: httpx.AsyncClient, sid: str) -> list[httpx.Response]:
    """The three routes every client starts with, at once."""
    return list(await asyncio.gather(
        client.get("/v1/sessions"),
        client.post("/v1/sessions", json={"prompt": "hello"}),
        client.get(f"/v1/sessions/{sid}"),
    ))


async def test_a_stopped_postgres_is_503_until_it_is_back(cluster: PrivateCluster):
    async with serving(await PostgresStore(cluster.dsn).open()) as (_, client):
        r = await client.post("/v1/sessions", json={"prompt": "hi"})
        assert r.status_code == 202, r.text
        sid = r.json()["id"]
        async with client.stream("GET", f"/v1/sessions/{sid}/events") as stream:
            assert stream.status_code == 200
            sse = SSE(stream)
            await sse.until(lambda f: f.event == "caught_up")

            await asyncio.to_thread(cluster.stop)
            try:
                for r in await routes(client, sid):
                    assert_unavailable(r)
                # an open stream ends rather than idling on pings; its client reconnects
                with pytest.raises(EOFError):
                    while True:
                        await sse.next(timeout=30)
                assert sse.last_comment == (  # and says why
                    "stream ended: store_unavailable; reconnect with Last-Event-ID")
            finally:
                await asyncio.to_thread(cluster.start)

        async def serving_again() -> bool:
            return all(r.status_code < 300 for r in await routes(client, sid))

        await eventually(serving_again, timeout=60, interval=0.5)


@pytest.mark.parametrize("error", [RuntimeError("secret detail"), OutliveError("secret detail")])
async def test_any_other_failure_is_a_bare_500(tmp_path: Path, error: Exception):
    store = await SqliteStore(tmp_path / "outlive.db").open()
    async with serving(store) as (_, client):
        async def broken(*args: Any, **kwargs: Any) -> Any:
            raise error

        store.list_sessions = broken  # type: ignore[method-assign]
        r = await client.get("/v1/sessions")
        assert r.status_code == 500
        assert r.json() == {"error": {"code": "INTERNAL", "message": "internal server error"}}
        assert "retry-after" not in r.headers


_HOLD_WAL_READ_LOCKS = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
while True:  # the five WAL read marks of the -shm file, as a reader in mid-read holds them
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 5, 123)
        break
    except OSError:
        time.sleep(0.01)
print("held", flush=True)
sys.stdin.read()
"""


async def test_a_sqlite_read_that_cannot_begin_is_503(tmp_path: Path):
    path = tmp_path / "outlive.db"
    async with serving(await SqliteStore(path).open()) as (_, client):
        r = await client.post("/v1/sessions", json={"prompt": "hi"})
        sid = r.json()["id"]
        assert (await client.get("/v1/sessions")).status_code == 200
        holder = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _HOLD_WAL_READ_LOCKS, f"{path}-shm",
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )
        assert holder.stdin is not None and holder.stdout is not None
        try:
            assert (await holder.stdout.readline()).strip() == b"held"
            # SQLite retries for about ten seconds, then gives up with "locking protocol"
            r = await client.get(f"/v1/sessions/{sid}")
            assert_unavailable(r)
        finally:
            holder.stdin.close()
            await asyncio.wait_for(holder.wait(), 10)
        assert (await client.get(f"/v1/sessions/{sid}")).status_code == 200
