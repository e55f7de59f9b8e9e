"""agent-evals compatibility: grade `DIR/<case-id>/sample-<n>.txt` the way that skill's
fallback harness (`run-evals.ps1`) decides, and print its table and verdict lines.

`evalkit grade --eval-file evals.json --outputs DIR -k 5 [--compat-wildcards]`

Decisions reproduced from the harness:

* eval file `{"cases": [{"id", "set", "prompt", "expect", "match"}]}`; `match` is
  `exact`, `contains` (when absent) or `regex`, read case-insensitively;
* a case's samples are the files `DIR/<id>/sample-*.txt`; a missing case folder is 0
  samples (a warning on stderr), which fails both metrics;
* all three match modes are case-insensitive;
* pass@k holds when there is at least one sample and at least one passes; pass^k holds
  when there are at least k samples and every sample passes;
* `capability` cases are gated on pass@k, `regression` cases on pass^k, and a case in
  any other set (e.g. `exploratory`) is measured and printed but gated on neither
  (evalkit shows its gate as `none`);
* it prints the table (Id, Set, Samples, Passes, Pass@k, Pass^k), then
  `PASS: all eval cases met their gate.` (exit 0) or
  `FAIL: N eval case(s) failed the gate: <ids>` (exit 1).

Where evalkit differs, on purpose:

* **Wildcards.** The harness implements `contains` as PowerShell `-like "*<expect>*"`,
  so `*`, `?` and `[...]` in an expectation are wildcards: `expect: "5 * 3"` passes on
  "5 plus 3", and `expect: "[draft]"` passes on any output containing a `d`. evalkit
  matches `contains` literally by default; `--compat-wildcards` restores the `-like`
  behaviour (with its backtick escape) for a like-for-like comparison of old results.
* **Trimming.** Outputs and expectations are trimmed in `exact` and `regex` (the harness
  trims only in `exact`); a `contains` expectation is kept byte for byte as the harness
  keeps it, so `"## "` does not match `"###x"` (issue 32).
* **Regex timeout.** A regex, and a `--compat-wildcards` pattern, runs on the `regex`
  engine with a 1 s timeout per sample; a timeout fails that sample (with a warning)
  instead of stalling the gate.
* **Sets.** A set other than capability and regression is accepted with gate `none`,
  as the harness accepts it, and a warning names it (with the gated set it may
  misspell: `regresion` would otherwise drop a case from the gate unnoticed). A case
  with no `set` at all is still an error: it is more likely a slip than a choice.
* **Bad input is exit 2.** A case without a `set`, an empty `expect`, an unknown
  `match`, an invalid regex or wildcard, a duplicate id, or an id that is not a plain
  folder name is an error naming the case, and nothing is graded.
* **Per-set figures.** The harness promised pass@k and pass^k "per case and per set"
  but printed only the per-case table; evalkit adds, per set, the number of cases and
  how many meet pass@k, pass^k and their gate.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import regex as _regex

from evalkit.foundations._io import MAX_CASES_BYTES, read_file_bytes, read_json_object
from evalkit.foundations.errors import InputError
from evalkit.foundations.records import CASE_SETS, NO_GATE, set_gate, ungated_set_warning
from evalkit.suites.formats.agent_evals import MATCH_MODES

SETS = CASE_SETS  # the gated sets; any other set is shown with gate "none"
REGEX_TIMEOUT_S = 1.0
MAX_SAMPLE_FILE_BYTES = 64 * 1024 * 1024  # one output file of an agent-evals outputs folder


@dataclass(frozen=True)
class EvalCase:
    """One case of an agent-evals `evals.json`."""

    id: str
    set: str
    expect: str
    match: str
    prompt: str = ""


@dataclass(frozen=True)
class CaseRow:
    """One row of the table: a case's samples and its two metrics."""

    id: str
    set: str
    samples: int
    passes: int
    pass_at_k: bool
    pass_hat_k: bool

    @property
    def gate(self) -> str:
        """`pass@k`, `pass^k`, or `none` (a set the harness does not gate)."""
        return set_gate(self.set)

    @property
    def gated(self) -> bool:
        return self.gate != NO_GATE

    @property
    def gate_passed(self) -> bool:
        """Whether the case meets its gate; a case with gate `none` cannot fail it."""
        if self.gate == NO_GATE:
            return True
        return self.pass_at_k if self.gate == "pass@k" else self.pass_hat_k


