"""The explorer: one self-contained HTML page per run (`explorer.html`) listing every
sample, with filters kept in the URL fragment, a case view with each arm's k samples
side by side, agent trajectories turn by turn, and the run's verdict, gate and findings
at the top linking to the cases they rest on; and `diff.html`, a run held against
another, per case and arm, regressions first, with the paired test of the change.

The page is a file, not a server: the data are embedded as gzip-compressed JSON in
base64 (decoded in the page with the browser's `DecompressionStream`, so a base64 text
cannot close its `<script>` element), its one script is allowed by its hash in a
Content-Security-Policy that lets the page load nothing from anywhere, and every text
of the run (model output, tool results, reasons) is put into the page as text nodes,
never parsed as HTML. A large run's page also carries its first rows apart (the head),
drawn before the rest is read, and the list renders only the rows in view: a
100,000-sample run shows rows in half a second, every row in under three
(benchmarks/bench_explorer.py).

Why hand-written: the explorers of other tools are servers (inspect view, promptfoo
view) or hosted; none shows a statistical verdict beside the rows it rests on.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import html
import json
import math
import re
from dataclasses import dataclass, replace
from importlib import resources
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd

from evalkit.conclusions.gates import gate_decision, load_baseline, run_as_baseline, run_metrics
from evalkit.foundations._io import jsonable, write_atomic
from evalkit.foundations._text import storable_json
from evalkit.foundations.errors import InputError
from evalkit.foundations.layout import BASELINE_FILE, GRADES, RUN_CONFIG
from evalkit.foundations.records import GateResult, RunMetrics, RunVerdicts
from evalkit.numbers.metrics import score_of
from evalkit.numbers.stats import sign_test
from evalkit.runfolder.runload import (
    GradeKey,
    Run,
    as_run,
    case_order,
    case_table,
    collector_paused,
    judge_trust_notice,
    key_tuples,
    keyed_values,
    passed_value,
    run_verdicts,
    sample_keys,
)
from evalkit.runfolder.runs import RunFolder, answered_line, find_suite_dir
from evalkit.runfolder.trajectories import Trajectory, read_trajectory
from evalkit.telling.report_index import verdict_entries
from evalkit.telling.workflow import repo_root_of

SCHEMA = "evalkit.explorer/1"
EXPLORER_HTML = "explorer.html"
DIFF_HTML = "diff.html"
TEMPLATE = "explorer.html"  # evalkit/templates/explorer.html: the page, its script and style

# Outcome codes of a sample row (the page names them).
PASSED, FAILED, ERRORED, UNGRADED = 0, 1, 2, 3
# Change codes of a diff row, in the order the diff lists them.
CHANGES = ("pass -> fail", "fail -> pass", "output changed", "same", "only in this run", "only in the other run")


@dataclass(frozen=True)
class ExplorerPage:
    """A page written by `write_explorer` or `write_diff`: where, and how much it holds."""

    path: Path
    rows: int
    bytes: int


# --- the data of one run ----------------------------------------------------------------


def _num(v: Any) -> float | None:
    """A finite number, else None (NaN from pandas' empty cells included)."""
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _text(v: Any) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)


_NO_GRADE: Any = object()  # a sample's grade cell where it has no grade line


def _outcome(passed: Any, checks: Any, error: Any, held: Any) -> tuple[int, str]:
    """A sample's outcome code and why, from its grade's cells (`passed` is `_NO_GRADE`
    for a sample with no grade line)."""
    if passed is True:  # most samples, first: what `passed_value` makes of True
        return PASSED, ""
    if passed is _NO_GRADE:
        return UNGRADED, "not graded"
    ok = passed_value(passed)
    if ok is True:
        return PASSED, ""
    if ok is False:
        failed = [str(c.get("name")) for c in checks or () if isinstance(c, dict) and not c.get("passed")]
        return FAILED, ", ".join(failed) or "failed"
    if _text(error):
        return ERRORED, f"grading error: {_text(error)}"
    return UNGRADED, f"judge held: {_text(held)}" if _text(held) else "no verdict"


def _checks(checks: Any) -> list[list[Any]]:
    """A grade's checks as `[name, passed (0/1), reason]` rows."""
    return [
        [str(c.get("name")), 1 if c.get("passed") else 0, _text(c.get("reason"))]
        for c in checks or ()
        if isinstance(c, dict)
    ]


# --- whole columns: what `_num`, `_text` and `cached is True` make of each cell of a
# column, with no Python call per cell where the column's dtype says what its cells are
# (a Python call per cell and field was 3 of the 6.5 s of a 200,000-sample run's page)


