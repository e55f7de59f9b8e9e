"""The reports index: `reports/<run>/report.json` (what the index shows for a run) and
`reports/index.html`, rebuilt from every run's manifest: one row per run and, per suite,
a trend of each arm's headline rate across its runs.

Why hand-written: the index's trend lines are a few lines of inline SVG (no plotting
library is worth starting in the parent process for a sparkline).
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from evalkit.calls.sandbox import NOT_CONTAINED
from evalkit.foundations import fmt
from evalkit.foundations._io import RUN_JSON_BYTES, jsonable, loads_bounded, read_json_object, write_atomic
from evalkit.foundations.errors import InputError
from evalkit.foundations.layout import INDEX_HTML, MANIFEST, SUMMARY_JSON
from evalkit.foundations.records import (
    GATE_CAUSE_INCOMPLETE,
    GATE_CAUSE_JUDGE,
    GATE_CAUSE_NOT_COMPARABLE,
    GateResult,
    RunVerdicts,
    gate_failure_causes,
)
from evalkit.runfolder.runload import grades_summary, judge_trust_notice, run_verdicts
from evalkit.runfolder.runs import (
    RunFolder,
    answered_as,
    config_arm_names,
    config_arm_settings,
    side_run,
    stopping_line,
)

# The notebooks a report can hold (notebooks/<name>.ipynb), in page order, and their titles.
NOTEBOOKS: tuple[str, ...] = (
    "run_summary",
    "pass_at_k",
    "skill_comparison",
    "judge_calibration",
    "power_planning",
    "micro_test",
    "replay",
)
TITLES = {
    "run_summary": "Run summary",
    "pass_at_k": "pass@k and pass^k",
    "skill_comparison": "Arm comparison",
    "judge_calibration": "Judge calibration",
    "power_planning": "Power planning",
    "micro_test": "Micro-test",
    "replay": "Replay",
}


class NotebookPage(Protocol):
    """What the manifest records of an executed notebook (`reports.NotebookReport`)."""

    @property
    def name(self) -> str: ...
    @property
    def ipynb(self) -> Path: ...
    @property
    def html(self) -> Path | None: ...
    @property
    def seconds(self) -> float: ...
    @property
    def error(self) -> str | None: ...
    @property
    def ok(self) -> bool: ...


# The page may load nothing from anywhere: no script at all, images and fonts only as
# data URIs, styles inline. Escaping is the defence; this policy is the second line.
CSP = (
    "default-src 'none'; img-src data:; style-src 'unsafe-inline'; font-src data:; "
    "script-src 'none'; base-uri 'none'; form-action 'none'"
)


def verdict_entries(v: RunVerdicts, complete: bool | None = None) -> list[dict[str, Any]]:
    """What the index shows of a run's `verdicts.json`: each comparison, the gate
    (`gate_verdict`), a single-arm conformance verdict, a micro-test's conclusion, and
    whether the judge may be trusted."""
    out: list[dict[str, Any]] = []
    for c in v.comparisons:
        entry: dict[str, Any] = {
            "kind": c.kind,
            "baseline": c.baseline_arm,
            "treatment": c.treatment_arm,
            "p_value": c.p_value,
            "judge": c.judge,
            "plan_followed": None if c.plan_check is None else c.plan_check.ok,
        }
        if c.plan_check is not None and not c.plan_check.ok:
            # a verdict that did not follow its plan is never shown as a plain (green) pass
            entry.update(
                label=f"{c.kind}, plan NOT followed",
                style="inconclusive",
                text="plan NOT followed: " + "; ".join(c.plan_check.flags),
            )
        elif c.plan_check is None:
            entry.update(label=f"{c.kind} (no plan)", text="exploratory: no pre-registered plan")
        out.append(entry)
    if v.gate is not None:
        out.append(gate_verdict(v.gate, complete=complete))
    if v.conformance is not None:
        cv = v.conformance
        out.append({"kind": cv.kind, "label": f"conformance {cv.kind}", "text": f"arm {cv.arm}: {cv.reason}"})
    if v.microtest is not None:
        out.append({"kind": "micro-test", "text": v.microtest.conclusion})
    if v.judge_trust is not None and v.judge_trust.trusted is not None:
        t = v.judge_trust
        out.append(
            {
                "kind": "pass" if t.trusted else "inconclusive",
                "label": "judge trusted" if t.trusted else "judge not trusted",
                "text": t.reason,
            }
        )
    return out


def write_manifest(
    run: Path,
    out_dir: Path,
    results: Iterable[NotebookPage],
    skipped: Mapping[str, str],
    *,
    run_dir: Path | None = None,
    pages: Mapping[str, str] | None = None,
) -> Path:
    """`reports/<run>/report.json`: what the index shows for the run (date, suite, arms,
    spend, the headline rate of each arm, verdicts, the judge's notice) and where each
    notebook's page is. It reads the files the earlier steps wrote: `summary.json`,
    `grades-summary.json` (the sample pass rate and cost per case of each arm) and
    `verdicts.json`. `run`: the folder the notebooks read; `run_dir`: the run folder it
    stands for (a redacted copy's original), `run` unless given. `pages`: the run's
    explorer pages (`explorer`, `diff`: file names; `against`: the run the diff holds
    it against), linked from the index."""
    meta = RunFolder(run).read_meta()
    summary_p = run / SUMMARY_JSON
    summary = read_json_object(summary_p, SUMMARY_JSON, limit=RUN_JSON_BYTES) if summary_p.exists() else {}
    grades = grades_summary(run)
    headline = {a: s.overall.sample_pass_rate for a, s in grades.per_arm.items()} if grades else {}
    costs = {a: s.overall.cost_per_case_usd for a, s in grades.per_arm.items()} if grades else {}
    manifest = {
        "run": run.name,
        "run_dir": str(run_dir if run_dir is not None else run),
        "created": meta.get("created"),
        "suite": meta.get("suite_name") or Path(str(meta.get("suite") or "")).name or None,
        "source": meta.get("source"),
        "arms": config_arm_names(meta),
        "arm_models": {a: answered_as(st) for a, st in config_arm_settings(meta).items()},
        "k": meta.get("k"),
        # a micro-test or a replay of cached answers: listed, but no point of the suite's trend
        "side_run": side_run(run, meta),
        "complete": summary.get("complete"),
        "stopped_early": stopping_line(summary),  # "stopped early at n of N cases (pass), saved $x (...)"
        "judge_notice": judge_trust_notice(run),
        # the program under test ran unsandboxed: the index says so, as every page does
        "not_contained": NOT_CONTAINED if (summary.get("isolation") or meta.get("isolation")) == "none" else None,
        "spend_usd": summary.get("spend_usd"),
        "judge_spend_usd": grades.judge_spend_usd if grades is not None else None,  # the last grading pass
        "cache_avoided_usd": summary.get("avoided_usd"),
        "graded": grades is not None,
        "headline_metric": "sample_pass_rate",
        "headline": headline,
        "cost_per_case_usd": costs,
        "verdicts": verdict_entries(run_verdicts(run), summary.get("complete")),
        "notebooks": [
            {
                "name": r.name,
                "html": r.html.name if r.html else None,
                "ipynb": r.ipynb.name,
                "ok": r.ok,
                "error": r.error,
                "seconds": round(r.seconds, 3),
            }
            for r in results
        ],
        "skipped": dict(skipped),
        "pages": dict(pages or {}),
    }
    path = out_dir / MANIFEST
    write_atomic(path, json.dumps(jsonable(manifest), indent=2) + "\n")
    return path


def gate_verdict(gate: GateResult | Mapping[str, Any], *, complete: bool | None = None) -> dict[str, Any]:
    """The index entry for a run's gate, labelled by cause: a gate that failed because the
    run was incomplete (no rate was read) is `gate failed: incomplete run`, shown as
    inconclusive and never as a regression; only a case-score drop or a cost increase is
    a regression. `gate` is the gate's result, or (in a manifest of evalkit 0.1) the
    `{arm, passed, reasons}` its notebook recorded."""
    if isinstance(gate, GateResult):
        gate = {
            "arm": gate.arm,
            "passed": gate.passed,
            "reasons": list(gate.reasons),
            "causes": gate.causes,
            "read_rates": gate.read_rates,
            "against": gate.against(),
        }
    against = gate.get("against") or f"{gate.get('arm')} vs baseline"
    if gate.get("passed"):
        return {"kind": "pass", "label": "gate passed", "text": against}
    causes = list(gate.get("causes") or gate_failure_causes(gate.get("reasons") or (), gate.get("read_rates")))
    if complete is False and not gate.get("reasons") and not gate.get("causes"):
        causes = [GATE_CAUSE_INCOMPLETE]  # an older manifest without reasons, for a run known INCOMPLETE
    regression = bool(causes) and not (
        {GATE_CAUSE_INCOMPLETE, GATE_CAUSE_NOT_COMPARABLE, GATE_CAUSE_JUDGE} & set(causes)
    )
    why = "; ".join(str(r) for r in gate.get("reasons") or ())
    return {
        "kind": "regression" if regression else "inconclusive",
        "label": "gate failed: " + (" / ".join(causes) or "reason not recorded"),
        "causes": causes,
        "text": against + (f": {why}" if why else ""),
    }


def load_manifests(reports_dir: str | Path) -> list[dict[str, Any]]:
    out = []
    for p in sorted(Path(reports_dir).glob(f"*/{MANIFEST}")):
        try:
            m = loads_bounded(p.read_text(encoding="utf-8"), p)
        except (json.JSONDecodeError, InputError):
            continue
        m["_dir"] = p.parent.name
        out.append(m)
    return out


def trend_svg(
    series: Mapping[str, Sequence[float | None]], labels: Sequence[str], *, width: int = 320, height: int = 90
) -> str:
    """An inline SVG line chart of rates in [0, 1] per series across runs (oldest
    first), with a legend; every text escaped."""
    n = len(labels)
    pad_l, pad_r, pad_t, pad_b = 28, 8, 8, 16
    w, h = width - pad_l - pad_r, height - pad_t - pad_b

    def xy(i: int, v: float) -> tuple[float, float]:
        x = pad_l + (w * i / (n - 1) if n > 1 else w / 2)
        return x, pad_t + h * (1 - v)

    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height + 14 * len(series)}' "
        f"role='img' aria-label='headline rates across runs'>",
        f"<rect x='{pad_l}' y='{pad_t}' width='{w}' height='{h}' fill='none' stroke='#ccc'/>",
        f"<text x='2' y='{pad_t + 8}' font-size='9'>100%</text>",
        f"<text x='8' y='{pad_t + h}' font-size='9'>0%</text>",
    ]
    for j, (name, vals) in enumerate(series.items()):
        color = fmt.ARM_PALETTE[j % len(fmt.ARM_PALETTE)]  # the colour the arm has on every page
        pts = [xy(i, float(v)) for i, v in enumerate(vals) if v is not None]
        if len(pts) > 1:
            parts.append(
                f"<polyline fill='none' stroke='{color}' stroke-width='1.5' points='"
                + " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
                + "'/>"
            )
        for (x, y), (i, v) in zip(pts, [(i, v) for i, v in enumerate(vals) if v is not None], strict=True):
            parts.append(
                f"<circle cx='{x:.1f}' cy='{y:.1f}' r='2.5' fill='{color}'>"
                f"<title>{html.escape(str(labels[i]))}: {float(v):.1%}</title></circle>"
            )
        parts.append(
            f"<text x='{pad_l}' y='{height + 10 + 14 * j}' font-size='10' fill='{color}'>"
            f"{html.escape(str(name))} (latest {_pct(vals[-1] if vals else None)})</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _arms_cell(m: Mapping[str, Any]) -> str:
    """The arms of a run, each with the model it ran (escaped): `arm (model)`."""
    models = m.get("arm_models") or {}
    return "<br>".join(
        html.escape(str(a)) + (f" <span class='model'>({html.escape(str(models[a]))})</span>" if models.get(a) else "")
        for a in m.get("arms") or []
    )


def _explorer_links(m: Mapping[str, Any]) -> str:
    """The index's links to a run's explorer and its diff (escaped), when it has them."""
    found = m.get("pages")
    pages: Mapping[str, Any] = found if isinstance(found, dict) else {}
    e, out = html.escape, ""
    if pages.get("explorer"):
        out += f" <a href='{e(m['_dir'])}/{e(str(pages['explorer']))}'>Explorer</a>"
    if pages.get("conversations"):  # a conversation run's page (evalkit.telling.conversations_page)
        out += f" <a href='{e(m['_dir'])}/{e(str(pages['conversations']))}'>Conversations</a>"
    if pages.get("diff"):
        against = e(str(pages.get("against") or ""))
        out += f" <a href='{e(m['_dir'])}/{e(str(pages['diff']))}'>Diff against {against}</a>"
    return out


def _pct(v: Any) -> str:
    return fmt.pct(v)


_INDEX_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em;color:#222;max-width:1200px}
table{border-collapse:collapse;margin:0.5em 0 1.5em 0}th,td{border:1px solid #ddd;padding:4px 8px;vertical-align:top;
font-size:13px}th{background:#f4f4f4;text-align:left}.pass{color:#1a7f37;font-weight:bold}
.regression{color:#c62828;font-weight:bold}.inconclusive{color:#8a6d00}.no-improvement{color:#555}
.warn{color:#c62828}code{font-size:12px}.skipped{color:#666;font-size:12px}
"""


def _judge_spend(m: Mapping[str, Any]) -> str:
    """The judge's spend beside the run's in the index's spend cell (`run.summary`'s spend
    is the run's calls; grading pays the judge on the same ledger), or "" when none."""
    judge = m.get("judge_spend_usd")
    return "" if not judge else f"<br>+ judge {html.escape(fmt.usd(judge))}"


def _relabel_old_gate_verdicts(m: dict[str, Any]) -> None:
    """A manifest written before gate entries carried their cause: "gate FAIL (...)" was
    labelled regression even for an incomplete run; label it by cause now (in place)."""
    for i, v in enumerate(m.get("verdicts") or []):
        if v.get("kind") == "regression" and "label" not in v and str(v.get("text", "")).startswith("gate FAIL"):
            m["verdicts"][i] = {**gate_verdict({"passed": False}, complete=m.get("complete")), "text": v["text"]}


def _verdicts_cell(m: Mapping[str, Any]) -> str:
    """A run's verdicts, one a line: label, arms, p-value, judge and text."""
    e = html.escape
    return (
        "<br>".join(
            (
                f"<span class='{e(str(v.get('style') or v['kind']))}'>{e(str(v.get('label') or v['kind']))}</span>"
                + (f" {e(str(v.get('treatment')))} vs {e(str(v.get('baseline')))}" if v.get("baseline") else "")
                + (f" (p = {e(fmt.pvalue(v['p_value']))})" if v.get("p_value") is not None else "")
                + (f", {e(str(v['judge']))} judge" if v.get("judge") else "")
                + (f": {e(str(v.get('text')))}" if v.get("text") else "")
            )
            for v in m.get("verdicts") or []
        )
        or "&mdash;"
    )


def _links_cell(m: Mapping[str, Any]) -> str:
    """A run's pages: each notebook page (marked when it failed), the explorer and
    diff links, and the pages not made with why."""
    e = html.escape
    links = " ".join(
        f"<a href='{e(m['_dir'])}/{e(nb['html'])}'>{e(TITLES.get(nb['name'], nb['name']))}</a>"
        + ("" if nb.get("ok") else " <span class='warn'>(failed)</span>")
        for nb in m.get("notebooks") or []
        if nb.get("html")
    )
    links += _explorer_links(m)
    skipped = m.get("skipped") or {}
    if isinstance(skipped, dict) and skipped:  # the pages not made, each with why (nothing to show)
        links += (
            "<br><span class='skipped'>not made: "
            + "; ".join(f"{e(TITLES.get(str(name), str(name)))} ({e(str(why))})" for name, why in skipped.items())
            + "</span>"
        )
    return links


def _run_notes(m: Mapping[str, Any]) -> str:
    """What the run cell says under the run's name: incomplete, the judge's notice, not
    contained, a side run, stopped early."""
    e = html.escape
    notes = "" if m.get("complete") in (True, None) else " <span class='warn'>INCOMPLETE</span>"
    if m.get("judge_notice"):
        notes += f"<br><span class='warn'>{e(str(m['judge_notice']))}</span>"
    if m.get("not_contained"):
        notes += f"<br><span class='warn'>{e(str(m['not_contained']))}</span>"
    if m.get("side_run"):
        notes += f"<br><span class='skipped'>{e(str(m['side_run']))}: not in the trend</span>"
    if m.get("stopped_early"):
        notes += f"<br><span class='stopped'>{e(str(m['stopped_early']))}</span>"
    return notes


def _run_row(m: Mapping[str, Any]) -> str:
    """One run's row of the index: date, run, suite, arms, rates, verdicts, spend, pages."""
    e = html.escape
    rates = ", ".join(f"{e(str(a))} {_pct(v)}" for a, v in (m.get("headline") or {}).items()) or (
        "<span class='warn'>not graded: nothing to report</span>" if m.get("graded") is False else "&mdash;"
    )
    return (
        f"<tr><td>{e(str(m.get('created') or ''))}</td><td><code>{e(m['_dir'])}</code>{_run_notes(m)}</td>"
        f"<td>{e(str(m.get('suite') or ''))}</td><td>{_arms_cell(m)}</td>"
        f"<td>{rates}</td><td>{_verdicts_cell(m)}</td>"
        f"<td>{e(fmt.usd(m.get('spend_usd')))}{_judge_spend(m)}</td><td>{_links_cell(m)}</td></tr>"
    )


def _run_rows(runs: list[dict[str, Any]]) -> list[str]:
    """The runs table's rows: grouped by suite (the suites in name order, each under a
    header row), each suite's runs newest first."""
    rows = []
    grouped = sorted(reversed(runs), key=lambda m: str(m.get("suite") or "(no suite)"))
    current: str | None = None
    for m in grouped:
        suite_name = str(m.get("suite") or "(no suite)")
        if suite_name != current:
            current = suite_name
            n_runs = sum(1 for r in runs if str(r.get("suite") or "(no suite)") == suite_name)
            rows.append(
                f"<tr class='suite'><th colspan='8'>suite {html.escape(suite_name)} ({n_runs} run(s))</th></tr>"
            )
        _relabel_old_gate_verdicts(m)
        rows.append(_run_row(m))
    return rows


def _trend_rows(runs: list[dict[str, Any]]) -> list[str]:
    """Per suite, a trend of each arm's sample pass rate across its runs (side runs
    left out); one run, or no graded run, says so instead."""
    e = html.escape
    trends = []
    by_suite: dict[str, list[dict[str, Any]]] = {}
    for m in runs:
        if not m.get("side_run"):
            by_suite.setdefault(str(m.get("suite") or "(no suite)"), []).append(m)
    for suite, ms in sorted(by_suite.items()):
        arms = list(dict.fromkeys(a for m in ms for a in (m.get("headline") or {})))
        series = {a: [(m.get("headline") or {}).get(a) for m in ms] for a in arms}
        labels = [m["_dir"] for m in ms]
        if not arms:
            chart = "<i>no graded runs</i>"
        elif len(ms) == 1:  # one point per arm is no trend
            chart = "one run so far (a trend needs two): " + e(
                ", ".join(f"{a} {fmt.pct(vals[0])}" for a, vals in series.items())
            )
        else:
            chart = trend_svg(series, labels)
        trends.append(f"<tr><td>{e(suite)}</td><td>{len(ms)}</td><td>{chart}</td></tr>")
    return trends


def build_index(reports_dir: str | Path) -> Path:
    """Rebuild `reports_dir/index.html` from every run's manifest: one row per run
    (date, suite, arms, verdicts, spend, links to each notebook page) and, per suite, a
    trend of each arm's sample pass rate across its runs."""
    root = Path(reports_dir)
    root.mkdir(parents=True, exist_ok=True)
    runs = load_manifests(root)
    runs.sort(key=lambda m: (m.get("created") or "", m["_dir"]))
    rows = _run_rows(runs)
    trends = _trend_rows(runs)
    page = (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">"
        f"<title>evalkit reports</title><style>{_INDEX_CSS}</style></head><body>"
        "<h1>evalkit reports</h1>"
        f"<p>{len(runs)} run(s). Each run links to its notebooks, rendered as self-contained pages; the executed "
        "notebooks sit beside them and reopen in JupyterLab. The rate shown per arm is the sample pass rate: "
        "samples whose every check passed / the samples the run was expected to produce (a missing, errored or "
        "ungraded sample is a failure, never a pass), from the run's grades-summary.json; the verdicts are those "
        "compare, gate and report recorded in its verdicts.json.</p>"
        "<h2>Runs</h2><table><thead><tr><th>date</th><th>run</th><th>suite</th><th>arms</th>"
        "<th>sample pass rate</th><th>verdicts</th><th>spend (run, then judge)</th><th>reports</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
        "<h2>Trend of the sample pass rate, per suite</h2>"
        "<table><thead><tr><th>suite</th><th>runs</th><th>sample pass rate per arm, oldest run first</th></tr></thead>"
        "<tbody>" + "".join(trends) + "</tbody></table></body></html>\n"
    )
    path = root / INDEX_HTML
    write_atomic(path, page)
    return path
