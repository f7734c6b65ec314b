#!/usr/bin/env bash
# The Debian programs the suite drives, installed where missing (make test runs it):
#
#   scripts/debian_tools.sh    # chromium (the browser test of report.html, tests/test_report_html.py) and
#                              # tmux (the summary drawn in a real terminal, tests/test_tables.py)
#
# With apt-get (as root, as CI runs); where one cannot be installed, exit 2 saying why: those tests are part
# of the suite and do not skip.
set -euo pipefail
install() {  # install PACKAGE COMMAND...: the package, unless one of the commands is on PATH
    local package=$1; shift
    for command in "$@"; do command -v "$command" >/dev/null && return 0; done
    if [[ "$(id -u)" != 0 ]]; then
        echo "debian_tools.sh: no $1 on PATH, and installing Debian's package needs root: apt-get install $package" >&2
        exit 2
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$package" >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$package" >/dev/null 2>&1; } \
        || { echo "debian_tools.sh: apt-get install $package failed" >&2; exit 2; }
}
install chromium chromium chromium-browser
install tmux tmux
