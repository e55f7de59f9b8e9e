"""A suite's cases, validated: each case object, its checks and their options, into `Case`
records. Split out of `evalkit.suites.suite`, which re-exports every public name.
"""

from __future__ import annotations

import ast
import difflib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import regex

from evalkit.foundations._jsonschema import jsonschema, remote_refs
from evalkit.foundations.checks import (
    CHECK_KINDS,
    CHECK_OPTIONS,
    TRAJECTORY_CHECK_OPTIONS,
    json_path_steps,
    regex_flags,
)
from evalkit.foundations.errors import InputError
from evalkit.foundations.findings import Findings
from evalkit.foundations.layout import (
    CASES_FILE,
)
from evalkit.foundations.records import (
    NO_GATE,
    SET_NAME,
    Case,
    Check,
    set_gate,
    ungated_set_warning,
)
from evalkit.suites.suite_conversation import check_conversation_input, check_scope, nl_assertions_rubric
from evalkit.suites.suite_source import (
    _ABSENT,
    CASE_KEYS,
    INTENTS,
    MAX_CASES,
    SuiteSource,
    _Reader,
    case_id_problem,
    is_comment_key,
)
from evalkit.suites.units import STATE_KEY, ToolFixtures, check_fixtures, check_state, check_trajectory_options


# --- a check's options ---------------------------------------------------------------
@dataclass(frozen=True)
class _CheckAt:
    """One check being validated: its kind, its options (filled in place where a kind
    takes its value from the case), the reader, its JSON path, its case and the suite."""

    kind: str
    opts: dict[str, Any]
    r: _Reader
    jp: str
    case: dict[str, Any]
    src: SuiteSource


# Options that are true or false, whichever check kind they belong to.
_BOOL_OPTIONS = {"trim", "case_fold", "collapse_whitespace", "expect", "should_refuse", "fullmatch"}


def _check_options(
    kind: str, opts: dict[str, Any], r: _Reader, jp: str, case: dict[str, Any], src: SuiteSource
) -> bool:
    """Validate one check's options by its kind's rule (`_OPTION_RULES`); fill `value`
    from a string `expected` where the kind compares against it. Returns False when the
    check is unusable. A trajectory or tool_calls check's own rule decides alone: a bad
    true/false option of one is reported but leaves it usable, as it always has."""
    ok = True
    for b in _BOOL_OPTIONS & set(opts):
        if not isinstance(opts[b], bool):
            r.err(f"{jp}.{b}", f"{b} must be true or false")
            ok = False
    rule = _OPTION_RULES.get(kind)
    if rule is None:
        return ok
    usable = rule(_CheckAt(kind, opts, r, jp, case, src))
    return usable if kind in _RULES_DECIDING_ALONE else usable and ok


def _text_value(c: _CheckAt) -> bool:
    """exact, contains: a string `value`, taken from a non-empty string `expected` when
    absent (contains: non-empty)."""
    expected = c.case.get("expected")
    if "value" not in c.opts:
        if isinstance(expected, str) and expected != "":
            c.opts["value"] = expected
        else:
            c.r.err(c.jp, f'a {c.kind} check needs a "value" (or a string "expected")')
            return False
    if not isinstance(c.opts["value"], str) or (c.kind == "contains" and c.opts["value"] == ""):
        c.r.err(f"{c.jp}.value", f"{c.kind} value must be a non-empty string")
        return False
    return True


def _regex_options(c: _CheckAt) -> bool:
    """regex: a non-empty `pattern` that compiles with its `flags` (and `case_fold`), and
    a positive `timeout_s`."""
    pattern = c.opts.get("pattern")
    if not isinstance(pattern, str) or pattern == "":
        c.r.err(f"{c.jp}.pattern", 'a regex check needs a non-empty "pattern" string')
        return False
    ok = True
    flags = regex_flags(c.opts.get("flags"))
    if flags is None:
        c.r.err(
            f"{c.jp}.flags",
            f"flags must be letters from 'imsx', a flag name (ignorecase, multiline, "
            f"dotall, verbose) or a list of them, got {json.dumps(c.opts.get('flags'))}",
        )
        flags, ok = 0, False
    timeout_s = c.opts.get("timeout_s")
    if "timeout_s" in c.opts and (
        isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or timeout_s <= 0
    ):
        c.r.err(f"{c.jp}.timeout_s", "timeout_s must be a positive number of seconds")
        ok = False
    if c.opts.get("case_fold"):
        flags |= regex.IGNORECASE
    try:
        regex.compile(pattern, flags)
    except regex.error as exc:
        c.r.err(f"{c.jp}.pattern", f"regex does not compile: {exc}")
        ok = False
    return ok


