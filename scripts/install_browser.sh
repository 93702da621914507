#!/bin/sh
# Make sure a Chromium the browser tests can drive is installed (Debian's package; Playwright's
# own download is not used). Run as root to install; otherwise it only checks.
#
#   scripts/install_browser.sh        install chromium-headless-shell if no browser is found
#
# Exits 0 when a browser is available afterwards. When none can be found or installed it exits
# non-zero with CI=true (stop before the suite) and 0 otherwise, with a warning: the browser
# tests then fail with the same advice (they never skip).
# OUTLIVE_BROWSER=/path/to/chrome overrides the search, as in tests/browser/conftest.py.
set -eu

CANDIDATES="/usr/bin/chromium-headless-shell /usr/lib/chromium/headless_shell /usr/lib/chromium/chromium-headless-shell /usr/bin/chromium"

find_browser() {
    if [ -n "${OUTLIVE_BROWSER:-}" ] && [ -x "${OUTLIVE_BROWSER}" ]; then
        echo "${OUTLIVE_BROWSER}"
        return 0
    fi
    for candidate in $CANDIDATES; do
        if [ -x "$candidate" ]; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

if found=$(find_browser); then
    echo "install_browser: using $found"
    exit 0
fi

if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "install_browser: no Chromium found; installing chromium-headless-shell with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    if apt-get update && apt-get install -y chromium-headless-shell; then
        if found=$(find_browser); then
            echo "install_browser: using $found"
            exit 0
        fi
    fi
    echo "install_browser: apt-get could not install chromium-headless-shell" >&2
else
    echo "install_browser: no Chromium found, and cannot install one (needs root and apt-get)" >&2
fi

if [ "${CI:-}" = "true" ]; then
    echo "install_browser: CI=true and no browser for the browser tests." >&2
    echo "  Install Debian's chromium-headless-shell (or chromium), or set OUTLIVE_BROWSER" >&2
    echo "  to a Chromium executable. Looked for: $CANDIDATES" >&2
    exit 1
fi
echo "install_browser: no browser; the browser tests will fail (looked for: $CANDIDATES)" >&2
exit 0
