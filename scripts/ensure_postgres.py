"""Make sure the test PostgreSQL answers; start the local cluster if it does not.

Used by `make test`: the machines come with PostgreSQL running, but a stopped cluster should
cost a start, not a confusing wall of connection errors.
"""

from __future__ import annotations

import glob
import subprocess
import sys
import time

import psycopg


def reachable(dsn: str) -> bool:
    try:
        with psycopg.connect(dsn, connect_timeout=3):
            return True
    except psycopg.OperationalError:
        return False


def main() -> int:
    dsn = sys.argv[1]
    if reachable(dsn):
        return 0
    versions = sorted(glob.glob("/etc/postgresql/*"))
    if not versions:
        print(f"PostgreSQL is not reachable at {dsn} and no local cluster was found.\n"
              "Start one, or point OUTLIVE_TEST_POSTGRES at a server.", file=sys.stderr)
        return 1
    version = versions[-1].rsplit("/", 1)[-1]
    print(f"PostgreSQL not reachable; starting local cluster {version}/main", file=sys.stderr)
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "start"], check=False
    )
    for _ in range(30):
        if reachable(dsn):
            return 0
        time.sleep(1)
    print(f"PostgreSQL still not reachable at {dsn}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