def _texts(col: pd.Series) -> list[str]:
    """`_text` of each cell: a string column with no gap through `str` (as `_text` of a str)."""
    values = col.tolist()
    if isinstance(col.dtype, pd.StringDtype) and not col.hasnans:
        return list(map(str, values))
    return list(map(_text, values))


def _nums(col: pd.Series) -> list[float | None]:
    """`_num` of each cell: a column of None as it is, a float64 column's finite cells as
    they are (`tolist` gives Python floats), an integer column's as floats, any other
    through `_num`."""
    values: list[Any] = col.tolist()
    if values.count(None) == len(values):  # a judge's score where no case is judged
        return values
    if col.dtype == np.float64:
        if np.isfinite(col.to_numpy()).all():
            return values
        return [v if math.isfinite(v) else None for v in values]
    if isinstance(col.dtype, np.dtype) and col.dtype.kind in ("i", "u"):
        return list(map(float, values))
    return list(map(_num, values))


def _flags(col: pd.Series) -> list[int]:
    """1 where a cell is True (not merely truthy), else 0: a bool column's cells as ints."""
    values = col.tolist()
    if isinstance(col.dtype, np.dtype) and col.dtype.kind == "b":
        return list(map(int, values))
    return [1 if v is True else 0 for v in values]


def _numbered(numbers: dict[str, int], names: list[str]) -> list[int]:
    """Each name's number in `numbers`; a name not in it is numbered next, in the order met."""
    for name in dict.fromkeys(names):
        numbers.setdefault(name, len(numbers))
    return list(map(numbers.__getitem__, names))


def _grade_rows(run: Run) -> list[int] | None:
    """For each sample, the row of its grade (its key's last row, `runload.sample_keys`:
    the one reading of "a sample's grade" the pass@k metrics, the verdict and the failures
    view share), -1 where it has none; None when every sample's grade is the row of its
    own number (grades.jsonl in the samples' order: columns as they are)."""
    if not len(run.grades):
        return [-1] * len(run.samples)
    rows = sample_keys(run).grade_row
    # the columns as they are only when they hold one grade per sample, in the samples' order
    # (a trailing grade of a key with no sample would otherwise run on past the samples)
    if len(run.grades) == len(rows) and np.array_equal(rows, np.arange(len(rows))):
        return None
    return list(rows.tolist())


def _taken(values: list[Any], rows: list[int] | None, missing: Any) -> list[Any]:
    """`values` (one per grade row) for each sample (`rows`: `_grade_rows`), `missing`
    for a sample with no grade."""
    return values if rows is None else list(map([*values, missing].__getitem__, rows))


def _grade_columns(run: Run) -> dict[str, list[Any]]:
    """The page's columns of each sample's grade (outcome and why, checks, judge score
    and reason), a row per sample."""
    g = run.grades
    rows = _grade_rows(run)
    checks = _taken(g["checks"].tolist(), rows, None)
    cells = (_taken(g[c].tolist(), rows, None) for c in ("error", "judge_held"))
    outcomes = list(map(_outcome, _taken(g["passed"].tolist(), rows, _NO_GRADE), checks, *cells))
    return {
        "o": list(map(itemgetter(0), outcomes)),
        "w": list(map(itemgetter(1), outcomes)),
        "ck": list(map(_checks, checks)),  # a list of its own for each sample
        "js": _taken(_nums(g["judge_score"]), rows, None),
        "jr": _taken(_texts(g["judge_reason"]), rows, ""),
    }


class _Columns:
    """The sample rows of a page as columns (one list per field): a 100,000-sample run
    is a few lists, not 100,000 objects with the same keys."""

    FIELDS = ("c", "a", "i", "o", "w", "out", "ck", "js", "jr", "cost", "lat", "ca", "tr")

    def __init__(self) -> None:
        self.cols: dict[str, list[Any]] = {f: [] for f in self.FIELDS}

    def add(self, **row: Any) -> None:
        for f in self.FIELDS:
            self.cols[f].append(row.get(f))

    def extend(self, columns: dict[str, list[Any]]) -> None:
        """Append rows a whole column at a time (every field's, all of one length)."""
        for f in self.FIELDS:
            self.cols[f].extend(columns[f])

    def in_order(self) -> dict[str, list[Any]]:
        """The columns with the rows in case order, then arm, then sample number (the
        page lists them so without sorting, and its head is the first rows)."""
        order = _row_order(self.cols["c"], self.cols["a"], self.cols["i"])
        if order is None:
            return dict(self.cols)
        return {f: list(map(col.__getitem__, order)) for f, col in self.cols.items()}


