"""Turn a verbose llama-cpp-python build log (pip -v running scikit-build-core, CMake
and ninja) into a few progress lines with the time so far, so a compile of minutes is
never silent; the whole log goes to the file given as the first argument.

    PIP ... -v 2>&1 | python tools/build_progress.py BUILD.LOG

Printed: the stages (the sdist unpacked, CMake configure, its end, the build, the
install into the wheel, the wheel made), "build step N of M" from ninja's ``[N/M]``
lines (the first, the last, each further tenth, and the next after a quiet minute), and any
line that reports an error. Written by hand: a dozen regexes over a stream, which no
library offers as such. Run by tools/install-llama.sh; tests/test_build_progress.py
feeds it a recorded log.
"""

from __future__ import annotations

import io
import os
import re
import sys
import time
from typing import IO, Callable

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
STEP = re.compile(r"^\s*\[(\d+)/(\d+)\]\s")
STAGES = [
    (re.compile(r"\*\*\* scikit-build-core (\S+).*\(wheel\)"), "scikit-build-core {0}: building the wheel"),
    (re.compile(r"\*\*\* Configuring CMake"), "CMake configure"),
    (re.compile(r"^\s*-- Build files have been written to"), "CMake configure done"),
    (re.compile(r"\*\*\* Building project with (\S+?)\.*$"), "build with {0}"),
    (re.compile(r"\*\*\* Installing project into wheel"), "installing into the wheel"),
    (re.compile(r"\*\*\* Created (\S+\.whl)"), "wheel made: {0}"),
]
ERROR = re.compile(r"(CMake Error|\berror:|\bError \d+\b|FAILED:|ninja: build stopped)")
TENTHS = 10
QUIET_S = 60.0  # at least one step line a minute while ninja runs


def clock(seconds: float) -> str:
    """Elapsed time as m:ss (h:mm:ss past an hour)."""
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def follow(lines: IO[str], out: IO[str], log: IO[str] | None, now: Callable[[], float] = time.monotonic) -> int:
    """Copy `lines` to `log` and print the progress lines to `out`; the number printed."""
    start = now()
    printed, last_tenth, last_at = 0, -1, start

    def say(text: str) -> None:
        nonlocal printed, last_at
        last_at = now()
        out.write(f"  [+{clock(last_at - start)}] {text}\n")
        out.flush()
        printed += 1

    for raw in lines:
        if log is not None:
            log.write(raw)
        line = ANSI.sub("", raw.rstrip("\n"))
        step = STEP.match(line)
        if step:
            n, m = int(step.group(1)), int(step.group(2))
            tenth = n * TENTHS // m if m else 0
            if n == 1 or n == m or tenth > last_tenth or now() - last_at >= QUIET_S:
                say(f"build step {n} of {m} ({n * 100 // m if m else 0}%)")
            last_tenth = max(last_tenth, tenth)
            continue
        for pattern, text in STAGES:
            found = pattern.search(line)
            if found:
                say(text.format(*found.groups()))
                break
        else:
            if ERROR.search(line):
                say(line.strip()[:300])
    return printed


def main(argv: list[str]) -> int:
    # bytes that are not UTF-8 (a compiler's message in another locale) are replaced, never
    # fatal: the filter must read to the end, or pip would write into a closed pipe
    lines = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")
    with open(argv[1] if len(argv) > 1 else os.devnull, "w", encoding="utf-8") as log:
        follow(lines, sys.stdout, log)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
