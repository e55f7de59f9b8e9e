"""The sandbox of a command or python unit: the program under test runs under
bubblewrap, and its only way out is the metering proxy. docs/agents.md says exactly
what a program sees and the limits it runs under.

Each sample's process runs as ``bwrap ... -- evalkit-forwarder OPTIONS PORT SOCKET --
ARGV`` (`bwrap_argv`; the forwarder compiled from ``_forwarder.c`` by `make sandbox`,
else ``python -I -S _forwarder.py``, which costs an interpreter's start-up a sample):
new PID, IPC, UTS and network namespaces, and, run by a user, a user namespace of its
own with every capability dropped and no nested one (`namespaces`). Run by root there
is no user namespace (bubblewrap would map the host's root into it): the mounts are made
as root, and the forwarder drops to `SANDBOX_UID` (no group, no capability) before the
program starts, with the per-sample `Limits` (`forwarder_options`: resource limits,
the cap on its connections to the proxy). The host's root filesystem is bound read-only;
folders that could hold the endpoint's address or key are hidden under empty read-only
tmpfs mounts (`_mounts`: evalkit's cwd and ``$HOME``, shown again where the program's
project or venv is bound; the suite, runs and run folders, hidden inside a bound project
too; `ALWAYS_HIDDEN`, where the host's services keep their Unix sockets), then bound back
read-only at the same paths what the program needs (the interpreter's prefixes, the
argv's files, argv[0]'s venv (`venv_of`), the program's project (`project_of`), the
python unit's module, the arms' skill folders, `unit.read_only_paths`); files that hold
secrets by name (`secret_files`) are covered. A fresh writable working directory of its
own (its cwd and ``$HOME``); a tmpfs ``/tmp`` of `Limits.tmp_bytes`;
``--die-with-parent`` and ``--new-session``, so when evalkit kills the sample's process
group (its timeout, the end of the run) the sandbox's PID 1 dies and the kernel kills
every process of its namespace, ``setsid`` children included. The proxy's Unix socket
(`evalkit.calls.proxy.MeteringProxy.listen_unix`) is bound at ``/tmp/.evalkit/proxy.sock``,
and the forwarder serves it on the sandbox's own ``127.0.0.1:PORT`` (PORT: the proxy's TCP
port; listening before the program starts, so its first connect never fails), so
``OPENAI_BASE_URL`` is the same URL inside and out. What the program returns is put
through a `Redactor` (every secret evalkit holds, in its encoded forms too) before it is
written; a failed program's error names the limit it hit (`limit_hit`, `limit_said`).

The environment is an allow-list (`environment`), never evalkit's own: `HOST_VARS`
when set, ``HOME``/``TMPDIR``, the proxy variables, `TELEMETRY_OFF`, and the host
variables `unit.env` names. With ``"isolation": "none"`` the program runs on the host
(same allow-list, same fresh working directory), and the run's record, its pages and
the terminal say that it was not contained (`NOT_CONTAINED`). Where bubblewrap cannot
run (no ``bwrap``, a kernel without unprivileged user namespaces: `probe`), a run that
asks for the sandbox is refused before anything is written (`require`).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from evalkit.foundations.errors import InputError
from evalkit.foundations.records import Limits
from evalkit.foundations.scrub import MIN_SECRET_CHARS, REDACTED, Redactor
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
    argv = [binary, *namespaces(), "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    argv += ["--", *unprivileged_prefix(), "true"]
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
    read-only (host paths, bound at the same path), the `secrets` files hidden by name
    (an empty file bound over each), and its `limits`. A `strict` folder stays hidden
    inside a bound one (the suite inside its project); a `hidden` one is shown where a
    read-only path binds it (the project inside ``$HOME``)."""

    workdir: Path
    socket: Path | None  # None: no proxy (a python unit's import check): argv runs without the forwarder
    port: int
    hidden: tuple[Path, ...]  # hidden unless a read-only path binds it back ($HOME, evalkit's cwd)
    read_only: tuple[Path, ...]
    secrets: tuple[Path, ...] = ()
    limits: Limits = Limits()
    strict: tuple[Path, ...] = ()  # hidden whatever is bound around them (the suite, runs and run folders)
    sharing: int = 1  # the sandboxes that may run at once: root's share one uid, and so its process count


def hidden_paths(*paths: Path | str | None) -> tuple[Path, ...]:
    """The folders to hide (resolved, deduplicated, none inside another, never ``/``)."""
    found: list[Path] = []
    for p in paths:
        if not p:
            continue
        r = Path(p).resolve()
        if r == Path("/") or not os.path.isdir(r):
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