def _row_order(c: list[int], a: list[int], i: list[int]) -> list[int] | None:
    """The rows sorted by (c, a, i), ties in their order; None when they are so already.
    numpy's lexsort (stable, as `sorted`) sorts 200,000 rows in milliseconds, where a key
    tuple per row took a quarter second; `sorted` for a sample number past 64 bits."""
    try:
        keys = [np.array(x, dtype=np.int64) for x in (i, a, c)]  # lexsort: the last is the first key
    except OverflowError:
        return sorted(range(len(c)), key=lambda r: (c[r], a[r], i[r]))
    order = np.lexsort(keys)
    return None if bool((order == np.arange(len(order))).all()) else list(order.tolist())


def _trajectory_json(t: Trajectory) -> dict[str, Any]:
    """An agent sample's last attempt, turn by turn: the messages the first call sent,
    each call's answer and the tool calls it led to, and how the attempt ended."""
    turns = []
    for turn in t.turns():
        call, answer = turn.call, (turn.call.get("answer") or {})
        turns.append(
            {
                "n": turn.number,
                "status": _text(call.get("status")),
                "text": _text(answer.get("text")),
                "asked": [_text(json.dumps(tc, default=str)) for tc in answer.get("tool_calls") or ()],
                "tools": [
                    {
                        "name": _text(x.get("name")),
                        "arguments": json.dumps(x.get("arguments"), default=str),
                        "result": _text(x.get("result")),
                        "error": _text(x.get("error")),
                        "source": _text(x.get("source")),
                    }
                    for x in turn.tools
                ],
            }
        )
    first = t.model_calls[0].get("request") or {} if t.model_calls else {}
    messages = [
        [_text(m.get("role")), _text(m.get("content"))] for m in first.get("messages") or () if isinstance(m, dict)
    ]
    if isinstance(first.get("prompt"), str):
        messages.append(["prompt", first["prompt"]])
    end = t.end or {}
    return {
        "messages": messages,
        "turns": turns,
        "finished": t.finished,
        "status": _text(end.get("status")) or "cut off",
        "stop": _text(end.get("stop")),
        "error": _text(end.get("error")),
        "attempts": t.attempts,
    }


def _sample_columns(run: Run, cases: dict[str, int], arms: dict[str, int]) -> tuple[_Columns, list[Any]]:
    """Every sample of the run (and every failed key of errors.jsonl) as page columns,
    and the trajectories the agent samples point at."""
    s = run.samples
    keys = key_tuples(s)
    tr, trajectories = _trajectory_column(run, keys)
    out = _Columns()
    out.extend(
        {
            "c": _numbered(cases, list(map(itemgetter(0), keys))),
            "a": _numbered(arms, list(map(itemgetter(1), keys))),
            "i": list(map(itemgetter(2), keys)),
            **_grade_columns(run),
            "out": _texts(s["output"]),
            "cost": _nums(s["cost_usd"]),
            "lat": _nums(s["latency_ms"]),
            "ca": _flags(s["cached"]),
            "tr": tr,
        }
    )
    _add_errors(run, out, cases, arms)
    return out, trajectories


def _trajectory_column(run: Run, keys: list[GradeKey]) -> tuple[list[int], list[dict[str, Any]]]:
    """Each sample's trajectory number (-1: none), and the trajectories: those of the
    agent samples (an `agent`, or a number of turns) whose file is there, in row order."""
    s = run.samples
    tr, trajectories = [-1] * len(keys), list[dict[str, Any]]()
    for r, (agent, turns) in enumerate(zip(s["agent"].tolist(), s["turns"].tolist(), strict=True)):
        if isinstance(agent, dict) or (turns is not None and _num(turns) is not None):
            t = read_trajectory(run.path, *keys[r])
            if t is not None:
                tr[r] = len(trajectories)
                trajectories.append(_trajectory_json(t))
    return tr, trajectories


def _add_errors(run: Run, out: _Columns, cases: dict[str, int], arms: dict[str, int]) -> None:
    """The keys that never made a sample (errors.jsonl): errored rows, with why."""
    e = run.errors
    if not len(e):
        return
    for (case_id, arm, index), (error, attempts) in keyed_values(e, ("error", "attempts")).items():
        tries = f" ({int(attempts)} attempt(s))" if _num(attempts) is not None else ""
        out.add(
            c=cases.setdefault(case_id, len(cases)),
            a=arms.setdefault(arm, len(arms)),
            i=index,
            o=ERRORED,
            w=_text(error) + tries,
            out="",
            ck=[],
            js=None,
            jr="",
            cost=None,
            lat=None,
            ca=0,
            tr=-1,
        )