@dataclass(frozen=True)
class SetFigures:
    """Per-set figures: cases, and how many meet pass@k, pass^k and their gate."""

    set: str
    cases: int
    pass_at_k: int
    pass_hat_k: int
    gate_passed: int

    @property
    def gate(self) -> str:
        return set_gate(self.set)


@dataclass(frozen=True)
class CompatReport:
    """The outcome of grading an outputs folder against an eval file."""

    k: int
    rows: tuple[CaseRow, ...]
    sets: tuple[SetFigures, ...]
    warnings: tuple[str, ...]

    @property
    def failed(self) -> tuple[str, ...]:
        return tuple(r.id for r in self.rows if not r.gate_passed)

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0

    @property
    def verdict_line(self) -> str:
        if self.failed:
            return f"FAIL: {len(self.failed)} eval case(s) failed the gate: {', '.join(self.failed)}"
        return "PASS: all eval cases met their gate."


# ------------------------------------------------------------------------ loading


def load_eval_file(path: str | Path, warnings: list[str] | None = None) -> list[EvalCase]:
    """Read and validate an agent-evals eval file; errors name the file and JSON path.
    A set other than capability and regression is accepted (gate `none`); its warning
    is appended to `warnings` when given."""
    p = Path(path)
    doc = read_json_object(p, "an eval file", limit=MAX_CASES_BYTES)
    if not isinstance(doc.get("cases"), list) or not doc["cases"]:
        raise InputError("the eval file needs a nonempty `cases` array", p, json_path="$.cases")
    cases: list[EvalCase] = []
    seen: set[str] = set()
    for i, raw in enumerate(doc["cases"]):
        jp = f"$.cases[{i}]"
        if not isinstance(raw, dict):
            raise InputError("each case must be an object", p, json_path=jp)
        cid = raw.get("id")
        if not isinstance(cid, str) or not cid or cid in (".", "..") or "/" in cid or "\\" in cid:
            raise InputError(
                "case id must be a nonempty folder name (no '/', '\\', '.' or '..')", p, json_path=f"{jp}.id"
            )
        if cid.casefold() in seen:
            raise InputError(f"duplicate case id {cid!r}", p, json_path=f"{jp}.id")
        seen.add(cid.casefold())
        cset = raw.get("set")
        if not isinstance(cset, str) or not cset.strip():
            raise InputError(
                f"case {cid!r}: `set` must be a nonempty string (capability, regression, or another "
                f'set shown with gate "none"), got {cset!r} (run-evals.ps1 would silently skip its '
                "gate)",
                p,
                json_path=f"{jp}.set",
            )
        cset = cset.strip()
        if set_gate(cset.lower()) == NO_GATE and warnings is not None:
            warnings.append(f"{p} {jp}.set: case {cid!r}: {ungated_set_warning(cset.lower())}")
        expect = raw.get("expect")
        if not isinstance(expect, str) or expect == "":
            raise InputError(f"case {cid!r}: `expect` must be a nonempty string", p, json_path=f"{jp}.expect")
        match = raw.get("match")
        if match is None or match == "":
            match = "contains"
        if not isinstance(match, str) or match.lower() not in MATCH_MODES:
            raise InputError(
                f"case {cid!r}: `match` must be exact, contains or regex, got {match!r}", p, json_path=f"{jp}.match"
            )
        prompt = raw.get("prompt", "")
        cases.append(EvalCase(cid, cset.lower(), expect, match.lower(), prompt if isinstance(prompt, str) else ""))
    return cases


