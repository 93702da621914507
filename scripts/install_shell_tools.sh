#!/bin/sh
# Make sure the command-line tools the README's "Try it" commands use are installed: curl and
# jq (tests/e2e/test_cli_daily.py runs those commands as written). Debian's packages, installed
# with apt-get when running as root; otherwise it only checks.
#
# Exits 0 when both are available afterwards. When one is missing and cannot be installed it
# exits non-zero with CI=true and 0 otherwise, with a warning: the README test then fails with
# the same advice (it never skips).
set -eu

TOOLS="curl jq"

missing() {
    for tool in $TOOLS; do
        command -v "$tool" >/dev/null 2>&1 || printf '%s ' "$tool"
    done
}

need=$(missing)
if [ -z "$need" ]; then
    exit 0
fi

if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "install_shell_tools: installing $need with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    # shellcheck disable=SC2086 # one word per package
    if apt-get update && apt-get install -y $need; then
        need=$(missing)
        [ -z "$need" ] && exit 0
    fi
    echo "install_shell_tools: apt-get could not install $need" >&2
else
    echo "install_shell_tools: missing $need, and cannot install (needs root and apt-get)" >&2
fi

if [ "${CI:-}" = "true" ]; then
    echo "install_shell_tools: CI=true and no $need for the README test." >&2
    exit 1
fi
echo "install_shell_tools: the README test will fail without $need" >&2
exit 0