def _cases_json(run: Run, order: list[str]) -> list[dict[str, Any]]:
    table = case_table(run).by_id()
    out = []
    for cid in order:
        row = table.get(cid)
        out.append(
            {
                "id": cid,
                "set": row.set if row else "capability",
                "tags": list(row.tags) if row else [],
                "judged": bool(row.judged) if row else False,
            }
        )
    return out


def _comparisons_json(verdicts: RunVerdicts) -> list[dict[str, Any]]:
    """Each two-arm verdict of verdicts.json (`verdicts`, read once: a large run's holds
    every case's vote) with its per-case votes (win / loss / tie / errored): the
    discordant cases are those the sign test rests on."""
    return [
        {
            "baseline": v.baseline_arm,
            "treatment": v.treatment_arm,
            "kind": v.kind,
            "p_value": v.p_value,
            "wins": v.wins,
            "losses": v.losses,
            "ties": v.ties,
            "errored": v.errored,
            "test": v.test,
            "reason": v.reason,
            "votes": dict(v.case_votes),
        }
        for v in verdicts.comparisons
    ]


def suite_baseline(run: Run | str | Path) -> Path | None:
    """The run's suite's `baseline.json`, when the suite folder and the file are there."""
    run = as_run(run)
    suite = find_suite_dir(run.path, run.config.get("suite"))
    return suite / BASELINE_FILE if suite is not None and (suite / BASELINE_FILE).is_file() else None


def _repo_relative(path: str, near: Path) -> str:
    """`path` as a shared page may show it: relative to the repository holding `near`
    (the run), else its last three parts (`evals/SUITE/baseline.json`); never a path
    of this machine."""
    p = Path(path)
    if not p.is_absolute():
        return p.as_posix()
    try:
        return p.resolve().relative_to(repo_root_of(near)).as_posix()
    except ValueError:
        return "/".join(p.parts[-3:])


def _gate_json(gate: GateResult, dropped: Drops, near: Path) -> dict[str, Any]:
    """A gate's result for the page: its decision, what it was gated against (in
    `GateResult.against`'s words, the paths repository-relative: `near` is the run),
    checks, reasons, notes, the cases whose score dropped against what it was gated on,
    and those left out of that (a side with fewer than k samples has no case score)."""
    shown = replace(
        gate,
        run=Path(gate.run).name if gate.run else "",
        baseline=_repo_relative(gate.baseline, near) if gate.baseline else "",
    )
    return {
        "arm": gate.arm,
        "passed": gate.passed,
        "baseline": shown.baseline,
        "against": shown.against(),
        "reasons": list(gate.reasons),
        "notes": list(gate.notes),
        "checks": [
            {
                "kind": c.kind,
                "group": c.group,
                "n": c.n_cases,
                "baseline": c.baseline,
                "current": c.current,
                "change": c.change,
                "threshold": c.threshold,
                "p": c.p_adjusted,
                "failed": c.failed,
            }
            for c in gate.checks
        ],
        "dropped": list(dropped.fell),
        "short": list(dropped.short),
    }


@dataclass(frozen=True)
class Drops:
    """The cases whose case score fell (the largest drop first), and the shared cases
    left out because a side has fewer than k samples (an errored or missing sample:
    no case score, as `gates.gate_metrics` says)."""

    fell: tuple[str, ...] = ()
    short: tuple[str, ...] = ()


def _gated_baseline(run: Run, gate: GateResult, given: Path | None) -> Path | None:
    """The baseline.json the recorded gate read: the path its record names while that
    file is there, else `given`, else the suite's."""
    for p in (Path(gate.baseline) if gate.baseline else None, given, suite_baseline(run)):
        if p is not None and p.is_file():
            return p
    return None


def _dropped_cases(run: Run, gate: GateResult, baseline: Path | None) -> Drops:
    """The cases whose case score fell against the baseline the gate read (its per-case
    counts), worst first; none for a baseline of rates only, or one accepted from
    another run than the one the gate read (re-accepted since)."""
    if baseline is None or gate.arm is None or not gate.read_rates:
        return Drops()
    read = load_baseline(baseline)
    if read.metrics is None or (gate.baseline_run and read.run_stamp != gate.baseline_run):
        return Drops()
    return drops(run_metrics(run, arm=gate.arm), read.metrics)


def drops(cur: RunMetrics, base: RunMetrics) -> Drops:
    """The cases of `cur` whose case score is below `base`'s, the largest drop first;
    a case with fewer than k samples on either side is skipped and listed as short."""
    bm = base.by_id()
    fell, short = [], []
    for c in cur.cases:
        if c.case_id not in bm:
            continue
        if c.n < cur.k or bm[c.case_id].n < base.k:
            short.append(c.case_id)
            continue
        change = score_of(cur, c) - score_of(base, bm[c.case_id])
        if change < 0:
            fell.append((change, c.case_id))
    return Drops(tuple(cid for _, cid in sorted(fell)), tuple(short))