# ----------------------------------------------------------------------- matching


def wildcard_to_regex(pattern: str) -> str:
    """Translate a PowerShell `-like` wildcard pattern to an anchored regex.

    Written by hand because `fnmatch` differs from PowerShell's WildcardPattern (it
    knows `[!x]` and no backtick escape). `*` is any run of characters (newlines
    included), `?` one character, `[abc]` / `[a-z]` a set, and a backtick escapes the
    next character. An unclosed `[` is an invalid pattern, as in PowerShell.
    """
    out = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "`" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        if ch == "*":
            out.append(".*")
        elif ch == "?":
            out.append(".")
        elif ch == "[":
            j = pattern.find("]", i + 1)
            if j == -1:
                raise ValueError(f"invalid wildcard pattern {pattern!r}: unclosed '['")
            body = pattern[i + 1 : j]
            if not body:
                raise ValueError(f"invalid wildcard pattern {pattern!r}: empty '[]'")
            parts, k = [], 0
            while k < len(body):
                if k + 2 < len(body) and body[k + 1] == "-":
                    parts.append(f"{re.escape(body[k])}-{re.escape(body[k + 2])}")
                    k += 3
                else:
                    parts.append(re.escape(body[k]))
                    k += 1
            out.append("[" + "".join(parts) + "]")
            i = j
        else:
            out.append(re.escape(ch))
        i += 1
    return r"\A" + "".join(out) + r"\Z"


def match_sample(output: str, case: EvalCase, *, compat_wildcards: bool = False) -> bool:
    """Whether one sample passes `case`, as the harness decides (see the module notes).

    Raises `TimeoutError` when a regex, or a `--compat-wildcards` pattern (which can
    backtrack just as badly: `a*a*a*a*b` against a long run of `a`), runs past
    `REGEX_TIMEOUT_S`.
    """
    out, exp = output.strip(), case.expect.strip()
    if case.match == "exact":
        return out.casefold() == exp.casefold()
    if case.match == "contains":  # byte for byte, as the harness's -like "*<expect>*"
        if compat_wildcards:
            rx = _regex.compile(wildcard_to_regex(f"*{case.expect}*"), _regex.IGNORECASE | _regex.DOTALL)
            return rx.match(output, timeout=REGEX_TIMEOUT_S) is not None
        return case.expect.casefold() in output.casefold()
    return _regex.search(exp, out, _regex.IGNORECASE, timeout=REGEX_TIMEOUT_S) is not None


def _validate_patterns(cases: list[EvalCase], eval_file: Path, compat_wildcards: bool) -> None:
    for i, c in enumerate(cases):
        try:
            if c.match == "regex":
                _regex.compile(c.expect.strip(), _regex.IGNORECASE)
            elif c.match == "contains" and compat_wildcards:
                wildcard_to_regex(f"*{c.expect}*")
        except (ValueError, _regex.error) as exc:
            raise InputError(f"case {c.id!r}: {exc}", eval_file, json_path=f"$.cases[{i}].expect") from None


# ------------------------------------------------------------------------ grading


def _sample_files(case_dir: Path) -> list[Path]:
    """The `sample-*.txt` entries of a case folder: every one that is not a folder, so a
    FIFO or a device among them is refused when read (`read_sample_file`) rather than
    silently dropped from the count."""
    return sorted(p for p in case_dir.iterdir() if not p.is_dir() and fnmatch.fnmatchcase(p.name, "sample-*.txt"))


def read_sample_file(path: Path) -> str:
    """One output file's text, as the harness reads it (a BOM dropped, bad UTF-8
    replaced): a regular file of at most `MAX_SAMPLE_FILE_BYTES` (`_io.read_file_bytes`)."""
    return read_file_bytes(path, limit=MAX_SAMPLE_FILE_BYTES).decode("utf-8-sig", errors="replace")


