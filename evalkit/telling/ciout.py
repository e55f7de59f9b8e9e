"""CI outputs: JUnit XML for test-report viewers and Markdown for a pull-request comment
or `$GITHUB_STEP_SUMMARY`, from the typed results the commands already compute.

`gate`, `compare`, `grade --eval-file` and `run` each turn their result into a
`CiReport` here (`gate_report`, `compare_report`, `eval_file_report`, `run_report`);
`write_junit` and `write_markdown` write it. The JUnit document has one `<testsuite>`
whose testcases are the gate's checks (gate) or the cases (the others); a failed check
or case is a `<failure>` with its reason, an INCOMPLETE run, an errored sample or an
unmatched trial is an `<error>` (no answer is never a failed answer, nor a pass), and a
case whose set has gate `none` is `<skipped>`. The document follows the JUnit schema
CI systems read (Jenkins xunit-plugin's `junit-10.xsd`: `testsuites` > `testsuite`
with `name`, `tests`, `failures`, `errors`, `skipped`, `time` > `testcase` with `name`,
`classname`, `time`). The Markdown has the verdict first, then the gate table, the plan
check, the spend and the top failures.

Model output and reasons quoted from it are untrusted text: control characters that XML
1.0 cannot carry are dropped, and the Markdown escapes HTML and Markdown syntax (and
breaks `@mentions`) so an answer cannot inject markup into a PR comment. Both files are
published (a job summary, a PR comment, a test-report artifact), so every text either
carries (names, messages, details, reasons, table cells, the headline) has each
personal value or secret the privacy scanner detects replaced by its kind's placeholder
first (`evalkit.pii.privacy.redact_shown`: `<API_KEY>`, `<EMAIL>`): a check's reason that
quotes a model leaking a token shows the placeholder, never the token.
"""

from __future__ import annotations

import html
import math
import os
import re
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from evalkit.foundations._io import loads_bounded, write_atomic
from evalkit.foundations.errors import InputError, RedactionIncomplete
from evalkit.foundations.layout import RESULTS, SUMMARY_JSON
from evalkit.foundations.records import COST_RISE_PREFIXES, SCORE_DROP_PREFIXES, UNDERPOWERED_PREFIX, judge_line
from evalkit.runfolder.runs import RunFolder, answered_line, config_arm_names, iter_jsonl

if TYPE_CHECKING:
    from evalkit.conclusions.agentevals import CompatReport
    from evalkit.conclusions.gates import GateResult, RunMetrics
    from evalkit.conclusions.verdicts import Verdict
    from evalkit.foundations.records_gate import GateCheck
    from evalkit.running.runner import RunResult

Outcome = Literal["passed", "failure", "error", "skipped"]
TOP_FAILURES = 5
MAX_TEXT = 2000  # characters of a message or detail kept in a report


@dataclass(frozen=True)
class TestCase:
    """One JUnit testcase: a gate check or a case, its outcome and why."""

    __test__ = False  # not a pytest class

    name: str
    classname: str
    outcome: Outcome = "passed"
    message: str = ""
    detail: str = ""


@dataclass(frozen=True)
class CiReport:
    """What one command says to CI: a headline verdict, its testcases, Markdown sections."""

    title: str
    ok: bool
    headline: str
    cases: tuple[TestCase, ...]
    sections: tuple[str, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)

    def counts(self) -> Counter[str]:
        return Counter(c.outcome for c in self.cases)


# --------------------------------------------------------------------------- text safety

_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]|~])")  # links, code, emphasis, tables (text never starts a line)


def _published(s: Any) -> str:
    """`s` as a published file may show it: personal data and secrets replaced by their
    kinds' placeholders (before any cut, so a value is never half shown)."""
    from evalkit.pii.privacy import redact_shown  # lazy: the privacy scanners compile their patterns on import

    return redact_shown(str(s))


