#!/usr/bin/env bash
# Headless Chromium for the suite's browser test of report.html (tests/test_report_html.py):
#
#   scripts/chromium.sh        # prints the path of a chromium, installing Debian's package when there is none
#
# Debian's `chromium` package, with apt-get (as root, as CI runs); where it cannot be installed, exit 2 saying
# why: the browser test is part of the suite and does not skip.
set -euo pipefail
found="$(command -v chromium || command -v chromium-browser || true)"
if [[ -z "$found" ]]; then
    if [[ "$(id -u)" != 0 ]]; then
        echo "chromium.sh: no chromium on PATH, and installing Debian's package needs root: apt-get install chromium" >&2
        exit 2
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1; } \
        || { echo "chromium.sh: apt-get install chromium failed" >&2; exit 2; }
    found="$(command -v chromium)"
fi
echo "$found"
