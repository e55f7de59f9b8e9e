"""Gates, baselines and run-to-run noise: a run held against an accepted baseline.

* `run_metrics` reads per-case counts of one arm of a graded run (`RunMetrics`).
* `gate` compares a run to an accepted baseline and fails on a success drop or a cost
  increase beyond its thresholds and beyond run-to-run noise; a run that did not finish
  cleanly fails without any rate being read.
* `accept_baseline` is the separate, deliberate act that writes one.
* `noise` says whether the gate thresholds sit above run-to-run noise.

References: Chen et al. 2021 (pass@k); Yao et al. 2024, tau-bench (pass^k); Good 2005,
"Permutation, Parametric and Bootstrap Tests of Hypotheses" (the within-case
permutation test the gate uses); Phipson & Smyth 2010; Holm 1979; Miller 2024, "Adding
Error Bars to Evals" (arXiv:2411.00640; clustered paired standard errors).
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from . import stats
from ._io import RUN_JSON_BYTES, iter_jsonl, read_json_object, suite_folder_of, write_atomic
from .errors import EvalkitError, InputError
from .layout import BASELINE_FILE, BASELINE_SUMMARY_FILE, CASES_FILE, RUN_CONFIG, SUMMARY_JSON, SUMMARY_MD
from .records import NO_GATE, GateThresholds, set_gate
from .runload import Run, as_run, case_order, grade_map, grade_passed, pick_arm
from .runs import find_suite_dir


@dataclass(frozen=True)
class CaseResult:
    """One case of one arm of a run: `n` samples (ungraded ones included, never as
    passes), `c` that passed, each sample's full cost (generator + cost avoided by the
    cache + judge), its set and tags."""

    case_id: str
    set: str
    tags: tuple[str, ...]
    n: int
    c: int
    costs: tuple[float, ...]
    ungraded: int = 0

    @property
    def gated(self) -> bool:
        """False for a case in a set with gate `none` (neither capability nor regression)."""
        return set_gate(self.set) != NO_GATE


@dataclass(frozen=True)
class RunMetrics:
    """What a gate reads from a run: per-case counts at the run's k.

    A case's success is pass@k for capability cases and pass^k for regression cases
    (agent-evals: capability gates on best-of-k, regression on all-of-k), by the
    unbiased estimators of `evalkit.stats`; the success rate of a group is the mean over
    its gated cases (a case in any other set has gate `none`: it is measured and shown,
    never part of a success rate or a gate). Cost per task is the mean over cases of the
    case's total sample cost, counting what a cache hit avoided so a replayed run costs
    what a live one would.
    """

    k: int
    cases: tuple[CaseResult, ...]
    arm: str | None = None
    run_stamp: str | None = None
    config_hash: str | None = None
    judge_version: str | None = None

    def by_id(self) -> dict[str, CaseResult]:
        return {c.case_id: c for c in self.cases}

    def score(self, case: CaseResult) -> float:
        return _score_table(case.set, case.n, self.k)[case.c]

    def success_rate(self, ids: Iterable[str] | None = None) -> float:
        sel = [c for c in self._select(ids) if c.gated]
        return float(np.mean([self.score(c) for c in sel])) if sel else math.nan

    def cost_per_task(self, ids: Iterable[str] | None = None) -> float:
        sel = self._select(ids)
        return float(np.mean([sum(c.costs) for c in sel])) if sel else math.nan

    def tags(self, ids: Iterable[str] | None = None) -> dict[str, list[str]]:
        out: dict[str, list[str]] = defaultdict(list)
        for c in self._select(ids):
            for t in c.tags:
                out[t].append(c.case_id)
        return dict(sorted(out.items()))

    def _select(self, ids: Iterable[str] | None) -> list[CaseResult]:
        if ids is None:
            return list(self.cases)
        m = self.by_id()
        return [m[i] for i in ids if i in m]

    def to_dict(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "arm": self.arm,
            "run_stamp": self.run_stamp,
            "config_hash": self.config_hash,
            "judge_version": self.judge_version,
            "cases": [
                {
                    "id": c.case_id,
                    "set": c.set,
                    "tags": list(c.tags),
                    "n": c.n,
                    "c": c.c,
                    "ungraded": c.ungraded,
                    "costs": [round(x, 10) for x in c.costs],
                }
                for c in self.cases
            ],
        }


def _case_score(case_set: str, n: int, c: int, k: int) -> float:
    if case_set == "regression":
        return stats.pass_hat_k(n, c, k)
    return stats.pass_at_k(n, c, k)


@functools.lru_cache(maxsize=4096)
def _score_table(case_set: str, n: int, k: int) -> tuple[float, ...]:
    """A case's score for every pass count c = 0..n (the permutation null indexes it)."""
    return tuple(_case_score(case_set, n, c, k) for c in range(n + 1))


def _metric_name(case_set: str, k: int) -> str:
    return f"pass^{k}" if case_set == "regression" else f"pass@{k}"


