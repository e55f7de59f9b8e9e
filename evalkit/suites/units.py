"""What a sample runs, as a suite declares it: the `unit` of `config.json`, the tool
fixtures of a case (`input.tool_results`) and the options of the trajectory checks.

Parsing and validation only (no process is started, no model called): `evalkit.suites.suite`
calls these while it validates a suite, reporting every problem with its file, line and
JSON path; `evalkit.running.agents` and `evalkit.calls.proxy` use `ToolFixtures` to answer tool calls.

``config.json`` -> ``unit`` (absent: the prompt template, as before)::

    {"kind": "prompt"}
    {"kind": "agent", "max_turns": 6}                     # evalkit's own tool loop (chat mode)
    {"kind": "command", "argv": ["{python}", "agent.py"], "timeout_s": 120}
    {"kind": "python", "callable": "my_agent.main:run", "timeout_s": 120}

In `argv`, ``{python}`` is the interpreter evalkit runs on and ``{suite}`` the suite
folder; the program runs in the suite folder. A case's fixtures::

    "input": {"question": "...", "tool_results": {
        "get_weather": [{"arguments": {"city": "Oslo"}, "result": "rain, 12 C"},
                        {"result": "no such city"}],            # no arguments: the default
        "*": {"error": "this tool is not available"}}}          # any other tool

An entry answers a call whose arguments equal its `arguments` (after JSON parsing); an
entry without `arguments` answers any other call of that tool; ``"*"`` answers any tool
with no entry of its own. `result` is any JSON value (text is sent as it is, anything
else as JSON); `error` makes the call a failed one (the model sees the message as the
tool's result, and the trajectory records the error). A call nothing answers is a tool
error too: ``no fixture for tool 'x' with arguments {...}``.

A case may hold state its tools change (tau2-bench's database): ``input.state`` is the
initial state (an object), and an entry's ``sets`` says what a call it answers changes::

    "input": {"state": {"orders": {"4412": {"status": "pending"}}}, "tool_results": {
        "cancel_order": [{"arguments": {"id": "4412"}, "result": "cancelled",
                          "sets": {"orders.4412.status": "cancelled"}}]}}

Each key of ``sets`` is a dotted path of object keys (missing objects on the way are
made); the state after a sample is the initial one with every answered call's ``sets``
applied in the order of the calls. A `state` check compares it with the expected one.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from evalkit.foundations.checks import TRAJECTORY_CHECK_OPTIONS  # noqa: F401 - validated here, defined with the other check kinds
from evalkit.foundations.records import Config, Executor, Json, Limits, Resources, Unit

UNIT_KINDS = ("prompt", "agent", "command", "python")
AGENT_KINDS = ("agent", "command", "python")  # the units with trajectories
SANDBOX_KEYS = ("isolation", "keep_workdir", "read_only_paths", "env", "limits")  # evalkit.calls.sandbox
ISOLATIONS = ("sandbox", "none")
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
UNIT_KEYS = {
    "prompt": {"kind", "resources"},  # resources: what a sample's Ray task holds (evalkit.running.executors)
    "agent": {"kind", "max_turns", "resources"},
    "command": {"kind", "argv", "timeout_s", "resources", *SANDBOX_KEYS},
    "python": {"kind", "callable", "timeout_s", "resources", *SANDBOX_KEYS},
}
RESOURCE_KEYS = ("num_cpus", "memory", "custom")  # unit.resources (evalkit.running.executors)
EXECUTOR_KINDS = ("local", "ray")
EXECUTOR_KEYS = ("kind", "address", "proxy_host")
MAX_TURNS = 1_000
MAX_UNIT_TIMEOUT_S = 86_400.0
FIXTURES_KEY = "tool_results"  # in a case's input object
STATE_KEY = "state"  # in a case's input object: its initial state, what fixtures' `sets` change
SETS_KEY = "sets"  # in a fixture entry: {"dotted.path": value, ...}
ANY_TOOL = "*"
CALLABLE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")
TOOL_CALL_MODES = ("exact", "any_order", "subset", "subset_any_order")


class Reader(Protocol):
    """What validation needs of `evalkit.suites.suite`'s reader: report a problem at a JSON path."""

    def err(self, jp: str, msg: str) -> None: ...

    def warn(self, jp: str, msg: str, strict_error: bool = False) -> None: ...