def _json_schema_options(c: _CheckAt) -> bool:
    """json_schema: a valid JSON Schema `schema`, taken from an object `expected` (not a
    rubric) when absent."""
    expected = c.case.get("expected")
    schema = c.opts.get("schema", expected if isinstance(expected, dict) and "rubric" not in expected else None)
    if not isinstance(schema, (dict, bool)):
        c.r.err(c.jp, 'a json_schema check needs a "schema" object (or an object "expected")')
        return False
    ok = True
    SchemaError, validator_for = jsonschema().SchemaError, jsonschema().validators.validator_for
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        c.r.err(f"{c.jp}.schema", f"not a valid JSON Schema: {exc.message}")
        ok = False
    for jp, ref in remote_refs(schema):
        c.r.err(f"{c.jp}.schema{jp[1:]}", f"{ref!r} points outside the schema: evalkit retrieves no $ref (inline it)")
        ok = False
    c.opts.setdefault("schema", schema)
    return ok


def _json_field_options(c: _CheckAt) -> bool:
    """json_field: a JSON `path` and a `value` (any JSON value)."""
    ok = True
    if json_path_steps(c.opts.get("path")) is None:
        c.r.err(f"{c.jp}.path", 'a json_field check needs a "path" like "$.field", "$.list[0]" or "$[\\"a key\\"]"')
        ok = False
    if "value" not in c.opts:
        c.r.err(c.jp, 'a json_field check needs a "value" (any JSON value; its type is kept)')
        ok = False
    return ok


def _one_process(c: _CheckAt) -> bool:
    """file_exists and exit_code read one process's working directory and exit status: a
    conversation runs its program once per turn (a fresh directory each), so neither has
    one to read there."""
    if c.src.config.get("simulator") is None:
        return True
    c.r.err(f"{c.jp}.kind", f"a {c.kind} check reads one process's run: a conversation runs its program once a turn")
    return False


def _file_exists_options(c: _CheckAt) -> bool:
    """file_exists: a `path` relative to the program's working directory, without '..'."""
    if not _one_process(c):
        return False
    rel = c.opts.get("path")
    if not isinstance(rel, str) or not rel or Path(rel).is_absolute() or ".." in Path(rel).parts:
        c.r.err(f"{c.jp}.path", 'a file_exists check needs a "path" relative to the working directory, without ".."')
        return False
    return True


def _exit_code_options(c: _CheckAt) -> bool:
    """exit_code: a `value` that is an exit status, 0 to 255 (default 0)."""
    if not _one_process(c):
        return False
    code = c.opts.get("value", 0)
    if isinstance(code, bool) or not isinstance(code, int) or not 0 <= code <= 255:
        c.r.err(f"{c.jp}.value", f"an exit_code value must be an exit status from 0 to 255, got {json.dumps(code)}")
        return False
    return True


def _trajectory_options(c: _CheckAt) -> bool:
    """forbidden_tools, max_turns, tool_errors, skill_activation (`units`)."""
    return check_trajectory_options(c.r, c.kind, c.opts, c.jp)