PROJECT_MARKERS = ("pyproject.toml", "package.json", "setup.py", ".git")
# Files that hold secrets by their name: hidden in every bound folder (an empty file in their place).
SECRET_NAMES = (".env", ".env.*", "*.pem", "*.key", ".netrc", ".git-credentials", ".pgpass", ".npmrc", ".pypirc")
_CREDENTIALS = re.compile(r"://[^/\s:@]+:[^/\s@]+@|\[credential|extraheader|password\s*=", re.IGNORECASE)
SKIP_DIRS = frozenset({"node_modules", ".venv", "venv", "__pycache__", ".tox", ".mypy_cache", ".ruff_cache"})
MAX_SCAN_FILES = 100_000  # a project's files looked at for secrets by name, at most


def venv_of(program: Path) -> tuple[Path, ...]:
    """The virtualenv an interpreter's path is in (the folder above it holding
    ``pyvenv.cfg``, the path not resolved) with the base interpreter it names (its
    ``home``'s prefix and the resolved file's), else nothing."""
    for folder in program.parents:
        cfg = folder / "pyvenv.cfg"
        if os.path.isfile(cfg):
            found = [folder, Path(os.path.realpath(program)).parent.parent]
            for line in cfg.read_text(encoding="utf-8", errors="replace").splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "home" and value.strip():
                    found.append(Path(value.strip()).resolve().parent)
            return tuple(dict.fromkeys(found))
    return ()


def project_of(script: Path) -> Path:
    """A program's project: the nearest folder above `script` holding one of
    `PROJECT_MARKERS`, else the script's own folder (never ``/`` nor ``$HOME`` itself)."""
    home = Path(os.environ.get("HOME") or Path.home())
    for folder in script.parents:
        if folder in (Path("/"), home):
            break
        if any(os.path.exists(folder / m) for m in PROJECT_MARKERS):
            return folder
    return script.parent


def secret_name(name: str) -> bool:
    """Whether a file named `name` holds secrets by its name (`SECRET_NAMES`): hidden from
    a sandboxed program, never sent to `analyze --judge`."""
    import fnmatch  # the names of secret files only

    return any(fnmatch.fnmatch(name, n) for n in SECRET_NAMES)


def secret_files(folders: Iterable[Path]) -> tuple[Path, ...]:
    """The files under `folders` that hold secrets by their name (`SECRET_NAMES`, and a
    ``.git/config`` with credentials in it), sorted; virtualenvs and ``node_modules`` are
    not looked into."""
    found: set[Path] = set()
    seen = 0
    for top in folders:
        if not os.path.isdir(top):
            continue
        for here, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not (Path(here) / d / "pyvenv.cfg").exists()]
            seen += len(files)
            found.update(Path(here) / f for f in files if secret_name(f))
            config = Path(here) / "config"
            if (
                Path(here).name == ".git"
                and config.is_file()
                and _CREDENTIALS.search(config.read_text(errors="replace"))
            ):
                found.add(config)
            if seen > MAX_SCAN_FILES:
                break
    return tuple(sorted(found))


# The host variables whose values are secrets evalkit holds (an endpoint's key, a CI
# token), besides the endpoints' own key variables: redacted from what a program returns.
SECRET_VAR_RE = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)


# the secrets a program returns are taken out by `foundations.scrub` (the trajectory writer, below
# this layer, calls it too)
def held_secrets(key_names: Iterable[str], host: Mapping[str, str] | None = None) -> dict[str, str]:
    """The secrets evalkit holds in its environment: the endpoints' key variables
    (`key_names`) and every variable named like a secret (`SECRET_VAR_RE`), by name."""
    host = os.environ if host is None else host
    names = set(key_names) | {n for n in host if SECRET_VAR_RE.search(n)}
    return {
        n: host[n] for n in sorted(names) if len(host.get(n, "")) >= MIN_SECRET_CHARS and not host[n].startswith("/")
    }


# How a program that hit a per-sample limit says so (its stderr, its exit status), by the
# limit's name in `Limits`: what names the limit in the errored sample's message.
_LIMIT_SIGNS = (
    ("file_size_bytes", re.compile(r"File too large|SIGXFSZ")),
    ("tmp_bytes", re.compile(r"No space left on device")),
    ("memory_bytes", re.compile(r"MemoryError|Cannot allocate memory|bad_alloc|out of memory", re.IGNORECASE)),
    ("processes", re.compile(r"Resource temporarily unavailable|can't start new thread|fork: retry")),
    ("open_files", re.compile(r"Too many open files")),
)
SIGXFSZ = 25  # Linux's signal for a write past RLIMIT_FSIZE


_SAID = re.compile(rb"evalkit sandbox: (it hit a per-sample limit: limits\.proxy_connections = \d+)")


def limit_said(stderr: bytes) -> list[str]:
    """The limits the forwarder said a program hit, in `stderr` (its line naming
    ``limits.proxy_connections``: the connections past it were closed)."""
    return [m.group(1).decode() for m in _SAID.finditer(stderr)]


