"""CLI subcommand `serve` (registered by evalkit._cli.main): a model server on loopback.

`evalkit serve` serves the embedded llama.cpp model (after a start-up completion of a
few tokens); `--scripted FILE` serves a script instead (evalkit.calls.serve.ScriptedServer).
With a command after `--`, the command runs with `EVALKIT_BASE_URL` set to the server's
base URL and `EVALKIT_SERVED` describing the server (`endpoints`: a judge with no base
URL of its own is judged there when the server answers as its model; a run or grade on
the server is watched through its status file), the server stops when the command
ends, and `evalkit serve` exits with the command's status, or 1 when the command
succeeded but the server died under it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from evalkit._cli.options import echo_text
from evalkit.foundations.errors import EvalkitError
from evalkit.suites.endpoints import GENERATOR_URL_ENV, SERVED_ENV

if TYPE_CHECKING:
    from evalkit.calls.serve import ScriptedServer, ServerProcess


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so `with server:` unwinds and stops the server."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise _Terminated


@click.command(
    "serve",
    context_settings={"ignore_unknown_options": False, "allow_interspersed_args": False},
)
@click.option(
    "--scripted",
    "script",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Serve this script (JSON/YAML: rules, default, faults) instead of the embedded model.",
)
@click.option(
    "--model",
    "model_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="GGUF model to serve (default: the embedded Gemma 3 270M).",
)
@click.option(
    "--port",
    type=int,
    default=None,
    show_default="18181 when it is free, else a free port",
    help="Port on 127.0.0.1 (0: a free port).",
)
@click.option(
    "--tools-model",
    is_flag=True,
    help="Serve the embedded model that calls tools (SmolLM2-135M-Instruct, chat endpoint, OpenAI tool_calls) "
    "instead of the Gemma 3 270M base model.",
)
@click.option("--n-ctx", type=int, default=2048, show_default=True, help="Context size (embedded model).")
@click.option("--threads", "n_threads", type=int, default=None, help="CPU threads (embedded model).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def serve(
    script: Path | None,
    model_path: Path | None,
    port: int | None,
    tools_model: bool,
    n_ctx: int,
    n_threads: int | None,
    command: tuple[str, ...],
) -> None:
    """Serve an OpenAI-compatible endpoint on 127.0.0.1 [-- COMMAND ...].

    Without COMMAND, serve until Ctrl-C (or until the server dies: exit 1), printing the
    base URL. With COMMAND, run it with EVALKIT_BASE_URL set (and EVALKIT_SERVED: a
    judge without a base URL of its own is judged here when this server answers as its
    model), then stop the server and exit with the command's status. A server that dies
    stops the command's evalkit runs and grades at once, INCOMPLETE, with its exit status
    and log tail.

    A script for --scripted answers the first rule whose `match` is in the prompt, else
    the default, after any matching fault (429, 500, 503, drop, slow, malformed,
    over_usage), for example:

    \b
      {"rules": [{"match": "France", "text": "Paris"},
                 {"match": "Peru", "texts": ["Lima", "Cusco"], "weights": [0.7, 0.3]}],
       "default": {"text": "unknown"},
       "faults": [{"kind": "429", "retry_after": 0.05, "times": 2}]}

    The whole format: docs/formats.md, "Scripted server script".
    """
    # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    from evalkit.calls.serve import LocalModelServer, ScriptedServer, default_port, port_is_free

    if script is not None and (model_path is not None or tools_model):
        raise click.UsageError("--scripted excludes --model and --tools-model")
    chosen = port is None
    if port is None:
        port = default_port()  # the same base URL each time, unless another server holds it

    def on(p: int) -> ScriptedServer | ServerProcess:
        """The server asked for, on port `p` (not started)."""
        if script is not None:
            return ScriptedServer(script, port=p)
        return LocalModelServer(model_path, port=p, n_ctx=n_ctx, n_threads=n_threads, tools=tools_model)

    # SIGTERM (CI cancelling a job) unwinds like Ctrl-C, so the model server is stopped: from
    # its first start on, a model still loading included
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if in_main else None
    server: ScriptedServer | ServerProcess | None = None
    try:
        server = on(port)
        if chosen and port:
            try:
                server.start()  # `with server:` in _serve keeps it
            except EvalkitError:
                if port_is_free("127.0.0.1", port):
                    raise  # nothing holds the port: the server failed for a reason of its own
                server = on(0)  # another serve took the default port after we looked: a free one
        rc = _serve(server, command)
    except BaseException:
        if server is not None:
            server.stop()  # stopped already where _serve's `with` ran; else the one started above
        raise
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
    if rc is not None:
        # A command killed by a signal reports -N; exit the way a shell would (128 + N).
        sys.exit(rc if rc >= 0 else 128 - rc)


def _serve(server: ScriptedServer | ServerProcess, command: tuple[str, ...]) -> int | None:
    """Serve until Ctrl-C (no command: returns None) or run `command`: its status. The
    server is watched all along: when it dies, the reason goes to stderr and to the
    status file the command's evalkit runs watch (`endpoints`), and the status is
    non-zero."""
    # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    from evalkit.calls.serve import ServerProcess

    with server:
        if isinstance(server, ServerProcess):
            server.smoke()  # a server that answers /v1/models but dies on its first completion fails here
        if not command:
            click.echo(server.base_url)
            click.echo("serving; Ctrl-C stops", err=True)
            try:
                while (reason := server.exit_reason()) is None:
                    time.sleep(0.2)
            except KeyboardInterrupt:
                return None
            echo_text(f"error: {reason}", err=True)  # the server's log tail
            return 1
        with tempfile.TemporaryDirectory(prefix="evalkit-serve-") as tmp:
            status = Path(tmp) / "server-status.txt"
            env = {
                **os.environ,
                GENERATOR_URL_ENV: server.base_url,
                SERVED_ENV: json.dumps(
                    {
                        "base_url": server.base_url,
                        "model": server.model_name,
                        "status_file": str(status),
                        "pid": getattr(server, "pid", None) or os.getpid(),
                        # what its answers depend on (not the port): the response cache's key
                        "cache_identity": server.cache_identity,
                        # the embedded model's file: runs count input tokens with its tokenizer
                        "model_path": str(getattr(server, "model_path", None) or "") or None,
                    }
                ),
            }
            try:
                proc = subprocess.Popen(list(command), env=env)
            except OSError as exc:
                echo_text(f"error: cannot run {command[0]!r}: {exc.strerror or exc}", err=True)
                return 127
            done = threading.Event()
            died: list[str] = []
            watcher = threading.Thread(
                target=_watch_server, args=(server, status, done, died), name="evalkit-serve-watch", daemon=True
            )
            watcher.start()
            try:
                rc = proc.wait()
            except KeyboardInterrupt as exc:
                # Ctrl-C reached the child too (same process group); SIGTERM did not: pass it on.
                if isinstance(exc, _Terminated):
                    proc.terminate()
                try:
                    rc = proc.wait(timeout=10)
                except (subprocess.TimeoutExpired, KeyboardInterrupt):
                    proc.kill()
                    rc = proc.wait()
            finally:
                done.set()
                watcher.join(timeout=5)
    if died and rc == 0:
        return 1  # the command finished, but the server it was given died under it
    return rc


def _watch_server(server: ScriptedServer | ServerProcess, status: Path, done: threading.Event, died: list[str]) -> None:
    """Until `done`: every 50 ms ask the server's watch; when it reports, write the
    reason to `status` (atomically; the command's runs stop on it) and to stderr."""
    from evalkit.foundations._io import write_atomic  # imported here, off the command's critical path

    while not done.wait(0.05):
        reason = server.exit_reason()
        if reason:
            write_atomic(status, reason + "\n")
            died.append(reason)
            echo_text(f"error: {reason}", err=True)
            return


COMMANDS: list[click.Command] = [serve]
