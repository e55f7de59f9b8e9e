"""Where a unit's samples run: in this process, or one Ray task each on a Ray cluster
(`config.json` -> ``executor``, `evalkit run --ray [ADDRESS]`).

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

A prompt or agent sample is a task too (`run_model_calls`): a prompt sample's task
sends the key's planned request through the official `openai` client to the driver's
proxy under a token for that one call (`MeteringProxy.open_call`), and the driver makes
the call with the run's client exactly as a local run does (`RemotePrompts`); an agent
unit's task runs evalkit's tool loop, each model and tool call served by the proxy
under the sample's token (`AgentRunner._remote_tool_loop`). Every call is the driver's.

What a task needs on its node: evalkit installed in the same interpreter path as the
driver's, the suite folder and the program at the same paths (a shared filesystem or
one machine), and the driver's proxy reachable: on loopback when every node is on the
driver's machine, else on the driver's node IP or ``executor.proxy_host``
(`RayExecutor._proxy_host`), every request needing its sample's token. A node that dies mid-sample makes that
sample errored (its paid calls stay paid) and the runner runs it once more (``requeue``
on its error); `--resume RUN --ray` runs what is still missing.

Ray is imported only here and only when a run asks for it (it takes seconds to import
and is an optional dependency of a local run).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import itertools
import json
import logging
import os
import secrets
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
from typing import TYPE_CHECKING, Any

from evalkit.calls.sandbox import OUTPUT_FILE, WORKER, WORKER_INSIDE, Jail, bwrap_argv, own_workdir
from evalkit.foundations._text import printable
from evalkit.foundations.errors import InputError, UnitCallError
from evalkit.foundations.records import Config, Executor, Limits, Resources

if TYPE_CHECKING:  # the driver's side only: a Ray worker imports this module without the openai client
    from evalkit.calls.client import Completion, ModelClient
    from evalkit.calls.proxy import MeteringProxy

LOOPBACK = "127.0.0.1"
CONNECT_TIMEOUT_S = 5.0  # how long the driver tries a cluster's address before exit 2
KILL_WAIT_S = 5.0  # how long a cancelled task is given to kill its program
POLL_S = 0.05  # how often a task in flight checks whether it must stop
# how long a prompt sample's task waits for the driver's answer to its one call (the
# driver's client has its own timeout and retries; this only frees a node from a dead driver)
PROMPT_TASK_TIMEOUT_S = 3600.0


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


def _same_cluster(a: str, b: str) -> bool:
    """Whether two ``host:port`` addresses name one cluster: the same port, and hosts
    that are one string or resolve to a common address (``localhost:6379`` and
    ``127.0.0.1:6379``)."""
    (host_a, _, port_a), (host_b, _, port_b) = (x.rstrip("/").rpartition(":") for x in (a, b))
    if port_a != port_b:
        return False
    host_a, host_b = host_a.strip("[]"), host_b.strip("[]")
    if host_a == host_b:
        return True

    def resolved(host: str) -> set[str]:
        try:
            return {str(info[4][0]) for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
        except (OSError, UnicodeError):
            return {host}

    return bool(resolved(host_a) & resolved(host_b))


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
        # the most samples in flight at once that had said where they started, and on how many
        # nodes they were then (the end-of-run line: evidence that samples ran side by side)
        self.most_at_once = (0, 0)
        self._lock = threading.Lock()  # `running` and `most_at_once`: the event loop's and the board's
        self._board: socket.socket | None = None
        self._board_secret = secrets.token_urlsafe(16)  # a task's line to the board starts with it
        self._ids = itertools.count()
        self._calls_task: Any = None
        # where the driver's proxy (and board) listen, and the address the tasks connect to
        # (`connect` decides: loopback for a cluster on this machine, else reachable by it)
        self.proxy_bind = LOOPBACK
        self.proxy_connect = LOOPBACK
        self.driver_ip: str | None = None

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
        if ray.is_initialized():  # this process joined a cluster already (a notebook's ray.init): that one
            self._check_joined(ray)
        else:
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
        self._calls_task = ray.remote(max_retries=0)(run_model_calls)
        self.driver_ip = str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
        self.proxy_bind, self.proxy_connect, why = self._proxy_host(ray)
        print(f"evalkit: ray: the metering proxy listens on {self.proxy_bind} ({why})", file=sys.stderr, flush=True)
        self._open_board()
        return self

    def _check_joined(self, ray: Any) -> None:
        """`InputError` (exit 2) when this process is connected to another cluster than
        the one asked for: a run goes where its executor says, or nowhere. Checked for a
        HOST:PORT address (a ``ray://`` client connection has no GCS address of its own to
        compare, and ``auto`` or none means whichever this process joined)."""
        address = self.spec.address
        if address in (None, "auto") or address.startswith("ray://"):
            return
        joined = str(ray.get_runtime_context().gcs_address)
        if not _same_cluster(joined, address):
            raise InputError(
                f"this process is already connected to the Ray cluster at {printable(joined)}, not the one at "
                f"{printable(address)}{'' if self.where else ' (--ray)'}: call ray.shutdown() first, or ask for "
                f"{printable(joined)}",
                self.where,
                json_path="$.executor.address" if self.where else None,
            )

    def room_note(self, concurrency: int, num_cpus: float) -> str | None:
        """What to say when the run's `concurrency` (the samples in flight at once, on the
        whole cluster) is below what the cluster's CPUs hold now at `num_cpus` per sample,
        else None: a cluster of three 1-CPU nodes runs three samples at once only at
        ``concurrency`` >= 3."""
        import ray  # lazy: only a Ray run gets here

        cpus = float(ray.cluster_resources().get("CPU", 0.0))  # type: ignore[no-untyped-call]
        room = int(cpus // num_cpus) if num_cpus > 0 else None
        if room is None or concurrency >= room:
            return None
        return (
            f"concurrency {concurrency} runs at most {concurrency} sample(s) at once; the cluster's "
            f"{cpus:g} CPU(s) hold {room} at num_cpus {num_cpus:g} (raise concurrency to use them)"
        )

    def _proxy_host(self, ray: Any) -> tuple[str, str, str]:
        """Where the driver's proxy binds, where the tasks connect to it, and why:
        `executor.proxy_host` when set (``0.0.0.0``/``::``: every interface, the tasks
        connecting to the driver's node IP); else loopback when every node alive now is
        on the driver's machine (its IP, as Ray reports it), else the driver's node IP.
        Either way every request needs its sample's token (`evalkit.calls.proxy`)."""
        assert self.driver_ip is not None
        host = self.spec.proxy_host
        if host:
            connect = self.driver_ip if host in ("0.0.0.0", "::") else host
            return host, connect, "executor.proxy_host"
        ips = {str(n.get("NodeManagerAddress")) for n in ray.nodes() if n.get("Alive")}
        if ips <= {self.driver_ip}:
            return LOOPBACK, LOOPBACK, "every node is on this machine; set executor.proxy_host for one that is not"
        return self.driver_ip, self.driver_ip, f"the driver's node IP: the cluster's nodes are on {len(ips)} machines"

    def _open_board(self) -> None:
        """A loopback listener each task tells its node to as it starts (``ID NODE``), for
        the progress line's samples in flight per node. Threads: a line per sample."""
        self._board = socket.socket(socket.AF_INET6 if ":" in self.proxy_bind else socket.AF_INET, socket.SOCK_STREAM)
        self._board.bind((self.proxy_bind, 0))
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
                    secret, sid, node = conn.recv(256).decode("ascii").split()
                    if not hmac.compare_digest(secret, self._board_secret):
                        continue  # not one of this run's tasks
                    with self._lock:
                        self.started_per_node[node[:8]] += 1
                        if sid in self.running:
                            self.running[sid] = node[:8]
                        placed = [n for n in self.running.values() if n != "?"]
                        self.most_at_once = max(self.most_at_once, (len(placed), len(set(placed))))
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
        self,
        spec: dict[str, Any],
        resources: Resources,
        must_stop: Callable[[], str | None],
        poll_s: float,
        *,
        calls: bool = False,
    ) -> dict[str, Any]:
        """Run one sample's process as a Ray task (`calls`: evalkit's own side of a
        prompt or agent sample, `run_model_calls`) and return what the task returned;
        ``why`` set (and the task cancelled, its program killed) when `must_stop` says
        why while it runs, or the task's failure (a dead node) as ``failed``."""
        import ray  # lazy: only a Ray run gets here

        options: dict[str, Any] = {"num_cpus": resources.num_cpus}
        if resources.memory is not None:
            options["memory"] = resources.memory
        if resources.custom:
            options["resources"] = dict(resources.custom)
        sid = str(next(self._ids))
        with self._lock:
            self.running[sid] = "?"  # placed, not yet started
        spec = {**spec, "driver_ip": self.driver_ip, "proxy_loopback": self.proxy_connect == LOOPBACK}
        if self._board is not None:
            spec["board"] = (self.proxy_connect, self._board.getsockname()[1], sid, self._board_secret)
        ref = (self._calls_task if calls else self._task).options(**options).remote(spec)
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
            with self._lock:
                self.running.pop(sid, None)
            if not fut.done():
                fut.cancel()

    def _count(self, result: dict[str, Any]) -> None:
        if result.get("node"):
            self.done_per_node[str(result["node"])[:8]] += 1

    def summary(self) -> str:
        """One line for the end of the run: how many sample processes started on how
        many nodes (those the run stopped and killed included), and the most that were
        in flight at once (started, their result not yet back) with the nodes they were on."""
        per_node = ", ".join(f"{n} {c}" for n, c in sorted(self.started_per_node.items()))
        total = sum(self.started_per_node.values())
        most, nodes = self.most_at_once
        return (
            f"ray: {total} sample process(es) ran on {len(self.started_per_node)} node(s) ({per_node or 'none'}); "
            f"at most {most} at once, on {nodes} node(s)"
        )

    def progress(self) -> str:
        """The progress bar's suffix: samples in flight per node (``?``: waiting for a
        node), and done per node."""
        with self._lock:
            flying = Counter(self.running.values())
        now = " ".join(f"{n}:{c}" for n, c in sorted(flying.items()))
        per_node = " ".join(f"{n}:{c}" for n, c in sorted(self.done_per_node.items()))
        return f"ray in flight {self.in_flight} ({now or '-'}); done per node {per_node or '-'}"