def run_data(run: Run | str | Path, *, baseline: str | Path | None = None) -> dict[str, Any]:
    """What a run's explorer shows, as JSON: cases, arms, every sample (columns),
    trajectories, the verdicts recorded in verdicts.json with their case votes, the
    gate with the cases that dropped, and the findings the index shows.
    `baseline`: the baseline.json the gate was read against (default: the suite's)."""
    run = as_run(run)
    order = case_order(run)
    cases = {c: i for i, c in enumerate(order)}
    arms = {a: i for i, a in enumerate(run.arm_names())}
    # the columns' lists all live on, yet each full collection walked them: the checks of
    # a 200,000-sample run took 1.4 s with the collector on, 0.3 s with it paused
    with collector_paused():
        cols, trajectories = _sample_columns(run, cases, arms)
        samples = cols.in_order()
    verdicts = run_verdicts(run)
    summary = run.summary or {}
    gate = None
    if verdicts.gate is not None:
        base = _gated_baseline(run, verdicts.gate, Path(baseline) if baseline is not None else None)
        gate = _gate_json(verdicts.gate, _dropped_cases(run, verdicts.gate, base), Path(run.path))
    return {
        "schema": SCHEMA,
        "mode": "run",
        "run": Path(run.path).name,
        "suite": run.config.get("suite_name") or Path(str(run.config.get("suite") or "")).name or None,
        "created": run.config.get("created"),
        "k": run.config.get("k"),
        "complete": summary.get("complete"),
        "incomplete": None
        if summary.get("complete", True)
        else f"INCOMPLETE: {summary.get('ran')} of {summary.get('total')} cases ran ({summary.get('reason')})",
        "judge_notice": judge_trust_notice(run.path),
        "answered": answered_line(run.config),
        "arms": list(arms),
        "cases": _cases_json(run, list(cases)),
        "samples": samples,
        "trajectories": trajectories,
        "comparisons": _comparisons_json(verdicts),
        "gate": gate,
        "findings": verdict_entries(verdicts, summary.get("complete")),
    }


# --- two runs ---------------------------------------------------------------------------


def _by_key(data: dict[str, Any]) -> dict[tuple[str, str], list[int]]:
    """(case, arm) -> the row numbers of its samples in a run's page data."""
    s, cases, arms = data["samples"], data["cases"], data["arms"]
    out: dict[tuple[str, str], list[int]] = {}
    for r, (c, a) in enumerate(zip(s["c"], s["a"], strict=True)):
        out.setdefault((cases[c]["id"], arms[a]), []).append(r)
    return out


def _side(data: dict[str, Any], rows: list[int]) -> dict[str, Any]:
    """One side of a diff row: passes, samples (at least the run's k: a missing sample
    counts as not passed, never as absent), cost, mean latency, outputs by index."""
    s = data["samples"]
    lat = [s["lat"][r] for r in rows if s["lat"][r] is not None]
    return {
        "passed": sum(1 for r in rows if s["o"][r] == PASSED),
        "n": max(len(rows), int(data.get("k") or 0)),
        "cost": sum(s["cost"][r] or 0.0 for r in rows),
        "lat": sum(lat) / len(lat) if lat else None,
        "outputs": {s["i"][r]: s["out"][r] for r in rows},
    }


def _change(new: dict[str, Any] | None, old: dict[str, Any] | None) -> int:
    """The change code (`CHANGES`) of one case and arm from OTHER (`old`) to RUN (`new`):
    compared by pass rate over at least k samples (a missing or errored sample is a
    failure)."""
    if old is None:
        return 4
    if new is None:
        return 5
    rn, ro = new["passed"] / max(new["n"], 1), old["passed"] / max(old["n"], 1)
    if rn < ro:
        return 0
    if rn > ro:
        return 1
    return 2 if new["outputs"] != old["outputs"] else 3


