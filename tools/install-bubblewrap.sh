#!/bin/sh
# bubblewrap (`bwrap`) for the sandbox of command and python units (evalkit/sandbox.py):
# Debian's `bubblewrap` package, installed with apt-get when it is missing and this user
# can (root, or passwordless sudo). Otherwise it says how to install it and exits 0: a
# run of a sandboxed unit then refuses with the same instruction (exit 2), or runs
# uncontained, and says so on every page, with "isolation": "none" in the unit.
set -eu
if command -v bwrap >/dev/null 2>&1; then exit 0; fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "make: no bwrap and no apt-get: install bubblewrap for the sandbox of agent programs" >&2
    exit 0
fi
if [ "$(id -u)" = 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
else
    echo "make: bwrap is missing; install it for the sandbox of agent programs: sudo apt-get install bubblewrap" >&2
    exit 0
fi
echo "make: installing Debian's bubblewrap for the sandbox of agent programs" >&2
$SUDO apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq bubblewrap >/dev/null \
    || echo "make: apt-get could not install bubblewrap; sandboxed agent units will refuse to run until it is installed" >&2
