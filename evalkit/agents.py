"""Agent units: evalkit's own tool loop, the user's agent program, a Python function.

A suite chooses its unit in `config.json` (`evalkit.units`). Each sample of an agent
unit is a `SampleSession` (`evalkit.session`): every model call is metered through the
run's one `ModelClient` under the run's ledger and cache, every tool call is answered
from the case's fixtures, and both are written to the sample's trajectory
(`evalkit.trajectories`) as they happen.

* ``agent``: evalkit's tool loop in chat mode. The rendered messages (system and user
  templates; an arm's skill is ``${skill}``, its guidance ``${guidance}``) and the
  suite's `tools` go to the model; each tool call in its answer is answered from the
  fixtures and sent back as a ``tool`` message; the loop ends at an answer with no tool
  call (`stop` ``final``), after `max_turns` model calls (``max_turns``: graded as a
  failure), or when a call is refused (the cap: the sample is errored).
* ``command``: the user's own agent, any language. Per sample evalkit runs `argv` in the
  suite folder, in a session of its own, with the case as JSON on stdin (`id`, `input`,
  `arm`, `index`, `seed`, `model`, `max_tokens`, `temperature`, `tools_url`, and
  `skill_dir` (absolute), `guidance`, `tools` when set) and `OPENAI_BASE_URL`,
  `OPENAI_API_KEY` (also `OPENAI_API_BASE`, `EVALKIT_BASE_URL`, `EVALKIT_API_KEY`),
  `EVALKIT_TOOLS_URL` and `EVALKIT_MODEL` pointing at the metering proxy
  (`evalkit.proxy`); the generator's and judge's key variables and every other
  ``*_API_KEY`` are removed from its environment. Its stdout (at most
  `MAX_OUTPUT_BYTES`) is the output; the exit status, the last `STDERR_TAIL_BYTES` of
  stderr and the duration are recorded. A non-zero exit,
  a timeout (`timeout_s`, the whole sample) or a refused or failed model call errors the
  sample, and the program's whole process group is killed at once (so is every sample
  in flight when the run stops).
* ``python``: the same contract in process: ``fn(case, client)`` gets the same dict (a
  copy of its own: what it changes reaches no other sample) and
  an `openai.OpenAI` client (an `AsyncOpenAI` one for an ``async def``) bound to the
  proxy, and returns the output string. Its module is loaded from its file in the suite
  folder, fresh each run, the folder on `sys.path` while the run lasts. A synchronous
  function runs in a daemon thread; one that outlives its timeout cannot be killed, but
  its sample is over and every later call it makes is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import itertools
import json
import os
import shutil
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from .client import CallStopped, Completion, ModelClient
from .errors import (
    BudgetExhausted,
    CeilingBreached,
    DiskFull,
    InputError,
    InputTooLong,
    ReplayMiss,
    UnitCallError,
)
from .proxy import MeteringProxy, SampleEndpoint, openai_tool_calls
from .records import Arm, Case, Config, Sample, Suite
from .session import SampleSession
from .trajectories import TrajectoryWriter
from .units import ToolFixtures

MAX_OUTPUT_BYTES = 1024 * 1024  # a program's stdout: more is an errored sample
STDERR_TAIL_BYTES = 4096
POLL_S = 0.05  # how often a sample in flight checks whether it must stop
_FAILURES = (BudgetExhausted, CeilingBreached, DiskFull, InputTooLong, ReplayMiss, UnitCallError)
# Known agent-framework telemetry, off in an agent program's environment (whatever
# evalkit's own environment says): a trace exporter posts each sample to a third party,
# with the sample's token, outside the proxy, and takes time the sample is measured by
# (openai-agents' tracing doubled a sample's duration). docs/formats.md lists them.
TELEMETRY_OFF = {
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


def tool_names(config: Config) -> tuple[str, ...] | None:
    """The names of the suite's declared tools (OpenAI tool objects), or None."""
    names = []
    for t in config.tools:
        fn = t.get("function") if isinstance(t.get("function"), dict) else t
        if isinstance(fn.get("name"), str):
            names.append(fn["name"])
    return tuple(names) or None