def _xml_text(s: Any) -> str:
    """Text XML 1.0 can carry, and may publish: the control characters it forbids are
    dropped, personal data and secrets replaced (`_published`)."""
    return _XML_BAD.sub("", _published(s))[:MAX_TEXT]


def md_escape(s: Any, limit: int = 160) -> str:
    """Untrusted text as inert Markdown on one line: personal data and secrets replaced
    (`_published`), HTML escaped, Markdown punctuation backslash-escaped, `@` broken so
    no one is mentioned, newlines folded, cut to `limit` characters."""
    text = " ".join(_XML_BAD.sub("", _published(s)).split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    text = html.escape(text, quote=False)
    return _MD_SPECIAL.sub(r"\\\1", text).replace("@", "@\u200b")


def _num(x: Any, fmt: str = ".3f") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return format(x, fmt)


def _gate_value(kind: str, x: Any) -> str:
    """A gate check's value: a score to three places, a cost in dollars."""
    return _num(x, ".3f") if kind != "cost" else "$" + _num(x, ".4g")


def _table(headers: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


# --------------------------------------------------------------------------- writers


def junit_xml(report: CiReport) -> bytes:
    """The report as a JUnit XML document (bytes, UTF-8, with the XML declaration)."""
    n = report.counts()
    attrs = {
        "name": report.title,
        "tests": str(len(report.cases)),
        "failures": str(n["failure"]),
        "errors": str(n["error"]),
        "skipped": str(n["skipped"]),
        "time": "0",
    }
    root = ET.Element("testsuites", {k: attrs[k] for k in ("name", "tests", "failures", "errors", "time")})
    suite = ET.SubElement(root, "testsuite", attrs)
    if report.properties:
        props = ET.SubElement(suite, "properties")
        for k, v in report.properties.items():
            ET.SubElement(props, "property", {"name": _xml_text(k), "value": _xml_text(v)})
    for c in report.cases:
        tc = ET.SubElement(
            suite, "testcase", {"name": _xml_text(c.name), "classname": _xml_text(c.classname), "time": "0"}
        )
        if c.outcome != "passed":
            el = ET.SubElement(tc, c.outcome, {"message": _xml_text(c.message), "type": c.outcome})
            el.text = _xml_text(c.detail or c.message)
        elif c.detail:
            ET.SubElement(tc, "system-out").text = _xml_text(c.detail)
    ET.indent(root)
    xml: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return xml + b"\n"


def answered_section(run: Any) -> list[str]:
    """ "**Answered by:** ..." (`runs.answered_line`: `scripted (script ...)` for evalkit's
    scripted server), or nothing for a run that recorded no arm settings."""
    said = answered_line(getattr(run, "config", None) or {})
    return ["**Answered by:** " + md_escape(said.removeprefix("answered by "), 300)] if said else []


def markdown(report: CiReport) -> str:
    """The report as Markdown: the verdict line, then its sections."""
    return "\n\n".join([f"## {report.title}: {md_escape(report.headline, 300)}", *report.sections]) + "\n"


def _checked(p: Path) -> Path:
    """`p` as written, read back by the privacy scanner (entities, escapes and the other
    decoded forms included): a file that still shows a value is removed and
    `RedactionIncomplete` names it (never the value), as a redacted report's files are."""
    from evalkit.pii.privacy import leaking_files, scanner  # lazy: as `_published`

    if leaking_files([p], [], scanner()):
        p.unlink()
        raise RedactionIncomplete(f"redaction incomplete: removed {p}, which still held personal data or a secret")
    return p


def write_junit(report: CiReport, path: str | Path) -> Path:
    """Write the JUnit XML atomically (parent folders made), then check what it shows."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(p, junit_xml(report).decode("utf-8"))
    return _checked(p)


def write_markdown(report: CiReport, path: str | Path) -> Path:
    """Write the Markdown atomically; when `path` is the `$GITHUB_STEP_SUMMARY` file,
    append to it instead, as GitHub expects of every step that writes there."""
    p = Path(path)
    text = markdown(report)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary and p.resolve() == Path(summary).resolve():
        from evalkit.pii.privacy import scanner  # lazy: as `_published`

        if scanner().scan(text):  # checked before it is appended: other steps' text stays
            raise RedactionIncomplete(f"redaction incomplete: nothing appended to {p}, which would show a secret")
        with open(p, "a", encoding="utf-8") as fh:
            fh.write(text + "\n")
        return p
    p.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(p, text)
    return _checked(p)


# --------------------------------------------------------------------------- shared parts


def spend_section(summary: dict[str, Any] | None) -> str:
    """`spend: $x of cap $y (avoided by the cache: $z)` from a run's summary."""
    s = summary or {}
    if "spend_usd" not in s:
        return "**Spend:** n/a (no run summary)"
    cap = s.get("cap_usd")
    return (
        f"**Spend:** ${_num(s.get('spend_usd'), '.6f')}"
        + (f" of cap ${_num(cap, '.6f')}" if cap else "")
        + f" (avoided by the cache: ${_num(s.get('avoided_usd', 0.0), '.6f')})"
    )


def judge_sections(run_path: Any) -> list[str]:
    """The judge's notice of the run (`runload.judge_trust_notice`: "Judge not calibrated
    (n of 20 labels)", or its judged results held) as a Markdown section; [] when there
    is nothing to say or no run."""
    from evalkit.runfolder.runload import judge_trust_notice  # lazy: pandas loads only where a report has a run

    notice = judge_trust_notice(str(run_path)) if run_path else None
    return ["**Judge:** " + md_escape(notice, 600)] if notice else []


def _first_failure(grade: dict[str, Any]) -> str:
    for c in grade.get("checks") or ():
        if isinstance(c, dict) and not c.get("passed"):
            return f"{c.get('name')}: {c.get('reason') or 'failed'}"
    return str(grade.get("error") or "failed")


def top_failures(run: Any, metrics: RunMetrics, n: int = TOP_FAILURES) -> list[tuple[str, str, str, str]]:
    """The `n` cases of `metrics` with the fewest passes (ungraded counted as fails):
    (case id, set, `c/n`, the first failing check's reason)."""
    grades: dict[str, dict[str, Any]] = {}
    if run is not None and len(run.grades):
        for g in run.grades[run.grades["arm"] == metrics.arm].to_dict("records"):
            if g.get("passed") is not True:
                grades.setdefault(str(g["case_id"]), g)
    worst = sorted((c for c in metrics.cases if c.c < c.n), key=lambda c: (c.c / c.n if c.n else 0.0, c.case_id))
    return [(c.case_id, c.set, f"{c.c}/{c.n}", _first_failure(grades.get(c.case_id, {}))) for c in worst[:n]]


def _failures_section(rows: list[tuple[str, str, str, str]], arm: str | None) -> str:
    if not rows:
        return "**Top failures:** none"
    body = _table(
        ["case", "set", "passed", "first failing check"],
        [[md_escape(a, 80), md_escape(b, 40), c, md_escape(d)] for a, b, c, d in rows],
    )
    return f"**Top failures** (arm `{md_escape(arm or '-', 60)}`):\n\n{body}"


def _plan_section(check: Any, none: str = "no pre-registered plan") -> str:
    if check is None:
        return f"**Plan check:** {none}"
    if check.ok:
        return f"**Plan check:** followed ({check.units()})"
    return "**Plan check:** NOT followed: " + md_escape("; ".join(check.flags), 400)


# --------------------------------------------------------------------------- gate


_GATE_CLASS = "evalkit.gate"  # the JUnit classname of the gate's testcases


def _gate_check_case(c: GateCheck, failed_reasons: set[str]) -> TestCase:
    """The testcase of one gate check: a failure with the gate's reason for it, else
    passed (within noise when the threshold was crossed but not beyond noise)."""
    unit = " points" if c.kind != "cost" else "%"
    detail = (
        f"baseline {_num(c.baseline, '.4g')}, current {_num(c.current, '.4g')}, change "
        f"{c.change:+.1f}{unit} (threshold {c.threshold:g}{unit}), cases {c.n_cases}, "
        f"p(noise) {_num(c.p_adjusted, '.3g')}"
    )
    if c.failed:
        prefixes = SCORE_DROP_PREFIXES if c.kind != "cost" else COST_RISE_PREFIXES
        why = next((r for r in failed_reasons if c.group in r and r.startswith(prefixes)), detail)
        return TestCase(c.label, _GATE_CLASS, "failure", why, detail)
    return TestCase(c.label, _GATE_CLASS, "passed", "", detail + (" (within noise)" if c.exceeded else ""))


def _gate_cases(res: GateResult) -> list[TestCase]:
    """The gate's testcases: comparable with the baseline, power, and one per check; or
    one errored `run finished cleanly` when no rate was read."""
    cls = _GATE_CLASS
    if not res.read_rates:
        return [
            TestCase(
                "run finished cleanly",
                cls,
                "error",
                "; ".join(res.reasons),
                "rates not read: a run that did not finish cleanly is not comparable",
            )
        ]
    failed_reasons = {r for r in res.reasons if r.startswith(SCORE_DROP_PREFIXES + COST_RISE_PREFIXES)}
    weak = [r for r in res.reasons if r.startswith(UNDERPOWERED_PREFIX)]
    other = [r for r in res.reasons if r not in failed_reasons and r not in weak]
    cases = [TestCase("comparable with the baseline", cls, "failure" if other else "passed", "; ".join(other))]
    if res.power is not None:
        # UNDERPOWERED is an error, never a pass: the gate could not see its threshold
        pw = res.power.describe()
        outcome: Outcome = "error" if weak else "passed"
        cases.append(
            TestCase(
                "power",
                cls,
                outcome,
                "; ".join(weak),
                pw + (" (warned)" if res.power.underpowered and not weak else ""),
            )
        )
    return cases + [_gate_check_case(c, failed_reasons) for c in res.checks]


def _gate_table(res: GateResult) -> list[str]:
    """The checks' table with the thresholds under it, or why no rate was read."""
    if res.read_rates and res.checks:
        rows = []
        for c in res.checks:
            unit = " pts" if c.kind != "cost" else "%"
            result = "FAIL" if c.failed else ("within noise" if c.exceeded else "ok")
            rows.append(
                [
                    md_escape(c.label, 60),
                    str(c.n_cases),
                    _gate_value(c.kind, c.baseline),
                    _gate_value(c.kind, c.current),
                    f"{c.change:+.1f}{unit}",
                    _num(c.p_adjusted, ".3g"),
                    result,
                ]
            )
        t = res.thresholds
        return [
            _table(["check", "cases", "baseline", "current", "change", "p(noise)", "result"], rows)
            + f"\n\nThresholds: gated case score drop > {t.max_success_drop_points:g} points, cost per case "
            f"increase > {t.max_cost_increase_pct:g}%; "
            + (
                f"a breach fails when beyond run-to-run noise (Holm-adjusted p <= {res.alpha:g}; "
                "`gate.require_significance`)."
                if t.require_significance
                else "a breach fails on the observed change (the seed's gate; p(noise) is shown, not required)."
            )
        ]
    if not res.read_rates:
        return ["Rates not read: a run that did not finish cleanly is not comparable (INCOMPLETE is never a pass)."]
    return []


def gate_report(res: GateResult, run: Any = None, metrics: RunMetrics | None = None) -> CiReport:
    """`evalkit gate`: one testcase per gate check (the gated case score overall and per tag, the cost per case);
    a breach beyond noise is a failure with its reason; a run that did not finish cleanly
    is one errored testcase (no rate was read); a baseline that cannot be compared is a
    failed `comparable with the baseline` testcase."""
    cases = _gate_cases(res)
    headline = res.status if res.status != "FAIL" else "FAIL: " + " / ".join(res.causes)
    sections = ["**Gated:** " + md_escape(res.against(), 400), *answered_section(run)]
    if res.reasons and not res.passed:
        sections.append("**Why:** " + md_escape("; ".join(res.reasons), 600))
    sections += judge_sections(res.run)
    sections += _gate_table(res)
    sections += [f"- note: {md_escape(n, 400)}" for n in res.notes]
    sections.append(
        _plan_section(
            None,
            "n/a: a gate holds a run to its baseline, not to a plan (`evalkit compare --markdown` checks the plan)",
        )
    )
    sections.append(spend_section(getattr(run, "summary", None) if run is not None else _summary_of(res.run)))
    if metrics is not None:
        sections.append(_failures_section(top_failures(run, metrics), metrics.arm))
    return CiReport(
        "evalkit gate", res.passed, headline, tuple(cases), tuple(sections), {"run": res.run, "baseline": res.baseline}
    )


def _summary_of(run_path: str) -> dict[str, Any] | None:
    p = Path(run_path) / SUMMARY_JSON
    try:
        d = loads_bounded(p.read_text(encoding="utf-8"), p)
    except (OSError, ValueError, InputError):
        return None
    return d if isinstance(d, dict) else None


# --------------------------------------------------------------------------- compare


def compare_report(
    v: Verdict,
    run: Any = None,
    base: RunMetrics | None = None,
    treat: RunMetrics | None = None,
    fail_on: tuple[str, ...] = (),
) -> CiReport:
    """`evalkit compare`: one testcase per case (its vote), then the verdict itself, which
    fails when its kind is one of `fail_on` (as the exit status does). The document is red
    exactly when the command exits 1: only then is a case the treatment lost a failure and
    an errored or unmatched case an error (they say why the verdict failed); otherwise
    every case passes with its vote as its output, since one lost case is no failure of a
    comparison that is decided over all of them."""

    cls = "evalkit.conclusions.compare"
    bm = base.by_id() if base is not None else {}
    tm = treat.by_id() if treat is not None else {}

    def counts(cid: str) -> str:
        b, t = bm.get(cid), tm.get(cid)
        return (
            (f"baseline {b.c}/{b.n}" if b else "baseline -") + ", " + (f"treatment {t.c}/{t.n}" if t else "treatment -")
        )

    failing = v.kind in fail_on
    cases = []
    for cid, vote in v.case_votes:
        if vote == "loss":
            why = f"the treatment lost this case ({counts(cid)})"
            cases.append(TestCase(cid, cls, "failure" if failing else "passed", why if failing else "", why))
        elif vote == "errored":
            why = f"a trial errored or is unmatched: no vote ({counts(cid)})"
            cases.append(TestCase(cid, cls, "error" if failing else "passed", why if failing else "", why))
        else:
            cases.append(TestCase(cid, cls, "passed", "", f"{vote} ({counts(cid)})"))
    cases.append(
        TestCase(
            "verdict",
            cls,
            "failure" if failing else "passed",
            f"{v.kind}: {v.reason}" if failing else "",
            f"{v.kind}: {v.reason}",
        )
    )
    p = "n/a" if v.p_value is None else f"{v.p_value:.4g}"
    rows = [
        [
            md_escape(v.treatment_arm or "-", 60),
            md_escape(v.baseline_arm or "-", 60),
            f"{v.wins}W / {v.ties}T / {v.losses}L",
            str(v.errored),
            p,
            f"{v.alpha:g}",
        ]
    ]
    sections = [
        "**Verdict:** " + md_escape(f"{v.kind}: {v.reason}", 600),
        "**Judge:** " + md_escape(judge_line(v.judge, v.judge_checks), 300),
        *answered_section(run),
        *judge_sections(getattr(run, "path", None)),
        _table(["treatment", "baseline", "tally (cases)", "errored", "sign-test p", "alpha"], rows),
        _plan_section(v.plan_check),
        spend_section(getattr(run, "summary", None)),
    ]
    if treat is not None:
        lost = [cid for cid, vote in v.case_votes if vote == "loss"]
        rows_l = [(cid, tm[cid].set if cid in tm else "-", counts(cid), "lost to the baseline") for cid in lost]
        sections.append(_failures_section(rows_l[:TOP_FAILURES] or top_failures(run, treat), treat.arm))
    headline = f"verdict {v.kind}" + (" (a failure: --fail-on)" if failing else "")
    return CiReport(
        "evalkit compare",
        not failing,
        headline,
        tuple(cases),
        tuple(sections),
        {"baseline_arm": v.baseline_arm or "", "treatment_arm": v.treatment_arm or ""},
    )


# --------------------------------------------------------------------------- grade --eval-file


def conformance_report(cv: Any, run: Any = None, fail_on: tuple[str, ...] = ()) -> CiReport:
    """`evalkit compare` on one arm: one testcase per trial below the threshold (a
    failure) or errored or missing (an error), then the conformance verdict, which fails
    when its kind is one of `fail_on`."""
    cls = "evalkit.conformance"
    cases = [TestCase(t, cls, "failure", "below the threshold") for t in cv.below_trials]
    for p in cv.problems:
        name, _, why = str(p).partition(": ")
        cases.append(TestCase(name, cls, "error", why or "errored"))
    failing = cv.kind in fail_on
    text = f"{cv.kind}: {cv.reason}"
    cases.append(TestCase("verdict", cls, "failure" if failing else "passed", text if failing else "", text))
    rows = [[md_escape(cv.arm or "-", 60), str(cv.n_trials), str(cv.met), str(cv.below), str(cv.errored)]]
    sections = [
        "**Verdict:** " + md_escape(text, 600),
        *judge_sections(getattr(run, "path", None)),
        _table(["arm", "trials", "met", "below", "errored or missing"], rows),
        spend_section(getattr(run, "summary", None)),
    ]
    headline = f"conformance {cv.kind}" + (" (a failure: --fail-on)" if failing else "")
    return CiReport("compare", not failing, headline, tuple(cases), tuple(sections))


def eval_file_report(rep: CompatReport) -> CiReport:
    """`evalkit grade --eval-file`: one testcase per case; a case that misses its gate is
    a failure (which metric, how many samples passed), a case with gate `none` is
    skipped (shown, never gated)."""
    cls = "evalkit.agent-evals"
    cases = []
    for r in rep.rows:
        figures = f"{r.passes}/{r.samples} samples passed; pass@{rep.k} {r.pass_at_k}, pass^{rep.k} {r.pass_hat_k}"
        if not r.gated:
            cases.append(TestCase(r.id, f"{cls}.{r.set}", "skipped", f"set {r.set!r} has gate none", figures))
        elif r.gate_passed:
            cases.append(TestCase(r.id, f"{cls}.{r.set}", "passed", "", figures))
        else:
            why = f"{r.gate.replace('k', str(rep.k))} not met: {r.passes}/{r.samples} samples passed" + (
                f" (fewer than k={rep.k} samples)" if r.samples < rep.k and r.gate == "pass^k" else ""
            )
            cases.append(TestCase(r.id, f"{cls}.{r.set}", "failure", why, figures))
    rows = [
        [
            md_escape(s.set, 40),
            str(s.cases),
            str(s.pass_at_k),
            str(s.pass_hat_k),
            s.gate if s.gate == "none" else f"{s.gate_passed}/{s.cases} ({s.gate})",
        ]
        for s in rep.sets
    ]
    failed = [
        (r.id, r.set, f"{r.passes}/{r.samples}", f"{r.gate} not met") for r in rep.rows if r.gated and not r.gate_passed
    ]
    sections = [
        "**Verdict:** " + md_escape(rep.verdict_line, 600),
        _table(["set", "cases", f"pass@{rep.k}", f"pass^{rep.k}", "gate"], rows),
        _plan_section(None),
        spend_section(None),
        _failures_section(failed[:TOP_FAILURES], None),
    ]
    sections += [f"- warning: {md_escape(w, 300)}" for w in rep.warnings[:10]]
    return CiReport(
        "evalkit grade --eval-file",
        rep.exit_code == 0,
        rep.verdict_line,
        tuple(cases),
        tuple(sections),
        {"k": str(rep.k)},
    )


# --------------------------------------------------------------------------- run


def run_report(result: RunResult) -> CiReport:
    """`evalkit run`: one testcase per case x arm; a key that errored is an error with the
    last error's message, a key never attempted (the run stopped, e.g. at the cost cap)
    is an error too (INCOMPLETE is never a pass), and the run itself is one more
    testcase, an error when INCOMPLETE. Grading is not part of a run: a finished case
    passes here and `grade` decides its answers."""
    folder = RunFolder(result.path)
    meta = folder.read_meta()
    k = int(meta.get("k") or 1)
    arms = config_arm_names(meta)
    per_arm_cases = meta.get("cases_per_arm") or {}
    done = (
        {(str(d.get("case_id")), str(d.get("arm")), int(d.get("index", -1))) for d in iter_jsonl(result.path / RESULTS)}
        if (result.path / RESULTS).exists()
        else set()
    )
    errs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for e in folder.errors():
        errs.setdefault((str(e.get("case_id")), str(e.get("arm"))), []).append(e)
    cls = "evalkit.run"
    tcs = []
    for arm in arms:
        for cid in per_arm_cases.get(arm) or meta.get("cases") or ():
            got = sum(1 for i in range(k) if (cid, arm, i) in done)
            bad = [e for e in errs.get((cid, arm), []) if (cid, arm, int(e.get("index", -1))) not in done]
            if bad:
                last = bad[-1]
                tcs.append(
                    TestCase(
                        cid,
                        f"{cls}.{arm}",
                        "error",
                        f"{len(bad)} sample(s) errored: {last.get('error')}",
                        f"{got}/{k} samples finished; last error after {last.get('attempts', '?')} "
                        f"attempt(s): {last.get('error')}",
                    )
                )
            elif got < k:
                tcs.append(
                    TestCase(
                        cid,
                        f"{cls}.{arm}",
                        "error",
                        f"{k - got} of {k} samples never ran ({result.reason or 'the run stopped'})",
                    )
                )
            else:
                tcs.append(TestCase(cid, f"{cls}.{arm}", "passed", "", f"{k}/{k} samples finished"))
    tcs.append(
        TestCase(
            "run complete",
            cls,
            "passed" if result.complete else "error",
            result.incomplete_line or "",
            f"{result.ran}/{result.total} cases",
        )
    )
    rows = [[md_escape(a, 60), str(c.get("samples", 0)), str(c.get("errors", 0))] for a, c in result.per_arm.items()]
    headline = "complete" if result.complete else (result.incomplete_line or "INCOMPLETE")  # never a pass
    sections = [
        f"**Run:** `{md_escape(result.path.name, 80)}`: {result.ran}/{result.total} cases, "
        f"{result.samples_ran}/{result.samples_total} samples",
        _table(["arm", "samples", "errors"], rows),
        _plan_section(None, "n/a for a run"),
        spend_section({"spend_usd": result.spend_usd, "cap_usd": result.cap_usd, "avoided_usd": result.avoided_usd}),
    ]
    worst = [
        [md_escape(tc.name, 80), md_escape(tc.classname.rsplit(".", 1)[-1], 40), md_escape(tc.message)]
        for tc in tcs[:-1]
        if tc.outcome == "error"
    ]
    if worst:
        sections.append("**Errored cases:**\n\n" + _table(["case", "arm", "error"], worst[:TOP_FAILURES]))
    return CiReport("evalkit run", result.complete, headline, tuple(tcs), tuple(sections), {"run": str(result.path)})