def _tool_calls_options(c: _CheckAt) -> bool:
    """tool_calls: its `mode`, `calls` (taken from a list `expected` when absent) of
    `{"name", "arguments"}`, and `ignore_args` names."""
    ok = check_trajectory_options(c.r, c.kind, c.opts, c.jp)
    expected = c.case.get("expected")
    calls = c.opts.get("calls", expected if isinstance(expected, list) else None)
    if not isinstance(calls, list):
        c.r.err(c.jp, 'a tool_calls check needs "calls" (or a list "expected"): [{"name", "arguments"}]')
        return False
    for i, call in enumerate(calls):
        if (
            not isinstance(call, dict)
            or not isinstance(call.get("name"), str)
            or not isinstance(call.get("arguments", {}), dict)
        ):
            c.r.err(f"{c.jp}.calls[{i}]", 'a tool call must be {"name": str, "arguments": object}')
            ok = False
        elif "compare_args" in call and not _compare_args_ok(call["compare_args"], c.opts.get("mode", "exact")):
            c.r.err(
                f"{c.jp}.calls[{i}].compare_args",
                "compare_args must be a list of argument names, in a mode other than any_order",
            )
            ok = False
    ign = c.opts.get("ignore_args", [])
    if not isinstance(ign, list) or not all(isinstance(x, str) for x in ign):
        c.r.err(f"{c.jp}.ignore_args", "ignore_args must be a list of argument names")
        ok = False
    c.opts.setdefault("calls", calls)
    return ok


def _state_options(c: _CheckAt) -> bool:
    """state: a tool-calling unit, the case's `input.state` (the initial state), and
    `expected` (an object), else the state its `tool_calls` check's calls produce,
    replayed through its fixtures here (`replayed`), as tau2-bench replays its actions."""
    inp = c.case.get("input")
    if not isinstance(inp, dict) or not isinstance(inp.get(STATE_KEY), dict):
        c.r.err(c.jp, f'a state check needs the case\'s "input.{STATE_KEY}": the initial state its tools change')
        return False
    if not _calls_tools(c.src.config):
        c.r.err(c.jp, "a state check reads what tool calls changed: it needs an agent, command or python unit")
        return False
    if "expected" in c.opts:
        if not isinstance(c.opts["expected"], dict):
            c.r.err(f"{c.jp}.expected", "expected must be an object: the state the tools should leave")
            return False
        return True
    calls = _gold_calls(c.case)
    if calls is None:
        c.r.err(c.jp, 'a state check needs "expected" (an object) or a tool_calls check whose calls replay to it')
        return False
    state, failed = ToolFixtures.of_case(inp).replay(calls)
    if failed:
        c.r.err(
            c.jp,
            f"the tool_calls check's calls do not replay through the case's fixtures ({failed[0]}): "
            'give the state check its "expected" state',
        )
        return False
    c.opts.update(expected=state, replayed=True)
    return True


def _calls_tools(cfg: dict[str, Any]) -> bool:
    """Whether a suite's unit (or an arm's own) is one that calls tools."""
    units = [cfg.get("unit"), *(a.get("unit") for a in cfg.get("arms") or () if isinstance(a, dict))]
    kinds = {u.get("kind") if isinstance(u, dict) else u for u in units}
    return bool(kinds & {"agent", "command", "python"})


def _gold_calls(case: dict[str, Any]) -> list[tuple[str, Any]] | None:
    """The calls of the case's first `tool_calls` check (its `calls`, else the case's
    list `expected` or `expected.tool_calls`) as (name, arguments); None without one."""
    expected = case.get("expected")
    for chk in case.get("checks") or ():
        if isinstance(chk, dict) and chk.get("kind") == "tool_calls":
            calls = chk.get("calls", expected.get("tool_calls") if isinstance(expected, dict) else expected)
            if isinstance(calls, list):
                return [(str(x.get("name")), x.get("arguments", {})) for x in calls if isinstance(x, dict)]
    return None


def _assertions_options(c: _CheckAt) -> bool:
    """assertions: a non-empty list of Python expressions, each one that parses (parsed
    here, never run: grading evaluates them in its sandbox)."""
    exprs = c.opts.get("assertions")
    if not isinstance(exprs, list) or not exprs or not all(isinstance(x, str) and x.strip() for x in exprs):
        c.r.err(f"{c.jp}.assertions", "assertions must be a non-empty list of Python expressions")
        return False
    ok = True
    for i, x in enumerate(exprs):
        try:
            ast.parse(x.strip(), mode="eval")
        except SyntaxError as exc:
            c.r.err(f"{c.jp}.assertions[{i}]", f"not a Python expression: {exc.msg}")
            ok = False
    return ok