def _diff_rows(new: dict[str, Any], old: dict[str, Any], cases: list[str], arms: list[str]) -> dict[str, list[Any]]:
    """One row per case and arm of either run: the change, both sides' passes, the cost
    and latency change; regressions first, then improvements, each the largest change
    first, then the rest."""
    kn, ko = _by_key(new), _by_key(old)
    rows = []
    for ci, cid in enumerate(cases):
        for ai, arm in enumerate(arms):
            a = _side(new, kn[(cid, arm)]) if (cid, arm) in kn else None
            b = _side(old, ko[(cid, arm)]) if (cid, arm) in ko else None
            if a is None and b is None:
                continue
            code = _change(a, b)
            change = (a["passed"] / max(a["n"], 1) - b["passed"] / max(b["n"], 1)) if a and b else 0.0
            rows.append((code, -abs(change), ci, ai, a, b))
    rows.sort(key=lambda r: (r[0], r[1], r[2], r[3]))
    out: dict[str, list[Any]] = {f: [] for f in ("c", "a", "ch", "p1", "n1", "p0", "n0", "dcost", "dlat")}
    for code, _, ci, ai, a, b in rows:
        for f, v in (("c", ci), ("a", ai), ("ch", code)):
            out[f].append(v)
        out["p1"].append(a["passed"] if a else None)
        out["n1"].append(a["n"] if a else None)
        out["p0"].append(b["passed"] if b else None)
        out["n0"].append(b["n"] if b else None)
        out["dcost"].append(a["cost"] - b["cost"] if a and b else None)
        both = a is not None and b is not None and a["lat"] is not None and b["lat"] is not None
        out["dlat"].append(a["lat"] - b["lat"] if both and a and b else None)
    return out


def paired_change(rows: dict[str, list[Any]], arms: list[str]) -> list[dict[str, Any]]:
    """Per arm, the exact sign test of the change over the cases both runs have: a case
    whose pass rate rose is a win, one whose rate fell a loss, the rest ties (with one
    sample a case, this is McNemar's exact test). `evalkit.numbers.stats.sign_test`.

    References: Dixon & Mood 1946, JASA 41(236); McNemar 1947, Psychometrika 12(2)."""
    out = []
    for ai, arm in enumerate(arms):
        codes = [ch for a, ch in zip(rows["a"], rows["ch"], strict=True) if a == ai and ch < 4]
        wins, losses = codes.count(1), codes.count(0)
        t = sign_test(wins, losses, len(codes) - wins - losses)
        out.append(
            {
                "arm": arm,
                "improved": wins,
                "regressed": losses,
                "ties": t.ties,
                "cases": len(codes),
                "p_value": t.p_value,
            }
        )
    return out


def gate_against(run: Run, other: Run, arms: list[str]) -> list[dict[str, Any]]:
    """RUN gated against OTHER, arm by arm (each arm both have, graded in both), by
    `evalkit gate`'s own decision (`gates.gate_decision`: a run that did not finish
    cleanly fails unread, a held judge reads no rate) had OTHER been accepted as the
    baseline; each with the cases whose score dropped."""
    out: list[dict[str, Any]] = []
    if not len(run.grades) or not len(other.grades):
        return out
    for arm in arms:
        if arm not in run.arm_names() or arm not in other.arm_names():
            continue
        base = run_as_baseline(other, arm)
        res = replace(
            gate_decision(run, base, arm=arm, label=Path(other.path).name),
            baseline_run=base.run_stamp or "",
            baseline_arm=arm,
        )
        assert base.metrics is not None
        fell = drops(run_metrics(run, arm=arm), base.metrics) if res.read_rates else Drops()
        out.append(_gate_json(res, fell, Path(run.path)))
    return out


def _suite_of(run: Path) -> str | None:
    """The suite a run folder ran (its `config.json`'s suite path, else its name)."""
    meta = RunFolder(run).read_meta()
    return str(meta.get("suite") or meta.get("suite_name") or "") or None


def previous_run(run: str | Path) -> Path | None:
    """The run before `run` of the same suite in its runs folder (run folders are named
    by their start time): the latest graded sibling of that suite whose name sorts
    before it, else None. What the demo diffs a new run against."""
    p = Path(run).resolve()
    older = [q for q in p.parent.iterdir() if q.name < p.name and (q / RUN_CONFIG).is_file() and (q / GRADES).is_file()]
    suite = _suite_of(p)
    older = [q for q in older if _suite_of(q) == suite]
    return max(older, key=lambda q: q.name) if older else None


def diff_data(run: Run | str | Path, other: Run | str | Path) -> dict[str, Any]:
    """What `diff.html` shows, as JSON: both runs' page data, one row per case and arm
    with what changed (regressions first), the paired test of the change per arm, RUN's
    gate against OTHER, and RUN's own recorded gate (against baseline.json's run)."""
    run, other = as_run(run), as_run(other)
    new, old = run_data(run), run_data(other)
    cases = list(dict.fromkeys([c["id"] for c in new["cases"]] + [c["id"] for c in old["cases"]]))
    arms = list(dict.fromkeys(new["arms"] + old["arms"]))
    meta = {c["id"]: c for c in old["cases"]} | {c["id"]: c for c in new["cases"]}
    rows = _diff_rows(new, old, cases, arms)
    return {
        "schema": SCHEMA,
        "mode": "diff",
        "run": new["run"],
        "other": old["run"],
        "arms": arms,
        "cases": [meta[c] for c in cases],
        "rows": rows,
        "changes": list(CHANGES),
        "paired": paired_change(rows, arms),
        "gate_against": gate_against(run, other, arms),
        "gate": new["gate"],
        "findings": new["findings"],
        "new": new,
        "old": old,
    }