def grade_outputs(
    eval_file: str | Path, outputs_dir: str | Path, k: int = 5, *, compat_wildcards: bool = False
) -> CompatReport:
    """Grade every case of `eval_file` on its samples in `outputs_dir`."""
    if not 1 <= int(k) <= 100:
        raise InputError(f"-k must be between 1 and 100, got {k}")
    eval_path, out_dir = Path(eval_file), Path(outputs_dir)
    if not out_dir.is_dir():
        raise InputError("outputs folder not found", out_dir)
    warnings: list[str] = []
    cases = load_eval_file(eval_path, warnings)
    _validate_patterns(cases, eval_path, compat_wildcards)
    rows: list[CaseRow] = []
    for case in cases:
        case_dir = out_dir / case.id
        if case_dir.is_dir():
            files = _sample_files(case_dir)
        else:
            warnings.append(f"No outputs for case '{case.id}' (expected '{case_dir}').")
            files = []
        passes = 0
        for f in files:
            text = read_sample_file(f)
            try:
                ok = match_sample(text, case, compat_wildcards=compat_wildcards)
            except TimeoutError:
                what = "wildcard match" if case.match == "contains" else "regex"
                warnings.append(
                    f"Case '{case.id}' {f.name}: {what} timed out after {REGEX_TIMEOUT_S:g}s; sample fails."
                )
                ok = False
            passes += ok
        n = len(files)
        rows.append(CaseRow(case.id, case.set, n, passes, n > 0 and passes >= 1, n >= k and passes == n))
    sets = []
    for s in dict.fromkeys([*SETS, *(r.set for r in rows)]):  # gated sets first, then the others in file order
        in_set = [r for r in rows if r.set == s]
        if in_set:
            sets.append(
                SetFigures(
                    s,
                    len(in_set),
                    sum(r.pass_at_k for r in in_set),
                    sum(r.pass_hat_k for r in in_set),
                    sum(r.gate_passed for r in in_set),
                )
            )
    return CompatReport(int(k), tuple(rows), tuple(sets), tuple(warnings))


# ---------------------------------------------------------------------- rendering


def _table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    """A plain text table in the shape of PowerShell's `Format-Table -AutoSize`:
    numbers right-aligned, everything else left-aligned, dashes under each header."""
    cells = [[str(v) for v in row] for row in rows]
    numeric = [
        all(isinstance(row[i], int) and not isinstance(row[i], bool) for row in rows) for i in range(len(headers))
    ]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def fmt(vals: list[str]) -> str:
        return " ".join(
            v.rjust(w) if num else v.ljust(w) for v, w, num in zip(vals, widths, numeric, strict=True)
        ).rstrip()

    return [fmt(headers), fmt(["-" * len(h) for h in headers]), *(fmt(r) for r in cells)]


def _pct(a: int, n: int) -> str:
    return f"{a}/{n} ({100.0 * a / n:.1f}%)" if n else "0/0"


def render(report: CompatReport) -> str:
    """The table, the per-set figures, then the PASS/FAIL line (last)."""
    lines = [""]
    lines += _table(
        ["Id", "Set", "Samples", "Passes", "Pass@k", "Pass^k"],
        [[r.id, r.set, r.samples, r.passes, r.pass_at_k, r.pass_hat_k] for r in report.rows],
    )
    other = any(s.gate == NO_GATE for s in report.sets)
    lines += [
        "",
        f"Per set (k={report.k}; capability gated on pass@k, regression on pass^k"
        + ("; other sets not gated: gate none" if other else "")
        + "):",
    ]
    lines += _table(
        ["Set", "Cases", "Pass@k", "Pass^k", "Gate"],
        [
            [
                s.set,
                s.cases,
                _pct(s.pass_at_k, s.cases),
                _pct(s.pass_hat_k, s.cases),
                _pct(s.gate_passed, s.cases) if s.gate != NO_GATE else NO_GATE,
            ]
            for s in report.sets
        ],
    )
    lines += ["", report.verdict_line]
    return "\n".join(lines) + "\n"