def _compare_args_ok(keys: Any, mode: Any) -> bool:
    """An expected call's `compare_args`: argument names, in a mode that pairs each
    expected call with the call it matches (not `any_order`)."""
    return isinstance(keys, list) and all(isinstance(k, str) for k in keys) and mode != "any_order"


def _grounding_options(c: _CheckAt) -> bool:
    """grounding: a non-empty `context`, the check's own or the case's."""
    ctx = c.opts.get("context", c.case.get("context"))
    if not isinstance(ctx, str) or not ctx.strip():
        c.r.err(c.jp, 'a grounding check needs the case\'s "context" (the text the output must stay within)')
        return False
    return True


def _refusal_options(c: _CheckAt) -> bool:
    """refusal: `patterns`, a list of regexes that compile (case-insensitive)."""
    pats = c.opts.get("patterns", [])
    if not isinstance(pats, list) or not all(isinstance(x, str) and x for x in pats):
        c.r.err(f"{c.jp}.patterns", "patterns must be a list of regex strings")
        return False
    ok = True
    for i, pat in enumerate(pats):
        try:
            regex.compile(pat, regex.IGNORECASE)
        except regex.error as exc:
            c.r.err(f"{c.jp}.patterns[{i}]", f"regex does not compile: {exc}")
            ok = False
    return ok


def _activation_options(c: _CheckAt) -> bool:
    """activation: a `marker` string or a `tool` name."""
    if not any(isinstance(c.opts.get(k), str) and c.opts.get(k) for k in ("marker", "tool")):
        c.r.err(c.jp, 'an activation check needs a "marker" string or a "tool" name')
        return False
    return True


def _scorer_options(c: _CheckAt) -> bool:
    """scorer: a `file` in the suite's `scorers/` (a bare name resolved as the scorer
    grader resolves it) that parses and defines `function` (default `score`)."""
    rel = c.opts.get("file")
    if isinstance(rel, str) and rel and "/" not in rel and "\\" not in rel:
        rel = f"scorers/{rel if rel.endswith('.py') else rel + '.py'}"  # as the scorer grader resolves it
    if not isinstance(rel, str) or not rel.startswith("scorers/") or ".." in Path(rel).parts or not rel.endswith(".py"):
        c.r.err(f"{c.jp}.file", 'a scorer check needs "file": "scorers/<name>.py" inside the suite')
        return False
    if not c.src.exists(rel):
        c.r.err(f"{c.jp}.file", f"scorer file {rel!r} not found")
        return False
    names = _scorer_functions(c.src, rel)
    if isinstance(names, InputError):  # a FIFO, a symlink out, too large: reported once
        if not any(f.path == names.path and f.message == names.message for f in c.r.fx.errors):
            c.r.fx.add(names)
        return False
    if isinstance(names, SyntaxError):
        c.r.err(f"{c.jp}.file", f"scorer {rel!r} does not parse: {names.msg} (line {names.lineno})")
        return False
    fn = c.opts.get("function", "score")
    if fn not in names:
        c.r.err(f"{c.jp}.function", f"scorer {rel!r} defines no function {fn!r}")
        return False
    return True


def _scorer_functions(src: SuiteSource, rel: str) -> frozenset[str] | SyntaxError | InputError:
    """The top-level function names of a scorer file, or why it cannot be read; parsed,
    never executed (lint must not run suite code), once per suite."""
    if rel not in src.scorer_functions:
        try:
            tree = ast.parse(src.read(rel), filename=rel)
            src.scorer_functions[rel] = frozenset(
                n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            )
        except (SyntaxError, InputError) as exc:
            src.scorer_functions[rel] = exc
    return src.scorer_functions[rel]


# Each check kind's rule for its options; a kind without one has no options to check.
_OPTION_RULES: dict[str, Callable[[_CheckAt], bool]] = {
    "exact": _text_value,
    "contains": _text_value,
    "regex": _regex_options,
    "json_schema": _json_schema_options,
    "json_field": _json_field_options,
    "file_exists": _file_exists_options,
    "exit_code": _exit_code_options,
    **dict.fromkeys(TRAJECTORY_CHECK_OPTIONS, _trajectory_options),
    "tool_calls": _tool_calls_options,
    "grounding": _grounding_options,
    "assertions": _assertions_options,
    "refusal": _refusal_options,
    "activation": _activation_options,
    "scorer": _scorer_options,
    "state": _state_options,
}
# The kinds whose rule alone says whether the check is usable (see `_check_options`).
_RULES_DECIDING_ALONE = {*TRAJECTORY_CHECK_OPTIONS, "tool_calls"}


