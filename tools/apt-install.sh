#!/bin/sh
# Install one Debian package with apt-get when this user can (root, or passwordless
# sudo); otherwise say how, and exit 0 either way: the caller's feature then fails with
# the same instruction. Shared by tools/install-chromium.sh and install-bubblewrap.sh.
#   tools/apt-install.sh PACKAGE WHAT-FOR IF-IT-FAILS
set -eu
pkg=$1 what=$2 failed=$3
if ! command -v apt-get >/dev/null 2>&1; then
    echo "make: no $pkg and no apt-get: install $pkg $what" >&2
    exit 0
fi
if [ "$(id -u)" = 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
else
    echo "make: $pkg is missing; install it $what: sudo apt-get install $pkg" >&2
    exit 0
fi
echo "make: installing Debian's $pkg $what" >&2
$SUDO apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$pkg" >/dev/null \
    || echo "make: apt-get could not install $pkg; $failed" >&2
