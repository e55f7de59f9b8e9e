#!/bin/sh
# Headless Chromium for the browser test of the reports (tests/test_reports_browser.py):
# Debian's `chromium` package, installed with apt-get when it is missing and this user
# can (tools/apt-install.sh). Otherwise it says how to install it and exits 0:
# `make test` goes on, and the browser test fails with the same instruction (it never skips).
set -eu
for b in chromium chromium-browser google-chrome; do
    if command -v "$b" >/dev/null 2>&1; then exit 0; fi
done
exec "$(dirname "$0")/apt-install.sh" chromium "for the browser test of the reports" \
    "the browser test will fail until it is installed"