# --- the page ---------------------------------------------------------------------------

_SCRIPT = re.compile(r"<script id=\"evalkit-explorer\">(.*?)</script>", re.S)


def _template() -> str:
    return resources.files("evalkit.templates").joinpath(TEMPLATE).read_text(encoding="utf-8")


def page_csp(template: str) -> str:
    """The page's Content-Security-Policy: nothing loads from anywhere (no request at
    all: `default-src 'none'`); the one script runs because its hash is named; styles
    and data-URI images inline."""
    m = _SCRIPT.search(template)
    if m is None:
        raise RuntimeError(f"evalkit/templates/{TEMPLATE} has no script evalkit-explorer")  # a packaging bug
    digest = base64.b64encode(hashlib.sha256(m.group(1).encode("utf-8")).digest()).decode("ascii")
    return (
        f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; img-src data:; "
        "base-uri 'none'; form-action 'none'"
    )


# zlib level 4: a 100,000-sample run's data compress 4x faster than at 6 (the default),
# in a file a fifth larger (bench_explorer.py)
_GZIP_LEVEL = 4
_COLUMNS = ("samples", "rows")  # built plain: numbers finite or None (`_num`), texts str
_RUNS = ("new", "old")  # a diff's two runs' data


def _plain(data: dict[str, Any]) -> dict[str, Any]:
    """`data` as plain JSON: its columns as they are (walking 100,000 rows through
    `jsonable` costs seconds), the rest through `jsonable`."""
    return {
        k: v if k in _COLUMNS else _plain(v) if k in _RUNS and isinstance(v, dict) else jsonable(v)
        for k, v in data.items()
    }


# orjson writes plain JSON values (dicts keyed by str, lists, tuples, str, int, float,
# bool, None) as `json` writes them after `jsonable` (a NaN outside the columns as null
# too), 8x faster: 1.3 s to 0.16 s for a 200,000-sample run. With these options it
# refuses the rest (a subclass such as numpy's float64, a dataclass, a datetime, a set; a
# lone surrogate, an integer past 64 bits, a key not a str), and those data go the way
# all did (`_plain`, then `json`). evalkit puts no Enum in the data, which orjson would
# write as its value where `jsonable` writes str() of it.
_ORJSON_PLAIN = orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
_FLOAT_FIELDS = frozenset({"js", "cost", "lat", "dcost", "dlat"})  # the columns of numbers (`_num`, differences)


def _finite_columns(data: dict[str, Any]) -> bool:
    """Whether each column of numbers (a run's and a diff's, and a diff's runs') holds
    finite numbers or None: what `allow_nan=False` guards on the `json` path, where
    orjson would write a NaN as null. Their sum is finite when they are (an overflow,
    or anything not a number, says no: the `json` path decides). The other columns hold
    ints, texts and lists of them (`_Columns.FIELDS`, `_diff_rows`)."""
    for k, v in data.items():
        if k in _RUNS and isinstance(v, dict) and not _finite_columns(v):
            return False
        for f, col in v.items() if k in _COLUMNS and isinstance(v, dict) else ():
            try:
                if f in _FLOAT_FIELDS and not math.isfinite(sum(filter(None, col))):
                    return False
            except TypeError:
                return False
    return True


def _page_json(data: dict[str, Any]) -> bytes:
    """The data as the page's JSON, in UTF-8; a NaN in the columns is a bug: refused
    (ValueError). A lone surrogate is written as its escape (`storable_json`)."""
    if _finite_columns(data):
        try:
            return orjson.dumps(data, option=_ORJSON_PLAIN)
        except TypeError:  # orjson.JSONEncodeError: what only `json` writes, or refuses
            pass
    return storable_json(_plain(data), separators=(",", ":"), allow_nan=False).encode("utf-8")


def embed(data: dict[str, Any]) -> str:
    """The data as the page carries them: JSON, gzip, base64 (no `<`, `&` or line
    separator can reach the HTML parser). A NaN in the columns is a bug: refused."""
    return base64.b64encode(gzip.compress(_page_json(data), compresslevel=_GZIP_LEVEL, mtime=0)).decode("ascii")


