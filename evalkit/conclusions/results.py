"""The seed's result shapes, from a grades summary: the metric table overall and per
tag (in the run's `summary.md` after grading) and the RESULTS block `evalkit grade`
ends with (metric, value, vs baseline when the suite has a `baseline.json`, judge
agreement when labels exist).

Every number is one `grades-summary.json` holds (`records.GroupMetrics`, defined once
in `evalkit.numbers.metrics`); this module only lays them out. The "vs baseline" column
compares like with like: the gated case score and the cost per case (list price), the
two numbers a baseline records and a gate reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalkit.foundations import fmt
from evalkit.foundations._io import RUN_JSON_BYTES, read_json_object, write_atomic
from evalkit.foundations.errors import EvalkitError
from evalkit.foundations.layout import BASELINE_FILE, SUMMARY_MD
from evalkit.foundations.records import Baseline, GradesSummary, GroupMetrics

# (label, field(s) of GroupMetrics, kind): the rows of the seed's table, in its order
ROWS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("Success rate", ("sample_pass_rate",), "rate"),
    ("Tool-call correctness", ("tool_call_correctness",), "rate"),
    ("Hallucination rate", ("hallucination_rate",), "rate"),
    ("Refusal rate", ("refusal_rate",), "rate"),
    ("Latency p50 / p95 ms", ("latency_p50_ms", "latency_p95_ms"), "ms"),
    ("Cost per case", ("cost_per_case_usd",), "usd"),
)
# summary.md's metric section sits between these lines, so a re-grade replaces it
BEGIN = "<!-- evalkit grade: metrics -->"
END = "<!-- /evalkit grade: metrics -->"


def _cell(m: GroupMetrics, names: tuple[str, ...], kind: str) -> str:
    vals = [getattr(m, n) for n in names]
    if kind == "ms":
        return fmt.NO_DATA if all(fmt.missing(v) for v in vals) else "/".join(f"{v:.0f}" for v in vals)
    v = vals[0]
    return fmt.usd(v) if kind == "usd" else fmt.fraction(v, 2)


def metric_rows(s: GradesSummary) -> tuple[list[str], list[list[str]]]:
    """The header and rows of the metric table: each metric overall and per tag (a
    metric no sample measured is left out)."""
    groups = [("Overall", s.overall)] + sorted(s.per_tag.items())
    header = ["Metric"] + [name for name, _ in groups]
    rows = []
    for label, names, kind in ROWS:
        cells = [_cell(m, names, kind) for _, m in groups]
        if all(c == fmt.NO_DATA for c in cells):
            continue
        rows.append([label, *cells])
    return header, rows


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    def esc(x: str) -> str:
        return x.replace("|", "\\|")

    out = ["| " + " | ".join(esc(h) for h in header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def summary_section(s: GradesSummary) -> str:
    """The metric section `summary.md` holds after grading (markdown)."""
    header, rows = metric_rows(s)
    return "\n".join(
        [BEGIN, "", "## Metrics (evalkit grade)", "", _md_table(header, rows), "", f"judge: {judge_line(s)}", "", END]
    )


def write_summary_md(run: str | Path, s: GradesSummary) -> Path:
    """Put the metric section into the run's `summary.md` (after what the runner wrote,
    its INCOMPLETE line first when it has one), replacing an earlier grading's."""
    path = Path(run) / SUMMARY_MD
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        text = ""
    if BEGIN in text:
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        text = head.rstrip("\n") + tail
    text = (text.rstrip("\n") + "\n\n" if text.strip() else "") + summary_section(s) + "\n"
    write_atomic(path, text)
    return path


def judge_line(s: GradesSummary) -> str:
    """Judge agreement with people on this run's labels, or why there is none."""
    h = s.human_agreement
    if not h:
        return "no human labels on this run (agreement not measured)" if s.judge_version else "no judge"
    return (
        f"{fmt.fraction(h.get('exact'), 2)} exact / {fmt.fraction(h.get('within_one'), 2)} within-1 "
        f"({int(h.get('n') or 0)} items)"
    )


def suite_baseline(suite: str | Path | None) -> Baseline | None:
    """The suite's accepted `baseline.json`, or None when it has none (or it cannot be
    read: the RESULTS block then says there is no baseline; `gate` reports why)."""
    if not suite:
        return None
    path = Path(suite) / BASELINE_FILE
    if not path.is_file():
        return None
    try:
        return Baseline.from_json(read_json_object(path, BASELINE_FILE, limit=RUN_JSON_BYTES))
    except (EvalkitError, KeyError, TypeError, ValueError):
        return None


def _arm_of(s: GradesSummary, baseline: Baseline | None) -> str | None:
    if baseline is not None and baseline.arm in s.per_arm:
        return baseline.arm
    return next(iter(s.per_arm)) if len(s.per_arm) == 1 else None


def results_block(s: GradesSummary, run: str | Path, baseline: Baseline | None = None) -> list[str]:
    """The RESULTS block `evalkit grade` ends with: run state, spend, the metric table
    overall and per tag, the gated case score and cost per case with their change vs
    the baseline (when there is one), and judge agreement."""
    lines = [f"RESULTS — {run}", "=" * 20, ""]
    state = "complete" if s.complete else f"INCOMPLETE {s.n_graded}/{s.n_expected} samples graded"
    lines.append(f"Run:     {state}")
    spend: Any = s.run_spend_usd
    lines.append(
        f"Spend:   {fmt.usd(spend)} of {fmt.usd(s.cap_usd)} cap (generator + judge); "
        f"judge paid this grading {fmt.usd(s.judge_spend_usd)}, avoided {fmt.usd(s.overall.judge_cache_avoided_usd)}"
    )
    lines.append("")
    header, rows = metric_rows(s)
    arm = _arm_of(s, baseline)
    scores = s.per_arm[arm].scores if arm is not None and arm in s.per_arm else None
    vs = ["-"] * len(rows)
    extra: list[list[str]] = []
    if scores is not None and scores.gated_case_score is not None:
        change = "-"
        if baseline is not None:
            change = fmt.points(scores.gated_case_score - baseline.gated_case_score)
        extra.append([f"Gated case score ({arm})", fmt.fraction(scores.gated_case_score, 2)] + ["" for _ in header[2:]])
        vs.append(change)
    for i, r in enumerate(rows):
        if r[0] == "Cost per case" and baseline is not None and baseline.cost_per_case_usd:
            # like with like: the baseline's is one arm's cost per case, so this is that arm's
            now = s.per_arm[arm].overall.cost_per_case_usd if arm is not None and arm in s.per_arm else None
            if now is not None:
                vs[i] = f"{100 * (now / baseline.cost_per_case_usd - 1):+.0f}%"
    header = header + (["vs baseline"] if baseline is not None else [])
    table = [r + ([v] if baseline is not None else []) for r, v in zip(rows + extra, vs, strict=True)]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *table, strict=True)]
    lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table]
    lines.append(f"Judge agreement   {judge_line(s)}")
    if baseline is None:
        lines.append("vs baseline: no baseline.json in the suite (`evalkit baseline accept` writes one)")
    return lines
