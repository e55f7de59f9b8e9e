"""Temporary files and folders for atomic writes, with ordinary permissions.

`tempfile.mkstemp` makes its file 0600 and `mkdtemp` its folder 0700, so a report, a
summary or a run folder renamed into place from one is unreadable to everyone else on
the machine. These make them as `open()` and `mkdir` would: 0666 / 0777 less the umask
(0644 / 0755 under the usual 022). The kernel applies the umask at creation, so the
umask is never read or changed (changing it is process-wide and races other threads).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

_TRIES = 100  # random names collide with probability ~2**-48 each; a bound, not a loop forever


def new_temp_file(target: str | Path) -> tuple[int, str]:
    """Create `.<name>.<random>.tmp` beside `target` for writing (exclusively: never an
    existing file or a symlink), mode 0666 less the umask. Returns (fd, path); the
    caller writes, renames it onto `target`, and unlinks it on failure."""
    p = Path(target)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    for _ in range(_TRIES):
        tmp = str(p.parent / f".{p.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {p}")  # pragma: no cover - 100 collisions


def new_temp_dir(parent: str | Path, prefix: str) -> Path:
    """Create `<parent>/<prefix><random>` (exclusively), mode 0777 less the umask: a
    folder built there and renamed into place is an ordinary folder."""
    for _ in range(_TRIES):
        d = Path(parent) / f"{prefix}{secrets.token_hex(6)}"
        try:
            d.mkdir(0o777)
            return d
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {parent}")  # pragma: no cover - 100 collisions