class RemotePrompts:
    """The driver's side of prompt samples on Ray: one task per sample
    (`run_model_calls`, ``kind`` ``prompt``) sends the key's planned request through the
    official `openai` client to this proxy (`MeteringProxy.open_call`, a token for that
    one call), which makes it here with the run's `ModelClient`, exactly as a local run
    does (`ModelClient.complete` under the same key: ledger, cache, retries), so the
    sample is the local run's and the key never leaves the driver. What the call
    raised is raised to the runner as a local call's would be. `start`, then
    `complete` per sample, `aclose` at the end."""

    def __init__(self, executor: RayExecutor, model: str, resources: Resources) -> None:
        self.executor = executor
        self.model = model
        self.resources = resources
        self.proxy: MeteringProxy | None = None

    async def start(self) -> RemotePrompts:
        from evalkit.calls.proxy import MeteringProxy  # the driver's: a worker never imports it

        self.proxy = await MeteringProxy(self.executor.proxy_bind, model=self.model).start()
        return self

    async def aclose(self) -> None:
        if self.proxy is not None:
            await self.proxy.aclose()
            self.proxy = None

    async def complete(
        self,
        client: ModelClient,
        *,
        sample_index: int,
        key: str,
        should_stop: Callable[[], str | None],
        **args: Any,
    ) -> Completion:
        """The key's call (`args`: `ModelClient.complete`'s request keywords, as the
        runner plans them), sent from a Ray node and made here."""
        assert self.proxy is not None
        made: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()
        started = threading.Event()  # the node's request came: the call is the driver's now

        async def handler(kw: dict[str, Any]) -> Completion:
            started.set()
            try:
                c = await client.complete(**kw, sample_index=sample_index, key=key, should_stop=should_stop)
            except asyncio.CancelledError:
                made.cancel()
                raise
            except BaseException as exc:
                if not made.done():
                    made.set_exception(exc)
                raise
            if not made.done():
                made.set_result(c)
            return c

        body: dict[str, Any] = {"model": client.endpoint.model}
        for name in ("prompt", "messages", "tools", "temperature", "seed", "stop"):
            if args.get(name) is not None:
                body[name] = args[name]
        body.update(args.get("extra") or {})
        ep = self.proxy.open_call(handler)
        root = f"http://{self.executor.proxy_connect}:{self.proxy.port}"
        spec = {
            "kind": "prompt",
            "base_url": ep.base_url.replace(self.proxy.root, root),
            "api_key": ep.api_key,
            "request": body,
            "timeout_s": PROMPT_TASK_TIMEOUT_S,
        }

        def must_stop() -> str | None:  # a task not yet at its call stops with the run; a call ends as it ends
            return None if started.is_set() else should_stop()

        try:
            got = await self.executor.run(spec, self.resources, must_stop, POLL_S, calls=True)
        finally:
            self.proxy.close_call(ep.token)
        if started.is_set():
            return await made  # the call as the driver made it (its node dying after it changes nothing)
        why = got.get("failed") or got.get("why") or got.get("error") or "it ended without one"
        err = UnitCallError(f"{key}: the prompt sample's task made no call: {why}")
        err.attempts = 0  # type: ignore[attr-defined]
        if "failed" in got:  # its node or worker died before the call: run once more
            err.requeue = True  # type: ignore[attr-defined]
        raise err


