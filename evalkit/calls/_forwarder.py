"""The forwarder inside a sandbox (`evalkit.calls.sandbox`): serves the metering proxy's Unix
socket on the sandbox's own 127.0.0.1:PORT, then runs the unit's program.

Run by bubblewrap as ``python -I -S _forwarder.py [OPTION...] PORT SOCKET -- ARGV...``
(the options of the compiled forwarder: ``--nproc``, ``--as``, ``--fsize``, ``--nofile``
limits, ``--uid`` for root's sandbox, and ``--max-connections=N``: at most N connections
copied at once, one more closed as it is accepted, and the first time a line on the
program's stderr names the limit, ``limits.proxy_connections``): it listens
on the loopback port (the sandbox has its own network namespace: nothing else is
reachable), forks, execs ARGV in the child (which inherits stdin, stdout and stderr),
lets go of those three itself, and copies each accepted connection to and from the
socket until the program exits; it exits with the program's status (128 + N for a
signal N, as a shell reports it). Standard library only, imported by no module of
evalkit: it runs under ``-S`` so it starts in a few milliseconds. Written by hand
because no library does this byte copy without costing the start-up it saves.
"""

# The C modules under `signal`, `socket` and `threading`, and no `__future__`: no Python-level
# import at start-up (`socket` alone pulls in enum and selectors): a sample's start-up
# is what this costs.
import _signal  # type: ignore[import-not-found]  # no stub: `signal` would import enum
import _socket
import _thread
import errno
import os
import sys
import time


def _copy(src: _socket.socket, dst: _socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(_socket.SHUT_WR)
        except OSError:
            pass


def _serve_one(conn: _socket.socket, path: str) -> None:
    try:
        up = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        up.connect(path)
    except OSError:
        conn.close()
        return
    back_done = _thread.allocate_lock()
    back_done.acquire()

    def back() -> None:
        try:
            _copy(up, conn)
        finally:
            back_done.release()

    try:
        _thread.start_new_thread(back, ())
    except RuntimeError:  # no thread to be had: this connection is dropped (its client sees it closed)
        conn.close()
        up.close()
        return
    _copy(conn, up)
    back_done.acquire()
    conn.close()
    up.close()


# accept(2) errors that end the server: the listener is no longer one. Every other is
# retried (Linux passes on pending network errors of the new connection, ENETDOWN, EPROTO
# and the like), after a short pause for a resource that comes back as connections end.
_FATAL = (errno.EBADF, errno.EINVAL, errno.ENOTSOCK)
_SCARCE = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


_live = [0]  # the connections being copied
_live_lock = _thread.allocate_lock()


def _counted(conn: _socket.socket, path: str) -> None:
    try:
        _serve_one(conn, path)
    finally:
        with _live_lock:
            _live[0] -= 1


def _serve(listener: _socket.socket, path: str, most: int = 0, report: int = -1) -> None:
    said = False
    while True:
        try:
            fd, _ = listener._accept()  # type: ignore[attr-defined]  # _socket's accept: a descriptor
        except OSError as exc:
            if exc.errno in _FATAL:
                return
            if exc.errno in _SCARCE:
                time.sleep(0.01)
            continue
        conn = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM, 0, fd)
        with _live_lock:
            full = most > 0 and _live[0] >= most
            _live[0] += 0 if full else 1
        if full:
            conn.close()
            if not said and report >= 0:
                line = f"evalkit sandbox: it hit a per-sample limit: limits.proxy_connections = {most}\n"
                os.write(report, line.encode())
            said = True
            continue
        try:
            conn.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
            _thread.start_new_thread(_counted, (conn, path))
        except (OSError, RuntimeError):  # no thread to be had: this connection is dropped
            conn.close()
            with _live_lock:
                _live[0] -= 1
            time.sleep(0.01)


def _clean_signals() -> None:
    """No signal ignored or blocked for the program: python ignores SIGPIPE and SIGXFSZ at
    start-up, and an ignored disposition and the blocked mask survive execvp (the compiled
    forwarder does the same)."""
    _signal.pthread_sigmask(_signal.SIG_SETMASK, [])
    for sig in _signal.valid_signals():
        if sig not in (_signal.SIGKILL, _signal.SIGSTOP):
            try:
                _signal.signal(sig, _signal.SIG_DFL)
            except (OSError, ValueError):  # the C library's own real-time signals: kept
                pass


_LIMITS = {"--nproc": "RLIMIT_NPROC", "--data": "RLIMIT_DATA", "--fsize": "RLIMIT_FSIZE", "--nofile": "RLIMIT_NOFILE"}


def _apply_options(args: list[str]) -> tuple[int, list[str]]:
    """The options before PORT, as the compiled forwarder's: resource limits, then
    ``--uid`` (root's sandbox: no group, that uid and gid); the connection limit and
    the rest of `args`. ValueError for a bad option, OSError for one not applied."""
    most, uid = 0, None
    while args and args[0].startswith("--") and args[0] != "--":
        name, _, value = args.pop(0).partition("=")
        if name in _LIMITS:
            import resource  # only when a limit is asked for

            n = int(value)
            resource.setrlimit(getattr(resource, _LIMITS[name]), (n, n))
        elif name == "--max-connections":
            most = int(value)
        elif name == "--uid":
            uid = int(value)
        else:
            raise ValueError(name)
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    return most, args


def main(args: list[str]) -> int:
    try:
        most, args = _apply_options(list(args))
        port, path, sep, *argv = args
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"evalkit sandbox: bad or failed forwarder option: {exc}\n")
        return 2
    if sep != "--" or not argv:
        sys.stderr.write("usage: _forwarder.py [OPTION...] PORT SOCKET -- ARGV...\n")
        return 2
    listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    listener.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(port)))
    listener.listen(128)
    pid = os.fork()
    if pid == 0:
        listener.close()
        _clean_signals()
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            sys.stderr.write(f"evalkit sandbox: could not start {argv[0]!r}: {exc.strerror or exc}\n")
        os._exit(127)
    report = os.dup(2)  # the server's way to name a limit hit (close-on-exec: dup's default here)
    try:
        _thread.start_new_thread(_serve, (listener, path, most, report))
    except RuntimeError as exc:  # reported while stderr is still the sample's; the sandbox ends with it
        sys.stderr.write(f"evalkit sandbox: could not start the proxy's forwarder: {exc}\n")
        os.kill(pid, _signal.SIGKILL)
        os.waitpid(pid, 0)
        return 1
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the program's pipes are its own: their end is its exit
        os.dup2(null, fd)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    os._exit(main(sys.argv[1:]))
