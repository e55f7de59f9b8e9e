"""The sandbox of a command or python unit: the program under test runs under
bubblewrap, and its only way out is the metering proxy.

Each sample's process runs as ``bwrap ... -- evalkit-forwarder PORT SOCKET -- ARGV``
(`bwrap_argv`; the forwarder compiled from ``_forwarder.c`` by `make sandbox`, else
``python -I -S _forwarder.py``, which costs an interpreter's start-up a sample): new
user, PID, IPC, UTS and network namespaces; the host's root filesystem bound read-only,
with the folders that could hold the endpoint's address or key hidden under empty
read-only tmpfs mounts (the suite folder, the run folder, the runs folder, evalkit's
working directory and ``$HOME``: `hidden_paths`; and
`ALWAYS_HIDDEN`, where the host's services keep their Unix sockets), then bound
back read-only only what the program needs (the interpreter's prefixes, the argv's
files, the python unit's module, the arms' skill folders, `unit.read_only_paths`); a
fresh writable working directory of its own (its cwd and ``$HOME``); a tmpfs ``/tmp``;
``--die-with-parent`` and ``--new-session``, so when evalkit kills the sample's process
group (its timeout, the end of the run) the sandbox's PID 1 dies and the kernel kills
every process of its namespace, ``setsid`` children included. The proxy's Unix socket
(`evalkit.calls.proxy.MeteringProxy.listen_unix`) is bound at ``/tmp/.evalkit/proxy.sock``,
and the forwarder serves it on the sandbox's own ``127.0.0.1:PORT`` (PORT: the proxy's TCP
port; listening before the program starts, so its first connect never fails), so
``OPENAI_BASE_URL`` is the same URL inside and out.

The environment is an allow-list (`environment`), never evalkit's own: `HOST_VARS`
when set, ``HOME``/``TMPDIR``, the proxy variables, `TELEMETRY_OFF`, and the host
variables `unit.env` names. With ``"isolation": "none"`` the program runs on the host
(same allow-list, same fresh working directory), and the run's record, its pages and
the terminal say that it was not contained (`NOT_CONTAINED`). Where bubblewrap cannot
run (no ``bwrap``, a kernel without unprivileged user namespaces: `probe`), a run that
asks for the sandbox is refused before anything is written (`require`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from evalkit.foundations.errors import InputError
from evalkit.suites.units import ISOLATIONS

BWRAP_ENV = "EVALKIT_BWRAP"  # the bubblewrap binary to use (default: `bwrap` on PATH)
# What a sandboxed program gets of evalkit's environment, by name, when set.
HOST_VARS = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM")
# Known agent-framework telemetry, off in every unit's environment (merged last but
# for the proxy variables; a suite's own `unit.env` cannot turn it back on, whatever
# evalkit's own environment says): a trace exporter posts each sample to a third party,
# with the sample's token, outside the proxy, and takes time the sample is measured by
# (openai-agents' tracing doubled a sample's duration). docs/formats.md lists them.
TELEMETRY_OFF: dict[str, str] = {
    "OPENAI_AGENTS_DISABLE_TRACING": "1",  # openai-agents: traces posted to the provider
    "LANGCHAIN_TRACING_V2": "false",  # langchain / langgraph: LangSmith tracing (either prefix)
    "LANGCHAIN_TRACING": "false",
    "LANGSMITH_TRACING": "false",
    "LANGSMITH_TRACING_V2": "false",
    "LOGFIRE_SEND_TO_LOGFIRE": "false",  # pydantic-ai: Logfire export
    "PYDANTIC_AI_NO_BANNER": "1",  # pydantic-ai: its first-run banner
    "OTEL_SDK_DISABLED": "true",  # OpenTelemetry exporters (pydantic-ai's, smolagents' openinference)
    "HF_HUB_DISABLE_TELEMETRY": "1",  # smolagents / huggingface_hub
    "LITELLM_TELEMETRY": "False",  # smolagents' LiteLLMModel
    "CREWAI_DISABLE_TELEMETRY": "true",
    "HAYSTACK_TELEMETRY_ENABLED": "False",
    "ANONYMIZED_TELEMETRY": "False",  # chromadb
    "GRADIO_ANALYTICS_ENABLED": "False",  # smolagents' GradioUI
    "DO_NOT_TRACK": "1",  # the cross-tool convention
}
INSIDE = "/tmp/.evalkit"  # where the sandbox finds the proxy's socket and the forwarder
SOCKET_INSIDE = f"{INSIDE}/proxy.sock"
FORWARDER_INSIDE = f"{INSIDE}/forwarder.py"
WORKER_INSIDE = f"{INSIDE}/pyworker.py"
OUTPUT_FILE = ".evalkit-output.txt"  # in the workdir: $EVALKIT_OUTPUT_FILE
NOT_CONTAINED = 'the program under test was NOT contained ("isolation": "none"): it ran on this machine unsandboxed'
NAMESPACES = ("--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net")
FORWARDER = Path(__file__).with_name("_forwarder.py")
FORWARDER_C = Path(__file__).with_name("_forwarder.c")
# The compiled forwarder (`make sandbox` builds it from `FORWARDER_C`): no interpreter to
# start per sample. `FORWARDER_ENV` names another binary, or "python" for `FORWARDER`.
FORWARDER_BIN = Path(sys.prefix) / "libexec" / "evalkit-forwarder"
FORWARDER_ENV = "EVALKIT_FORWARDER"
FORWARDER_BIN_INSIDE = f"{INSIDE}/forwarder"
WORKER = Path(__file__).with_name("_pyworker.py")


def bwrap_binary() -> str | None:
    """The bubblewrap binary: `EVALKIT_BWRAP` when set, else ``bwrap`` on PATH; None when absent."""
    named = os.environ.get(BWRAP_ENV)
    if named:
        return named if os.access(named, os.X_OK) else None
    return shutil.which("bwrap")


def forwarder_binary() -> Path | None:
    """The compiled forwarder to run, else None (then `FORWARDER` runs, under python):
    `FORWARDER_ENV` when set ("python": none), else `FORWARDER_BIN`; only an executable
    no older than `FORWARDER_C` (one built from an earlier source is not used)."""
    named = os.environ.get(FORWARDER_ENV)
    if named == "python":
        return None
    path = Path(named) if named else FORWARDER_BIN
    try:
        fresh = path.stat().st_mtime >= FORWARDER_C.stat().st_mtime
    except OSError:
        return None
    return path if fresh and os.access(path, os.X_OK) else None


def build_forwarder(dest: Path = FORWARDER_BIN, cc: str | None = None) -> str | None:
    """Compile `FORWARDER_C` to `dest` (`make sandbox`); why not, else None. A failed
    build leaves nothing at `dest`: runs then use the python forwarder."""
    compiler = cc or os.environ.get("CC") or "cc"
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    try:
        done = subprocess.run([compiler, "-O2", "-o", str(part), str(FORWARDER_C)], capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        part.unlink(missing_ok=True)
        return f"{compiler} could not run: {exc}"
    if done.returncode != 0:
        part.unlink(missing_ok=True)
        return f"{compiler} failed: {done.stderr.decode('utf-8', 'replace').strip()}"
    part.replace(dest)
    return None


@functools.cache
def _probe(binary: str | None) -> str | None:
    if binary is None:
        return "bubblewrap (bwrap) is not installed: `make install` installs it on Debian/Ubuntu (apt's bubblewrap)"
    argv = [binary, *NAMESPACES, "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "true"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=30, env={"PATH": os.environ.get("PATH", "")})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not run: {exc}"
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip() or f"exit status {done.returncode}"
        return f"bubblewrap cannot make a sandbox here (a kernel without unprivileged user namespaces?): {why}"
    return None


def probe() -> str | None:
    """Why no sandbox can be made on this machine, else None: one trivial bwrap call
    (new user, PID, IPC, UTS and network namespaces), made once per binary."""
    return _probe(bwrap_binary())


def require(isolation: str, config_path: Path) -> None:
    """`InputError` (exit 2, before anything is written) for a sandboxed unit where
    bubblewrap cannot run, naming the reason and the way out."""
    if isolation != "sandbox":
        return
    why = probe()
    if why is not None:
        raise InputError(
            f"the unit's program cannot be sandboxed: {why}; install bubblewrap, or run it uncontained "
            'with "isolation": "none" in the unit (every page then says it was not contained)',
            config_path,
            json_path="$.unit.isolation",
        )


def environment(
    proxy_vars: Mapping[str, str],
    workdir: Path,
    names: Iterable[str] = (),
    host: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """A unit's environment, built from nothing: `HOST_VARS` and the variables `names`
    (`unit.env`) from `host` (evalkit's environment) when set, ``HOME`` and ``TMPDIR``,
    `TELEMETRY_OFF`, then `proxy_vars` (the proxy's URLs and the sample's token)."""
    host = os.environ if host is None else host
    env = {name: host[name] for name in (*HOST_VARS, *names) if name in host}
    env.setdefault("PATH", os.defpath)
    env.update(HOME=str(workdir), TMPDIR="/tmp", PYTHONDONTWRITEBYTECODE="1")
    env.update(TELEMETRY_OFF)
    env.update(proxy_vars)
    return env


@dataclass(frozen=True)
class Jail:
    """One sample's sandbox: its writable `workdir`, the proxy's `socket` on the host
    and TCP `port` (served inside on loopback), what is hidden and what bound back
    read-only (host paths, bound at the same path)."""

    workdir: Path
    socket: Path | None  # None: no proxy (a python unit's import check): argv runs without the forwarder
    port: int
    hidden: tuple[Path, ...]
    read_only: tuple[Path, ...]


def hidden_paths(*paths: Path | str | None) -> tuple[Path, ...]:
    """The folders to hide (resolved, deduplicated, none inside another, never ``/``)."""
    found: list[Path] = []
    for p in paths:
        if not p:
            continue
        r = Path(p).resolve()
        if r == Path("/") or not r.is_dir():
            continue
        found.append(r)
    found.sort(key=lambda p: len(p.parts))
    out: list[Path] = []
    for p in found:
        if not any(p == q or p.is_relative_to(q) for q in out):
            out.append(p)
    return tuple(out)


def interpreter_paths() -> tuple[Path, ...]:
    """What the interpreter evalkit runs on needs to start (its prefixes and the real
    file of `sys.executable`), to bind back where a hidden folder covers it."""
    real = Path(os.path.realpath(sys.executable))
    return tuple(dict.fromkeys(Path(p).resolve() for p in (sys.prefix, sys.base_prefix, real.parent.parent)))


# Always hidden: where the host keeps its services' Unix sockets (a read-only bind does
# not stop a connect(); the network namespace stops only abstract and TCP sockets).
ALWAYS_HIDDEN = ("/run", "/var/run", "/var/tmp")


def bwrap_argv(jail: Jail, argv: list[str], *, binary: str | None = None) -> list[str]:
    """The bubblewrap command line that runs `argv` in `jail` (see the module docstring)."""
    out = [binary or bwrap_binary() or "bwrap", *NAMESPACES, "--die-with-parent", "--new-session"]
    out += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    jail = dataclasses.replace(jail, hidden=hidden_paths(*jail.hidden, *ALWAYS_HIDDEN))
    for h in jail.hidden:
        if h != Path("/tmp") and not h.is_relative_to("/tmp"):
            out += ["--tmpfs", str(h)]
    covered = (*jail.hidden, Path("/tmp"))
    for p in jail.read_only:  # what the read-only root shows already needs no mount of its own
        if p.exists() and any(p == h or p.is_relative_to(h) for h in covered):
            out += ["--ro-bind", str(p), str(p)]
    out += ["--bind", str(jail.workdir), str(jail.workdir)]
    out += ["--ro-bind", str(FORWARDER), FORWARDER_INSIDE, "--ro-bind", str(WORKER), WORKER_INSIDE]
    compiled = forwarder_binary() if jail.socket is not None else None
    if compiled is not None:
        out += ["--ro-bind", str(compiled), FORWARDER_BIN_INSIDE]
    if jail.socket is not None:
        out += ["--bind", str(jail.socket), SOCKET_INSIDE]
    for h in jail.hidden:
        if h != Path("/tmp") and not h.is_relative_to("/tmp"):
            out += ["--remount-ro", str(h)]
    out += ["--chdir", str(jail.workdir), "--"]
    if jail.socket is None:
        return out + argv
    forwarder = [FORWARDER_BIN_INSIDE] if compiled is not None else [sys.executable, "-I", "-S", FORWARDER_INSIDE]
    return out + [*forwarder, str(jail.port), SOCKET_INSIDE, "--", *argv]


if __name__ == "__main__":  # `make sandbox`: python -m evalkit.calls.sandbox build
    if sys.argv[1:] != ["build"]:
        raise SystemExit("usage: python -m evalkit.calls.sandbox build")
    why = build_forwarder()
    print(
        f"evalkit: the compiled sandbox forwarder could not be built ({why}); sandboxed samples use the "
        "python forwarder (about 10 ms more start-up each)"
        if why
        else f"evalkit: sandbox forwarder built: {FORWARDER_BIN}"
    )


__all__ = [
    "FORWARDER",
    "FORWARDER_BIN",
    "FORWARDER_BIN_INSIDE",
    "FORWARDER_C",
    "FORWARDER_ENV",
    "HOST_VARS",
    "ISOLATIONS",
    "Jail",
    "NOT_CONTAINED",
    "OUTPUT_FILE",
    "TELEMETRY_OFF",
    "WORKER",
    "WORKER_INSIDE",
    "bwrap_argv",
    "build_forwarder",
    "bwrap_binary",
    "environment",
    "forwarder_binary",
    "hidden_paths",
    "interpreter_paths",
    "probe",
    "require",
]
