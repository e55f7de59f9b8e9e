"""A suite's cases, validated: each case object, its checks and their options, into `Case`
records. Split out of `evalkit.suites.suite`, which re-exports every public name.
"""

from __future__ import annotations

import ast
import difflib
import json
import re
from pathlib import Path
from typing import Any

import regex

from evalkit.foundations._jsonschema import jsonschema
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
from evalkit.suites.units import check_fixtures, check_trajectory_options


# --- cases ----------------------------------------------------------------------------
def _check_options(
    kind: str, opts: dict[str, Any], r: _Reader, jp: str, case: dict[str, Any], src: SuiteSource
) -> bool:
    """Validate one check's options; fill `value` from a string `expected` where the kind
    compares against it. Returns False when the check is unusable."""
    ok = True
    expected = case.get("expected")
    bools = {"trim", "case_fold", "collapse_whitespace", "expect", "should_refuse", "fullmatch"}
    for b in bools & set(opts):
        if not isinstance(opts[b], bool):
            r.err(f"{jp}.{b}", f"{b} must be true or false")
            ok = False
    if kind in ("exact", "contains"):
        if "value" not in opts:
            if isinstance(expected, str) and expected != "":
                opts["value"] = expected
            else:
                r.err(jp, f'a {kind} check needs a "value" (or a string "expected")')
                return False
        if not isinstance(opts["value"], str) or (kind == "contains" and opts["value"] == ""):
            r.err(f"{jp}.value", f"{kind} value must be a non-empty string")
            ok = False
    elif kind == "regex":
        pattern = opts.get("pattern")
        if not isinstance(pattern, str) or pattern == "":
            r.err(f"{jp}.pattern", 'a regex check needs a non-empty "pattern" string')
            return False
        flags = regex_flags(opts.get("flags"))
        if flags is None:
            r.err(
                f"{jp}.flags",
                f"flags must be letters from 'imsx', a flag name (ignorecase, multiline, "
                f"dotall, verbose) or a list of them, got {json.dumps(opts.get('flags'))}",
            )
            flags, ok = 0, False
        if "timeout_s" in opts and (
            isinstance(opts["timeout_s"], bool)
            or not isinstance(opts["timeout_s"], (int, float))
            or opts["timeout_s"] <= 0
        ):
            r.err(f"{jp}.timeout_s", "timeout_s must be a positive number of seconds")
            ok = False
        if opts.get("case_fold"):
            flags |= regex.IGNORECASE
        try:
            regex.compile(pattern, flags)
        except regex.error as exc:
            r.err(f"{jp}.pattern", f"regex does not compile: {exc}")
            ok = False
    elif kind == "json_schema":
        schema = opts.get("schema", expected if isinstance(expected, dict) and "rubric" not in expected else None)
        if not isinstance(schema, (dict, bool)):
            r.err(jp, 'a json_schema check needs a "schema" object (or an object "expected")')
            return False
        SchemaError, validator_for = jsonschema().SchemaError, jsonschema().validators.validator_for

        try:
            validator_for(schema).check_schema(schema)
        except SchemaError as exc:
            r.err(f"{jp}.schema", f"not a valid JSON Schema: {exc.message}")
            ok = False
        opts.setdefault("schema", schema)
    elif kind == "json_field":
        if json_path_steps(opts.get("path")) is None:
            r.err(f"{jp}.path", 'a json_field check needs a "path" like "$.field", "$.list[0]" or "$[\\"a key\\"]"')
            ok = False
        if "value" not in opts:
            r.err(jp, 'a json_field check needs a "value" (any JSON value; its type is kept)')
            ok = False
    elif kind == "file_exists":
        rel = opts.get("path")
        if not isinstance(rel, str) or not rel or Path(rel).is_absolute() or ".." in Path(rel).parts:
            r.err(f"{jp}.path", 'a file_exists check needs a "path" relative to the working directory, without ".."')
            ok = False
    elif kind == "exit_code":
        code = opts.get("value", 0)
        if isinstance(code, bool) or not isinstance(code, int) or not 0 <= code <= 255:
            r.err(f"{jp}.value", f"an exit_code value must be an exit status from 0 to 255, got {json.dumps(code)}")
            ok = False
    elif kind in TRAJECTORY_CHECK_OPTIONS:
        ok = check_trajectory_options(r, kind, opts, jp)
    elif kind == "tool_calls":
        ok = check_trajectory_options(r, kind, opts, jp)
        calls = opts.get("calls", expected if isinstance(expected, list) else None)
        if not isinstance(calls, list):
            r.err(jp, 'a tool_calls check needs "calls" (or a list "expected"): [{"name", "arguments"}]')
            return False
        for i, c in enumerate(calls):
            if (
                not isinstance(c, dict)
                or not isinstance(c.get("name"), str)
                or not isinstance(c.get("arguments", {}), dict)
            ):
                r.err(f"{jp}.calls[{i}]", 'a tool call must be {"name": str, "arguments": object}')
                ok = False
        ign = opts.get("ignore_args", [])
        if not isinstance(ign, list) or not all(isinstance(x, str) for x in ign):
            r.err(f"{jp}.ignore_args", "ignore_args must be a list of argument names")
            ok = False
        opts.setdefault("calls", calls)
    elif kind == "grounding":
        ctx = opts.get("context", case.get("context"))
        if not isinstance(ctx, str) or not ctx.strip():
            r.err(jp, 'a grounding check needs the case\'s "context" (the text the output must stay within)')
            ok = False
    elif kind == "refusal":
        pats = opts.get("patterns", [])
        if not isinstance(pats, list) or not all(isinstance(x, str) and x for x in pats):
            r.err(f"{jp}.patterns", "patterns must be a list of regex strings")
            return False
        for i, pat in enumerate(pats):
            try:
                regex.compile(pat, regex.IGNORECASE)
            except regex.error as exc:
                r.err(f"{jp}.patterns[{i}]", f"regex does not compile: {exc}")
                ok = False
    elif kind == "activation":
        if not any(isinstance(opts.get(k), str) and opts.get(k) for k in ("marker", "tool")):
            r.err(jp, 'an activation check needs a "marker" string or a "tool" name')
            ok = False
    elif kind == "scorer":
        rel = opts.get("file")
        if isinstance(rel, str) and rel and "/" not in rel and "\\" not in rel:
            rel = f"scorers/{rel if rel.endswith('.py') else rel + '.py'}"  # as the scorer grader resolves it
        if (
            not isinstance(rel, str)
            or not rel.startswith("scorers/")
            or ".." in Path(rel).parts
            or not rel.endswith(".py")
        ):
            r.err(f"{jp}.file", 'a scorer check needs "file": "scorers/<name>.py" inside the suite')
            return False
        if not src.exists(rel):
            r.err(f"{jp}.file", f"scorer file {rel!r} not found")
            return False
        fn = opts.get("function", "score")
        if rel not in src.scorer_functions:
            try:
                # parsed, never executed: lint must not run suite code
                tree = ast.parse(src.read(rel), filename=rel)
                src.scorer_functions[rel] = frozenset(
                    n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                )
            except (SyntaxError, InputError) as exc:
                src.scorer_functions[rel] = exc
        names = src.scorer_functions[rel]
        if isinstance(names, InputError):  # a FIFO, a symlink out, too large: reported once
            if not any(f.path == names.path and f.message == names.message for f in r.fx.errors):
                r.fx.add(names)
            return False
        if isinstance(names, SyntaxError):
            r.err(f"{jp}.file", f"scorer {rel!r} does not parse: {names.msg} (line {names.lineno})")
            return False
        if fn not in names:
            r.err(f"{jp}.function", f"scorer {rel!r} defines no function {fn!r}")
            ok = False
    return ok