# --- a case ---------------------------------------------------------------------------
def _validate_case(
    raw: dict[str, Any], file: str, line: int | None, prefix: str, fx: Findings, src: SuiteSource
) -> Case | None:
    """One case object checked key by key, each problem reported with its JSON path
    (`prefix` and the key) and the case's line; the `Case`, or None when it is unusable."""
    r = _Reader(fx, file, lambda jp: line)
    r.unknown_keys(raw, CASE_KEYS, prefix, "case")
    cid = _case_id(r, raw, prefix)
    if cid is None:
        return None
    label = f"case {cid!r}: "
    inp, input_ok = _case_input(r, raw, prefix, label, src)
    tags, tags_ok = _case_tags(r, raw, prefix, label)
    case_set, set_ok = _case_set(r, raw, prefix, label)
    threshold = r.number(raw, "judge_threshold", prefix, integer=True, minimum=1, maximum=5, default=4)
    intent, context, about_ok = _case_intent_context(r, raw, prefix, label)
    expected = raw.get("expected")
    rubric, rubric_ok = _case_rubric(r, expected, prefix, label)
    checks, checks_ok = _case_checks(r, raw, prefix, label, src)
    if not (input_ok and tags_ok and set_ok and about_ok and rubric_ok and checks_ok):
        return None
    if not checks and rubric is None:
        r.err(
            prefix,
            label + 'has neither a check nor a rubric: it could never fail (add "checks", '
            'a string "expected", or "expected": {"rubric": ...})',
        )
        return None
    return Case(
        id=cid,
        input=inp,
        expected=expected,
        tags=tuple(tags),
        set=case_set,
        judge_threshold=int(threshold),
        checks=tuple(checks),
        rubric=rubric,
        intent=intent,
        context=context,
        line=line or 0,
    )


def _case_id(r: _Reader, raw: dict[str, Any], prefix: str) -> str | None:
    """The case's `id`, safe as a folder name (ids become folder names); None after
    reporting why not."""
    cid = raw.get("id", _ABSENT)
    if cid is _ABSENT:
        r.err(prefix + ".id", "missing required key 'id'")
        return None
    problem = case_id_problem(cid)
    if problem:
        r.err(prefix + ".id", f"unsafe case id {cid!r}: {problem} (ids become folder names)")
        return None
    assert isinstance(cid, str)
    return cid


def _case_input(r: _Reader, raw: dict[str, Any], prefix: str, label: str, src: SuiteSource) -> tuple[Any, bool]:
    """The case's `input`: a string, or an object of template variables (each key a
    variable name, its fixtures checked; in a conversation suite its simulated user);
    with whether it is usable."""
    ok = True
    if "input" not in raw:
        r.err(prefix + ".input", label + "missing required key 'input'")
        ok = False
    inp = raw.get("input", "")
    if not isinstance(inp, (str, dict)):
        r.err(prefix + ".input", label + "input must be a string or an object of template variables")
        return inp, False
    if isinstance(inp, dict):
        for key in inp:
            if not re.fullmatch(r"[_a-zA-Z][_a-zA-Z0-9]*", key):
                r.err(prefix + f".input.{key}", label + f"input key {key!r} cannot be a template variable name")
                ok = False
        ok = check_fixtures(r, inp, prefix + ".input", label) and ok
        ok = check_state(r, inp, prefix + ".input", label) and ok
    if src.config.get("simulator") is not None:  # a conversation: the simulated user it meets
        ok = check_conversation_input(r, inp, prefix, label) and ok
    return inp, ok


