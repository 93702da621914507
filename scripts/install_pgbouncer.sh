#!/bin/sh
# Make sure Debian's pgbouncer is installed: the store tests run through it in transaction
# mode (tests/support/pgbouncer.py starts it on a free port). Run as root to install;
# otherwise it only checks.
#
#   scripts/install_pgbouncer.sh      install pgbouncer if it is not found
#
# Exits 0 when pgbouncer is available afterwards. When it cannot be found or installed it exits
# non-zero with CI=true (stop before the suite) and 0 otherwise, with a warning: the PgBouncer
# tests then fail with the same advice (they never skip).
# OUTLIVE_PGBOUNCER=/path/to/pgbouncer overrides the search, as in tests/support/pgbouncer.py.
set -eu

CANDIDATES="/usr/sbin/pgbouncer /usr/bin/pgbouncer"

find_pgbouncer() {
    if [ -n "${OUTLIVE_PGBOUNCER:-}" ] && [ -x "${OUTLIVE_PGBOUNCER}" ]; then
        echo "${OUTLIVE_PGBOUNCER}"
        return 0
    fi
    for candidate in $(command -v pgbouncer 2>/dev/null || true) $CANDIDATES; do
        if [ -x "$candidate" ]; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

if found=$(find_pgbouncer); then
    echo "install_pgbouncer: using $found"
    exit 0
fi

if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "install_pgbouncer: no pgbouncer found; installing it with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    # the tests start their own pgbouncer on a free port; the package's service is not used
    if apt-get update && apt-get install -y pgbouncer; then
        if found=$(find_pgbouncer); then
            echo "install_pgbouncer: using $found"
            exit 0
        fi
    fi
    echo "install_pgbouncer: apt-get could not install pgbouncer" >&2
else
    echo "install_pgbouncer: no pgbouncer found, and cannot install one (needs root and apt-get)" >&2
fi

if [ "${CI:-}" = "true" ]; then
    echo "install_pgbouncer: CI=true and no pgbouncer for the PgBouncer tests." >&2
    echo "  Install Debian's pgbouncer, or set OUTLIVE_PGBOUNCER to its executable." >&2
    echo "  Looked for: pgbouncer on PATH, $CANDIDATES" >&2
    exit 1
fi
echo "install_pgbouncer: no pgbouncer; the PgBouncer tests will fail (looked for: $CANDIDATES)" >&2
exit 0