def limit_hit(status: int, stderr_tail: str, limits: Limits) -> str | None:
    """Which per-sample limit a program that failed with `status` hit, as ``limits.NAME =
    VALUE``, judged by its exit status (`SIGXFSZ`) or its stderr's last lines; else None."""
    name = "file_size_bytes" if status in (-SIGXFSZ, 128 + SIGXFSZ) else None
    lines = stderr_tail.strip().splitlines()[-3:]
    for limit, sign in _LIMIT_SIGNS:
        if name is None and any(sign.search(line) for line in lines):
            name = limit
    return None if name is None else f"it hit a per-sample limit: limits.{name} = {getattr(limits, name)}"


# Always hidden: where the host keeps its services' Unix sockets (a read-only bind does
# not stop a connect(); the network namespace stops only abstract and TCP sockets).
ALWAYS_HIDDEN = ("/run", "/var/run", "/var/tmp")


# Root's sandboxed programs run as this host uid (``nobody``), dropped to inside the
# sandbox: bubblewrap maps the caller's own uid into a user namespace, so run by root
# with one the sandbox's processes would be the host's root (every root-only file readable).
SANDBOX_UID = 65534
# No capability inside (nothing can be unmounted or remounted), no nested user namespace.
HARDENING = ("--cap-drop", "ALL", "--disable-userns")


def _as_root() -> bool:
    return os.geteuid() == 0


def namespaces() -> list[str]:
    """Bubblewrap's namespace and capability options. Run by a user: a user namespace of
    its own (the user's uid mapped, no capability, no nested user namespace). Run by
    root: no user namespace (bubblewrap would map the host's root into it); the mounts
    are made as root, then `unprivileged_prefix` drops to `SANDBOX_UID` inside."""
    if not _as_root():
        return [*NAMESPACES, *HARDENING]
    keep = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP")  # what setpriv needs to drop the rest
    return [*NAMESPACES[1:], "--cap-drop", "ALL", *(a for cap in keep for a in ("--cap-add", cap))]


def unprivileged_prefix() -> list[str]:
    """The command, first inside root's sandbox, that drops to `SANDBOX_UID` (no group,
    no capability, an empty bounding set); nothing for a user, unprivileged already."""
    if not _as_root():
        return []
    ids = [f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}", "--clear-groups"]
    return [shutil.which("setpriv") or "/usr/bin/setpriv", *ids, "--inh-caps=-all", "--bounding-set=-all", "--"]


def own_workdir(path: Path) -> None:
    """Hand a sample's working directory to the uid its sandbox runs as (root's: `SANDBOX_UID`)."""
    if _as_root():
        os.chown(path, SANDBOX_UID, SANDBOX_UID)
        path.chmod(0o711)  # bubblewrap, root without a capability, enters it before dropping to the uid


def limit_argv(limits: Limits, sharing: int = 1) -> list[str]:
    """The ``prlimit`` command that sets a sample's per-process limits inside its sandbox.
    A user's sandbox has a user namespace of its own: the process count is the sample's
    alone. Root's all run as `SANDBOX_UID`, which the kernel counts together: their
    limit is `limits.processes` times the `sharing` sandboxes that may run at once."""
    return [
        shutil.which("prlimit") or "/usr/bin/prlimit",
        f"--nproc={limits.processes * (max(1, sharing) if _as_root() else 1)}",
        f"--data={limits.memory_bytes}",  # writable memory: an address-space reservation (V8, Go) is no use
        f"--fsize={limits.file_size_bytes}",
        f"--nofile={limits.open_files}",
        "--",
    ]


def _cover(p: Path, hidden: tuple[Path, ...], bound: tuple[Path, ...]) -> str | None:
    """What shows `p` in the sandbox: "hidden" when the deepest mount strictly above it
    is a hidden folder's tmpfs, "bound" when a read-only bind, None for the root's."""
    best, kind = -1, None
    for q, what in [*((h, "hidden") for h in hidden), *((b, "bound") for b in bound)]:
        if p != q and p.is_relative_to(q) and len(q.parts) > best:
            best, kind = len(q.parts), what
    return kind


def _untraversable(paths: Iterable[Path]) -> list[Path]:
    """For root's sandbox (`SANDBOX_UID`): the first folder above each path that the
    sandbox's uid may not enter (``/root``, say), to hide, so the binds under it are reached."""
    if not _as_root():
        return []
    out = []
    for p in paths:
        for parent in reversed(p.parents):
            try:
                if not parent.stat().st_mode & 0o001:
                    out.append(parent)
                    break
            except OSError:
                break
    return out


def _between(p: Path, hidden: tuple[Path, ...]) -> list[Path]:
    """The folders between the tmpfs above `p` and `p` (made in that tmpfs)."""
    top = max((h for h in hidden if p.is_relative_to(h) and p != h), key=lambda h: len(h.parts))
    return [d for d in reversed(p.parents) if d.is_relative_to(top) and d != top]