def program_argv(suite: Suite) -> list[str]:
    """A command unit's argv with ``{python}`` and ``{suite}`` filled in; `InputError`
    (before anything is written) when its program cannot be found."""
    root = str(Path(suite.path).resolve())
    argv = [a.replace("{python}", sys.executable).replace("{suite}", root) for a in suite.config.unit.argv]
    prog = argv[0]
    found = (Path(root) / prog).is_file() if os.sep in prog else shutil.which(prog) is not None
    if not found:
        raise InputError(
            f"the command unit's program {prog!r} was not found "
            + ("in the suite folder" if os.sep in prog else "on PATH"),
            Path(suite.path) / "config.json",
            json_path="$.unit.argv[0]",
        )
    return argv


def program_files(suite: Suite) -> list[Path]:
    """The files inside the suite folder that are the agent program under test, sorted: a
    command unit's argv entries naming a file there (its script, a config it reads), a
    python unit's module file (every ``.py`` of its package). Hashed into a run's inputs,
    so a resume with a changed one is refused (`evalkit.runner.input_hashes`)."""
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


_UNIT_LOADS = itertools.count(1)  # each load of a python unit's module gets a name of its own


def _load_suite_module(root: Path, module_name: str) -> ModuleType | None:
    """`module_name` (``mod`` or ``pkg.mod``) loaded from its file in the suite folder
    `root` under a name of its own, or None when the folder has no such module or
    package. Never an already imported module of that name (another suite's ``agent``),
    and fresh each run, so an edited file is read again; a package's relative imports
    resolve within its own copy."""
    top, _, rest = module_name.partition(".")
    base = root / top
    init = base / "__init__.py"
    unique = f"_evalkit_unit_{next(_UNIT_LOADS)}_{top}"
    spec: importlib.machinery.ModuleSpec | None
    if not rest and base.with_suffix(".py").is_file():
        spec = importlib.util.spec_from_file_location(unique, base.with_suffix(".py"))
    elif init.is_file():
        spec = importlib.util.spec_from_file_location(unique, init, submodule_search_locations=[str(base)])
    elif rest and base.is_dir():  # a namespace package: no code of its own, its folder searched
        spec = importlib.machinery.ModuleSpec(unique, None, is_package=True)
        spec.submodule_search_locations = [str(base)]
    else:
        return None
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[unique] = module  # as an import would: its own dataclasses and submodules find it
    if spec.loader is not None:
        spec.loader.exec_module(module)
    return importlib.import_module(f"{unique}.{rest}") if rest else module


def load_callable(suite: Suite) -> Callable[..., Any]:
    """A python unit's function: its module loaded from the suite folder by file
    (`_load_suite_module`), else (not in the folder: an installed package) imported; with
    the suite folder first on `sys.path` either way. `InputError` when it cannot be
    imported or is not callable."""
    spec = suite.config.unit.callable or ""
    module_name, _, attr = spec.partition(":")
    where = Path(suite.path) / "config.json"
    root = str(Path(suite.path).resolve())
    sys.path.insert(0, root)
    try:
        module = _load_suite_module(Path(root), module_name) or importlib.import_module(module_name)
    except Exception as exc:  # the suite author's code failed to import
        raise InputError(
            f"python unit {spec!r}: cannot import {module_name!r}: {exc!r}", where, json_path="$.unit.callable"
        ) from None
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(root)
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise InputError(
            f"python unit {spec!r}: {module_name} has no function {attr!r}", where, json_path="$.unit.callable"
        )
    found: Callable[..., Any] = fn
    return found


def prepare(suite: Suite) -> Any:
    """Check what an agent unit needs before a run starts (nothing is written yet): a
    command's program, a python unit's function. Returns the function (python) or the
    argv (command), None for other units."""
    kind = suite.config.unit.kind
    if kind == "command":
        return program_argv(suite)
    if kind == "python":
        return load_callable(suite)
    return None