def open_executor(spec: Executor, configs: list[Config], where: Path, *, from_flag: bool = False) -> RayExecutor | None:
    """The run's executor: None for a local run; for Ray, the cluster joined, after the
    check that refuses (exit 2, before anything is written) what cannot run there yet:
    ``keep_workdir`` (the working directory is on the node). `where`: the suite's
    config.json; `from_flag`: the executor came from ``--ray``, which a refusal names."""
    if spec.kind != "ray":
        return None
    for config in configs:
        if config.unit.keep_workdir:
            raise InputError(
                "keep_workdir is not available on Ray yet (a sample's working directory is on its node)",
                where,
                json_path="$.unit.keep_workdir",
            )
    remote = RayExecutor(spec, None if from_flag else where).connect()
    note = remote.room_note(max(c.concurrency for c in configs), max(c.unit.resources.num_cpus for c in configs))
    if note is not None:
        print(f"evalkit: ray: {note}", file=sys.stderr, flush=True)
    return remote


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
            os.chmod(path, 0o666 if os.geteuid() == 0 else 0o600)  # root's sandbox runs as another uid
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


def _task_start(spec: dict[str, Any]) -> tuple[str, str | None]:
    """This task's node id, after telling the driver's board where it runs; and why the
    driver's proxy cannot be reached from here (a proxy on the driver's loopback, this
    node on another machine), else None."""
    import ray  # on the worker: Ray is already imported there

    node = str(ray.get_runtime_context().get_node_id())
    if spec.get("board"):  # tell the driver's progress line where this sample runs
        bhost, bport, sid, secret = spec["board"]
        with contextlib.suppress(OSError), socket.create_connection((bhost, int(bport)), timeout=2) as tell:
            tell.sendall(f"{secret} {sid} {node}\n".encode("ascii"))
    here = str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
    if spec.get("proxy_loopback") and spec.get("driver_ip") and here != spec["driver_ip"]:
        return node, (
            f"this node ({here}) is not the driver's machine ({spec['driver_ip']}), whose metering proxy "
            "listens on loopback: set \"proxy_host\" in config.json's executor (the driver's address the nodes reach)"
        )
    return node, None


