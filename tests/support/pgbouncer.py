"""PgBouncer in transaction mode in front of the test PostgreSQL server, started by the suite.

Production PostgreSQL often sits behind PgBouncer, where a session's consecutive transactions
may run on different server connections: LISTEN, session settings and server-side prepared
statements do not work there. The tests run the Store through one (Debian's `pgbouncer`,
installed by `make test` with scripts/install_pgbouncer.sh) to prove outlive needs none of
them on its pooled DSN; LISTEN goes to the server directly (`listen_dsn`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from .processes import free_port

CANDIDATES = ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer")


def find_pgbouncer() -> str:
    """The pgbouncer executable; fails with the fix when there is none (tests never skip)."""
    found = os.environ.get("OUTLIVE_PGBOUNCER") or shutil.which("pgbouncer")
    for candidate in (found, *CANDIDATES):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise RuntimeError(
        "pgbouncer is not installed: run `make test` (scripts/install_pgbouncer.sh installs "
        "Debian's pgbouncer as root), or `apt-get install pgbouncer`, or set "
        "OUTLIVE_PGBOUNCER to its executable"
    )


@dataclass
class PgBouncer:
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    def dsn_for(self, direct: str) -> str:
        """`direct`'s database and user through this PgBouncer. Startup options (`options`)
        are not passed: PgBouncer ignores them, as the one in production would."""
        info = {k: v for k, v in conninfo_to_dict(direct).items() if k != "options"}
        info.update(host="127.0.0.1", port=str(self.port))
        return make_conninfo(**info)  # type: ignore[arg-type]


def _config(directory: Path, port: int, server: str) -> Path:
    info = conninfo_to_dict(server)
    host, server_port = info.get("host", "127.0.0.1"), info.get("port", "5432")
    user = str(info.get("user", "postgres"))
    (directory / "users.txt").write_text(f'"{user}" ""\n')
    ini = directory / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        # tests do not crash the server: commits need not wait for the WAL (as fast_dsn)
        f"* = host={host} port={server_port} connect_query='SET synchronous_commit = off'\n"
        "[pgbouncer]\n"
        "listen_addr = 127.0.0.1\n"
        f"listen_port = {port}\n"
        "unix_socket_dir =\n"
        "auth_type = trust\n"
        f"auth_file = {directory / 'users.txt'}\n"
        "pool_mode = transaction\n"
        "max_client_conn = 500\n"
        "default_pool_size = 20\n"
        "ignore_startup_parameters = extra_float_digits,options\n"
    )
    for path in (directory, directory / "users.txt", ini):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return ini


@contextlib.contextmanager
def running_pgbouncer(server: str) -> Iterator[PgBouncer]:
    """PgBouncer on a free port in front of `server` (a DSN); stopped at the end."""
    exe = find_pgbouncer()
    directory = Path(tempfile.mkdtemp(prefix="outlive-pgbouncer-"))
    port = free_port()
    ini = _config(directory, port, server)
    # PgBouncer refuses to run as root; as root, it runs as the server's usual system user.
    user = ["-u", "postgres"] if os.geteuid() == 0 else []
    log = directory / "pgbouncer.log"
    with log.open("wb") as out:  # its log goes to stderr, so the dropped user need not write
        proc = subprocess.Popen([exe, *user, str(ini)], stdout=out, stderr=subprocess.STDOUT)
    bouncer = PgBouncer(port, proc, log)
    try:
        _wait_ready(bouncer, server)
        yield bouncer
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(directory, ignore_errors=True)


def _wait_ready(bouncer: PgBouncer, server: str) -> None:
    deadline = time.monotonic() + 10
    dsn = bouncer.dsn_for(server)
    while True:
        if bouncer.process.poll() is not None:
            raise RuntimeError(f"pgbouncer exited: {_log(bouncer)}")
        try:
            with psycopg.connect(dsn, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"pgbouncer did not answer in 10 s: {_log(bouncer)}") from None
            time.sleep(0.05)


def _log(bouncer: PgBouncer) -> str:
    return bouncer.log.read_text()[-2000:] if bouncer.log.exists() else "(no log)"
