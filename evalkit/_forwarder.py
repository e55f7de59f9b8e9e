"""The forwarder inside a sandbox (`evalkit.sandbox`): serves the metering proxy's Unix
socket on the sandbox's own 127.0.0.1:PORT, then runs the unit's program.

Run by bubblewrap as ``python -I -S _forwarder.py PORT SOCKET -- ARGV...``: it listens
on the loopback port (the sandbox has its own network namespace: nothing else is
reachable), forks, execs ARGV in the child (which inherits stdin, stdout and stderr),
lets go of those three itself, and copies each accepted connection to and from the
socket until the program exits; it exits with the program's status (128 + N for a
signal N, as a shell reports it). Standard library only, imported by no module of
evalkit: it runs under ``-S`` so it starts in a few milliseconds. Written by hand
because no library does this byte copy without costing the start-up it saves.
"""

from __future__ import annotations

import os
import socket
import sys
import threading


def _copy(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _serve_one(conn: socket.socket, path: str) -> None:
    try:
        up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        up.connect(path)
    except OSError:
        conn.close()
        return
    back = threading.Thread(target=_copy, args=(up, conn), daemon=True)
    back.start()
    _copy(conn, up)
    back.join()
    conn.close()
    up.close()


def _serve(listener: socket.socket, path: str) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=_serve_one, args=(conn, path), daemon=True).start()


def main(args: list[str]) -> int:
    port, path, sep, *argv = args
    if sep != "--" or not argv:
        print("usage: _forwarder.py PORT SOCKET -- ARGV...", file=sys.stderr)
        return 2
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(port)))
    listener.listen(128)
    pid = os.fork()
    if pid == 0:
        listener.close()
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            print(f"evalkit sandbox: could not start {argv[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        os._exit(127)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the program's pipes are its own: their end is its exit
        os.dup2(null, fd)
    threading.Thread(target=_serve, args=(listener, path), daemon=True).start()
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    os._exit(main(sys.argv[1:]))