def _bounded_communicate(
    proc: subprocess.Popen[bytes], line: bytes, timeout_s: float, max_output: int, tail_bytes: int
) -> tuple[bytes, bytes, str | None]:
    """`proc.communicate` that holds at most `max_output` + 1 bytes of stdout (the
    program's group killed past that, as a local run kills it) and the last `tail_bytes`
    of stderr: its stdout, its stderr tail, and why it was killed (else None)."""
    out, err = bytearray(), bytearray()
    why: list[str] = []

    def read_out() -> None:
        assert proc.stdout is not None
        while chunk := os.read(proc.stdout.fileno(), 65536):
            out.extend(chunk)
            if len(out) > max_output:
                why.append(f"its stdout passed {max_output} bytes")
                _kill_group(proc.pid)
                return

    def read_err() -> None:
        assert proc.stderr is not None
        while chunk := os.read(proc.stderr.fileno(), 65536):
            err.extend(chunk)
            del err[:-tail_bytes]

    def feed() -> None:
        assert proc.stdin is not None
        with contextlib.suppress(OSError):  # a program that never reads its case: its pipe closed
            proc.stdin.write(line)
            proc.stdin.close()

    readers = [threading.Thread(target=f, daemon=True) for f in (read_out, read_err, feed)]
    for t in readers:
        t.start()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        why.append(f"timed out after {timeout_s:g}s")
        _kill_group(proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=KILL_WAIT_S)
    for t in readers:
        t.join(KILL_WAIT_S)
    return bytes(out[: max_output + 1]), bytes(err), (why[0] if why else None)