def _validate_case(
    raw: dict[str, Any], file: str, line: int | None, prefix: str, fx: Findings, src: SuiteSource
) -> Case | None:
    r = _Reader(fx, file, lambda jp: line)

    def j(sub: str) -> str:  # a JSON path inside this case
        return prefix + sub

    r.unknown_keys(raw, CASE_KEYS, prefix, "case")
    ok = True

    cid = raw.get("id", _ABSENT)
    if cid is _ABSENT:
        r.err(j(".id"), "missing required key 'id'")
        return None
    problem = case_id_problem(cid)
    if problem:
        r.err(j(".id"), f"unsafe case id {cid!r}: {problem} (ids become folder names)")
        return None
    label = f"case {cid!r}: "

    if "input" not in raw:
        r.err(j(".input"), label + "missing required key 'input'")
        ok = False
    inp = raw.get("input", "")
    if not isinstance(inp, (str, dict)):
        r.err(j(".input"), label + "input must be a string or an object of template variables")
        ok = False
    elif isinstance(inp, dict):
        for key in inp:
            if not re.fullmatch(r"[_a-zA-Z][_a-zA-Z0-9]*", key):
                r.err(j(f".input.{key}"), label + f"input key {key!r} cannot be a template variable name")
                ok = False
        ok = check_fixtures(r, inp, j(".input"), label) and ok

    tags = raw.get("tags", _ABSENT)
    if tags is _ABSENT:
        r.err(j(".tags"), label + "missing required key 'tags' (at least one tag)")
        ok = False
        tags = []
    elif not isinstance(tags, list) or not tags or not all(isinstance(t, str) and t.strip() for t in tags):
        r.err(j(".tags"), label + "tags must be a non-empty list of non-empty strings")
        ok = False
        tags = []

    case_set = raw.get("set", "capability")
    if not isinstance(case_set, str) or not SET_NAME.fullmatch(case_set):
        r.err(
            j(".set"),
            label + "set must be a lowercase name (capability and regression are gated, any other "
            f'is shown with gate "none"), got {json.dumps(case_set)}',
        )
        ok = False
    elif set_gate(case_set) == NO_GATE:
        r.warn(j(".set"), label + ungated_set_warning(case_set))
    threshold = r.number(raw, "judge_threshold", prefix, integer=True, minimum=1, maximum=5, default=4)
    intent = raw.get("intent")
    if intent is not None and intent not in INTENTS:
        r.err(j(".intent"), label + f"intent must be one of {', '.join(INTENTS)}, got {json.dumps(intent)}")
        ok = False
    context = raw.get("context")
    if context is not None and not isinstance(context, str):
        r.err(j(".context"), label + "context must be a string")
        ok = False

    expected = raw.get("expected")
    rubric = None
    if isinstance(expected, dict) and "rubric" in expected:
        rb = expected["rubric"]
        if isinstance(rb, list) and rb and all(isinstance(x, str) and x.strip() for x in rb):
            rubric = "\n".join(f"- {x.strip()}" for x in rb)
        elif isinstance(rb, str) and rb.strip():
            rubric = rb
        else:
            r.err(j(".expected.rubric"), label + "rubric must be a non-empty string or list of criteria")
            ok = False

    checks: list[Check] = []
    if "checks" in raw:
        raw_checks = raw["checks"]
        if not isinstance(raw_checks, list):
            r.err(j(".checks"), label + "checks must be a list")
            raw_checks = []
            ok = False
        for i, c in enumerate(raw_checks):
            cj = j(f".checks[{i}]")
            if not isinstance(c, dict):
                r.err(cj, label + 'a check must be an object with a "kind"')
                ok = False
                continue
            kind = c.get("kind")
            if kind not in CHECK_KINDS:
                r.err(cj + ".kind", label + f"unknown check kind {json.dumps(kind)}; known: {', '.join(CHECK_KINDS)}")
                ok = False
                continue
            opts = {k: v for k, v in c.items() if k != "kind"}
            # an unknown option is an unknown key (an error with a "did you mean", a warning
            # under --lenient-keys): a misspelt `case_fodl` would otherwise be ignored silently
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
            if _check_options(kind, opts, r, cj, raw, src):
                checks.append(Check(kind, opts))
            else:
                ok = False
    elif isinstance(expected, str):
        if expected.strip():
            checks.append(Check("contains", {"value": expected, "case_fold": True}))
        else:
            r.err(
                j(".expected"),
                label + "expected is empty: the default contains check would pass any output; "
                "give checks (e.g. a regex) instead",
            )
            ok = False

    if ok and not checks and rubric is None:
        r.err(
            prefix,
            label + 'has neither a check nor a rubric: it could never fail (add "checks", '
            'a string "expected", or "expected": {"rubric": ...})',
        )
        ok = False
    if not ok:
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