def parse_unit(r: Reader, raw: Any, mode: str, jp: str = "$.unit") -> Unit | None:
    """The `unit` of a config (`raw`: its JSON value, None when absent), or None after
    reporting what is wrong with it. `jp`: where it is (an arm's `unit` is its own)."""
    if raw is None:
        return Unit()
    if isinstance(raw, str):
        raw = {"kind": raw}
    if not isinstance(raw, dict):
        r.err(jp, 'unit must be an object {"kind": "prompt" | "agent" | "command" | "python", ...}')
        return None
    kind = raw.get("kind")
    if kind not in UNIT_KINDS:
        r.err(f"{jp}.kind", f"unit kind must be one of {', '.join(UNIT_KINDS)}, got {json.dumps(kind)}")
        return None
    for key in raw:
        if key not in UNIT_KEYS[kind] and not str(key).startswith("//"):
            r.warn(f"{jp}.{key}", f"unknown key {key!r} for a {kind} unit (ignored)", strict_error=True)
    ok = True
    max_turns, argv, timeout_s, target = 8, (), 300.0, None
    if kind == "agent":
        if mode != "chat":
            r.err(f"{jp}.kind", 'an agent unit runs evalkit\'s tool loop in chat mode: set "mode": "chat"')
            ok = False
        v = raw.get("max_turns", 8)
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_TURNS:
            r.err(f"{jp}.max_turns", f"max_turns must be an integer from 1 to {MAX_TURNS}, got {json.dumps(v)}")
            ok = False
        else:
            max_turns = v
    if kind in ("command", "python"):
        v = raw.get("timeout_s", 300.0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= MAX_UNIT_TIMEOUT_S:
            r.err(f"{jp}.timeout_s", f"timeout_s must be a number of seconds in (0, {MAX_UNIT_TIMEOUT_S:g}]")
            ok = False
        else:
            timeout_s = float(v)
    if kind == "command":
        v = raw.get("argv")
        if not isinstance(v, list) or not v or not all(isinstance(x, str) and x for x in v):
            r.err(f"{jp}.argv", 'a command unit needs "argv": a non-empty list of non-empty strings')
            ok = False
        else:
            argv = tuple(v)
    if kind == "python":
        v = raw.get("callable")
        if not isinstance(v, str) or not CALLABLE_RE.fullmatch(v):
            r.err(f"{jp}.callable", f'a python unit needs "callable": "pkg.module:function", got {json.dumps(v)}')
            ok = False
        else:
            target = v
    box: dict[str, Any] | None = {}
    if kind in ("prompt", "agent"):
        res = parse_resources(r, raw.get("resources"), f"{jp}.resources")
        ok = ok and res is not None
        box = {"resources": res} if res is not None else None
    if kind in ("command", "python"):
        box = _parse_sandbox(r, raw, jp)
        ok = ok and box is not None
        res = parse_resources(r, raw.get("resources"), f"{jp}.resources")
        ok = ok and res is not None
        if box is not None and res is not None:
            box["resources"] = res
    if not ok:
        return None
    return Unit(kind=kind, max_turns=max_turns, argv=argv, timeout_s=timeout_s, callable=target, **(box or {}))


def _parse_sandbox(r: Reader, raw: dict[str, Any], jp: str) -> dict[str, Any] | None:
    """The sandbox keys of a command or python unit (`evalkit.calls.sandbox`), or None after
    reporting what is wrong. Whether a path exists is checked when the run starts
    (`evalkit.running.agents.prepare`), where the suite folder is known."""
    ok = True
    iso = raw.get("isolation", "sandbox")
    if iso not in ISOLATIONS:
        r.err(f"{jp}.isolation", f"isolation must be one of {', '.join(ISOLATIONS)}, got {json.dumps(iso)}")
        ok = False
    keep = raw.get("keep_workdir", False)
    if not isinstance(keep, bool):
        r.err(f"{jp}.keep_workdir", f"keep_workdir must be true or false, got {json.dumps(keep)}")
        ok = False
    paths = raw.get("read_only_paths", [])
    if not isinstance(paths, list) or not all(isinstance(p, str) and p for p in paths):
        r.err(
            f"{jp}.read_only_paths",
            "read_only_paths must be a list of paths (absolute, or relative to the suite folder)",
        )
        ok = False
    else:
        for i, p in enumerate(paths):
            if not p.startswith("/") and ".." in p.replace("\\", "/").split("/"):
                r.err(
                    f"{jp}.read_only_paths[{i}]", f"{p!r}: a relative path must stay inside the suite folder (no '..')"
                )
                ok = False
    names = raw.get("env", [])
    if not isinstance(names, list) or not all(isinstance(n, str) and ENV_NAME_RE.fullmatch(n) for n in names):
        r.err(f"{jp}.env", "env must be a list of environment variable names (passed from evalkit's environment)")
        ok = False
    limits = parse_limits(r, raw.get("limits"), f"{jp}.limits")
    if not ok or limits is None:
        return None
    return {
        "isolation": iso,
        "keep_workdir": keep,
        "read_only_paths": tuple(paths),
        "env": tuple(names),
        "limits": limits,
    }


def parse_limits(r: Reader, raw: Any, jp: str) -> Limits | None:
    """`unit.limits` (None when absent: `Limits`' defaults), or None after reporting what
    is wrong: an object of positive whole numbers named as `Limits`' fields."""
    if raw is None:
        return Limits()
    names = [f.name for f in dataclasses.fields(Limits)]
    if not isinstance(raw, dict):
        r.err(jp, f"limits must be an object of whole numbers: {', '.join(names)}")
        return None
    ok = True
    for key, v in raw.items():
        if str(key).startswith("//"):
            continue
        if key not in names:
            r.err(f"{jp}.{key}", f"unknown limit {key!r} (one of {', '.join(names)})")
            ok = False
        elif isinstance(v, bool) or not isinstance(v, int) or not 0 < v < 2**62:
            r.err(f"{jp}.{key}", f"{key} must be a whole number above 0, got {json.dumps(v)}")
            ok = False
    if not ok:
        return None
    return Limits(**{k: v for k, v in raw.items() if k in names})


def parse_resources(r: Reader, raw: Any, jp: str) -> Resources | None:
    """`unit.resources` (None when absent: one CPU), or None after reporting what is
    wrong: ``{"num_cpus": 1, "memory": BYTES, "custom": {"NAME": AMOUNT}}``, what each
    sample's Ray task asks of a node (`evalkit.running.executors`)."""
    if raw is None:
        return Resources()
    if not isinstance(raw, dict):
        r.err(jp, 'resources must be an object {"num_cpus": 1, "memory": BYTES, "custom": {"NAME": AMOUNT}}')
        return None
    ok = True
    for key in raw:
        if key not in RESOURCE_KEYS and not str(key).startswith("//"):
            r.err(f"{jp}.{key}", f"unknown key {key!r} in resources (one of {', '.join(RESOURCE_KEYS)})")
            ok = False

    def amount(v: Any) -> bool:
        return not isinstance(v, bool) and isinstance(v, (int, float)) and 0 <= v < 1e12

    cpus = raw.get("num_cpus", 1)
    if not amount(cpus):
        r.err(f"{jp}.num_cpus", f"num_cpus must be a number of CPUs, 0 or more, got {json.dumps(cpus)}")
        ok = False
    memory = raw.get("memory")
    if memory is not None and (not amount(memory) or not isinstance(memory, int)):
        r.err(f"{jp}.memory", f"memory must be a whole number of bytes, got {json.dumps(memory)}")
        ok = False
    custom = raw.get("custom", {})
    if not isinstance(custom, dict):
        r.err(f"{jp}.custom", 'custom must be an object {"NAME": AMOUNT} of the resources a node declares')
        ok = False
        custom = {}
    for name, v in custom.items():
        if name in ("CPU", "GPU", "memory", "object_store_memory") or not amount(v):
            r.err(f"{jp}.custom.{name}", f"custom resource {name!r} must be a name of its own with an amount >= 0")
            ok = False
    if not ok:
        return None
    return Resources(
        num_cpus=float(cpus),
        memory=memory,
        custom=tuple(sorted((str(k), float(v)) for k, v in custom.items())),
    )


def parse_executor(r: Reader, raw: Any, jp: str = "$.executor") -> Executor | None:
    """`executor` of a config (None when absent: local), or None after reporting what is
    wrong: ``{"kind": "ray", "address": "auto" | "HOST:PORT" | "ray://..." | null}``."""
    if raw is None:
        return Executor()
    if not isinstance(raw, dict):
        r.err(jp, 'executor must be an object {"kind": "local" | "ray", "address": ...}')
        return None
    ok = True
    for key in raw:
        if key not in EXECUTOR_KEYS and not str(key).startswith("//"):
            r.err(f"{jp}.{key}", f"unknown key {key!r} in executor (one of {', '.join(EXECUTOR_KEYS)})")
            ok = False
    kind = raw.get("kind", "local")
    if kind not in EXECUTOR_KINDS:
        r.err(f"{jp}.kind", f"executor kind must be one of {', '.join(EXECUTOR_KINDS)}, got {json.dumps(kind)}")
        return None
    address = raw.get("address")
    if address is not None and (not isinstance(address, str) or not address.strip()):
        shape = '"auto", "HOST:PORT", "ray://HOST:PORT" or null'
        r.err(f"{jp}.address", f"address must be {shape}, got {json.dumps(address)}")
        ok = False
    elif address is not None and kind == "local":
        r.err(f"{jp}.address", 'an address needs "kind": "ray"')
        ok = False
    proxy_host = raw.get("proxy_host")
    if proxy_host is not None and (not isinstance(proxy_host, str) or not proxy_host.strip() or kind == "local"):
        r.err(
            f"{jp}.proxy_host",
            f'proxy_host must be a host the nodes reach the driver at, with "kind": "ray", '
            f"got {json.dumps(proxy_host)}",
        )
        ok = False
    if not ok:
        return None
    return Executor(kind=kind, address=address, proxy_host=proxy_host)


# --------------------------------------------------------------------------- fixtures


def tool_names(config: Config) -> tuple[str, ...] | None:
    """The names of the suite's declared tools (OpenAI tool objects), or None."""
    names = []
    for t in config.tools:
        fn = t.get("function") if isinstance(t.get("function"), dict) else t
        if isinstance(fn.get("name"), str):
            names.append(fn["name"])
    return tuple(names) or None


def canonical_arguments(args: Any) -> Any:
    """Tool-call arguments as compared: a JSON string is parsed (an empty one is {}), a
    string that is not JSON stays a string."""
    if isinstance(args, str):
        try:
            return json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return args
    return {} if args is None else args


@dataclass(frozen=True)
class ToolAnswer:
    """What a tool call got: `content` (what the model sees), and `error` (why it failed,
    None when it did not); `source` says where the answer came from (`fixture`,
    `default`, `any-tool default`, `no fixture`, `unknown tool`); `sets`, what the call
    changed in the case's state (its fixture's `sets`), None when nothing."""

    content: str
    error: str | None
    source: str
    sets: Mapping[str, Any] | None = None


def _as_text(value: Json) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def set_path(state: dict[str, Any], path: str, value: Any) -> None:
    """Set the dotted `path` (`orders.4412.status`: object keys) of `state` to a copy of
    `value`, making the objects missing on the way; `ValueError` naming the step when
    one on the way is not an object."""
    *parents, last = path.split(".")
    here = state
    for i, key in enumerate(parents):
        here = here.setdefault(key, {})
        if not isinstance(here, dict):
            raise ValueError(f"state path {path!r}: {'.'.join(parents[: i + 1])!r} is not an object")
    here[last] = copy.deepcopy(value)


def applied(state: Mapping[str, Any] | None, sets: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `state` (None: {}) with a fixture's `sets` applied in their order."""
    out = copy.deepcopy(dict(state or {}))
    for path, value in sets.items():
        set_path(out, path, value)
    return out


class ToolFixtures:
    """The tool results of one case (`input.tool_results`): no real side effect, ever.
    Its `state` (a copy of `input.state`, None when the case has none) is what the calls
    answered so far changed: each fixture's `sets`, in the order of the calls."""

    def __init__(
        self,
        fixtures: Mapping[str, Any] | None,
        declared: tuple[str, ...] | None = None,
        state: Mapping[str, Any] | None = None,
    ) -> None:
        self._fixtures = fixtures
        self._by_tool: dict[str, list[dict[str, Any]]] = {}
        for name, entries in (fixtures or {}).items():
            self._by_tool[str(name)] = list(entries) if isinstance(entries, list) else [entries]
        self._declared = set(declared) if declared else None
        self._initial = copy.deepcopy(dict(state)) if isinstance(state, Mapping) else None
        self.state: dict[str, Any] | None = copy.deepcopy(self._initial)

    @classmethod
    def of_case(cls, case_input: Any, declared: tuple[str, ...] | None = None) -> ToolFixtures:
        fx = case_input.get(FIXTURES_KEY) if isinstance(case_input, dict) else None
        state = case_input.get(STATE_KEY) if isinstance(case_input, dict) else None
        return cls(fx if isinstance(fx, dict) else None, declared, state if isinstance(state, dict) else None)

    def answer(self, name: str, arguments: Any) -> ToolAnswer:
        """The answer to a call of tool `name` with `arguments` (see the module
        docstring); a fixture's `sets` change `state`."""
        if self._declared is not None and name not in self._declared:
            return ToolAnswer(
                f"error: unknown tool {name!r} (declared: {', '.join(sorted(self._declared))})",
                f"unknown tool {name!r}",
                "unknown tool",
            )
        args = canonical_arguments(arguments)
        chosen, source = self._entry(name, args)
        if chosen is None:
            shown = json.dumps(args, ensure_ascii=False, sort_keys=True) if not isinstance(args, str) else args
            why = f"no fixture for tool {name!r} with arguments {shown}"
            return ToolAnswer(f"error: {why}", why, "no fixture")
        if "error" in chosen:
            return ToolAnswer(f"error: {_as_text(chosen['error'])}", _as_text(chosen["error"]), source)
        sets = chosen.get(SETS_KEY)
        if isinstance(sets, dict) and sets:
            try:
                self.state = applied(self.state, sets)
            except ValueError as exc:  # the fixture's author's mistake, said as the call's error
                return ToolAnswer(f"error: {exc}", str(exc), source)
            return ToolAnswer(_as_text(chosen.get("result")), None, source, sets)
        return ToolAnswer(_as_text(chosen.get("result")), None, source)

    def _entry(self, name: str, args: Any) -> tuple[dict[str, Any] | None, str]:
        """The entry answering a call (its arguments' own, else its tool's default, else
        the any-tool default) and where it came from."""
        entries = self._by_tool.get(name)
        source = "fixture"
        if entries is None:
            entries, source = self._by_tool.get(ANY_TOOL, []), "any-tool default"
        chosen = next((e for e in entries if "arguments" in e and canonical_arguments(e["arguments"]) == args), None)
        if chosen is None:
            chosen = next((e for e in entries if "arguments" not in e), None)
            source = "default" if source == "fixture" else source
        return chosen, source

    def replay(self, calls: Iterable[tuple[str, Any]]) -> tuple[dict[str, Any], list[str]]:
        """The state `calls` ((name, arguments), in order) produce from the case's initial
        state, answered as a sample's are (tau2-bench replays its gold actions so), and
        why each call that failed failed (no fixture matched it, its fixture's error): a
        gold call that changed nothing would make "nothing changed" the expected state."""
        fresh = ToolFixtures(self._fixtures, None, self._initial)
        failed = []
        for name, args in calls:
            got = fresh.answer(name, args)
            if got.error is not None:
                failed.append(got.error)
        return fresh.state or {}, failed


def check_fixtures(r: Reader, case_input: Any, jp: str, label: str) -> bool:
    """Report malformed `input.tool_results` of a case; True when they are usable."""
    if not isinstance(case_input, dict) or FIXTURES_KEY not in case_input:
        return True
    fx = case_input[FIXTURES_KEY]
    where = f"{jp}.{FIXTURES_KEY}"
    if not isinstance(fx, dict):
        r.err(where, label + f"{FIXTURES_KEY} must be an object: tool name -> an entry or a list of entries")
        return False
    ok = True
    for name, entries in fx.items():
        items = entries if isinstance(entries, list) else [entries]
        for i, e in enumerate(items):
            ej = f"{where}.{name}" + (f"[{i}]" if isinstance(entries, list) else "")
            if not isinstance(e, dict):
                r.err(ej, label + 'a tool fixture is an object {"arguments"?, "result" | "error"}')
                ok = False
                continue
            unknown = set(e) - {"arguments", "result", "error", SETS_KEY}
            for key in sorted(unknown):
                r.warn(f"{ej}.{key}", label + f"unknown key {key!r} in a tool fixture (ignored)", strict_error=True)
            if ("result" in e) == ("error" in e):
                r.err(ej, label + 'a tool fixture needs exactly one of "result" or "error"')
                ok = False
            if "arguments" in e and not isinstance(e["arguments"], (dict, str)):
                r.err(f"{ej}.arguments", label + "arguments must be an object (or a JSON string)")
                ok = False
            if SETS_KEY in e:
                ok = _check_sets(r, e, case_input.get(STATE_KEY), f"{ej}.{SETS_KEY}", label) and ok
    return ok


def _check_sets(r: Reader, entry: dict[str, Any], state: Any, jp: str, label: str) -> bool:
    """A fixture entry's `sets`: an object of dotted paths (non-empty keys between the
    dots) to JSON values, on an entry with a `result` (a failed call changes nothing),
    each path settable in the case's `input.state`."""
    sets = entry[SETS_KEY]
    if not isinstance(sets, dict) or not sets:
        r.err(jp, label + 'sets must be a non-empty object {"dotted.path": value} (what the call changes)')
        return False
    if "error" in entry:
        r.err(jp, label + "a fixture with an error changes nothing: sets needs a result")
        return False
    for path in sets:
        if not all(path.split(".")):
            r.err(f"{jp}.{path}", label + f"state path {path!r} needs a name between every two dots")
            return False
    try:
        applied(state if isinstance(state, dict) else None, sets)
    except ValueError as exc:
        r.err(jp, label + f"{exc} in input.{STATE_KEY}")
        return False
    return True


def check_state(r: Reader, case_input: Any, jp: str, label: str) -> bool:
    """A case's `input.state` (its initial state), when present: a JSON object."""
    if isinstance(case_input, dict) and STATE_KEY in case_input and not isinstance(case_input[STATE_KEY], dict):
        r.err(f"{jp}.{STATE_KEY}", label + f"{STATE_KEY} must be an object: the initial state the tools change")
        return False
    return True


def check_trajectory_options(r: Reader, kind: str, opts: dict[str, Any], jp: str) -> bool:
    """Validate the options of a trajectory check (`TRAJECTORY_CHECK_OPTIONS`) or the
    `mode` of a `tool_calls` check; True when usable."""
    ok = True
    if kind == "tool_calls":
        mode = opts.get("mode", "exact")
        if mode not in TOOL_CALL_MODES:
            r.err(f"{jp}.mode", f"mode must be one of {', '.join(TOOL_CALL_MODES)}, got {json.dumps(mode)}")
            ok = False
    elif kind == "forbidden_tools":
        tools, calls = opts.get("tools", []), opts.get("calls", [])
        if not isinstance(tools, list) or not all(isinstance(t, str) and t for t in tools):
            r.err(f"{jp}.tools", "tools must be a list of tool names")
            ok = False
        if not isinstance(calls, list) or not all(
            isinstance(c, dict) and isinstance(c.get("name"), str) and isinstance(c.get("arguments", {}), dict)
            for c in calls
        ):
            r.err(f"{jp}.calls", 'calls must be a list of {"name": str, "arguments": object (a subset to match)}')
            ok = False
        if ok and not tools and not calls:
            r.err(jp, 'a forbidden_tools check needs "tools" (names) or "calls" (name and arguments)')
            ok = False
    elif kind in ("max_turns", "tool_errors"):
        v = opts.get("max", _MISSING if kind == "max_turns" else 0)
        if isinstance(v, bool) or not isinstance(v, int) or v < (1 if kind == "max_turns" else 0):
            least = 1 if kind == "max_turns" else 0
            r.err(f"{jp}.max", f'a {kind} check needs "max": an integer of at least {least}')
            ok = False
    elif kind == "skill_activation":
        for key in ("skill", "preflight"):
            if key in opts and (not isinstance(opts[key], str) or not opts[key]):
                r.err(f"{jp}.{key}", f"{key} must be a non-empty string")
                ok = False
        if "preflight" in opts and isinstance(opts["preflight"], str):
            import regex  # lazy: only for a preflight pattern

            try:
                regex.compile(opts["preflight"], regex.IGNORECASE)
            except regex.error as exc:
                r.err(f"{jp}.preflight", f"regex does not compile: {exc}")
                ok = False
        if "expect" in opts and not isinstance(opts["expect"], bool):
            r.err(f"{jp}.expect", "expect must be true or false")
            ok = False
    return ok


_MISSING = object()