def run_sample_process(spec: dict[str, Any]) -> dict[str, Any]:
    """A Ray task: run one sample's process on this node and return ``out`` (its stdout,
    at most `max_output` + 1 bytes), ``status``, ``stderr_tail``, ``why`` (it was killed:
    its timeout, its stdout too long), ``output_file`` (the bytes it wrote to
    ``$EVALKIT_OUTPUT_FILE``, at most `max_output` + 1) and ``node``. `spec` is what the
    driver's `AgentRunner` built: ``argv``, ``sandbox``, ``hidden``/``read_only`` (the
    sandbox's folders), ``proxy`` (host, port), ``env``, ``driver_workdir``,
    ``payload``, ``timeout_s``, ``max_output``, ``tail_bytes``."""
    node, unreachable = _task_start(spec)
    if unreachable is not None:
        return {"why": None, "start_error": unreachable, "node": node}
    host, port = spec["proxy"]
    workdir = Path(tempfile.mkdtemp(prefix="evalkit-work-")).resolve()
    sockdir = Path(tempfile.mkdtemp(prefix="evalkit-relay-"))
    relay = _Relay((host, int(port)), str(sockdir / "proxy.sock") if spec["sandbox"] else None)
    proc: subprocess.Popen[bytes] | None = None
    try:
        # the proxy's URL as the driver wrote it into the environment, and as the program
        # reaches it here: the sandbox's forwarder on its own loopback at the proxy's port,
        # or, without the sandbox, the relay's loopback port
        local_root = spec.get("proxy_root") or f"http://{host}:{port}"
        remote_root = f"http://{LOOPBACK}:{port}" if spec["sandbox"] else f"http://{LOOPBACK}:{relay.port}"

        def here(value: str) -> str:  # the driver's workdir is this node's, the proxy is reached as said
            return value.replace(spec["driver_workdir"], str(workdir)).replace(local_root, remote_root)

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
                tuple(map(Path, spec.get("secrets", ()))),
                Limits(**spec.get("limits", {})),
                tuple(map(Path, spec.get("strict", ()))),
                int(spec.get("sharing", 1)),
            )
            own_workdir(workdir)
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
        max_output = int(spec["max_output"])
        out, err, why = _bounded_communicate(proc, line, float(spec["timeout_s"]), max_output, int(spec["tail_bytes"]))
        file_bytes: bytes | None = None
        path = workdir / OUTPUT_FILE
        if path.is_file() and not path.is_symlink():
            with path.open("rb") as f:
                file_bytes = f.read(max_output + 1)
        status = proc.returncode if proc.returncode is not None else -signal.SIGKILL
        return {
            "out": out[: max_output + 1],
            "status": status,
            "stderr_tail": err.decode("utf-8", "replace"),
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


def run_model_calls(spec: dict[str, Any]) -> dict[str, Any]:
    """A Ray task: evalkit's own side of a prompt or agent sample, on this node. The
    model calls go through the official `openai` client to the driver's metering proxy
    (``base_url``, the sample's token as ``api_key``), which reserves each on the
    driver's ledger, makes it there (the upstream key never leaves the driver) and
    records it; so a prompt sample's one call and an agent's trajectory are the ones a
    local run records. ``kind`` ``prompt``: send ``request`` (the planned call) once;
    ``agent``: evalkit's tool loop (`evalkit.running.agents.AgentRunner._tool_loop`, step
    for step: ``messages``, ``params``, ``max_turns``; tools answered at ``tools_url``).
    Returns ``stop`` (``final``, ``max_turns``) or ``error`` (what the proxy or the
    transport said), and ``node``."""
    import httpx  # on the worker: the openai client's own transport
    import openai

    node, unreachable = _task_start(spec)
    if unreachable is not None:
        return {"error": unreachable, "node": node}
    timeout = float(spec["timeout_s"])
    client = openai.OpenAI(base_url=spec["base_url"], api_key=spec["api_key"], max_retries=0, timeout=timeout)
    try:
        if spec["kind"] == "prompt":
            body = dict(spec["request"])
            if "prompt" in body:
                client.completions.create(**body)
            else:
                client.chat.completions.create(**body)
            return {"stop": "final", "node": node}
        convo: list[Any] = [dict(m) for m in spec["messages"]]
        params = dict(spec["params"])
        for _ in range(int(spec["max_turns"])):
            answer = client.chat.completions.create(messages=convo, **params)
            message = answer.choices[0].message
            if not message.tool_calls:
                return {"stop": "final", "node": node}
            calls: list[dict[str, Any]] = []
            for tc in message.tool_calls:
                fn: Any = getattr(tc, "function", None)  # function tools only: the proxy serves no others
                calls.append(
                    {"id": tc.id, "type": "function", "function": {"name": fn.name, "arguments": fn.arguments}}
                )
            convo.append({"role": "assistant", "content": message.content or None, "tool_calls": calls})
            for call in calls:
                raw = call["function"]["arguments"]
                try:  # as evalkit reads a tool call's arguments (`evalkit.calls.client`): JSON, else as written
                    arguments = json.loads(raw) if isinstance(raw, str) else raw
                except json.JSONDecodeError:
                    arguments = raw
                said = httpx.post(
                    spec["tools_url"],
                    json={"name": call["function"]["name"], "arguments": arguments, "id": call["id"]},
                    headers={"Authorization": f"Bearer {spec['api_key']}"},
                    timeout=timeout,
                )
                said.raise_for_status()
                convo.append({"role": "tool", "tool_call_id": call["id"], "content": said.json()["content"]})
        return {"stop": "max_turns", "node": node}
    except (openai.OpenAIError, httpx.HTTPError, KeyError, ValueError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "node": node}
    finally:
        client.close()


__all__ = ["RayExecutor", "run_model_calls", "run_sample_process"]
