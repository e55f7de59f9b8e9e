"""agent-evals `evals.json` -> suite parts: `{"cases": [{"id", "set", "prompt", "expect",
"match"}]}`, read by the same rules as `evalkit grade --eval-file`
(`evalkit.conclusions.agentevals`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import regex

from evalkit.foundations._io import line_of
from evalkit.foundations.errors import InputError
from evalkit.foundations.layout import PROMPT_FILE
from evalkit.foundations.records import SET_NAME
from evalkit.suites.formats.base import (
    IMPORT_PROMPT,
    ImportedSuite,
    default_config,
    raise_with_warnings,
    read_json_file,
    slugify,
)
from evalkit.suites.suite import _Reader

MATCH_MODES = ("exact", "contains", "regex")  # `match` of a case, read case-insensitively; absent: contains


# `checks` is evalkit's own: any native check (json_field, file_exists, exit_code, ...)
# besides, or instead of, the one `expect`/`match` gives
AGENT_EVALS_CASE_KEYS = {"id", "set", "prompt", "expect", "match", "checks"}


def read_agent_evals(path: str | Path) -> ImportedSuite:
    """agent-evals `{"cases": [{"id", "set", "prompt", "expect", "match"}]}`.

    That harness trims outputs and expectations and matches case-insensitively in all
    three modes (`contains` by default); the checks written here keep those semantics
    (`trim`/`case_fold`, regex flag `i`), except that a `contains` value is kept byte for
    byte as `run-evals.ps1` keeps it (`"## "` must not match `"###x"`). Its `contains`
    treats `*` and `?` as wildcards; ours matches literally, so such expectations get a
    warning. A case may add evalkit's own `checks` (validated as a native case's), and
    with them may leave out `expect`.
    """
    p = Path(path)
    doc, lines, fx, reader = read_json_file(p)

    if not isinstance(doc, dict) or not isinstance(doc.get("cases"), list):
        raise InputError('an agent-evals file must be an object with a "cases" list', p, 1, "$")
    for key in doc:
        if key != "cases":
            reader.warn(f"$.{key}", f"unknown key {key!r} (ignored)")
    if not doc["cases"]:
        raise InputError('the "cases" list is empty', p, line_of(lines, "$.cases"), "$.cases")
    cases: list[tuple[int | None, str, dict[str, Any]]] = []
    shape = 'an object {"id", "set", "prompt", "expect", "match"}'
    for jp, c in reader.objects(doc["cases"], "$.cases", AGENT_EVALS_CASE_KEYS, "case", shape):
        case = _agent_evals_case(reader, jp, c)
        if case is not None:
            cases.append((line_of(lines, jp), jp, case))
    raise_with_warnings(fx)
    name = p.parent.name or p.stem
    config = default_config(name, f"imported from agent-evals {p.name}", source=f"agent-evals {p.name}")
    return ImportedSuite(
        "agent-evals", str(p), name, config, tuple(cases), {PROMPT_FILE: IMPORT_PROMPT}, tuple(fx.warnings)
    )


def _agent_evals_case(reader: _Reader, jp: str, c: dict[str, Any]) -> dict[str, Any] | None:
    """The native case one agent-evals case becomes: its `expect` as the check its
    `match` names, then its own `checks`; None after reporting why it cannot be read."""
    read = _read_case(reader, jp, c)
    if read is None:
        return None
    match, case_set, extra = read
    if "expect" not in c:
        return _case(c, c.get("prompt", ""), None, case_set, extra)
    check = _expect_check(reader, jp, c["expect"], match)
    if check is None:
        return None
    return _case(c, c.get("prompt", ""), c["expect"], case_set, [check, *extra])


def _read_case(reader: _Reader, jp: str, c: dict[str, Any]) -> tuple[str, str, list[Any]] | None:
    """A case's fields checked by the rules of `evalkit grade --eval-file`
    (agentevals.load_eval_file), so a file one accepts the other reads alike: set and
    match case-insensitive, an empty match is contains, the prompt optional, `expect`
    optional beside evalkit's own `checks`. (match, set, checks) in lower case, or None
    after reporting every problem."""
    ok = True
    extra = c.get("checks")
    if extra is not None and not isinstance(extra, list):
        reader.err(f"{jp}.checks", "checks must be a list of evalkit check objects")
        ok, extra = False, None
    for key in ("id", "expect"):
        if key == "expect" and extra and "expect" not in c:
            continue  # the case's own checks decide it
        if not isinstance(c.get(key), str):
            reader.err(f"{jp}.{key}", f"missing or non-string {key!r}")
            ok = False
    if not isinstance(c.get("prompt", ""), str):
        reader.err(f"{jp}.prompt", "prompt must be a string")
        ok = False
    match = c.get("match") or "contains"
    if not isinstance(match, str) or match.lower() not in MATCH_MODES:
        reader.err(f"{jp}.match", f"unknown match type {json.dumps(match)}; expected exact, contains or regex")
        ok = False
    case_set = _import_set(reader, jp, c.get("set"))
    if not ok or case_set is None:
        return None
    return match.lower(), case_set.strip().lower(), list(extra or [])


def _import_set(reader: _Reader, jp: str, case_set: Any) -> str | None:
    """A case's `set`: capability when absent (warned: run-evals.ps1 skips its gate), any
    other name kept as a native set name (slugified, warned, when it is not one); None
    after reporting one that is not a non-empty string."""
    if case_set is None:
        reader.warn(
            f"{jp}.set",
            "no set: imported as capability (agent-evals' run-evals.ps1 skips the gate of "
            "such a case, and `evalkit grade --eval-file` refuses it)",
        )
        return "capability"
    if not isinstance(case_set, str) or not case_set.strip():
        reader.err(f"{jp}.set", f"set must be a nonempty string, got {json.dumps(case_set)}")
        return None
    if not SET_NAME.fullmatch(case_set.strip().lower()):
        # any set is accepted (gate "none" unless capability or regression), as a native set name
        reader.warn(
            f"{jp}.set",
            f"set {json.dumps(case_set)} imported as {slugify(case_set)!r} (a set name is "
            "lowercase letters, digits, '.', '_' and '-')",
        )
        return slugify(case_set)
    return case_set


def _expect_check(reader: _Reader, jp: str, raw_expect: str, match: str) -> dict[str, Any] | None:
    """The check an `expect` becomes under its `match`, with the harness's semantics:
    trimmed and case-insensitive, except that a contains value is kept byte for byte (as
    run-evals.ps1 keeps it); None after reporting an empty expectation or a regex that
    does not compile."""
    expect = raw_expect.strip()
    if not expect:
        reader.err(f"{jp}.expect", "expect is empty: it would match any output")
        return None
    if match == "exact":
        return {"kind": "exact", "value": expect, "trim": True, "case_fold": True}
    if match == "contains":
        if "*" in expect or "?" in expect:
            reader.warn(
                f"{jp}.expect",
                "agent-evals treats * and ? in a contains expectation as wildcards; "
                "evalkit matches them literally (use match: regex for a pattern)",
            )
        return {"kind": "contains", "value": raw_expect, "case_fold": True}  # byte for byte
    try:
        regex.compile(expect, regex.IGNORECASE)
    except regex.error as exc:
        reader.err(f"{jp}.expect", f"regex does not compile: {exc}")
        return None
    return {"kind": "regex", "pattern": expect, "flags": "i"}


def _case(c: dict[str, Any], prompt: str, expect: str | None, case_set: str, checks: list[Any]) -> dict[str, Any]:
    """The native case an agent-evals case becomes."""
    out: dict[str, Any] = {"id": c["id"], "input": prompt}
    if expect is not None:
        out["expected"] = expect
    return {**out, "tags": [case_set], "set": case_set, "checks": checks}
