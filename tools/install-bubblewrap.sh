#!/bin/sh
# bubblewrap (`bwrap`) for the sandbox of command and python units (evalkit/calls/sandbox.py):
# Debian's `bubblewrap` package, installed with apt-get when it is missing and this user
# can (tools/apt-install.sh). Otherwise it says how to install it and exits 0: a run of a
# sandboxed unit then refuses with the same instruction (exit 2), or runs uncontained,
# and says so on every page, with "isolation": "none" in the unit.
set -eu
if command -v bwrap >/dev/null 2>&1; then exit 0; fi
exec "$(dirname "$0")/apt-install.sh" bubblewrap "for the sandbox of agent programs" \
    "sandboxed agent units will refuse to run until it is installed"