HEAD_ROWS = 200  # the rows a run's page shows before it has read the rest


def head_of(data: dict[str, Any]) -> dict[str, Any] | None:
    """A run's page data cut to its first `HEAD_ROWS` samples (no trajectory), and their
    total: what the page shows first, while it reads the rest. None for a diff, or a run
    small enough to show at once."""
    s = data.get("samples")
    if data.get("mode") != "run" or s is None or len(s["o"]) <= HEAD_ROWS:
        return None
    rows = {f: col[:HEAD_ROWS] for f, col in s.items()}
    rows["tr"] = [-1] * len(rows["tr"])
    return {**data, "samples": rows, "trajectories": [], "total": len(s["o"])}


def banners(data: dict[str, Any]) -> str:
    """What the page says before any row, in its HTML (escaped), so it shows even before
    the script has read the data: INCOMPLETE, and the judge's notice (of RUN, for a diff)."""
    run = data.get("new") or data
    said = [run.get("incomplete"), run.get("judge_notice")]
    page = "".join(f'<div class="banner">{html.escape(str(t))}</div>' for t in said if t)
    answered = [
        (data.get("old") or {}).get("answered") and f"the other run: {data['old']['answered']}",
        run.get("answered") and ("this run: " if data.get("old") else "") + str(run["answered"]),
    ]
    return page + "".join(f'<p class="sub answered">{html.escape(str(t))}</p>' for t in answered if t)


_SLOT = re.compile(r"__(CSP|TITLE|BANNERS|HEAD|DATA)__")


def render_page(data: dict[str, Any], title: str) -> str:
    """The self-contained page of `data` (`run_data` or `diff_data`). The template's
    slots are filled in one pass: a text that reads `__DATA__` is never a slot."""
    template = _template()
    head = head_of(data)
    values = {
        "CSP": html.escape(page_csp(template), quote=True),
        "TITLE": html.escape(title),
        "BANNERS": banners(data),
        "HEAD": embed(head) if head is not None else "",
        "DATA": embed(data),
    }
    return _SLOT.sub(lambda m: values[m.group(1)], template)


def _check_run(path: str | Path) -> Path:
    p = Path(path)
    if not (p / RUN_CONFIG).is_file():
        raise InputError("not a run folder (no config.json)", p)
    return p


def _built(run: Run | str | Path, against: Run | str | Path | None, baseline: str | Path | None) -> tuple[str, int]:
    """The page of `run` (its diff against `against`, when given) and how many rows it lists."""
    loaded = run if isinstance(run, Run) else as_run(_check_run(run))
    if against is None:
        data = run_data(loaded, baseline=baseline)
        return render_page(data, f"{data['run']}: explorer"), len(data["samples"]["o"])
    other = against if isinstance(against, Run) else as_run(_check_run(against))
    d = diff_data(loaded, other)
    return render_page(d, f"{d['run']} against {d['other']}: diff"), len(d["rows"]["ch"])


def _write(out_dir: str | Path, name: str, built: tuple[str, int]) -> ExplorerPage:
    page, rows = built
    path = Path(out_dir) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, page)
    return ExplorerPage(path, rows, len(page.encode("utf-8")))


def write_explorer(run: Run | str | Path, out_dir: str | Path, *, baseline: str | Path | None = None) -> ExplorerPage:
    """Write `out_dir/explorer.html` for the run; return where, with its rows and bytes.
    `baseline`: the baseline.json its recorded gate read (default: the suite's)."""
    return _write(out_dir, EXPLORER_HTML, _built(run, None, baseline))


def write_diff(run: Run | str | Path, other: Run | str | Path, out_dir: str | Path) -> ExplorerPage:
    """Write `out_dir/diff.html`: RUN against OTHER; return where, with its rows and bytes."""
    return _write(out_dir, DIFF_HTML, _built(run, other, None))


class Explorer:
    """A run's explorer in a notebook cell (`evalkit.explore(run)`): the same page as
    `explorer.html`, shown in an iframe whose `srcdoc` holds it (so the notebook's own
    page runs none of its script)."""

    def __init__(self, page: str, rows: int) -> None:
        self.page = page
        self.rows = rows

    def _repr_html_(self) -> str:
        return (
            f'<iframe srcdoc="{html.escape(self.page, quote=True)}" '
            'style="width:100%;height:720px;border:1px solid #ddd" sandbox="allow-scripts"></iframe>'
        )


def explore(run: Run | str | Path, against: Run | str | Path | None = None) -> Explorer:
    """The explorer of `run` (or its diff against `against`) for a notebook cell."""
    return Explorer(*_built(run, against, None))
