"""Where a command or python unit's samples run: in this process, or one Ray task each
on a Ray cluster (`config.json` -> ``executor``, `evalkit run --ray [ADDRESS]`).

With Ray, the driver (the `evalkit run` process) stays what it is on one machine: it
plans the keys, holds the ledger, the response cache and the run folder (their only
writer), runs the metering proxy (`evalkit.calls.proxy`) and each sample's session, and
writes every result, trajectory and error exactly as a local run does. Only the
sample's process moves: `RayExecutor.run` submits one task (`run_sample_process`) with
the unit's `resources` as the task's options, and the task, on whatever node Ray
places it, starts a worker-side relay (`_Relay`) to the driver's proxy, runs the
program (in its bubblewrap sandbox, `evalkit.calls.sandbox`, whose Unix socket is the
relay's) with the sample's case on stdin and the allow-listed environment the driver
built (`evalkit.running.agents.child_env`: the proxy's URL and the sample's token, never an
upstream key), and hands back its stdout, exit status, stderr tail and output file.
Every model call the program makes goes through the relay to the driver's proxy, so it
is reserved on the driver's one ledger before it is sent, and a sample's tokens and
trajectory are the ones a local run records. A task tells the driver's loopback
"board" which node it started on, for the progress line's samples in flight per node.

What a task needs on its node: evalkit installed in the same interpreter path as the
driver's, the suite folder and the program at the same paths (a shared filesystem or
one machine), and the driver's proxy reachable at ``127.0.0.1:PORT`` (the proxy binds
loopback: a cluster on this one machine). A node that dies mid-sample makes that
sample errored (its paid calls stay paid) and the runner runs it once more (``requeue``
on its error); `--resume RUN --ray` runs what is still missing.

Ray is imported only here and only when a run asks for it (it takes seconds to import
and is an optional dependency of a local run).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evalkit.calls.sandbox import OUTPUT_FILE, WORKER, WORKER_INSIDE, Jail, bwrap_argv
from evalkit.foundations._text import printable
from evalkit.foundations.errors import InputError
from evalkit.foundations.records import Config, Executor, Resources

CONNECT_TIMEOUT_S = 5.0  # how long the driver tries a cluster's address before exit 2
KILL_WAIT_S = 5.0  # how long a cancelled task is given to kill its program


def _reachable(address: str) -> str | None:
    """Why a Ray address (``host:port`` or ``ray://host:port``) cannot be reached, else
    None: one TCP connection, so an unreachable cluster is refused in seconds (Ray's own
    connect retries for minutes)."""
    hostport = address.removeprefix("ray://").rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        return f"not a HOST:PORT address: {address!r}"
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S):
            return None
    except OSError as exc:
        return exc.strerror or str(exc)


class RayExecutor:
    """The driver's side of a Ray run (see the module docstring): `connect` before
    anything is written, `run` per sample, `close` at the end. `where`: the file the
    executor came from (config.json), named by a refusal."""

    def __init__(self, spec: Executor, where: Path | str | None = None) -> None:
        self.spec = spec
        self.where = where
        self._owned = False
        self._task: Any = None
        self.in_flight = 0
        self.done_per_node: Counter[str] = Counter()
        self.started_per_node: Counter[str] = Counter()  # sample processes started, per node
        self.running: dict[str, str] = {}  # submission id -> the node its task said it started on
        self.started = threading.Event()  # set as a task says where it started (tests wait on it)
        self._board: socket.socket | None = None
        self._ids = itertools.count()

    @property
    def address_text(self) -> str:
        return self.spec.address or "a new local cluster"

    def connect(self) -> RayExecutor:
        """Join the cluster (or start a local one for address None); `InputError` (exit 2)
        when it cannot be reached, before the run writes or spends anything."""
        try:
            import ray  # lazy: Ray only for a run that asks for it (seconds to import)
        except ImportError:
            raise InputError(
                "the Ray executor needs Ray: pip install 'ray>=2.9'",
                self.where,
                json_path="$.executor" if self.where else None,
            ) from None

        address = self.spec.address
        if not ray.is_initialized():
            target = address
            if address == "auto":  # the cluster `ray start` made here: its GCS address, checked below
                # lazy, as Ray is; private, but the one function that resolves "auto" as ray.init does
                from ray._private.services import canonicalize_bootstrap_address

                with contextlib.suppress(Exception):
                    target = canonicalize_bootstrap_address("auto") or address
            why = _reachable(target) if target not in (None, "auto") else None
            if why is not None:
                raise self._unreachable(why)
            try:
                ray.init(address=address, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise self._unreachable(str(exc)) from None
            self._owned = True
        self._task = ray.remote(max_retries=0)(run_sample_process)
        self._open_board()
        return self

    def _open_board(self) -> None:
        """A loopback listener each task tells its node to as it starts (``ID NODE``), for
        the progress line's samples in flight per node. Threads: a line per sample."""
        self._board = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._board.bind(("127.0.0.1", 0))
        self._board.listen(64)
        board = self._board

        def serve() -> None:
            while True:
                try:
                    conn, _ = board.accept()
                except OSError:
                    return
                with conn, contextlib.suppress(OSError, ValueError):
                    conn.settimeout(CONNECT_TIMEOUT_S)
                    sid, node = conn.recv(256).decode("ascii").split()
                    self.started_per_node[node[:8]] += 1
                    if sid in self.running:
                        self.running[sid] = node[:8]
                    self.started.set()

        threading.Thread(target=serve, daemon=True).start()

    def _unreachable(self, why: str) -> InputError:
        return InputError(
            f"the Ray cluster at {self.address_text}{'' if self.where else ' (--ray)'} cannot be reached: "
            f"{printable(why)} (start one with `ray start --head`, or give its address to --ray)",
            self.where,
            json_path="$.executor.address" if self.where else None,
        )

    def close(self) -> None:
        if self._task is not None:
            print(f"evalkit: {self.summary()}", file=sys.stderr, flush=True)
            self._task = None
        if self._board is not None:
            with contextlib.suppress(OSError):
                self._board.shutdown(socket.SHUT_RDWR)
            self._board.close()
            self._board = None
        if self._owned:
            import ray  # lazy: only a Ray run gets here

            ray.shutdown()
            self._owned = False

    async def run(
        self, spec: dict[str, Any], resources: Resources, must_stop: Callable[[], str | None], poll_s: float
    ) -> dict[str, Any]:
        """Run one sample's process as a Ray task and return what `run_sample_process`
        returned; ``why`` set (and the task cancelled, its program killed) when
        `must_stop` says why while it runs, or the task's failure (a dead node) as
        ``failed``."""
        import ray  # lazy: only a Ray run gets here

        options: dict[str, Any] = {"num_cpus": resources.num_cpus}
        if resources.memory is not None:
            options["memory"] = resources.memory
        if resources.custom:
            options["resources"] = dict(resources.custom)
        sid = str(next(self._ids))
        self.running[sid] = "?"  # placed, not yet started
        if self._board is not None:
            spec = {**spec, "board": (*self._board.getsockname()[:2], sid)}
        ref = self._task.options(**options).remote(spec)
        fut = asyncio.wrap_future(ref.future())
        self.in_flight += 1
        try:
            why: str | None = None
            while not fut.done():
                await asyncio.wait({fut}, timeout=poll_s)
                if fut.done():
                    break
                why = must_stop()
                if why is not None:
                    ray.cancel(ref)  # KeyboardInterrupt in the task: it kills its program's group
                    await asyncio.wait({fut}, timeout=KILL_WAIT_S)
                    break
            if why is not None:
                if not fut.done():
                    fut.cancel()
                    return {"why": why, "status": -signal.SIGKILL, "stderr_tail": "", "out": b""}
                with contextlib.suppress(BaseException):
                    done = fut.result()
                    self._count(done)
                    return {**done, "why": done.get("why") or why}
                return {"why": why, "status": -signal.SIGKILL, "stderr_tail": "", "out": b""}
            try:
                result: dict[str, Any] = fut.result()
            except Exception as exc:  # the task itself failed: a node or worker died, an import failed
                first = (str(exc).strip().splitlines() or [""])[0]
                return {"failed": f"the Ray task failed ({type(exc).__name__}: {first})"}
            self._count(result)
            return result
        finally:
            self.in_flight -= 1
            self.running.pop(sid, None)
            if not fut.done():
                fut.cancel()

    def _count(self, result: dict[str, Any]) -> None:
        if result.get("node"):
            self.done_per_node[str(result["node"])[:8]] += 1

    def summary(self) -> str:
        """One line for the end of the run: how many sample processes started on how
        many nodes (those the run stopped and killed included)."""
        per_node = ", ".join(f"{n} {c}" for n, c in sorted(self.started_per_node.items()))
        total = sum(self.started_per_node.values())
        return f"ray: {total} sample process(es) ran on {len(self.started_per_node)} node(s) ({per_node or 'none'})"

    def progress(self) -> str:
        """The progress bar's suffix: samples in flight per node (``?``: waiting for a
        node), and done per node."""
        flying = Counter(self.running.values())
        now = " ".join(f"{n}:{c}" for n, c in sorted(flying.items()))
        per_node = " ".join(f"{n}:{c}" for n, c in sorted(self.done_per_node.items()))
        return f"ray in flight {self.in_flight} ({now or '-'}); done per node {per_node or '-'}"


def open_executor(spec: Executor, configs: list[Config], where: Path, *, from_flag: bool = False) -> RayExecutor | None:
    """The run's executor: None for a local run; for Ray, the cluster joined, after the
    checks that refuse (exit 2, before anything is written) what cannot run there yet:
    a prompt or agent unit (evalkit's own loop runs in the driver) and
    ``keep_workdir`` (the working directory is on the node). `where`: the suite's
    config.json; `from_flag`: the executor came from ``--ray``, which a refusal names."""
    if spec.kind != "ray":
        return None
    for config in configs:
        if config.unit.kind not in ("command", "python"):
            raise InputError(
                f"a {config.unit.kind} unit runs in evalkit's own process: only command and python units "
                "run on Ray so far (leave out --ray / the executor)",
                where,
                json_path="$.unit.kind",
            )
        if config.unit.keep_workdir:
            raise InputError(
                "keep_workdir is not available on Ray yet (a sample's working directory is on its node)",
                where,
                json_path="$.unit.keep_workdir",
            )
    return RayExecutor(spec, None if from_flag else where).connect()


# -- the worker's side ---------------------------------------------------------------------


def _copy(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


class _Relay:
    """The worker-side relay to the driver's metering proxy: listens on a Unix socket
    (`path`: what the sandbox binds in) or on a loopback TCP port, and copies each
    connection to and from the proxy at `upstream`. Threads and the standard library:
    a byte copy no library offers without an event loop of its own in the task."""

    def __init__(self, upstream: tuple[str, int], path: str | None) -> None:
        self.upstream = upstream
        if path is not None:
            self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.listener.bind(path)
            os.chmod(path, 0o600)
        else:
            self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.listener.bind(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1]) if path is None else 0
        self.listener.listen(128)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._pipe, args=(conn,), daemon=True).start()

    def _pipe(self, conn: socket.socket) -> None:
        try:
            up = socket.create_connection(self.upstream, timeout=CONNECT_TIMEOUT_S)
            up.settimeout(None)
        except OSError:
            conn.close()
            return
        back = threading.Thread(target=_copy, args=(up, conn), daemon=True)
        back.start()
        _copy(conn, up)
        back.join()
        conn.close()
        up.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def run_sample_process(spec: dict[str, Any]) -> dict[str, Any]:
    """A Ray task: run one sample's process on this node and return ``out`` (its stdout,
    at most `max_output` + 1 bytes), ``status``, ``stderr_tail``, ``why`` (it was killed:
    its timeout, its stdout too long), ``output_file`` (the bytes it wrote to
    ``$EVALKIT_OUTPUT_FILE``, at most `max_output` + 1) and ``node``. `spec` is what the
    driver's `AgentRunner` built: ``argv``, ``sandbox``, ``hidden``/``read_only`` (the
    sandbox's folders), ``proxy`` (host, port), ``env``, ``driver_workdir``,
    ``payload``, ``timeout_s``, ``max_output``, ``tail_bytes``."""
    import ray  # on the worker: Ray is already imported there

    node = ray.get_runtime_context().get_node_id()
    if spec.get("board"):  # tell the driver's progress line where this sample runs
        bhost, bport, sid = spec["board"]
        with contextlib.suppress(OSError), socket.create_connection((bhost, int(bport)), timeout=2) as tell:
            tell.sendall(f"{sid} {node}\n".encode("ascii"))
    host, port = spec["proxy"]
    workdir = Path(tempfile.mkdtemp(prefix="evalkit-work-")).resolve()
    sockdir = Path(tempfile.mkdtemp(prefix="evalkit-relay-"))
    relay = _Relay((host, int(port)), str(sockdir / "proxy.sock") if spec["sandbox"] else None)
    proc: subprocess.Popen[bytes] | None = None
    try:
        local_root, remote_root = f"http://{host}:{port}", f"http://127.0.0.1:{relay.port}"

        def here(value: str) -> str:  # the driver's workdir is this node's; without the sandbox, the relay's port
            value = value.replace(spec["driver_workdir"], str(workdir))
            return value if spec["sandbox"] else value.replace(local_root, remote_root)

        env = {k: here(v) for k, v in spec["env"].items()}
        payload = json.loads(here(json.dumps(spec["payload"], ensure_ascii=False)))
        argv = list(spec["argv"])
        if spec["sandbox"]:
            jail = Jail(
                workdir,
                sockdir / "proxy.sock",
                int(port),
                tuple(map(Path, spec["hidden"])),
                tuple(map(Path, spec["read_only"])),
            )
            argv = bwrap_argv(jail, argv)
        else:
            argv = [str(WORKER) if a == WORKER_INSIDE else a for a in argv]
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv,
                cwd=str(workdir),
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # its own process group: a kill takes its children too
            )
        except OSError as exc:
            return {"why": None, "start_error": f"could not start {argv[0]!r}: {exc.strerror or exc}", "node": node}
        line = json.dumps(payload, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n"
        why: str | None = None
        try:
            out, err = proc.communicate(line, timeout=float(spec["timeout_s"]))
        except subprocess.TimeoutExpired:
            why = f"timed out after {float(spec['timeout_s']):g}s"
            _kill_group(proc.pid)
            try:
                out, err = proc.communicate(timeout=KILL_WAIT_S)
            except subprocess.TimeoutExpired:
                out, err = b"", b""
        max_output = int(spec["max_output"])
        if why is None and len(out) > max_output:
            why = f"its stdout passed {max_output} bytes"
        file_bytes: bytes | None = None
        path = workdir / OUTPUT_FILE
        if path.is_file() and not path.is_symlink():
            with path.open("rb") as f:
                file_bytes = f.read(max_output + 1)
        status = proc.returncode if proc.returncode is not None else -signal.SIGKILL
        return {
            "out": out[: max_output + 1],
            "status": status,
            "stderr_tail": err[-int(spec["tail_bytes"]) :].decode("utf-8", "replace"),
            "why": why,
            "output_file": file_bytes,
            "node": node,
            "duration_s": time.monotonic() - started,
        }
    finally:
        if proc is not None and proc.returncode is None:  # cancelled (KeyboardInterrupt): never left running
            _kill_group(proc.pid)
            with contextlib.suppress(Exception):
                proc.wait(timeout=KILL_WAIT_S)
        relay.close()
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(sockdir, ignore_errors=True)


__all__ = ["RayExecutor", "run_sample_process"]
