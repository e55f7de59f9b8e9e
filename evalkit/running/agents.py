"""Agent units: evalkit's own tool loop, the user's agent program, a Python function.

A suite chooses its unit in `config.json` (`evalkit.suites.units`). Each sample of an agent
unit is a `SampleSession` (`evalkit.calls.session`): every model call is metered through the
run's one `ModelClient` under the run's ledger and cache, every tool call is answered
from the case's fixtures, and both are written to the sample's trajectory
(`evalkit.runfolder.trajectories`) as they happen.

* ``agent``: evalkit's tool loop in chat mode. The rendered messages (system and user
  templates; an arm's skill is ``${skill}``, its guidance ``${guidance}``) and the
  suite's `tools` go to the model; each tool call in its answer is answered from the
  fixtures and sent back as a ``tool`` message; the loop ends at an answer with no tool
  call (`stop` ``final``), after `max_turns` model calls (``max_turns``: graded as a
  failure), or when a call is refused (the cap: the sample is errored).
* ``command``: the user's own agent, any language. Per sample evalkit runs `argv` in a
  fresh working directory, in the sandbox (`evalkit.calls.sandbox`, unless the unit says
  ``"isolation": "none"``) and a session of its own, with the case as JSON on stdin (`id`, `input`,
  `arm`, `index`, `seed`, `model`, `max_tokens`, `temperature`, `tools_url`, and
  `skill_dir` (absolute), `guidance`, `tools` when set) and `OPENAI_BASE_URL`,
  `OPENAI_API_KEY` (also `OPENAI_API_BASE`, `EVALKIT_BASE_URL`, `EVALKIT_API_KEY`),
  `EVALKIT_TOOLS_URL` and `EVALKIT_MODEL` pointing at the metering proxy
  (`evalkit.calls.proxy`), in an allow-listed environment (`child_env`: nothing else of
  evalkit's). Its stdout (at most `MAX_OUTPUT_BYTES`), or what it wrote to
  ``$EVALKIT_OUTPUT_FILE`` (its stdout then kept as a log), is the output; the exit
  status, the last `STDERR_TAIL_BYTES` of stderr and the duration are recorded. A non-zero exit,
  a timeout (`timeout_s`, the whole sample) or a refused or failed model call errors the
  sample, and the program's whole process group is killed at once (so is every sample
  in flight when the run stops).
* ``python``: the same contract out of process: per sample a worker
  (`evalkit.calls._pyworker`) is started as a command is, in the same sandbox and
  environment; ``fn(case, client)`` gets the same dict and an `openai.OpenAI` client
  (an `AsyncOpenAI` one for an ``async def``) bound to the proxy, and returns the output
  string. The upstream client and key never exist in its process. Its module is
  imported there from the suite folder (first on its `sys.path`), so each run reads it
  fresh; at the run's start a worker imports it once to check it (`check_callable`),
  and evalkit's own process never runs it. One that outlives its timeout is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from evalkit.calls.client import CallStopped, Completion, ModelClient
from evalkit.calls.proxy import MeteringProxy, SampleEndpoint, openai_tool_calls
from evalkit.calls.sandbox import (
    NOT_CONTAINED,
    OUTPUT_FILE,
    WORKER,
    WORKER_INSIDE,
    Jail,
    Redactor,
    bwrap_argv,
    environment,
    held_secrets,
    hidden_paths,
    interpreter_paths,
    limit_hit,
    limit_said,
    own_workdir,
    project_of,
    require,
    secret_files,
    venv_of,
)
from evalkit.calls.session import Key, SampleSession, TwinShare
from evalkit.foundations.errors import (
    BudgetExhausted,
    CeilingBreached,
    DiskFull,
    InputError,
    InputTooLong,
    ReplayMiss,
    UnitCallError,
)
from evalkit.foundations.findings import Finding
from evalkit.foundations.layout import workdir_relpath
from evalkit.foundations.records import Arm, Case, Config, Sample, Suite
from evalkit.runfolder.trajectories import TrajectoryWriter
from evalkit.suites.units import ToolFixtures, tool_names

MAX_OUTPUT_BYTES = 1024 * 1024  # a program's stdout: more is an errored sample
STDERR_TAIL_BYTES = 4096
POLL_S = 0.05  # how often a sample in flight checks whether it must stop
_FAILURES = (BudgetExhausted, CeilingBreached, DiskFull, InputTooLong, ReplayMiss, UnitCallError)


def program_argv(suite: Suite) -> list[str]:
    """A command unit's argv with ``{python}`` and ``{suite}`` filled in, and every entry
    naming a file of the suite folder made absolute (the program runs in a working
    directory of its own: `evalkit.calls.sandbox`) without following symlinks (a
    virtualenv's ``python`` is a link out of it); `InputError` (before anything is written)
    when its program cannot be found."""
    root = Path(suite.path).resolve()
    argv = [a.replace("{python}", sys.executable).replace("{suite}", str(root)) for a in suite.config.unit.argv]
    prog = argv[0]
    found = (root / prog).is_file() if os.sep in prog else shutil.which(prog) is not None
    if not found:
        raise InputError(
            f"the command unit's program {prog!r} was not found "
            + ("in the suite folder" if os.sep in prog else "on PATH"),
            Path(suite.path) / "config.json",
            json_path="$.unit.argv[0]",
        )
    out = []
    for i, a in enumerate(argv):  # absolute, symlinks kept: a venv's python stays in its venv
        in_suite = not os.path.isabs(a) and (i > 0 or os.sep in a) and _is_file(root / a)
        out.append(os.path.normpath(root / a) if in_suite else a)
    return out


def program_files(suite: Suite) -> list[Path]:
    """The files inside the suite folder that are the agent program under test, sorted: a
    command unit's argv entries naming a file there (its script, a config it reads), a
    python unit's module file (every ``.py`` of its package). Hashed into a run's inputs,
    so a resume with a changed one is refused (`evalkit.running.runner.input_hashes`)."""
    root = Path(suite.path).resolve()
    unit = suite.config.unit
    found: set[Path] = set()
    if unit.kind == "command":
        for a in unit.argv:
            if "{python}" in a:
                continue
            p = Path(a.replace("{suite}", str(root)))
            found.add((root / p).resolve())  # relative to the suite folder, where it runs
    elif unit.kind == "python":
        top, _, rest = (unit.callable or "").partition(":")[0].partition(".")
        found.add((root / top).with_suffix(".py").resolve())
        if (root / top).is_dir():
            found.update(p.resolve() for p in (root / top).rglob("*.py"))
    return sorted(p for p in found if p.is_relative_to(root) and _is_file(p))


def _is_file(p: Path) -> bool:
    """`p.is_file()`, False for an argument that cannot name a file (an inline script too
    long for a path)."""
    try:
        return p.is_file()
    except OSError:
        return False


def prepare(suite: Suite) -> Any:
    """Check what an agent unit needs before a run starts (nothing is written yet): a
    command's program, a python unit's function (imported by its worker, out of
    process), the sandbox (`check_sandbox`). Returns the argv of the command or of the
    python unit's worker, None for other units."""
    kind = suite.config.unit.kind
    if kind in ("command", "python"):
        check_sandbox(suite)
    if kind == "command":
        return program_argv(suite)
    if kind == "python":
        argv = worker_argv(suite)
        check_callable(suite, argv)
        return argv
    return None


def child_env(config: Config, ep: SampleEndpoint, workdir: Path) -> dict[str, str]:
    """The environment of a command or python unit's process, built from an allow-list
    (`evalkit.calls.sandbox.environment`), never evalkit's own: the proxy in place of the
    endpoint (``OPENAI_BASE_URL``, and ``ANTHROPIC_BASE_URL`` / ``GOOGLE_GEMINI_BASE_URL``
    for the Anthropic and Gemini wires), ``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``,
    ``GEMINI_API_KEY``, ``GOOGLE_API_KEY`` and ``EVALKIT_API_KEY`` the sample's proxy token, and of
    evalkit's variables only `HOST_VARS` and those `unit.env` names."""
    unit = config.unit
    root = ep.base_url.removesuffix("/v1")  # the anthropic and google-genai clients add their own paths
    proxy_vars = {
        "OPENAI_BASE_URL": ep.base_url,
        "OPENAI_API_BASE": ep.base_url,
        "OPENAI_API_KEY": ep.api_key,
        "ANTHROPIC_BASE_URL": root,
        "ANTHROPIC_API_KEY": ep.api_key,
        "GOOGLE_GEMINI_BASE_URL": root,
        "GEMINI_API_KEY": ep.api_key,
        "GOOGLE_API_KEY": ep.api_key,
        "EVALKIT_BASE_URL": ep.base_url,
        "EVALKIT_API_KEY": ep.api_key,
        "EVALKIT_TOOLS_URL": ep.tools_url,
        "EVALKIT_MODEL": config.generator.model,
        "EVALKIT_OUTPUT_FILE": str(workdir / OUTPUT_FILE),
        "EVALKIT_TIMEOUT_S": f"{unit.timeout_s:g}",
    }
    return environment(proxy_vars, workdir, unit.env)


def _key_names(config: Config) -> set[str]:
    names = {config.generator.api_key_env, "EVALKIT_SERVED", "EVALKIT_JUDGE_BASE_URL"}
    names.update(config.for_arm(a).generator.api_key_env for a in config.arms)  # an arm's own endpoint key
    if config.judge is not None:
        names.add(config.judge.api_key_env)
    return names


def check_sandbox(suite: Suite) -> None:
    """`InputError` (exit 2, naming the key) for a unit's sandbox settings that cannot
    hold: a `read_only_paths` entry that does not exist, an `env` name that is the
    endpoint's key, a sandbox bubblewrap cannot make here (`evalkit.calls.sandbox.require`)."""
    unit = suite.config.unit
    where = Path(suite.path) / "config.json"
    root = Path(suite.path).resolve()
    for i, rel in enumerate(unit.read_only_paths):
        p = (root / rel).resolve()
        inside = os.path.isabs(rel) or p.is_relative_to(root)
        if not p.exists() or not inside or p == root:
            why = "does not exist" if not p.exists() else "is not a path inside the suite folder"
            raise InputError(
                f"read_only_paths: {rel!r} {why} (relative paths are to the suite folder {root})",
                where,
                json_path=f"$.unit.read_only_paths[{i}]",
            )
    keys = _key_names(suite.config)
    for i, name in enumerate(unit.env):
        if name in keys or name.upper().endswith("_API_KEY"):
            raise InputError(
                f"env: {name!r} would hand the program an endpoint's key (it gets the proxy's token instead)",
                where,
                json_path=f"$.unit.env[{i}]",
            )
    require(unit.isolation, where)


def _read_only_paths(suite: Suite, argv: list[str]) -> tuple[Path, ...]:
    """What a sandboxed program needs bound back read-only (at the same paths): the
    interpreter, the files its argv names (argv[0] found on PATH too), argv[0]'s
    virtualenv and the program's project (`evalkit.calls.sandbox.project_of`), the arms'
    skill folders, and `unit.read_only_paths`."""
    root = Path(suite.path).resolve()
    out: list[Path] = list(interpreter_paths())
    prog = shutil.which(argv[0]) if os.sep not in argv[0] else argv[0]
    files = [Path(a) for a in [prog, *argv[1:]] if a and os.path.isabs(a) and _is_file(Path(a))]
    out += files
    venv = venv_of(files[0]) if files and files[0] == Path(prog or "") else ()
    out += venv
    scripts = [f for f in files if not any(f.is_relative_to(v) for v in venv)]
    if scripts and suite.config.unit.kind == "command":
        out.append(project_of(scripts[0]))
    out += [(root / a.skill_dir).resolve() for a in suite.config.arms if a.skill_dir]
    out += [(root / rel).resolve() for rel in suite.config.unit.read_only_paths]
    if suite.config.unit.kind == "python":
        out += _python_paths(suite)[1]
    return tuple(dict.fromkeys(out))


def _bound_secrets(read_only: tuple[Path, ...]) -> tuple[Path, ...]:
    skip = set(interpreter_paths())
    return secret_files(
        p for p in read_only if os.path.isdir(p) and p not in skip and not os.path.exists(p / "pyvenv.cfg")
    )


def hidden_secrets(suite: Suite, read_only: tuple[Path, ...]) -> tuple[Path, ...]:
    """The files that hold secrets by name (`evalkit.calls.sandbox.secret_files`) in the
    folders bound into a sandbox (not the interpreters'), each said on stderr as a finding."""
    found = _bound_secrets(read_only)
    for f in found:
        finding = Finding("warning", "hidden from the sandboxed program: a file that holds secrets by its name", str(f))
        print(f"evalkit: {finding}", file=sys.stderr, flush=True)
    return found


def _python_paths(suite: Suite) -> tuple[list[Path], list[Path]]:
    """A python unit's module: the folders to put on the worker's `sys.path` after the
    suite folder (where its top-level module lives, when not in the suite folder: found
    without running it), and the files or folders to bind read-only: its module or
    package and every ``.py`` file of the suite folder's top level (its siblings)."""
    import importlib.util  # find_spec only: nothing of the module runs here

    root = Path(suite.path).resolve()
    top = (suite.config.unit.callable or "").partition(":")[0].partition(".")[0]
    siblings = sorted(p for p in root.glob("*.py") if p.is_file())  # what it may import at call time
    if (root / top).with_suffix(".py").is_file():
        return [], siblings
    if (root / top).is_dir():
        return [], [root / top, *siblings]
    try:
        spec = importlib.util.find_spec(top)  # a top-level name: found, never executed
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin or not os.path.isabs(spec.origin):
        return [], []
    origin = Path(spec.origin).resolve()
    where = origin.parent.parent if spec.submodule_search_locations else origin.parent
    bind = origin.parent if spec.submodule_search_locations else origin
    return [where], [bind]


def check_callable(suite: Suite, argv: list[str]) -> None:
    """`InputError` when the python unit's function cannot be imported: its worker
    (`evalkit.calls._pyworker --check`) imports it in the unit's own environment and sandbox,
    before anything is written; the function's module never runs in evalkit's process."""
    spec = suite.config.unit.callable or ""
    where = Path(suite.path) / "config.json"
    work = Path(tempfile.mkdtemp(prefix="evalkit-check-"))
    try:
        cmd = [argv[0], argv[1], argv[2], "--check", *argv[3:]]
        env = environment({}, work, suite.config.unit.env)
        if suite.config.unit.isolation == "sandbox":
            broad, strict = _hidden(suite, None)
            read_only = _read_only_paths(suite, cmd)
            own_workdir(work)
            jail = Jail(work, None, 0, broad, read_only, _bound_secrets(read_only), suite.config.unit.limits, strict)
            cmd = bwrap_argv(jail, cmd)
        else:
            cmd[2] = str(WORKER)
        done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InputError(f"python unit {spec!r}: its worker could not start: {exc}", where) from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lines = done.stdout.decode("utf-8", "replace").strip().splitlines()
    try:
        said = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        said = {}
    if said.get("ok") is True:
        return
    why = said.get("import_error") or (
        f"its worker exited with status {done.returncode}: " + done.stderr.decode("utf-8", "replace")[-800:]
    )
    raise InputError(f"python unit {spec!r}: {why}", where, json_path="$.unit.callable")


def worker_argv(suite: Suite) -> list[str]:
    """The argv of a python unit's worker process (`evalkit.calls._pyworker`)."""
    root = str(Path(suite.path).resolve())
    extra, _ = _python_paths(suite)
    return [sys.executable, "-I", WORKER_INSIDE, suite.config.unit.callable or "", root, *map(str, extra)]


def _hidden(suite: Suite, run_path: Path | None) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """The folders a sandbox hides (`evalkit.calls.sandbox.hidden_paths`): evalkit's cwd
    and ``$HOME`` (shown where the program's project or venv is bound), and the suite,
    runs and run folders (hidden inside a bound project too)."""
    home = os.environ.get("HOME") or str(Path.home())
    runs = run_path.parent if run_path is not None else None
    return hidden_paths(os.getcwd(), home), hidden_paths(suite.path, run_path, runs)


class _Ended(Exception):
    """A program or function ended without an output: `why`, and what it left."""

    def __init__(self, why: str, exit_status: int | None = None, stderr_tail: str = "") -> None:
        super().__init__(why)
        self.exit_status, self.stderr_tail = exit_status, stderr_tail


class AgentRunner:
    """Runs the samples of one agent unit in a run (see the module docstring). Build it
    with `start` on the run's event loop and `aclose` it when the run ends."""

    def __init__(
        self,
        suite: Suite,
        run_path: Path,
        client: ModelClient,
        *,
        should_stop: Callable[[], str | None],
        on_stop: Callable[[str], None],
        target: Any = None,
        executor: Any = None,
        share: Callable[[Key], TwinShare | None] | None = None,
    ) -> None:
        self.suite = suite
        self.share = share  # a twin arm's sample shares its calls with its twin's (`SampleSession`)
        self.executor = executor  # an evalkit.running.executors.RayExecutor: each sample's process is a Ray task
        self.config = suite.config
        self.unit = suite.config.unit
        self.run_path = Path(run_path)
        self.client = client
        self.should_stop = should_stop
        self.on_stop = on_stop
        self.target = target
        self.proxy: MeteringProxy | None = None
        self._declared = tool_names(self.config)
        self._sockdir: Path | None = None  # the proxy's Unix socket's folder (a sandboxed unit)
        self._socket: Path | None = None
        self._hidden: tuple[Path, ...] = ()
        self._strict: tuple[Path, ...] = ()
        self._read_only: tuple[Path, ...] = ()
        self._secrets: tuple[Path, ...] = ()
        self._held = held_secrets(_key_names(self.config))  # redacted from what a program returns

    async def start(self) -> AgentRunner:
        # an agent unit on Ray too: its tool loop runs on a node, its calls come back here
        if self.unit.kind in ("command", "python") or self.executor is not None:
            # where the nodes reach it (loopback unless the cluster is past this machine)
            host = self.executor.proxy_bind if self.executor is not None else "127.0.0.1"
            self.proxy = await MeteringProxy(host, model=self.config.generator.model).start()
        if self.unit.kind in ("command", "python"):
            assert self.proxy is not None
            self.proxy.tool_report_limits = (self.unit.limits.tool_report_bytes, self.unit.limits.tool_reports)
            if self.unit.isolation == "sandbox":  # the sandbox's one way out (evalkit.calls.sandbox)
                self._sockdir = Path(tempfile.mkdtemp(prefix="evalkit-proxy-"))
                self._socket = Path(await self.proxy.listen_unix(str(self._sockdir / "proxy.sock")))
                self._socket.chmod(0o666)  # root's sandbox runs as another uid; its folder is root's alone
                self._hidden, self._strict = _hidden(self.suite, self.run_path)
                argv = self.target or self._argv()
                self._read_only = _read_only_paths(self.suite, argv)
                self._secrets = hidden_secrets(self.suite, self._read_only)
            else:
                print(f"evalkit: {NOT_CONTAINED}", file=sys.stderr, flush=True)
        return self

    def _argv(self) -> list[str]:
        return program_argv(self.suite) if self.unit.kind == "command" else worker_argv(self.suite)

    async def aclose(self) -> None:
        if self.proxy is not None:
            await self.proxy.aclose()
            self.proxy = None
        if self._sockdir is not None:
            shutil.rmtree(self._sockdir, ignore_errors=True)
            self._sockdir = None

    async def sample(self, case: Case, arm: Arm, index: int, seed: int, prompt: Any) -> Sample:
        """Run one sample: a `Sample` when it finished, else the exception the runner
        maps (the first refused or failed call's, `CallStopped` when the run stopped, or
        `UnitCallError` for a program that failed), its `attempts` the HTTP requests its
        calls made, so a sample that paid for anything is on `errors.jsonl`."""
        redactor = Redactor(self._held)
        contained = self.unit.kind in ("command", "python")
        writer = TrajectoryWriter(self.run_path, case.id, arm.name, index, redactor.fields if contained else None)
        session = SampleSession(
            client=self.client,
            key=(case.id, arm.name, index),
            writer=writer,
            fixtures=ToolFixtures.of_case(case.input, self._declared if self.unit.kind == "agent" else None),
            should_stop=self.should_stop,
            on_stop=self.on_stop,
            share=None if self.share is None else self.share((case.id, arm.name, index)),
        )
        end: dict[str, Any] = {}
        try:
            writer.write(
                "start", {"case_id": case.id, "arm": arm.name, "index": index, "seed": seed, "unit": self.unit.kind}
            )
            try:
                if self.unit.kind == "agent":
                    output, stop = await self._tool_loop(session, prompt, seed)
                else:
                    run = self._program(session, case, arm, index, seed, end, redactor)
                    output, stop = await _redacted(run, redactor, end)
            except asyncio.CancelledError:
                await session.finish("interrupted")
                raise
            except _Ended as exc:
                await session.finish(str(exc))
                end.update(exit_status=exc.exit_status, stderr_tail=exc.stderr_tail)
                raise self._error(session, exc) from None
            except _FAILURES as exc:
                await session.finish(str(exc))
                raise self._error(session, exc) from None
            await session.finish("finished")
            if session.failure is not None:  # a refused call the agent got past: never a pass
                raise self._error(session, session.failure)
        except BaseException as exc:
            end.update(status="errored", error=f"{type(exc).__name__}: {exc}")
            self._end(writer, session, _said_redacted(session, redactor, end), None)
            raise
        end.update(status="finished", stop=stop)
        _said_redacted(session, redactor, end)
        self._end(writer, session, end, output)  # written before its results.jsonl line
        agent = session.agent_record(self.unit.kind, writer, stop)
        if arm.skill_dir:
            agent["skill_dir"] = arm.skill_dir
        for name in ("exit_status", "stderr_tail", "stdout_tail", "workdir", "redacted"):
            if end.get(name) is not None:
                agent[name] = end[name]
        if contained:
            agent["isolation"] = self.unit.isolation
        return session.sample(
            case,
            arm.name,
            seed,
            output,
            agent,
            model=self.config.generator.model,
            tool_calls=redactor.fields(session.trace()) if contained else session.trace(),
            turns=session.calls,
        )

    def _end(self, writer: TrajectoryWriter, session: SampleSession, end: dict[str, Any], output: str | None) -> None:
        line = {
            **{k: v for k, v in end.items() if k in ("status", "stop", "error")},
            "output": output,
            "turns": session.calls,
            "tool_calls": len(session.tool_calls),
            "tool_errors": len(session.tool_errors),
            "usage": {"prompt_tokens": session.usage_in, "completion_tokens": session.usage_out},
            "cost_usd": session.cost_usd,
            "duration_ms": round((time.monotonic() - session.started) * 1000, 3),
        }
        for name in ("exit_status", "stderr_tail", "stdout_tail", "workdir", "redacted"):
            if end.get(name) is not None:
                line[name] = end[name]
        if session.fixtures.state is not None:  # the tools' final state (a `state` check's)
            line["state"] = session.fixtures.state
        try:
            writer.write("end", line)
        finally:
            writer.close()

    def _error(self, session: SampleSession, exc: BaseException) -> BaseException:
        """The exception the runner maps for a sample that did not finish: the session's
        first failure when a call failed (its kind decides the stop cause), else `exc`
        as a `UnitCallError` (or `CallStopped` when the run stopped); `attempts` is what
        the sample's calls made the endpoint receive."""
        failure = session.failure or exc
        where = f"call {session.failed_call}: " if session.failure is not None and session.failed_call else ""
        if isinstance(failure, _Ended):
            stopped = self.should_stop()
            cls: type[BaseException] = CallStopped if stopped else UnitCallError
            message = str(failure) if not stopped else f"the run stopped ({stopped}): {failure}"
        else:
            cls = type(failure) if isinstance(failure, _FAILURES) else UnitCallError
            message = f"{where}{failure}"
        if cls is DiskFull:
            err: BaseException = failure
        else:
            err = cls(f"{session.label}: {message}")
        err.attempts = session.attempts  # type: ignore[attr-defined]
        err.cost_usd = session.cost_usd  # type: ignore[attr-defined]
        if getattr(failure, "requeue", False):  # its Ray node died: the runner runs it once more
            err.requeue = True  # type: ignore[attr-defined]
        return err

    def redactor(self) -> Redactor:
        """A fresh redactor of the secrets evalkit holds, for one sample or conversation."""
        return Redactor(self._held)

    async def turn(
        self,
        session: SampleSession,
        redactor: Redactor,
        case: Case,
        arm: Arm,
        seed: int,
        conversation: list[dict[str, Any]],
    ) -> str:
        """One agent turn of a conversation (`evalkit.conversations.loop`): the program run
        once as a sample's is, its case carrying `conversation` (the turns so far, the
        user's last); its output (line ends at its end taken off) is the reply. Raises what ends the conversation: a
        refused or failed call's exception (`_error`), or `UnitCallError` with the
        program's `exit_status` and `stderr_tail` for a program that failed."""
        end: dict[str, Any] = {}
        # the simulated user's scenario (`input.user`: what it knows, must not tell, wants)
        # is the simulator's alone, as it is for a prompt or tool-loop agent: the program
        # meets the user only through the conversation
        if isinstance(case.input, dict) and "user" in case.input:
            case = dataclasses.replace(case, input={k: v for k, v in case.input.items() if k != "user"})
        run = self._program(session, case, arm, session.key[2], seed, end, redactor, conversation)
        try:
            output, _ = await _redacted(run, redactor, end)
        except _Ended as exc:
            err = self._error(session, exc)
            err.exit_status, err.stderr_tail = exc.exit_status, exc.stderr_tail  # type: ignore[attr-defined]
            raise err from None
        if session.failure is not None:  # a refused call the program got past: the turn failed
            raise self._error(session, session.failure)
        return output.rstrip("\n")  # print's line end is no part of the message

    # -- evalkit's own tool loop -----------------------------------------------------------

    async def _tool_loop(self, session: SampleSession, messages: Any, seed: int) -> tuple[str, str]:
        if self.executor is not None:
            return await self._remote_tool_loop(session, messages, seed)
        convo = [dict(m) for m in messages]
        tools = list(self.config.tools) or None
        stop = list(self.config.stop) or None
        last: Completion | None = None
        for turn in range(1, self.unit.max_turns + 1):
            last = await session.model_call(
                messages=convo, tools=tools, temperature=self.config.temperature, seed=seed, stop=stop
            )
            if not last.tool_calls:
                return last.text, "final"
            calls = openai_tool_calls(last.tool_calls, f"call_{turn}_")
            convo.append({"role": "assistant", "content": last.text or None, "tool_calls": calls})
            for call, tc in zip(calls, last.tool_calls, strict=True):
                answer = session.tool(str(tc.get("name")), tc.get("arguments"), call["id"])
                convo.append({"role": "tool", "tool_call_id": call["id"], "content": answer.content})
        assert last is not None
        return last.text, "max_turns"

    async def _remote_tool_loop(self, session: SampleSession, messages: Any, seed: int) -> tuple[str, str]:
        """`_tool_loop` as a Ray task (`evalkit.running.executors.run_model_calls`): the same
        loop on a node, each of its model and tool calls served here by the proxy under
        the sample's token, so the session records them as the local loop's; the output
        is the last answer's text, as the local loop's."""
        assert self.proxy is not None
        ep = self.proxy.open(session)
        params: dict[str, Any] = {"model": self.config.generator.model}
        for name, value in (
            ("tools", list(self.config.tools) or None),
            ("temperature", self.config.temperature),
            ("seed", seed),
            ("stop", list(self.config.stop) or None),
        ):
            if value is not None:
                params[name] = value
        spec = {
            "kind": "agent",
            "base_url": ep.base_url.replace(self.proxy.root, f"http://{self.executor.proxy_connect}:{self.proxy.port}"),
            "api_key": ep.api_key,
            "tools_url": ep.tools_url.replace(
                self.proxy.root, f"http://{self.executor.proxy_connect}:{self.proxy.port}"
            ),
            "messages": [dict(m) for m in messages],
            "params": params,
            "max_turns": self.unit.max_turns,
            "timeout_s": self.unit.timeout_s,
        }
        try:
            got = await self.executor.run(
                spec, self.unit.resources, lambda: self._must_stop(session, float("inf")), POLL_S, calls=True
            )
        finally:
            await self.proxy.close(ep.token, "its tool loop ended")
        if "failed" in got:  # the task died with its node or worker: errored, and run once more
            lost = _Ended(str(got["failed"]))
            lost.requeue = True  # type: ignore[attr-defined]
            raise lost
        if got.get("why"):
            raise _Ended(f"the tool loop was stopped: {got['why']}")
        if got.get("error"):
            raise _Ended(f"the tool loop on its node failed: {got['error']}")
        last = session.last
        if last is None:
            raise _Ended("the tool loop on its node made no model call")
        return last.text, str(got["stop"])

    # -- the user's program or function ------------------------------------------------------

    def _payload(
        self, case: Case, arm: Arm, index: int, seed: int, ep: SampleEndpoint, conversation: Any = None
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "id": case.id,
            "input": case.input,
            "arm": arm.name,
            "index": index,
            "seed": seed,
            "model": self.config.generator.model,
            "max_tokens": self.config.max_tokens_out,
            "temperature": self.config.temperature,
            "tools_url": ep.tools_url,
        }
        if arm.skill_dir:
            payload["skill_dir"] = str((Path(self.suite.path) / arm.skill_dir).resolve())
        if arm.guidance:
            payload["guidance"] = arm.guidance
        if self.config.tools:
            payload["tools"] = list(self.config.tools)
        if conversation is not None:  # a conversation's turn: the turns so far, the user's last
            payload["conversation"] = conversation
        # a copy of its own (input, fixtures, tools): what a python unit changes in it
        # never reaches another sample, nor the case the graders read
        copied: dict[str, Any] = json.loads(json.dumps(payload))
        return copied

    async def _program(
        self,
        session: SampleSession,
        case: Case,
        arm: Arm,
        index: int,
        seed: int,
        end: dict[str, Any],
        redactor: Redactor,
        conversation: Any = None,
    ) -> tuple[str, str]:
        assert self.proxy is not None
        ep = self.proxy.open(session)
        redactor.add("the sample's proxy token", ep.api_key)
        workdir, keep = self._workdir(case, arm, index)
        # a case with an exit_code check grades a command's non-zero exit instead of
        # erroring the sample (its output is what it wrote before it exited)
        graded_exit = self.unit.kind == "command" and any(c.kind == "exit_code" for c in case.checks)
        try:
            payload = self._payload(case, arm, index, seed, ep, conversation)
            if keep:
                end["workdir"] = workdir_relpath(case.id, arm.name, index)
            out, status, stderr_tail = await self._process(session, payload, ep, workdir, end, graded_exit)
            if self.unit.kind == "command":
                return self._command_output(out, workdir, end)
            return self._python_output(out, status, stderr_tail, end)
        finally:
            await self.proxy.close(ep.token, "its program ended")
            if not keep:  # off the event loop: a workdir of many files takes seconds to remove
                await asyncio.to_thread(shutil.rmtree, workdir, ignore_errors=True)

    def _workdir(self, case: Case, arm: Arm, index: int) -> tuple[Path, bool]:
        """A fresh working directory for the sample, and whether it is kept (in the run
        folder, `unit.keep_workdir`, or when the case has a `file_exists` check that
        grading reads it for) or discarded when the sample ends."""
        if self.unit.keep_workdir or any(c.kind == "file_exists" for c in case.checks):
            path = self.run_path / workdir_relpath(case.id, arm.name, index)
            if path.exists():  # a resumed sample starts afresh
                shutil.rmtree(path)
            path.mkdir(parents=True)
            if self.unit.isolation == "sandbox":
                own_workdir(path)
            return path.resolve(), True
        path = Path(tempfile.mkdtemp(prefix="evalkit-work-")).resolve()
        if self.unit.isolation == "sandbox":
            own_workdir(path)
        return path, False

    def _command_output(self, out: bytes, workdir: Path, end: dict[str, Any]) -> tuple[str, str]:
        """The program's output: what it wrote to ``$EVALKIT_OUTPUT_FILE`` when it did
        (its stdout then kept as a log, `stdout_tail`), else its stdout."""
        path = workdir / OUTPUT_FILE
        if path.is_file() and not path.is_symlink():
            if path.stat().st_size > MAX_OUTPUT_BYTES:
                raise _Ended(f"its output file passed {MAX_OUTPUT_BYTES} bytes", 0, str(end.get("stderr_tail") or ""))
            end["stdout_tail"] = _decode(out[-STDERR_TAIL_BYTES:])
            return _decode(path.read_bytes()), f"exit {end.get('exit_status', 0)}"
        return _decode(out), f"exit {end.get('exit_status', 0)}"

    def _python_output(self, out: bytes, status: int, stderr_tail: str, end: dict[str, Any]) -> tuple[str, str]:
        """The worker's one JSON line (`evalkit.calls._pyworker`), as the function's output."""
        lines = _decode(out).strip().splitlines()
        try:
            said = json.loads(lines[-1]) if lines else None
        except json.JSONDecodeError:
            said = None
        if not isinstance(said, dict):
            why = f"the function's worker ended without a result ({_exit_text(status)})"
            raise _Ended(why, status, stderr_tail)
        if "raised" in said:
            tb = str(said.get("traceback") or "")[-STDERR_TAIL_BYTES:]
            end["stderr_tail"] = tb
            raise _Ended(f"the function raised {said['raised']}: {said.get('message')}", None, tb)
        if "returned" in said:
            raise _Ended(f"the function returned {said['returned']}, not the output string", None, stderr_tail)
        if "import_error" in said:
            raise _Ended(f"the function could not be imported: {said['import_error']}", None, stderr_tail)
        return str(said.get("output", "")), "returned"

    def _must_stop(self, session: SampleSession, deadline: float) -> str | None:
        """Why a program in flight must be stopped now, else None."""
        if session.failure is not None:
            return f"call {session.failed_call} failed: {session.failure}"
        stopped = self.should_stop()
        if stopped:
            return f"the run stopped ({stopped})"
        if time.monotonic() > deadline:
            return f"timed out after {self.unit.timeout_s:g}s"
        return None

    def _spawn_argv(self, workdir: Path) -> list[str]:
        """The command line of one sample's process: the unit's (or its worker's) argv,
        inside its sandbox unless the unit says ``"isolation": "none"``."""
        argv = list(self.target or self._argv())
        if self.unit.isolation != "sandbox":
            return [str(WORKER) if a == WORKER_INSIDE else a for a in argv]
        assert self._socket is not None and self.proxy is not None
        jail = Jail(
            workdir,
            self._socket,
            self.proxy.port,
            self._hidden,
            self._read_only,
            self._secrets,
            self.unit.limits,
            self._strict,
            self.config.concurrency,
        )
        return bwrap_argv(jail, argv)

    async def _process(
        self,
        session: SampleSession,
        payload: dict[str, Any],
        ep: SampleEndpoint,
        workdir: Path,
        end: dict[str, Any],
        graded_exit: bool = False,
    ) -> tuple[bytes, int, str]:
        """Run one sample's process to its end: its stdout, exit status and stderr tail;
        `_Ended` for a kill, or for a non-zero exit unless `graded_exit` (an `exit_code`
        check grades the status)."""
        if self.executor is not None:
            return await self._remote_process(session, payload, ep, workdir, end)
        deadline = time.monotonic() + self.unit.timeout_s
        proc = await self._start_process(workdir, ep)
        pipes = _Pipes(proc, payload)
        try:
            why = await self._watch(proc, pipes, session, deadline)
            status = await _reap(proc, pipes, killed=why is not None)
        finally:
            if proc.returncode is None:  # cancelled: never leave the program running
                _kill_group(proc.pid)
            pipes.cancel()
        stderr_tail = _decode(bytes(pipes.tail))
        end.update(exit_status=status, stderr_tail=stderr_tail)
        self._check_ending(why, pipes, status, stderr_tail, graded_exit)
        return bytes(pipes.out), status, stderr_tail

    async def _start_process(self, workdir: Path, ep: SampleEndpoint) -> asyncio.subprocess.Process:
        """Start one sample's process (`_spawn_argv`) in `workdir`, in a process group of
        its own, its environment `child_env`; `_Ended` when it cannot start."""
        argv = self._spawn_argv(workdir)
        try:
            return await asyncio.create_subprocess_exec(
                *argv,
                cwd=str(workdir),
                env=child_env(self.config, ep, workdir),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # its own process group: a kill takes its children too
            )
        except OSError as exc:
            raise _Ended(f"could not start {argv[0]!r}: {exc.strerror or exc}") from None

    async def _watch(
        self, proc: asyncio.subprocess.Process, pipes: _Pipes, session: SampleSession, deadline: float
    ) -> str | None:
        """Wait for the process to exit, asking every `POLL_S` whether it must be stopped
        (too much stdout, a failed call, the run's stop, its timeout): then its group is
        killed and why is returned; None when it exited by itself."""
        # `returncode` is set at its exit; `wait()` (Python 3.11) only returns once its
        # pipes are closed too, which what it left running may keep open.
        while proc.returncode is None and not pipes.waiter.done():
            await asyncio.wait({pipes.waiter}, timeout=POLL_S)
            if proc.returncode is not None or pipes.waiter.done():
                return None
            too_long = f"its stdout passed {MAX_OUTPUT_BYTES} bytes" if pipes.too_long else None
            why = too_long or self._must_stop(session, deadline)
            if why is not None:
                _kill_group(proc.pid)
                return why
        return None

    def _check_ending(self, why: str | None, pipes: _Pipes, status: int, stderr_tail: str, graded_exit: bool) -> None:
        """`_Ended` for a process that did not end well: killed (`why`), too much stdout,
        a limit its sandbox's forwarder named, a non-zero exit (unless `graded_exit`)."""
        if why is None and pipes.too_long:
            why = f"its stdout passed {MAX_OUTPUT_BYTES} bytes"
        what = "program" if self.unit.kind == "command" else "function's worker"
        if why is not None:
            raise _Ended(f"{why}; the {what} was killed", status, stderr_tail)
        if pipes.said:
            raise _Ended(f"the {what} {pipes.said[0]}", status, stderr_tail)
        if status != 0 and not (graded_exit and status > 0):
            raise _Ended(self._exit_why(status, stderr_tail), status, stderr_tail)

    def _exit_why(self, status: int, stderr_tail: str) -> str:
        """Why a sample's program failed: its exit status, and the per-sample limit it hit
        when it says so (`evalkit.calls.sandbox.limit_hit`)."""
        what = "program" if self.unit.kind == "command" else "function's worker"
        hit = limit_hit(status, stderr_tail, self.unit.limits) if self.unit.isolation == "sandbox" else None
        return f"the {what} exited with {_exit_text(status)}" + (f": {hit}" if hit else "")

    async def _remote_process(
        self, session: SampleSession, payload: dict[str, Any], ep: SampleEndpoint, workdir: Path, end: dict[str, Any]
    ) -> tuple[bytes, int, str]:
        """`_process` on a Ray node (`evalkit.running.executors`): the same argv, environment and
        case, the program's output file copied back into `workdir`, and the same endings."""
        assert self.proxy is not None
        spec = {
            "argv": list(self.target or self._argv()),
            "sandbox": self.unit.isolation == "sandbox",
            "hidden": [str(p) for p in self._hidden],
            "strict": [str(p) for p in self._strict],
            "read_only": [str(p) for p in self._read_only],
            "secrets": [str(p) for p in self._secrets],
            "limits": dataclasses.asdict(self.unit.limits),
            "sharing": self.config.concurrency,
            "proxy": (self.executor.proxy_connect, self.proxy.port),
            "proxy_root": self.proxy.root,  # as the environment's URLs say it
            "env": child_env(self.config, ep, workdir),
            "driver_workdir": str(workdir),
            "payload": payload,
            "timeout_s": self.unit.timeout_s,
            "max_output": MAX_OUTPUT_BYTES,
            "tail_bytes": STDERR_TAIL_BYTES,
        }
        got = await self.executor.run(spec, self.unit.resources, lambda: self._must_stop(session, float("inf")), POLL_S)
        what = "program" if self.unit.kind == "command" else "function's worker"
        if "failed" in got:  # the task died with its node or worker: errored, and run once more
            lost = _Ended(str(got["failed"]))
            lost.requeue = True  # type: ignore[attr-defined]
            raise lost
        if "start_error" in got:
            raise _Ended(str(got["start_error"]))
        if got.get("output_file") is not None:
            (workdir / OUTPUT_FILE).write_bytes(got["output_file"])
        status, stderr_tail, out = int(got["status"]), str(got.get("stderr_tail", "")), bytes(got.get("out", b""))
        end.update(exit_status=status, stderr_tail=stderr_tail)
        if got.get("why"):
            raise _Ended(f"{got['why']}; the {what} was killed", status, stderr_tail)
        if limit_said(stderr_tail.encode()):
            raise _Ended(f"the {what} {limit_said(stderr_tail.encode())[0]}", status, stderr_tail)
        if status != 0:
            raise _Ended(self._exit_why(status, stderr_tail), status, stderr_tail)
        return out, status, stderr_tail


class _Pipes:
    """A running process's pipes, served while it runs: the case written to its stdin,
    its stdout kept (`too_long` past `MAX_OUTPUT_BYTES`), the last `STDERR_TAIL_BYTES` of
    its stderr and the lines there in which its sandbox's forwarder names a limit hit
    (`said`); `waiter` waits for its exit."""

    def __init__(self, proc: asyncio.subprocess.Process, payload: dict[str, Any]) -> None:
        self.proc = proc
        self.out = bytearray()
        self.tail = bytearray()
        self.too_long = False
        self.said: list[str] = []
        self.tasks = [asyncio.ensure_future(c) for c in (self._feed(payload), self._read_out(), self._read_err())]
        self.waiter = asyncio.ensure_future(proc.wait())

    async def _feed(self, payload: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.proc.stdin.write(json.dumps(payload, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n")
            await self.proc.stdin.drain()
            self.proc.stdin.close()

    async def _read_out(self) -> None:
        assert self.proc.stdout is not None
        while chunk := await self.proc.stdout.read(65536):
            self.out.extend(chunk)
            if len(self.out) > MAX_OUTPUT_BYTES:
                self.too_long = True
                return

    async def _read_err(self) -> None:
        assert self.proc.stderr is not None
        while chunk := await self.proc.stderr.read(65536):
            self.tail.extend(chunk)
            self.said.extend(limit_said(bytes(self.tail[-len(chunk) - 200 :])))
            del self.tail[:-STDERR_TAIL_BYTES]

    def cancel(self) -> None:
        for t in (*self.tasks, self.waiter):
            t.cancel()


async def _reap(proc: asyncio.subprocess.Process, pipes: _Pipes, killed: bool) -> int:
    """The exit status of a process that exited or was `killed` (reaped at once; its
    pipes may stay open a moment longer). Its readers end at EOF; pipes still open after
    its exit are held by what it left running in its group (which keeps the group's id
    from being reused): that is killed."""
    if killed:
        deadline_kill = time.monotonic() + 5.0
        while proc.returncode is None and time.monotonic() < deadline_kill:
            await asyncio.wait({pipes.waiter}, timeout=POLL_S)
    _, open_pipes = await asyncio.wait(pipes.tasks, timeout=2.0)
    if open_pipes:
        _kill_group(proc.pid)
        await asyncio.wait(open_pipes, timeout=2.0)
    await asyncio.wait({pipes.waiter}, timeout=2.0)
    return proc.returncode if proc.returncode is not None else -signal.SIGKILL


async def _redacted(run: Awaitable[tuple[str, str]], redactor: Redactor, end: dict[str, Any]) -> tuple[str, str]:
    """A program's output and how it stopped, every secret evalkit holds (its own proxy
    token too) redacted from them, from its stderr and stdout tails in `end` and from the
    `_Ended` it may raise."""
    try:
        output, stop = await run
        return redactor.text(output), stop
    except _Ended as exc:
        clean = _Ended(redactor.text(str(exc)), exc.exit_status, redactor.text(exc.stderr_tail))
        clean.requeue = getattr(exc, "requeue", False)  # type: ignore[attr-defined]
        raise clean from None
    finally:
        for name in ("stderr_tail", "stdout_tail"):
            if isinstance(end.get(name), str):
                end[name] = redactor.text(end[name])


def _said_redacted(session: SampleSession, redactor: Redactor, end: dict[str, Any]) -> dict[str, Any]:
    """`end` with ``redacted`` (the secrets found in what the program returned), each
    said on stderr as a finding naming the sample."""
    if redactor.hits:
        end["redacted"] = sorted(redactor.hits)
        what = ", ".join(end["redacted"])
        finding = Finding("warning", f"a secret evalkit holds was in what the program returned, redacted: {what}")
        print(f"evalkit: {session.label}: {finding}", file=sys.stderr, flush=True)
    return end


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _exit_text(status: int) -> str:
    if status < 0:
        try:
            return f"signal {signal.Signals(-status).name} ({-status})"
        except ValueError:
            return f"signal {-status}"
    return f"status {status}"


def _decode(data: bytes) -> str:
    """A program's bytes as text: UTF-8, an undecodable byte as U+FFFD."""
    return data.decode("utf-8", "replace")


__all__ = [
    "AgentRunner",
    "check_callable",
    "check_sandbox",
    "child_env",
    "prepare",
    "program_argv",
    "program_files",
    "tool_names",
    "worker_argv",
]