def _mounts(jail: Jail) -> tuple[list[str], list[Path]]:
    """The mounts that hide and bind back, in depth order (a bind inside a hidden folder
    after its tmpfs, the suite inside its bound project after the bind), and the tmpfs
    folders made (remounted read-only at the end)."""
    strict = hidden_paths(*jail.strict)
    bound = tuple(p for p in dict.fromkeys(jail.read_only) if os.path.exists(p) and p not in strict)
    broad = hidden_paths(*jail.hidden, *ALWAYS_HIDDEN, *_untraversable(bound))
    hidden = (*strict, *(h for h in broad if h not in bound and h != Path("/tmp")), Path("/tmp"))  # /tmp: its own
    tmpfs = [h for h in hidden[:-1] if _cover(h, hidden, bound) != "hidden"]
    ops = [(len(h.parts), 0, ["--tmpfs", str(h)]) for h in tmpfs]
    binds = [(p, "--ro-bind") for p in bound if _cover(p, hidden, bound) == "hidden"]
    for p, how in [*binds, (jail.workdir, "--bind")]:  # its folders made enterable by the sandbox's uid
        if _cover(p, hidden, bound) == "hidden":
            ops += [
                (len(d.parts), 0, ["--perms", "0755", "--dir", str(d)]) for d in _between(p, (*tmpfs, Path("/tmp")))
            ]
        ops.append((len(p.parts), 1, [how, str(p), str(p)]))
    shown = [f for f in jail.secrets if os.path.isfile(f) and _cover(f, hidden, bound) != "hidden"]
    ops += [(len(f.parts), 2, ["--ro-bind", os.devnull, str(f)]) for f in shown]
    ops.sort(key=lambda op: (op[0], op[1]))
    unique = dict.fromkeys(tuple(op[2]) for op in ops)  # a folder made once for every bind under it
    return [arg for op in unique for arg in op], tmpfs


def bwrap_argv(jail: Jail, argv: list[str], *, binary: str | None = None) -> list[str]:
    """The bubblewrap command line that runs `argv` in `jail` (see the module docstring)."""
    out = [binary or bwrap_binary() or "bwrap", *namespaces()]
    out += ["--die-with-parent", "--new-session", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    out += ["--size", str(jail.limits.tmp_bytes), "--perms", "1777", "--tmpfs", "/tmp"]
    mounts, tmpfs = _mounts(jail)
    out += mounts
    out += ["--perms", "0755", "--dir", INSIDE]
    out += ["--ro-bind", str(FORWARDER), FORWARDER_INSIDE, "--ro-bind", str(WORKER), WORKER_INSIDE]
    compiled = forwarder_binary() if jail.socket is not None else None
    if compiled is not None:
        out += ["--ro-bind", str(compiled), FORWARDER_BIN_INSIDE]
    if jail.socket is not None:
        out += ["--bind", str(jail.socket), SOCKET_INSIDE]
    for h in tmpfs:
        out += ["--remount-ro", str(h)]
    out += ["--chdir", str(jail.workdir), "--"]
    if jail.socket is None:  # no forwarder: setpriv and prlimit do its part
        return out + [*unprivileged_prefix(), *limit_argv(jail.limits, jail.sharing)] + argv
    forwarder = [FORWARDER_BIN_INSIDE] if compiled is not None else [sys.executable, "-I", "-S", FORWARDER_INSIDE]
    return out + [*forwarder, *forwarder_options(jail), str(jail.port), SOCKET_INSIDE, "--", *argv]


def forwarder_options(jail: Jail) -> list[str]:
    """What the forwarder applies before it starts the program (no process of their
    own: each costs a start-up under load): `limit_argv`'s limits, root's drop to
    `SANDBOX_UID`, and the cap on connections to the proxy."""
    options = limit_argv(jail.limits, jail.sharing)[1:-1]
    if _as_root():
        options.append(f"--uid={SANDBOX_UID}")
    return [*options, f"--max-connections={jail.limits.proxy_connections}"]


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
    "REDACTED",
    "Redactor",
    "SANDBOX_UID",
    "SECRET_NAMES",
    "TELEMETRY_OFF",
    "WORKER",
    "WORKER_INSIDE",
    "build_forwarder",
    "bwrap_argv",
    "bwrap_binary",
    "environment",
    "forwarder_binary",
    "forwarder_options",
    "held_secrets",
    "hidden_paths",
    "interpreter_paths",
    "limit_argv",
    "limit_hit",
    "limit_said",
    "namespaces",
    "own_workdir",
    "probe",
    "project_of",
    "require",
    "secret_files",
    "secret_name",
    "unprivileged_prefix",
    "venv_of",
]