def child_env(config: Config, ep: SampleEndpoint) -> dict[str, str]:
    """The environment of a command unit's process: the proxy in place of the endpoint,
    and no endpoint key in sight: the generator's and judge's key variables and every
    ``*_API_KEY`` (another provider's, which the program could call unmetered) are
    removed; ``OPENAI_API_KEY`` and ``EVALKIT_API_KEY`` are the sample's proxy token.
    Known framework telemetry is off (`TELEMETRY_OFF`)."""
    env = dict(os.environ)
    drop = {"EVALKIT_SERVED", "EVALKIT_JUDGE_BASE_URL", "LOGFIRE_TOKEN", config.generator.api_key_env}
    drop.update(name for name in env if name.upper().endswith("_API_KEY"))
    if config.judge is not None:
        drop.add(config.judge.api_key_env)
    for name in drop:
        env.pop(name, None)
    env.update(TELEMETRY_OFF)
    env.update(
        {
            "OPENAI_BASE_URL": ep.base_url,
            "OPENAI_API_BASE": ep.base_url,
            "OPENAI_API_KEY": ep.api_key,
            "EVALKIT_BASE_URL": ep.base_url,
            "EVALKIT_API_KEY": ep.api_key,
            "EVALKIT_TOOLS_URL": ep.tools_url,
            "EVALKIT_MODEL": config.generator.model,
        }
    )
    return env


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
    ) -> None:
        self.suite = suite
        self.config = suite.config
        self.unit = suite.config.unit
        self.run_path = Path(run_path)
        self.client = client
        self.should_stop = should_stop
        self.on_stop = on_stop
        self.target = target
        self.proxy: MeteringProxy | None = None
        self._declared = tool_names(self.config)
        self._syspath: str | None = None  # the suite folder, on sys.path while a python unit runs

    async def start(self) -> AgentRunner:
        if self.unit.kind in ("command", "python"):
            self.proxy = await MeteringProxy(model=self.config.generator.model).start()
        if self.unit.kind == "python":  # a function's own imports at call time find its siblings
            self._syspath = str(Path(self.suite.path).resolve())
            sys.path.insert(0, self._syspath)
        return self

    async def aclose(self) -> None:
        if self.proxy is not None:
            await self.proxy.aclose()
            self.proxy = None
        if self._syspath is not None:
            with contextlib.suppress(ValueError):
                sys.path.remove(self._syspath)
            self._syspath = None

    async def sample(self, case: Case, arm: Arm, index: int, seed: int, prompt: Any) -> Sample:
        """Run one sample: a `Sample` when it finished, else the exception the runner
        maps (the first refused or failed call's, `CallStopped` when the run stopped, or
        `UnitCallError` for a program that failed), its `attempts` the HTTP requests its
        calls made, so a sample that paid for anything is on `errors.jsonl`."""
        writer = TrajectoryWriter(self.run_path, case.id, arm.name, index)
        session = SampleSession(
            client=self.client,
            key=(case.id, arm.name, index),
            writer=writer,
            fixtures=ToolFixtures.of_case(case.input, self._declared if self.unit.kind == "agent" else None),
            should_stop=self.should_stop,
            on_stop=self.on_stop,
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
                    output, stop = await self._program(session, case, arm, index, seed, end)
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
            self._end(writer, session, end, None)
            raise
        end.update(status="finished", stop=stop)
        self._end(writer, session, end, output)  # written before its results.jsonl line
        last = session.last
        duration_ms = (time.monotonic() - session.started) * 1000
        agent = {
            "unit": self.unit.kind,
            "trajectory": writer.relpath,
            "attempt": writer.attempt,
            "stop": stop,
            "model_calls": session.calls,
            "cached_calls": session.cached_calls,
            "tool_errors": list(session.tool_errors),
            "duration_ms": round(duration_ms, 3),
        }
        if arm.skill_dir:
            agent["skill_dir"] = arm.skill_dir
        for name in ("exit_status", "stderr_tail"):
            if end.get(name) is not None:
                agent[name] = end[name]
        return Sample(
            case_id=case.id,
            tags=case.tags,
            arm=arm.name,
            index=index,
            seed=seed,
            model=last.model if last is not None else self.config.generator.model,
            output=output,
            tool_calls=tuple(session.trace()),
            finish_reason=last.finish_reason if last is not None else None,
            usage=session.usage,
            latency_ms=round(duration_ms, 3),
            cost_usd=session.cost_usd,
            request_hash=session.trajectory_hash(),
            system_fingerprint=last.system_fingerprint if last is not None else None,
            cached=session.calls > 0 and session.cached_calls == session.calls,
            cost_avoided_usd=session.avoided_usd,
            turns=session.calls,
            agent=agent,
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
        for name in ("exit_status", "stderr_tail"):
            if end.get(name) is not None:
                line[name] = end[name]
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
        return err

    # -- evalkit's own tool loop -----------------------------------------------------------

    async def _tool_loop(self, session: SampleSession, messages: Any, seed: int) -> tuple[str, str]:
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

    # -- the user's program or function ------------------------------------------------------

    def _payload(self, case: Case, arm: Arm, index: int, seed: int, ep: SampleEndpoint) -> dict[str, Any]:
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
        # a copy of its own (input, fixtures, tools): what a python unit changes in it
        # never reaches another sample, nor the case the graders read
        copied: dict[str, Any] = json.loads(json.dumps(payload))
        return copied

    async def _program(
        self, session: SampleSession, case: Case, arm: Arm, index: int, seed: int, end: dict[str, Any]
    ) -> tuple[str, str]:
        assert self.proxy is not None
        ep = self.proxy.open(session)
        try:
            payload = self._payload(case, arm, index, seed, ep)
            if self.unit.kind == "command":
                return await self._command(session, payload, ep, end)
            return await self._python(session, payload, ep, end)
        finally:
            await self.proxy.close(ep.token, "its program ended")

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

    async def _command(
        self, session: SampleSession, payload: dict[str, Any], ep: SampleEndpoint, end: dict[str, Any]
    ) -> tuple[str, str]:
        argv = self.target or program_argv(self.suite)
        deadline = time.monotonic() + self.unit.timeout_s
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=str(Path(self.suite.path).resolve()),
                env=child_env(self.config, ep),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # its own process group: a kill takes its children too
            )
        except OSError as exc:
            raise _Ended(f"could not start {argv[0]!r}: {exc.strerror or exc}") from None
        out = bytearray()
        tail = bytearray()
        too_long = False

        async def feed() -> None:
            assert proc.stdin is not None
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                proc.stdin.write(json.dumps(payload, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n")
                await proc.stdin.drain()
                proc.stdin.close()

        async def read_out() -> None:
            nonlocal too_long
            assert proc.stdout is not None
            while chunk := await proc.stdout.read(65536):
                out.extend(chunk)
                if len(out) > MAX_OUTPUT_BYTES:
                    too_long = True
                    return

        async def read_err() -> None:
            assert proc.stderr is not None
            while chunk := await proc.stderr.read(65536):
                tail.extend(chunk)
                del tail[:-STDERR_TAIL_BYTES]

        io = [asyncio.ensure_future(f()) for f in (feed, read_out, read_err)]
        waiter = asyncio.ensure_future(proc.wait())
        why: str | None = None
        try:
            # `returncode` is set at its exit; `wait()` (Python 3.11) only returns once its
            # pipes are closed too, which what it left running may keep open.
            while proc.returncode is None and not waiter.done():
                await asyncio.wait({waiter}, timeout=POLL_S)
                if proc.returncode is not None or waiter.done():
                    break
                why = f"its stdout passed {MAX_OUTPUT_BYTES} bytes" if too_long else self._must_stop(session, deadline)
                if why is not None:
                    _kill_group(proc.pid)
                    break
            if why is not None:  # killed: reaped at once (its pipes may stay open a moment longer)
                deadline_kill = time.monotonic() + 5.0
                while proc.returncode is None and time.monotonic() < deadline_kill:
                    await asyncio.wait({waiter}, timeout=POLL_S)
            # Readers end at EOF. Pipes still open after its exit are held by what it left
            # running in its group (which keeps the group's id from being reused): killed.
            _, open_pipes = await asyncio.wait(io, timeout=2.0)
            if open_pipes:
                _kill_group(proc.pid)
                await asyncio.wait(open_pipes, timeout=2.0)
            await asyncio.wait({waiter}, timeout=2.0)
            status = proc.returncode if proc.returncode is not None else -signal.SIGKILL
        finally:
            if proc.returncode is None:  # cancelled: never leave the program running
                _kill_group(proc.pid)
            for t in (*io, waiter):
                t.cancel()
        stderr_tail = _decode(bytes(tail))
        end.update(exit_status=status, stderr_tail=stderr_tail)
        if why is None and too_long:
            why = f"its stdout passed {MAX_OUTPUT_BYTES} bytes"
        if why is not None:
            raise _Ended(f"{why}; the program was killed", status, stderr_tail)
        if status != 0:
            raise _Ended(f"the program exited with {_exit_text(status)}", status, stderr_tail)
        return _decode(bytes(out)), "exit 0"

    async def _python(
        self, session: SampleSession, payload: dict[str, Any], ep: SampleEndpoint, end: dict[str, Any]
    ) -> tuple[str, str]:
        import openai  # lazy: the SDK loads only when an agent unit calls through it

        fn = self.target or load_callable(self.suite)
        deadline = time.monotonic() + self.unit.timeout_s
        kw: dict[str, Any] = {
            "base_url": ep.base_url,
            "api_key": ep.api_key,
            "max_retries": 0,
            "timeout": self.unit.timeout_s,
        }
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        task: asyncio.Task[Any] | None = None
        if inspect.iscoroutinefunction(fn):

            async def run_async() -> Any:
                async with openai.AsyncOpenAI(**kw) as oc:
                    return await fn(payload, oc)

            task = asyncio.ensure_future(run_async())
            task.add_done_callback(lambda t: _settle_future(done, t))
        else:

            def run_sync() -> None:
                try:
                    with openai.OpenAI(**kw) as oc:
                        value = fn(payload, oc)
                except BaseException as exc:  # reported to the loop, never lost in the thread
                    loop.call_soon_threadsafe(_set_future, done, None, exc)
                else:
                    loop.call_soon_threadsafe(_set_future, done, value, None)

            threading.Thread(target=run_sync, name=f"evalkit-python-unit-{session.label}", daemon=True).start()
        try:
            while not done.done():
                await asyncio.wait({done}, timeout=POLL_S)
                why = None if done.done() else self._must_stop(session, deadline)
                if why is not None:
                    if task is not None:
                        task.cancel()
                    raise _Ended(f"{why}; the function was abandoned")
        finally:
            if task is not None and not task.done():
                task.cancel()
        exc = done.exception()
        if exc is not None:
            if session.failure is not None:
                raise session.failure
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-STDERR_TAIL_BYTES:]
            end["stderr_tail"] = tb
            raise _Ended(f"the function raised {type(exc).__name__}: {exc}", None, tb)
        value = done.result()
        if not isinstance(value, str):
            raise _Ended(f"the function returned {type(value).__name__}, not the output string")
        return value, "returned"


def _set_future(fut: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)


def _settle_future(fut: asyncio.Future[Any], task: asyncio.Task[Any]) -> None:
    if task.cancelled():
        _set_future(fut, None, asyncio.CancelledError())
    else:
        _set_future(fut, task.result() if task.exception() is None else None, task.exception())


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
    "TELEMETRY_OFF",
    "AgentRunner",
    "child_env",
    "load_callable",
    "prepare",
    "program_argv",
    "program_files",
    "tool_names",
]