def _case_tags(r: _Reader, raw: dict[str, Any], prefix: str, label: str) -> tuple[list[str], bool]:
    """The case's `tags`, required: a non-empty list of non-empty strings; ([], False)
    after reporting a problem."""
    tags = raw.get("tags", _ABSENT)
    if tags is _ABSENT:
        r.err(prefix + ".tags", label + "missing required key 'tags' (at least one tag)")
        return [], False
    if not isinstance(tags, list) or not tags or not all(isinstance(t, str) and t.strip() for t in tags):
        r.err(prefix + ".tags", label + "tags must be a non-empty list of non-empty strings")
        return [], False
    return tags, True


def _case_set(r: _Reader, raw: dict[str, Any], prefix: str, label: str) -> tuple[Any, bool]:
    """The case's `set` (default capability): a lowercase name; a set other than
    capability and regression is shown ungated, with a warning."""
    case_set = raw.get("set", "capability")
    if not isinstance(case_set, str) or not SET_NAME.fullmatch(case_set):
        r.err(
            prefix + ".set",
            label + "set must be a lowercase name (capability and regression are gated, any other "
            f'is shown with gate "none"), got {json.dumps(case_set)}',
        )
        return case_set, False
    if set_gate(case_set) == NO_GATE:
        r.warn(prefix + ".set", label + ungated_set_warning(case_set))
    return case_set, True


def _case_intent_context(r: _Reader, raw: dict[str, Any], prefix: str, label: str) -> tuple[Any, Any, bool]:
    """The case's optional `intent` (one of `INTENTS`) and `context` (a string); with
    whether both are usable."""
    ok = True
    intent = raw.get("intent")
    if intent is not None and intent not in INTENTS:
        r.err(prefix + ".intent", label + f"intent must be one of {', '.join(INTENTS)}, got {json.dumps(intent)}")
        ok = False
    context = raw.get("context")
    if context is not None and not isinstance(context, str):
        r.err(prefix + ".context", label + "context must be a string")
        ok = False
    return intent, context, ok


def _case_rubric(r: _Reader, expected: Any, prefix: str, label: str) -> tuple[str | None, bool]:
    """The judge's rubric of `expected.rubric`: a string, or a list of criteria made a
    bulleted list; a conversation's `expected.nl_assertions` (`nl_assertions_rubric`);
    (None, True) when the case has none."""
    if isinstance(expected, dict) and "nl_assertions" in expected:
        return nl_assertions_rubric(r, expected, prefix, label)
    if not isinstance(expected, dict) or "rubric" not in expected:
        return None, True
    rb = expected["rubric"]
    if isinstance(rb, list) and rb and all(isinstance(x, str) and x.strip() for x in rb):
        return "\n".join(f"- {x.strip()}" for x in rb), True
    if isinstance(rb, str) and rb.strip():
        return rb, True
    r.err(prefix + ".expected.rubric", label + "rubric must be a non-empty string or list of criteria")
    return None, False


def _case_checks(
    r: _Reader, raw: dict[str, Any], prefix: str, label: str, src: SuiteSource
) -> tuple[list[Check], bool]:
    """The case's checks: its `checks` list, else the check its `expected` stands for
    (`_implied_check`); with whether all are usable."""
    expected = raw.get("expected")
    if "checks" not in raw:
        if isinstance(expected, str) and not expected.strip():
            r.err(
                prefix + ".expected",
                label + "expected is empty: the default contains check would pass any output; "
                "give checks (e.g. a regex) instead",
            )
            return [], False
        implied = _implied_check(expected, exact=src.seed001_flat)
        if implied is None:
            return [], True
        check = _case_check(r, implied, prefix + ".expected", label, raw, src)
        return ([check], True) if check is not None else ([], False)
    raw_checks, ok = raw["checks"], True
    if not isinstance(raw_checks, list):
        r.err(prefix + ".checks", label + "checks must be a list")
        raw_checks, ok = [], False
    checks: list[Check] = []
    for i, c in enumerate(raw_checks):
        check = _case_check(r, c, prefix + f".checks[{i}]", label, raw, src)
        if check is None:
            ok = False
        else:
            checks.append(check)
    return checks, ok


