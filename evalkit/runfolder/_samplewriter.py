"""Sample text files written by a helper process, off the runner's event loop.

A run writes one `samples/<case>/<arm>/sample-<n>.txt` per sample (the agent-evals
layout). Creating a small file is cheap on most disks but costs up to 0.7 ms of kernel
time on some (measured on an ext4 VM, varying run to run), which on a fast endpoint is a
third of a run's CPU. A thread does not help: it needs the GIL back after every system
call and waits behind the busy event loop. So a child process with its own interpreter
does the file work on another core, fed whole frames over a pipe; the runner's share is
one non-blocking `write` to the pipe per sample (a full pipe never blocks it: the frames
wait in its memory, bounded, and go out with the next one or when the run ends). No
library offers this, hence this module.

Protocol: frames of `!II` (path length, data length), the path relative to the run
folder (UTF-8), then the data (the text as WTF-8, `evalkit.foundations._text.wtf8`). The child
writes each file to a temporary name and renames it, ignores SIGINT (Ctrl-C reaches the
whole process group: it drains what it was sent and ends at end of input, so a parent
killed by any signal loses nothing that reached the pipe; frames still waiting in the
parent's memory are repaired by the resume, as their samples have their lines), and
exits 1 naming the files it could not write. `results.jsonl` stays the record of what
finished: the parent repairs missing sample files from it when the child fails, and a
resumed run repairs them before it goes on.
"""

from __future__ import annotations

import os
import secrets
import signal
import struct
import subprocess
import sys
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from evalkit.foundations._io import write_all
from evalkit.foundations._text import wtf8

_HEADER = struct.Struct("!II")
_F_SETPIPE_SZ = 1031  # Linux fcntl: a bigger pipe lets the runner get ahead of a slow disk
_PIPE_BYTES = 1 << 20
# Frames the pipe had no room for wait in the parent's memory, up to this many bytes;
# past it `send` blocks until the child catches up (a disk slower than the run).
_PENDING_BYTES = 16 << 20


def write_text_atomic(root: Path, rel: str, data: bytes, made: set[Path]) -> None:
    """Write `root/rel` through a temporary name and a rename (readers never see half a
    file); `made` caches the folders already created."""
    p = root / rel
    if p.parent not in made:
        p.parent.mkdir(parents=True, exist_ok=True)
        made.add(p.parent)
    # a name of this writer's own: the helper of a run killed with SIGKILL drains what it
    # was sent after its parent is gone, while the resumed run repairs the same files
    # (the same text) inline; with one shared name, one rename took the other's file
    tmp = p.with_name(f".{p.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            write_all(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)  # no half-written file left behind (a full disk, a kill)
        except OSError:
            pass
        raise


def _safe_relative(rel: str) -> bool:
    parts = PurePosixPath(rel).parts
    return bool(parts) and not rel.startswith("/") and ".." not in parts and "\x00" not in rel


class SampleWriter:
    """The parent's end: `send` hands one file to the child, `finish` waits for it.

    `send` raises nothing: once the child is gone, `ok` turns False and the caller
    writes what is left itself (`finish` returns False too).
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.ok = True
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "evalkit.runfolder._samplewriter", str(self.root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert self._proc.stdin is not None and self._proc.stderr is not None  # both are PIPE
        self._stdin, self._stderr = self._proc.stdin, self._proc.stderr
        self._fd = self._stdin.fileno()
        try:
            import fcntl

            fcntl.fcntl(self._fd, _F_SETPIPE_SZ, _PIPE_BYTES)
        except (ImportError, OSError):  # not Linux, or over the system's pipe-max-size
            pass
        # Non-blocking: a full pipe (the child behind a slow disk, or not scheduled on a
        # loaded machine) never stalls the runner's event loop in `send`; what does not
        # fit waits in `_pending` and goes out on the next `send` or at `finish`.
        os.set_blocking(self._fd, False)
        self._pending = bytearray()

    def send(self, rel: str, text: str) -> bool:
        """Queue `text` for `root/rel`; False when the child can no longer take it."""
        if not self.ok:
            return False
        path, data = rel.encode("utf-8"), wtf8(text)  # any text, a lone surrogate included
        self._pending += _HEADER.pack(len(path), len(data))
        self._pending += path
        self._pending += data
        self._flush(block=len(self._pending) > _PENDING_BYTES)
        return self.ok

    def _flush(self, block: bool) -> None:
        """Write what the pipe takes of the pending frames, in order (all of them when
        `block`); a child that is gone turns `ok` False."""
        try:
            if block:
                os.set_blocking(self._fd, True)
            view = memoryview(self._pending)
            written = 0
            try:
                while written < len(view):
                    written += os.write(self._fd, view[written:])
            except BlockingIOError:
                pass  # the pipe is full: the rest waits for the next send
            finally:
                view.release()
                del self._pending[:written]
                if block:
                    os.set_blocking(self._fd, False)
        except OSError:  # BrokenPipeError: the child died
            self.ok = False

    def finish(self, timeout_s: float | None = None) -> tuple[bool, str]:
        """Close the pipe and wait for the child to write everything; (all written,
        the child's error text)."""
        if self.ok and self._pending:
            self._flush(block=True)
        try:
            self._stdin.close()
        except OSError:
            self.ok = False
        err = self._stderr.read()  # the child writes to stderr only as it ends
        self._stderr.close()
        self._proc.wait(timeout=timeout_s)
        ok = self.ok and self._proc.returncode == 0
        return ok, err.decode("utf-8", "replace").strip()

    def kill(self) -> None:
        """Stop the child now (tests: a writer that dies mid-run)."""
        self._proc.kill()
        self._proc.wait()


def _read_exact(stream: BinaryIO, n: int) -> bytes:
    return stream.read(n) if n else b""  # BufferedReader.read(n) waits for n bytes or end of input


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    root = Path(argv[1])
    stream = sys.stdin.buffer
    made: set[Path] = set()
    failed: list[str] = []
    while True:
        head = _read_exact(stream, _HEADER.size)
        if len(head) < _HEADER.size:
            break  # end of input (a torn header means the parent died mid-frame)
        plen, dlen = _HEADER.unpack(head)
        body = _read_exact(stream, plen + dlen)
        if len(body) < plen + dlen:
            break  # a torn frame: its sample has no results line yet, a resume writes it
        rel = body[:plen].decode("utf-8", "replace")
        if not _safe_relative(rel):
            failed.append(f"{rel!r}: not a path inside the run folder")
            continue
        try:
            write_text_atomic(root, rel, body[plen:], made)
        except OSError as exc:
            failed.append(f"{rel}: {exc.strerror or exc}")
    if failed:
        shown = "; ".join(failed[:5]) + (f"; and {len(failed) - 5} more" if len(failed) > 5 else "")
        print(f"evalkit sample writer: {len(failed)} file(s) not written: {shown}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