def suite_dir_of(run: Run) -> Path | None:
    """The run's suite folder (`runs.find_suite_dir`)."""
    return find_suite_dir(run.path, run.config.get("suite"))


def _case_sets(suite_dir: Path | None) -> dict[str, str]:
    """Case id -> set (`capability` default) from the suite's `cases.jsonl`."""
    if suite_dir is None:
        return {}
    p = Path(suite_dir) / CASES_FILE
    if not p.exists():  # an evals.json / eval.yaml suite: its cases come through the importer
        from .loader import load_suite  # lazy: the loader brings the privacy scanner (detect_secrets)

        try:
            return {c.id: c.set for c in load_suite(suite_dir).cases}
        except InputError:
            return {}
    out = {}
    for row in iter_jsonl(p):
        if isinstance(row, dict) and "id" in row:
            out[str(row["id"])] = str(row.get("set") or "capability")
    return out


def run_metrics(
    run: Run | str | Path, *, arm: str | None = None, suite_dir: str | Path | None = None, k: int | None = None
) -> RunMetrics:
    """Per-case counts of one arm of a graded run (see `RunMetrics`). A sample without a
    grade, or whose grade is null, counts in n and never in c."""
    run = as_run(run)
    arm = pick_arm(run, arm, "name the one to gate with --arm")
    # the suite's sets; a run ingested from a source with sets (agent-evals) carries its own
    sets = _case_sets(Path(suite_dir) if suite_dir else suite_dir_of(run)) or dict(run.config.get("case_sets") or {})
    grades = grade_map(run)
    samples = run.samples[run.samples["arm"] == arm]
    per: dict[str, dict[str, Any]] = {}
    judge_versions: Counter = Counter()
    for row in samples.to_dict("records"):
        cid = str(row["case_id"])
        d = per.setdefault(cid, {"tags": tuple(row.get("tags") or ()), "n": 0, "c": 0, "costs": [], "ungraded": 0})
        g = grades.get((cid, arm, int(row["index"])))
        ok = grade_passed(g)
        d["n"] += 1
        d["c"] += ok is True
        d["ungraded"] += ok is None
        cost = _num(row.get("cost_usd")) + _num(row.get("cost_avoided_usd")) + _num((g or {}).get("judge_cost_usd"))
        d["costs"].append(cost)
        if g and g.get("judge_version"):
            judge_versions[g["judge_version"]] += 1
    kk = int(k or run.config.get("k") or max((d["n"] for d in per.values()), default=1))
    order = [c for c in case_order(run) if c in per]
    cases = tuple(
        CaseResult(
            case_id=c,
            set=sets.get(c, "capability"),
            tags=per[c]["tags"],
            n=per[c]["n"],
            c=per[c]["c"],
            costs=tuple(per[c]["costs"]),
            ungraded=per[c]["ungraded"],
        )
        for c in order
    )
    return RunMetrics(
        k=kk,
        cases=cases,
        arm=arm,
        run_stamp=Path(run.path).name,
        config_hash=run.config.get("config_hash"),
        judge_version=judge_versions.most_common(1)[0][0] if judge_versions else None,
    )


