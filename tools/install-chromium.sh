#!/bin/sh
# Headless Chromium for the browser test of the reports (tests/test_reports_browser.py):
# Debian's `chromium` package, installed with apt-get when it is missing and this user
# can (root, or passwordless sudo). Otherwise it says how to install it and exits 0:
# `make test` goes on, and the browser test fails with the same instruction (it never skips).
set -eu
for b in chromium chromium-browser google-chrome; do
    if command -v "$b" >/dev/null 2>&1; then exit 0; fi
done
if ! command -v apt-get >/dev/null 2>&1; then
    echo "make: no chromium and no apt-get: install Chromium for the browser test of the reports" >&2
    exit 0
fi
if [ "$(id -u)" = 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
else
    echo "make: chromium is missing; install it for the browser test: sudo apt-get install chromium" >&2
    exit 0
fi
echo "make: installing Debian's chromium for the browser test of the reports" >&2
$SUDO apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null \
    || echo "make: apt-get could not install chromium; the browser test will fail until it is installed" >&2