def _implied_check(expected: Any, *, exact: bool = False) -> dict[str, Any] | None:
    """The check an `expected` stands for in a case without `checks`, graded by its shape
    (seed 001: "a string, a JSON object, a tool-call list, or a rubric note"): a string,
    `contains` (case-folded), or in a suite whose config is seed 001's flat shape (`exact`),
    `exact` after whitespace and case normalisation, as that seed grades it; a list, or an
    object's `tool_calls` (with its `ignore_args`), the tool-call trace (same names in order, same arguments); an object
    with a `rubric`, none (judged); any other object, JSON equality of the output."""
    if isinstance(expected, str) and not expected.strip():  # it would pass every output: no check
        return None
    if isinstance(expected, str) and exact:  # seed 001's config: exact after whitespace and case normalisation
        return {"kind": "exact", "value": expected, "collapse_whitespace": True, "case_fold": True}
    if isinstance(expected, str):
        return {"kind": "contains", "value": expected, "case_fold": True}
    if isinstance(expected, list):
        return {"kind": "tool_calls", "calls": expected}
    if not isinstance(expected, dict):
        return None
    if "tool_calls" in expected:
        return {"kind": "tool_calls", "calls": expected["tool_calls"], "ignore_args": expected.get("ignore_args", [])}
    if "rubric" in expected:
        return None
    return {"kind": "json_field", "path": "$", "value": expected}


def _case_check(r: _Reader, c: Any, cj: str, label: str, raw: dict[str, Any], src: SuiteSource) -> Check | None:
    """One check object of a case: a known `kind` and that kind's options (an unknown
    option is an unknown key); None after reporting why it is unusable."""
    if not isinstance(c, dict):
        r.err(cj, label + 'a check must be an object with a "kind"')
        return None
    kind = c.get("kind")
    if kind not in CHECK_KINDS:
        r.err(cj + ".kind", label + f"unknown check kind {json.dumps(kind)}; known: {', '.join(CHECK_KINDS)}")
        return None
    opts = {k: v for k, v in c.items() if k != "kind"}
    _unknown_check_options(r, kind, opts, cj, label)
    if "scope" in opts and not check_scope(r, opts["scope"], cj, label, src.config.get("simulator") is not None):
        return None
    return Check(kind, opts) if _check_options(kind, opts, r, cj, raw, src) else None


def _unknown_check_options(r: _Reader, kind: str, opts: dict[str, Any], cj: str, label: str) -> None:
    """An option a check kind does not take is an unknown key (an error with a "did you
    mean", a warning under --lenient-keys): a misspelt `case_fodl` would otherwise be
    ignored silently."""
    for key in opts:
        if key not in CHECK_OPTIONS[kind] and not is_comment_key(str(key)):
            close = difflib.get_close_matches(str(key), sorted(CHECK_OPTIONS[kind]), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            known = ", ".join(sorted(CHECK_OPTIONS[kind]))
            r.fx.unknown_key(
                label + f"unknown option {key!r} for a {kind} check{hint} (its options: {known})",
                r.path,
                r.line_for(f"{cj}.{key}"),
                f"{cj}.{key}",
            )


def validate_cases(src: SuiteSource, fx: Findings) -> list[Case]:
    if len(src.cases) > MAX_CASES:
        fx.error(
            f"{len(src.cases)} cases, over the limit of {MAX_CASES} cases per suite",
            src.cases[0][0] if src.cases else src.display(CASES_FILE),
        )
        return []
    cases: list[Case] = []
    id_places: dict[str, list[tuple[str, int | None, str]]] = {}
    for file, line, prefix, obj in src.cases:
        case = _validate_case(obj, file, line, prefix, fx, src) if isinstance(obj, dict) else None
        if isinstance(obj, dict) and isinstance(obj.get("id"), str):
            id_places.setdefault(obj["id"], []).append((file, line, prefix))
        if case is not None:
            cases.append(case)
    for cid, places in id_places.items():
        if len(places) > 1:
            where = ", ".join(f"line {ln}" if ln else pfx for _, ln, pfx in places)
            for file, line, prefix in places:
                fx.error(
                    f"duplicate case id {cid!r} (used on {where}); ids must be unique and never reused",
                    file,
                    line,
                    prefix + ".id",
                )
    return cases