def _num(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if math.isnan(v) else v


class _Null:
    """Monte Carlo null distribution of two runs of one model on the same cases.

    Under "same model", the 2k samples of a case are exchangeable between the two runs:
    conditional on a case's total passes, the current run's count is hypergeometric, and
    its sample costs are a random subset of the pooled costs. Drawing those per case
    gives the run-to-run noise of any group's success rate (pass@k / pass^k included)
    and of cost per task, with the case set held fixed. No library offers this
    stratified permutation test for pass@k-transformed scores, hence the numpy code.

    References: Good 2005, "Permutation, Parametric and Bootstrap Tests of Hypotheses",
    ch. 3 (stratified permutation tests); Phipson & Smyth 2010 ((b+1)/(B+1) p-values).
    """

    def __init__(self, cur: RunMetrics, base: RunMetrics, ids: list[str], n_resamples: int, seed: int) -> None:
        self.ids = ids
        self.B = int(n_resamples)
        rng = np.random.default_rng(seed)
        cm, bm = cur.by_id(), base.by_id()
        m = len(ids)
        nr = np.array([cm[i].n for i in ids])
        nb = np.array([bm[i].n for i in ids])
        cr = np.array([cm[i].c for i in ids])
        cb = np.array([bm[i].c for i in ids])
        total = cr + cb
        width = int(max(nr.max(initial=0), nb.max(initial=0))) + 1
        tab_r = np.full((m, width), np.nan)
        tab_b = np.full((m, width), np.nan)
        for j, i in enumerate(ids):
            s = cm[i].set
            tab_r[j, : nr[j] + 1] = _score_table(s, int(nr[j]), cur.k)
            tab_b[j, : nb[j] + 1] = _score_table(s, int(nb[j]), cur.k)
        cols = np.arange(m)
        self.obs_diff = tab_r[cols, cr] - tab_b[cols, cb]  # per case, current - baseline
        x = rng.hypergeometric(total, (nr + nb) - total, nr, size=(self.B, m)) if m else np.zeros((self.B, 0), int)
        self.null_diff = tab_r[cols[None, :], x] - tab_b[cols[None, :], total[None, :] - x]
        # costs: the current run's share of each case's pooled sample costs
        self.obs_cost = (np.array([sum(cm[i].costs) for i in ids]), np.array([sum(bm[i].costs) for i in ids]))
        pooled = [np.array(cm[i].costs + bm[i].costs, dtype=float) for i in ids]
        width_c = max((len(x) for x in pooled), default=0)
        padded = np.zeros((m, width_c))
        keys = rng.random((self.B, m, width_c), dtype=np.float32)
        for j, x in enumerate(pooled):
            padded[j, : x.size] = x
            keys[:, j, x.size :] = np.inf  # padding sorts last, never drawn
        # a uniformly random subset of nr[j] of each case's pooled costs goes to the current run
        order = keys.argsort(axis=2)
        drawn = np.take_along_axis(np.broadcast_to(padded, keys.shape), order, axis=2)
        take = np.arange(width_c)[None, None, :] < nr[None, :, None]
        null_r = (drawn * take).sum(axis=2)
        null_b = padded.sum(axis=1)[None, :] - null_r
        self.null_cost = (null_r, null_b)

    def success(self, mask: np.ndarray) -> tuple[float, np.ndarray]:
        """Observed and null change of the group's success rate (current - baseline)."""
        return float(self.obs_diff[mask].mean()), self.null_diff[:, mask].mean(axis=1)

    def cost(self) -> tuple[float, np.ndarray]:
        """Observed and null relative change of cost per task (current / baseline - 1)."""
        r, b = self.obs_cost
        nr, nb = self.null_cost
        with np.errstate(divide="ignore", invalid="ignore"):
            return float(r.sum() / b.sum() - 1) if b.sum() > 0 else math.nan, nr.sum(axis=1) / nb.sum(axis=1) - 1

    def p_worse(self, obs: float, null: np.ndarray, worse_is_lower: bool) -> float:
        hits = np.sum(null <= obs + 1e-12) if worse_is_lower else np.sum(null >= obs - 1e-12)
        return float((1 + hits) / (1 + self.B))


@dataclass(frozen=True)
class GateCheck:
    """One comparison of a gate: `kind` `success` (points) or `cost` (percent), the
    group (`overall` or `tag:<name>`), baseline and current values, the signed change
    (current minus baseline: points for success, so a drop is negative; percent for
    cost, so an increase is positive), the threshold (a magnitude: the largest drop in
    points, or increase in percent, allowed), whether the change breached it, the one-sided p-value of the change
    under run-to-run noise (Holm-adjusted in `p_adjusted`; None when the baseline
    has no per-case data), and whether it failed the gate."""

    kind: str
    group: str
    n_cases: int
    baseline: float
    current: float
    change: float
    threshold: float
    exceeded: bool
    p_value: float | None
    p_adjusted: float | None
    failed: bool


@dataclass(frozen=True)
class GateResult:
    """The gate's outcome. `read_rates` is False when it failed on the run's exit status
    or INCOMPLETE summary without reading any rate."""

    passed: bool
    reasons: tuple[str, ...]
    read_rates: bool
    checks: tuple[GateCheck, ...] = ()
    notes: tuple[str, ...] = ()
    thresholds: GateThresholds = field(default_factory=GateThresholds)
    alpha: float = 0.05
    run: str = ""
    baseline: str = ""

    @property
    def causes(self) -> list[str]:
        """Why it failed (`gate_failure_causes`): empty when it passed."""
        return [] if self.passed else gate_failure_causes(self.reasons, self.read_rates)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["causes"] = self.causes
        d["reasons"] = list(self.reasons)
        d["notes"] = list(self.notes)
        d["checks"] = [
            {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(c).items()}
            for c in self.checks
        ]
        return d

    def render(self) -> str:
        lines = [
            f"Gate: {'PASS' if self.passed else 'FAIL: ' + ' / '.join(self.causes)}"
            + ("" if self.passed else f" ({'; '.join(self.reasons)})")
        ]
        if not self.read_rates:
            lines.append("rates not read: a run that did not finish cleanly is not comparable")
            return "\n".join(lines)
        t = self.thresholds
        lines.append(
            f"thresholds: success drop > {t.max_success_drop_points:g} points (overall, tags with >= "
            f"{t.min_tag_cases} cases), cost per task increase > {t.max_cost_increase_pct:g}%; "
            f"a breach fails when beyond run-to-run noise (Holm-adjusted p <= {self.alpha:g}); "
            "change = current - baseline"
        )
        lines.append(
            f"{'check':<28} {'cases':>5} {'baseline':>10} {'current':>10} {'change':>9} {'p(noise)':>9}  result"
        )
        for c in self.checks:
            unit = " pts" if c.kind == "success" else "%"
            fmt = (lambda v: f"{v:.3f}") if c.kind == "success" else (lambda v: f"${v:.4g}")
            p = "-" if c.p_adjusted is None else f"{c.p_adjusted:.3g}"
            res = "FAIL" if c.failed else ("within noise" if c.exceeded else "ok")
            lines.append(
                f"{c.kind + ' ' + c.group:<28} {c.n_cases:>5} {fmt(c.baseline):>10} {fmt(c.current):>10} "
                f"{c.change:>+7.1f}{unit:<3}{p:>8}  {res}"
            )
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


GATE_CAUSE_INCOMPLETE = "incomplete run"


GATE_CAUSE_SUCCESS = "success drop"


GATE_CAUSE_COST = "cost increase"


GATE_CAUSE_NOT_COMPARABLE = "not comparable with the baseline"


# Prefixes of the reasons `_run_not_clean` gives (the gate failed without reading a rate).
_NOT_CLEAN_PREFIXES = ("the runner exited", "no summary", "summary.json is not valid", "INCOMPLETE")


def gate_failure_causes(reasons: Iterable[str], read_rates: bool | None = None) -> list[str]:
    """Why a gate failed, from its reasons (as a report's sidecar keeps them): `incomplete
    run` when it failed on the run's exit status or summary without reading any rate
    (never a regression: nothing was measured), otherwise `success drop` and/or `cost
    increase`, or `not comparable with the baseline` (k changed, no shared case, short
    cases). Empty for a gate that passed."""
    reasons = [str(r) for r in reasons]
    if read_rates is False or any(r.startswith(_NOT_CLEAN_PREFIXES) for r in reasons):
        return [GATE_CAUSE_INCOMPLETE]
    causes = []
    if any(r.startswith("success-rate drop") for r in reasons):
        causes.append(GATE_CAUSE_SUCCESS)
    if any(r.startswith("cost-per-task increase") for r in reasons):
        causes.append(GATE_CAUSE_COST)
    if reasons and not causes:
        causes.append(GATE_CAUSE_NOT_COMPARABLE)
    return causes


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (same values as statsmodels
    `multipletests(method="holm")`, which this replaces only because that function runs
    a full `gc.collect()` on every call: 0.1 s each in a loaded process, too slow for
    the gate's seeded simulations).

    References: Holm 1979, "A simple sequentially rejective multiple test procedure",
    Scand. J. Statist. 6(2).
    """
    m = len(p_values)
    order = np.argsort(p_values, kind="stable")
    adj = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adj[i] = running
    return [float(x) for x in adj]


def _thresholds_from(cfg: dict[str, Any] | None) -> tuple[GateThresholds, float]:
    g = (cfg or {}).get("gate") or {}
    d = GateThresholds()
    try:
        t = GateThresholds(
            max_success_drop_points=float(g.get("max_success_drop_points", d.max_success_drop_points)),
            max_cost_increase_pct=float(g.get("max_cost_increase_pct", d.max_cost_increase_pct)),
            min_tag_cases=int(g.get("min_tag_cases", d.min_tag_cases)),
        )
        alpha = float(g.get("alpha", 0.05))
    except (TypeError, ValueError) as exc:
        raise InputError(f"gate thresholds must be numbers: {exc}", json_path="$.gate") from None
    if not 0 < alpha <= 1:
        raise InputError(f"gate alpha must be in (0, 1], got {alpha!r}", json_path="$.gate.alpha")
    return t, alpha


def _run_not_clean(run_path: Path, summary: dict[str, Any] | None, runner_exit: int | None) -> list[str]:
    """Why a run cannot be gated or accepted, from its exit status and summary alone."""
    reasons = []
    if runner_exit:
        reasons.append(f"the runner exited {runner_exit}")
    if summary is None:
        sp = run_path / SUMMARY_JSON
        if not sp.exists():
            return reasons + ["no summary.json: the run did not finish"]
        try:
            summary = json.loads(sp.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            return reasons + ["summary.json is not valid JSON: the run did not finish cleanly"]
    if not isinstance(summary, dict) or not summary:
        return reasons + ["no summary: the run did not finish"]
    if summary.get("complete") is not True:
        reasons.append(
            f"INCOMPLETE: {summary.get('ran', '?')}/{summary.get('total', '?')} cases "
            f"({summary.get('reason') or 'no reason given'})"
        )
    if summary.get("exit_code") not in (0, None):
        reasons.append(f"the runner exited {summary.get('exit_code')}")
    md = run_path / SUMMARY_MD
    if md.exists():
        with open(md, encoding="utf-8", errors="replace") as fh:
            first = fh.readline().strip()
        if first.upper().startswith("INCOMPLETE") and not any(r.startswith("INCOMPLETE") for r in reasons):
            reasons.append(first)
    return reasons


def load_baseline(path: str | Path) -> dict[str, Any]:
    """Read `baseline.json`: ours (with per-case data) or the agent-evals shape
    (`success_rate`, `cost_per_task_usd`, `per_tag`)."""
    p = Path(path)
    if not os.path.lexists(p):
        raise InputError("baseline not found (accept one with `evalkit baseline accept RUN`)", p)
    raw = read_json_object(p, "a baseline", limit=RUN_JSON_BYTES, root=suite_folder_of(p))
    if "cases" not in raw and "success_rate" not in raw:
        raise InputError("baseline has neither per-case data nor success_rate", p, json_path="$.success_rate")
    if "cases" in raw:
        try:
            raw["_metrics"] = RunMetrics(
                k=int(raw["k"]),
                arm=raw.get("arm"),
                run_stamp=raw.get("run_stamp"),
                config_hash=raw.get("config_hash"),
                judge_version=raw.get("judge_version"),
                cases=tuple(
                    CaseResult(
                        case_id=str(c["id"]),
                        set=str(c.get("set") or "capability"),
                        tags=tuple(c.get("tags") or ()),
                        n=int(c["n"]),
                        c=int(c["c"]),
                        costs=tuple(float(x) for x in c.get("costs") or ()),
                        ungraded=int(c.get("ungraded", 0)),
                    )
                    for c in raw["cases"]
                ),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"malformed per-case baseline data: {exc!r}", p, json_path="$.cases") from None
    return raw


def gate(
    run: Run | str | Path,
    baseline_path: str | Path,
    thresholds: GateThresholds | None = None,
    *,
    arm: str | None = None,
    alpha: float | None = None,
    runner_exit: int | None = None,
    n_resamples: int = 2000,
    seed: int = 0,
) -> GateResult:
    """Gate a run against an accepted baseline. It never writes a baseline.

    Fails, without reading any rate, on a non-zero runner exit or a summary that is
    missing or INCOMPLETE. Otherwise, on the cases both share, fails on a success-rate
    drop above `max_success_drop_points` overall or on any tag with at least
    `min_tag_cases` cases, or a cost-per-task increase above `max_cost_increase_pct`
    percent (thresholds from the run's `config.json` `gate` unless given). Capability
    cases count pass@k, regression cases pass^k. A breach fails the gate when it is
    also beyond run-to-run noise: its one-sided p-value under the within-case
    permutation null (`_Null`), Holm-adjusted across all checks, is <= alpha (config
    `gate.alpha`, default 0.05; 1 turns the noise guard off). This keeps the false-alarm
    rate on two runs of one model at most alpha.

    References: Holm 1979, Scand. J. Statist. 6(2) (`holm`);
    Good 2005 (permutation tests); Chen et al. 2021 and Yao et al. 2024 (pass@k, pass^k).
    """
    run_path = Path(run.path) if isinstance(run, Run) else Path(run)
    summary = run.summary if isinstance(run, Run) else None
    bad = _run_not_clean(run_path, summary, runner_exit)
    if bad:
        return GateResult(
            passed=False,
            reasons=tuple(bad),
            read_rates=False,
            thresholds=thresholds or GateThresholds(),
            run=str(run_path),
            baseline=str(baseline_path),
        )
    baseline = load_baseline(baseline_path)
    run = as_run(run)
    cfg_t, cfg_alpha = _thresholds_from(run.config.get("config") or {})
    t = thresholds or cfg_t
    alpha = cfg_alpha if alpha is None else alpha
    cur = gate_run_metrics(run, baseline_path, arm=arm, baseline=baseline)
    return gate_metrics(
        cur,
        baseline.get("_metrics") or baseline,
        t,
        alpha=alpha,
        n_resamples=n_resamples,
        seed=seed,
        run_label=str(run_path),
        baseline_label=str(baseline_path),
    )


def _note_ungated(notes: list[str], cur: RunMetrics, ids: list[str]) -> None:
    by_id = cur.by_id()
    ungated = [i for i in ids if not by_id[i].gated]
    if ungated:
        sets = ", ".join(dict.fromkeys(by_id[i].set for i in ungated))
        notes.append(
            f"{len(ungated)} case(s) in sets with gate none ({sets}): shown, never gated; their cost is counted"
        )


def gate_run_metrics(
    run: Run | str | Path, baseline_path: str | Path, *, arm: str | None = None, baseline: dict[str, Any] | None = None
) -> RunMetrics:
    """The run's metrics exactly as `gate` reads them: the baseline's arm unless `arm`
    is given, case sets from the baseline's suite folder."""
    run = as_run(run)
    baseline = baseline if baseline is not None else load_baseline(baseline_path)
    suite_dir = Path(baseline_path).parent
    if arm is None and baseline.get("arm") in run.arm_names():
        arm = baseline["arm"]
    return run_metrics(run, arm=arm, suite_dir=suite_dir if (suite_dir / CASES_FILE).exists() else None)


def gate_metrics(
    cur: RunMetrics,
    baseline: RunMetrics | dict[str, Any],
    t: GateThresholds,
    *,
    alpha: float = 0.05,
    n_resamples: int = 2000,
    seed: int = 0,
    run_label: str = "",
    baseline_label: str = "",
) -> GateResult:
    """The rate-reading half of `gate`, on metrics already extracted: `baseline` is the
    baseline run's `RunMetrics` (noise guard on) or an agent-evals shaped dict of rates
    (thresholds only)."""
    run_path, baseline_path = run_label, baseline_label
    reasons: list[str] = []
    notes: list[str] = []
    ungraded = sum(c.ungraded for c in cur.cases)
    if ungraded:
        notes.append(f"{ungraded} sample(s) ungraded: counted as failures, never as passes")
    base: RunMetrics | None = baseline if isinstance(baseline, RunMetrics) else None
    raw_checks: list[tuple[str, str, int, float, float, float, float, float | None]] = []
    if base is not None:
        if base.k != cur.k:
            reasons.append(
                f"k changed from the baseline's {base.k} to {cur.k}: pass@k/pass^k are not "
                "comparable; accept a new baseline"
            )
            return GateResult(
                False, tuple(reasons), True, (), tuple(notes), t, alpha, str(run_path), str(baseline_path)
            )
        bm, cm = base.by_id(), cur.by_id()
        ids = [c.case_id for c in cur.cases if c.case_id in bm]
        new = [c.case_id for c in cur.cases if c.case_id not in bm]
        gone = [i for i in bm if i not in cm]
        if new:
            notes.append(f"{len(new)} case(s) not in the baseline, not gated: {', '.join(new[:10])}")
        if gone:
            notes.append(f"{len(gone)} baseline case(s) missing from this run: {', '.join(gone[:10])}")
        if not ids:
            reasons.append("no case in common with the baseline")
            return GateResult(
                False, tuple(reasons), True, (), tuple(notes), t, alpha, str(run_path), str(baseline_path)
            )
        short = [i for i in ids if cm[i].n < cur.k or bm[i].n < cur.k]
        if short:
            reasons.append(f"{len(short)} case(s) have fewer than k={cur.k} samples: {', '.join(short[:10])}")
            return GateResult(
                False, tuple(reasons), True, (), tuple(notes), t, alpha, str(run_path), str(baseline_path)
            )
        null = _Null(cur, base, ids, n_resamples, seed)
        gated = [i for i in ids if cm[i].gated]
        _note_ungated(notes, cur, ids)
        groups = [("overall", gated)] + [
            (f"tag:{tag}", members) for tag, members in cur.tags(gated).items() if len(members) >= t.min_tag_cases
        ]
        for name, members in groups if gated else ():
            mask = np.isin(np.array(ids), members)
            obs, nd = null.success(mask)
            raw_checks.append(
                (
                    "success",
                    name,
                    len(members),
                    base.success_rate(members),
                    cur.success_rate(members),
                    100 * obs,
                    t.max_success_drop_points,
                    null.p_worse(obs, nd, worse_is_lower=True),
                )
            )
        obs_c, nd_c = null.cost()
        if not math.isnan(obs_c):
            raw_checks.append(
                (
                    "cost",
                    "per task",
                    len(ids),
                    base.cost_per_task(ids),
                    cur.cost_per_task(ids),
                    100 * obs_c,
                    t.max_cost_increase_pct,
                    null.p_worse(obs_c, nd_c, False),
                )
            )
        else:
            notes.append("baseline cost is zero: cost not gated")
    else:
        notes.append("baseline has no per-case data (agent-evals shape): thresholds applied without the noise guard")
        ids = [c.case_id for c in cur.cases]
        gated = [c.case_id for c in cur.cases if c.gated]
        _note_ungated(notes, cur, ids)
        per_tag = baseline.get("per_tag") or {}
        groups = [("overall", gated, float(baseline["success_rate"]))] if gated else []
        for tag, members in cur.tags(gated).items():
            if len(members) >= t.min_tag_cases and tag in per_tag:
                groups.append((f"tag:{tag}", members, float(per_tag[tag])))
        for name, members, b in groups:
            c_ = cur.success_rate(members)
            raw_checks.append(("success", name, len(members), b, c_, 100 * (c_ - b), t.max_success_drop_points, None))
        bc = baseline.get("cost_per_task_usd")
        if bc:
            cc = cur.cost_per_task()
            raw_checks.append(
                ("cost", "per task", len(ids), float(bc), cc, 100 * (cc / float(bc) - 1), t.max_cost_increase_pct, None)
            )
    ps = [rc[7] for rc in raw_checks if rc[7] is not None]
    adj = holm(ps)
    checks = []
    for rc in raw_checks:
        kind, group, n, b, c_, change, thr, p = rc
        p_adj = float(adj.pop(0)) if p is not None else None
        # `change` is signed current - baseline: success fails on a drop (change < -thr),
        # cost on an increase (change > thr).
        worsening = -change if kind == "success" else change
        exceeded = worsening > thr + 1e-9
        failed = exceeded and (p_adj is None or p_adj <= alpha)
        checks.append(GateCheck(kind, group, n, b, c_, change, thr, exceeded, p, p_adj, failed))
        if failed:
            what = "success-rate drop" if kind == "success" else "cost-per-task increase"
            unit = " points" if kind == "success" else "%"
            reasons.append(
                f"{what} {group}: {change:+.1f}{unit} (beyond {thr:g}{unit})"
                + (f" (p = {p_adj:.3g})" if p_adj is not None else "")
            )
        elif exceeded:
            notes.append(
                f"{kind} {group}: change {change:+.1f} breaches {thr:g} but is within run-to-run noise "
                f"(adjusted p = {p_adj:.3g} > {alpha:g}); run `evalkit noise` on two baseline runs"
            )
    return GateResult(
        passed=not reasons,
        reasons=tuple(reasons),
        read_rates=True,
        checks=tuple(checks),
        notes=tuple(notes),
        thresholds=t,
        alpha=alpha,
        run=str(run_path),
        baseline=str(baseline_path),
    )


def accept_baseline(
    run: Run | str | Path, suite_dir: str | Path | None = None, *, arm: str | None = None
) -> tuple[Path, Path]:
    """Accept a run as the suite's baseline: write `baseline.json` (rates overall, per
    tag and per set, cost per task, and the per-case counts the gate's noise guard
    needs) and `baseline-summary.md` (the run's summary, the provenance), each through
    a temporary file and a rename. Refuses a run that did not finish cleanly or has
    ungraded samples: such a run can never become a baseline. Gates never call this.
    """
    run = as_run(run)
    bad = _run_not_clean(Path(run.path), run.summary, None)
    if bad:
        raise EvalkitError("refusing to accept this run as a baseline: " + "; ".join(bad))
    if suite_dir is None:
        suite_dir = suite_dir_of(run)
        if suite_dir is None:
            raise InputError(
                "cannot find the run's suite folder: pass --to SUITE_DIR",
                Path(run.path) / RUN_CONFIG,
                json_path="$.suite",
            )
    suite_dir = Path(suite_dir)
    if not suite_dir.is_dir():
        raise InputError("suite folder not found", suite_dir)
    m = run_metrics(run, arm=arm, suite_dir=suite_dir)
    ungraded = [c.case_id for c in m.cases if c.ungraded]
    if ungraded:
        raise EvalkitError(
            f"refusing to accept a run with ungraded samples (cases {', '.join(ungraded[:10])}): re-grade it first"
        )
    if not m.cases:
        raise EvalkitError("refusing to accept a run with no samples")
    gated = [c.case_id for c in m.cases if c.gated]
    if not gated:
        raise EvalkitError("refusing to accept a run with no gated case (every set has gate none)")
    tags = m.tags(gated)
    per_set = {}
    for s in ("capability", "regression"):
        ids = [c.case_id for c in m.cases if c.set == s]
        if ids:
            est = stats.mean_and_se([m.score(c) for c in m._select(ids)])
            per_set[s] = {
                "metric": _metric_name(s, m.k),
                "value": est.value,
                "se": _nan_none(est.se),
                "n_cases": len(ids),
            }
    overall = stats.mean_and_se([m.score(c) for c in m.cases if c.gated])
    doc = {
        "format": 1,
        "run_stamp": m.run_stamp,
        "run": str(run.path),
        "summary": BASELINE_SUMMARY_FILE,
        "accepted": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "judge_version": m.judge_version,
        "config_hash": m.config_hash,
        "arm": m.arm,
        "k": m.k,
        "success_rate": overall.value,
        "success_rate_se": _nan_none(overall.se),
        "cost_per_task_usd": m.cost_per_task(),
        "per_tag": {t: m.success_rate(ids) for t, ids in tags.items()},
        "per_tag_cases": {t: len(ids) for t, ids in tags.items()},
        "per_set": per_set,
        **{k: v for k, v in m.to_dict().items() if k == "cases"},
    }
    run_md = Path(run.path) / SUMMARY_MD
    body = run_md.read_text(encoding="utf-8", errors="replace") if run_md.exists() else "(the run has no summary.md)\n"
    head = [
        f"# Baseline: run {m.run_stamp}",
        "",
        f"Accepted {doc['accepted']} from `{run.path}` (arm `{m.arm}`, k = {m.k}, "
        f"config hash {m.config_hash or 'n/a'}, judge {m.judge_version or 'n/a'}).",
        "",
        "| metric | value |",
        "|---|---|",
        f"| success rate (capability pass@{m.k}, regression pass^{m.k}) | {overall.value:.3f} |",
        f"| cost per task (USD) | {doc['cost_per_task_usd']:.6f} |",
    ]
    head += [f"| tag `{t}` ({len(ids)} cases) | {doc['per_tag'][t]:.3f} |" for t, ids in tags.items()]
    text_md = "\n".join(head) + "\n\n## Run summary\n\n" + body
    bj, bs = suite_dir / BASELINE_FILE, suite_dir / BASELINE_SUMMARY_FILE
    # The summary first: a baseline.json never points at a summary that is not there yet.
    write_atomic(bs, text_md)
    write_atomic(bj, json.dumps(doc, indent=2) + "\n")
    return bj, bs


def _nan_none(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


@dataclass(frozen=True)
class NoiseCheck:
    """Run-to-run noise of one gated quantity: the observed change b - a (points or
    percent), its clustered paired SE over cases (success only), `noise95` the change
    two runs of one model stay within 95% of the time (the within-case permutation
    null), the gate threshold, and whether the threshold sits above that noise."""

    kind: str
    group: str
    n_cases: int
    observed: float
    se: float | None
    noise95: float
    threshold: float
    above_noise: bool


@dataclass(frozen=True)
class NoiseReport:
    """`ok` when every gate threshold sits above run-to-run noise and the two runs do
    not already differ by more than a threshold."""

    ok: bool
    checks: tuple[NoiseCheck, ...]
    notes: tuple[str, ...]
    thresholds: GateThresholds

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["notes"] = list(self.notes)
        return d

    def render(self) -> str:
        lines = [
            (
                "thresholds sit above the run-to-run noise"
                if self.ok
                else "thresholds do NOT sit above the run-to-run noise"
            )
        ]
        lines.append(f"{'quantity':<28} {'cases':>5} {'b - a':>8} {'SE':>7} {'noise95':>8} {'threshold':>9}  verdict")
        for c in self.checks:
            u = "pts" if c.kind == "success" else "%"
            se = "-" if c.se is None else f"{c.se:.2f}"
            verdict = "above noise" if c.above_noise else "TOO TIGHT"
            if abs(c.observed) > c.threshold:
                verdict += ", runs differ by more than the threshold"
            lines.append(
                f"{c.kind + ' ' + c.group:<28} {c.n_cases:>5} {c.observed:>+8.2f} {se:>7} {c.noise95:>8.2f} "
                f"{c.threshold:>6g} {u:<3} {verdict}"
            )
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def noise(
    run_a: Run | str | Path,
    run_b: Run | str | Path,
    thresholds: GateThresholds | None = None,
    *,
    arm: str | None = None,
    n_resamples: int = 4000,
    seed: int = 0,
) -> NoiseReport:
    """Compare two runs of the same config: does each gate threshold sit above their
    run-to-run noise? For the success rate overall and per tag with enough cases, and
    for cost per task: the observed change, its clustered paired SE (cases are the
    clusters), and the 95th percentile of |change| under the within-case permutation
    null. A threshold at or below that percentile would fail unchanged prompts more
    than 5% of the time without the gate's noise guard; two runs that differ by more
    than the threshold mean it is too tight or the seed is not honoured.

    References: Miller 2024, arXiv:2411.00640 (clustered paired SE); Good 2005
    (permutation null).
    """
    a, b = as_run(run_a), as_run(run_b)
    notes: list[str] = []
    ha, hb = a.config.get("config_hash"), b.config.get("config_hash")
    if ha and hb and ha != hb:
        notes.append(f"the runs have different config hashes ({ha[:12]} vs {hb[:12]}): not the same config")
    t = thresholds or _thresholds_from(a.config.get("config") or {})[0]
    for r in (a, b):
        bad = _run_not_clean(Path(r.path), r.summary, None)
        if bad:
            raise EvalkitError(f"{r.path}: " + "; ".join(bad) + ": its rates are not comparable")
    ma = run_metrics(a, arm=arm)
    mb = run_metrics(b, arm=arm)
    if ma.k != mb.k:
        raise InputError(f"the runs have different k ({ma.k} and {mb.k})", json_path="k")
    am = ma.by_id()
    ids = [c.case_id for c in mb.cases if c.case_id in am and am[c.case_id].n >= ma.k and c.n >= ma.k]
    if len(ids) < 2:
        raise InputError("the runs share fewer than two fully sampled cases")
    null = _Null(mb, ma, ids, n_resamples, seed)
    checks = []
    groups = [("overall", ids)] + [(f"tag:{tag}", m) for tag, m in mb.tags(ids).items() if len(m) >= t.min_tag_cases]
    bm = mb.by_id()
    for name, members in groups:
        mask = np.isin(np.array(ids), members)
        obs, nd = null.success(mask)
        sa = [ma.score(am[i]) for i in members]
        sb = [mb.score(bm[i]) for i in members]
        se = stats.paired_difference(sb, sa).se if len(members) >= 2 else math.nan
        n95 = float(np.quantile(np.abs(nd), 0.95)) * 100
        checks.append(
            NoiseCheck(
                "success",
                name,
                len(members),
                100 * obs,
                _nan_none(100 * se),
                n95,
                t.max_success_drop_points,
                t.max_success_drop_points > n95,
            )
        )
    obs_c, nd_c = null.cost()
    if not math.isnan(obs_c):
        n95 = float(np.nanquantile(np.abs(nd_c), 0.95)) * 100
        checks.append(
            NoiseCheck(
                "cost",
                "per task",
                len(ids),
                100 * obs_c,
                None,
                n95,
                t.max_cost_increase_pct,
                t.max_cost_increase_pct > n95,
            )
        )
    ok = all(c.above_noise and abs(c.observed) <= c.threshold for c in checks)
    return NoiseReport(ok=ok, checks=tuple(checks), notes=tuple(notes), thresholds=t)
