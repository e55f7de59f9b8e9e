"""Gates, baselines and run-to-run noise: a run held against an accepted baseline.

* `run_metrics` reads per-case counts of one arm of a graded run (`RunMetrics`).
* `gate` compares a run to an accepted baseline and fails on a gated case score drop or a cost
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

import json
import math
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict, Unpack

import numpy as np
import pandas as pd

from evalkit.conclusions.verdicts import record_verdicts
from evalkit.foundations._io import RUN_JSON_BYTES, read_json_object, suite_folder_of, write_atomic
from evalkit.foundations.errors import EvalkitError, InputError
from evalkit.foundations.layout import BASELINE_FILE, BASELINE_SUMMARY_FILE, RUN_CONFIG, SUMMARY_JSON, SUMMARY_MD
from evalkit.foundations.records import (
    GATE_CAUSE_COST,
    GATE_CAUSE_INCOMPLETE,
    GATE_CAUSE_JUDGE,
    GATE_CAUSE_NOT_COMPARABLE,
    GATE_CAUSE_SCORE,
    GATE_POWER,
    UNDERPOWERED_PREFIX,
    Baseline,
    CaseResult,
    CaseTable,
    GateCheck,
    GatePower,
    GateResult,
    GateThresholds,
    RunMetrics,
    SetScore,
    gate_failure_causes,
)
from evalkit.foundations.records_gate import GATE_RECORDED_BY_GATE
from evalkit.foundations.records_suite import noise_guard_asked
from evalkit.numbers import stats
from evalkit.numbers.metrics import (
    cost_per_case,
    gated_case_score,
    gated_case_score_estimate,
    raw_value,
    sample_pass_rate,
    score_of,
    score_table,
)
from evalkit.runfolder.runload import (
    Run,
    SampleKeys,
    as_run,
    case_order,
    case_table,
    grades_summary,
    passed_value,
    pick_arm,
    sample_keys,
    suite_dir_of,
)
from evalkit.runfolder.runs import RunFolder, config_arm_settings, decided_keys

__all__ = [  # the records a gate makes, importable from here
    "GATE_CAUSE_COST",
    "GATE_CAUSE_INCOMPLETE",
    "GATE_CAUSE_JUDGE",
    "GATE_CAUSE_NOT_COMPARABLE",
    "GATE_CAUSE_SCORE",
    "Baseline",
    "CaseResult",
    "GateCheck",
    "GateResult",
    "RunMetrics",
    "gate_failure_causes",
]


def run_metrics(run: Run | str | Path, *, arm: str | None = None, k: int | None = None) -> RunMetrics:
    """Per-case counts of one arm of a graded run (`records.RunMetrics`): samples, passes,
    each sample's list-price cost, and the case's set and tags as the run recorded them
    (`runload.case_table`). A sample without a grade, or whose grade is null, counts in
    n and never in c."""
    run = as_run(run)
    arm = pick_arm(run, arm, "name the one to gate with --arm")
    return _arm_metrics(run, arm, _MetricsInputs.of(run), k)


def run_metrics_by_arm(run: Run | str | Path, arms: Sequence[str], *, k: int | None = None) -> dict[str, RunMetrics]:
    """`run_metrics` of each of `arms`, the run's case table, grades and case order read
    once for all of them (the pass@k page asks for every arm of a 100,000-sample run)."""
    run = as_run(run)
    picked = [pick_arm(run, arm, "name the one to gate with --arm") for arm in arms]
    inputs = _MetricsInputs.of(run)
    return {arm: _arm_metrics(run, arm, inputs, k) for arm in picked}


@dataclass(frozen=True)
class _MetricsInputs:
    """What `run_metrics` reads of a run whatever the arm: the case table and order, each
    sample row's key and grade row (`runload.sample_keys`), the judge versions.

    A run is read column by column: a 100,000-sample run's per-sample Python loop (a dict
    look-up, `passed_value` and four `_num` a sample) took 1.7 s for the pass@k page's two
    arms."""

    table: CaseTable
    sets: dict[str, str]  # case id -> set, from the table
    order: list[str]
    keys: SampleKeys
    judge_versions: list[Any] | None  # by grade row, then None for "no grade"; None: no grade has a string

    @classmethod
    def of(cls, run: Run) -> _MetricsInputs:
        versions = run.grades["judge_version"]
        # a missing value is never a string: a run whose grades name no judge version is read no further
        named = not versions.isna().all() and any(isinstance(v, str) for v in versions.tolist())
        table = case_table(run)
        sets = {c.id: c.set for c in table.cases}
        return cls(table, sets, case_order(run), sample_keys(run), [*versions.tolist(), None] if named else None)


def _verdicts(passed: pd.Series, at: np.ndarray) -> np.ndarray:
    """`passed_value` of the grades at rows `at` as 1 (True), 0 (False) or -1 (None; row
    -1: no grade): a bool column as it is, any other value by value (those rows only)."""
    if passed.dtype == np.bool_:
        return np.take(np.append(np.asarray(passed.to_numpy(), dtype=np.int8), np.int8(-1)), at)
    values, codes = passed.tolist(), {None: -1, True: 1, False: 0}
    return np.array([codes[passed_value(values[i])] if i >= 0 else -1 for i in at.tolist()], dtype=np.int8)


def _nums(column: pd.Series, at: np.ndarray) -> np.ndarray:
    """`_num` of the values at rows `at` (row -1: none, 0.0): a numpy number column as
    float64 with NaN as 0.0 (what `float` and `_num` make of each), any other column value
    by value (those rows only)."""
    if isinstance(column.dtype, np.dtype) and column.dtype.kind in "biuf":
        values = np.append(column.to_numpy(dtype=np.float64), 0.0)
        return np.take(np.where(np.isnan(values), 0.0, values), at)
    raw = column.tolist()
    return np.array([_num(raw[i]) if i >= 0 else 0.0 for i in at.tolist()], dtype=np.float64)


def _list_prices(run: Run, rows: np.ndarray, grade_rows: np.ndarray) -> np.ndarray:
    """`list_price(_num(...), ...)` of each of the sample `rows` with its grade row (-1:
    none): the same sum in the same order, float64 addition being Python's float's."""
    samples, grades = run.samples, run.grades
    paid, avoided = _nums(samples["cost_usd"], rows), _nums(samples["cost_avoided_usd"], rows)
    judge, judge_avoided = (
        _nums(grades["judge_cost_usd"], grade_rows),
        _nums(grades["judge_cost_avoided_usd"], grade_rows),
    )
    total: np.ndarray = paid + avoided + judge + judge_avoided
    return total


def _arm_metrics(run: Run, arm: str, inputs: _MetricsInputs, k: int | None) -> RunMetrics:
    """`run_metrics` of one arm, from what every arm shares (`_MetricsInputs`)."""
    rows = np.flatnonzero((run.samples["arm"] == arm).to_numpy(dtype=bool))
    per = _case_results(run, arm, inputs, rows)
    return RunMetrics(
        k=int(k or run.config.get("k") or max((c.n for c in per.values()), default=1)),
        cases=tuple(per[c] for c in inputs.order if c in per),
        arm=arm,
        run_stamp=Path(run.path).name,
        config_hash=run.config.get("config_hash"),
        judge_version=_judge_version(inputs, rows),
        sets_from=inputs.table.source,
    )


def _case_results(run: Run, arm: str, inputs: _MetricsInputs, rows: np.ndarray) -> dict[str, CaseResult]:
    """Case id -> its `CaseResult` from the sample `rows` (the arm's, in row order): the
    tags of its first sample, n, passes, ungraded, each sample's cost in row order, then
    the samples a per-case stopping run skipped (`_decided`)."""
    if not len(rows):
        return {}
    codes = inputs.keys.case[rows]
    by_case = np.argsort(codes, kind="stable")  # each case's samples together, in row order
    rows, codes = rows[by_case], codes[by_case]
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    ends = np.r_[starts[1:], len(rows)]
    grade_rows = inputs.keys.grade_row[rows]
    verdict = _verdicts(run.grades["passed"], grade_rows)
    passes = np.add.reduceat(verdict == 1, starts, dtype=np.int64).tolist()
    ungraded = np.add.reduceat(verdict == -1, starts, dtype=np.int64).tolist()
    costs = tuple(_list_prices(run, rows, grade_rows).tolist())  # a case's costs: one slice of it
    tags = run.samples["tags"].iloc[rows[starts]].tolist()
    names = [inputs.keys.case_ids[c] for c in codes[starts].tolist()]
    sets, skipped = inputs.sets, _decided(run, arm)
    out = {}
    for name, t, s, e, c, u in zip(names, tags, starts.tolist(), ends.tolist(), passes, ungraded, strict=True):
        more = skipped.get(name, 0)
        costs_ = costs[s:e] + (0.0,) * more
        out[name] = CaseResult(name, sets.get(name, "capability"), tuple(t or ()), e - s + more, c, costs_, u)
    return out


def _judge_version(inputs: _MetricsInputs, rows: np.ndarray) -> str | None:
    """The judge version most of the sample `rows`' grades name (the first met of the
    most named), among those a string names; None when none does."""
    versions = inputs.judge_versions
    if versions is None:
        return None
    counts = Counter(v for v in map(versions.__getitem__, inputs.keys.grade_row[rows].tolist()) if isinstance(v, str))
    return counts.most_common(1)[0][0] if counts else None


def _decided(run: Run, arm: str) -> Counter[str]:
    """Per case, the samples of `arm` a per-case stopping run skipped, its case's gate
    decided (`runs.decided_keys`): each counts as a failed sample at no cost, so n reaches
    k and the gated pass^k / pass@k is exactly the full design's, never a pass the rule
    did not see."""
    return Counter(case_id for case_id, key_arm, _ in decided_keys(run.summary) if key_arm == arm)


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
    gives the run-to-run noise of any group's gated case score (pass@k / pass^k) and of
    its cost per case, with the case set held fixed. No library offers this
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
            tab_r[j, : nr[j] + 1] = score_table(s, int(nr[j]), cur.k)
            tab_b[j, : nb[j] + 1] = score_table(s, int(nb[j]), cur.k)
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

    def score(self, mask: np.ndarray) -> tuple[float, np.ndarray]:
        """Observed and null change of the group's gated case score (current - baseline)."""
        return float(self.obs_diff[mask].mean()), self.null_diff[:, mask].mean(axis=1)

    def cost(self) -> tuple[float, np.ndarray]:
        """Observed and null relative change of the cost per case (current / baseline - 1)."""
        r, b = self.obs_cost
        nr, nb = self.null_cost
        with np.errstate(divide="ignore", invalid="ignore"):
            return float(r.sum() / b.sum() - 1) if b.sum() > 0 else math.nan, nr.sum(axis=1) / nb.sum(axis=1) - 1

    def p_worse(self, obs: float, null: np.ndarray, worse_is_lower: bool) -> float:
        hits = np.sum(null <= obs + 1e-12) if worse_is_lower else np.sum(null >= obs - 1e-12)
        return float((1 + hits) / (1 + self.B))


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


# what seed 001 says to do when the gate cannot see its threshold (step 6 finding, guideline 10)
NOISE_ADVICE = (
    "run the baseline twice and `evalkit noise` the two runs: when they differ by more than the threshold, the "
    "gate cannot hold at that N; widen it or add cases"
)


def thresholds_from(cfg: dict[str, Any] | None) -> GateThresholds:
    """The gate thresholds of a config snapshot (`config.json` -> `gate`; defaults for
    the keys it lacks: the seed's gate). `gate.alpha` is the noise guard's level, in
    (0, 1]; `require_significance` defaults to what a set `alpha` meant before issue 41
    (`records_suite.noise_guard_asked`)."""
    g = (cfg or {}).get("gate") or {}
    d = GateThresholds()
    try:
        t = GateThresholds(
            max_success_drop_points=float(g.get("max_success_drop_points", d.max_success_drop_points)),
            max_cost_increase_pct=float(g.get("max_cost_increase_pct", d.max_cost_increase_pct)),
            min_tag_cases=int(g.get("min_tag_cases", d.min_tag_cases)),
            alpha=float(g.get("alpha", d.alpha)),
            on_underpowered=g.get("on_underpowered", d.on_underpowered),
            require_significance=g.get("require_significance", noise_guard_asked(g)),
        )
    except (TypeError, ValueError) as exc:
        raise InputError(f"gate thresholds must be numbers: {exc}", json_path="$.gate") from None
    if not isinstance(t.require_significance, bool):
        raise InputError(
            f"gate require_significance must be true or false, got {t.require_significance!r}",
            json_path="$.gate.require_significance",
        )
    if not 0 < t.alpha <= 1:
        raise InputError(f"gate alpha must be in (0, 1], got {t.alpha!r}", json_path="$.gate.alpha")
    if t.on_underpowered not in ("fail", "warn"):
        raise InputError(
            f'gate on_underpowered must be "fail" or "warn", got {t.on_underpowered!r}',
            json_path="$.gate.on_underpowered",
        )
    return t


def gate_power(n_cases: int, baseline_score: float, t: GateThresholds) -> GatePower:
    """What a gate of `n_cases` gated cases at a baseline score can see: the smallest
    drop it detects at its alpha (`stats.detectable_drop`, power `GATE_POWER`, planned
    at the baseline's score shrunk by Laplace's rule) against its threshold.

    References: Cohen 1988, ch. 6 (see `stats.detectable_drop`).
    """
    p = stats.planning_rate(min(1.0, max(0.0, baseline_score)), n_cases)
    drop = stats.detectable_drop(n_cases, p, t.alpha, GATE_POWER)
    thr = t.max_success_drop_points
    needed = stats.cases_for_drop(thr / 100, p, t.alpha, GATE_POWER) if thr > 0 else 0
    return GatePower(
        n_cases=n_cases,
        alpha=t.alpha,
        power=GATE_POWER,
        planning_rate=p,
        detectable_drop_points=100 * drop,
        threshold_points=thr,
        cases_needed=needed,
        underpowered=100 * drop > thr + 1e-9,
        on_underpowered=t.on_underpowered,
    )


def run_not_clean(run_path: Path, summary: dict[str, Any] | None, runner_exit: int | None) -> list[str]:
    """Why a run cannot be gated or accepted, from the runner's exit status and the
    run's `summary.json` alone (its `complete` and `exit_code`): empty when it finished
    cleanly."""
    reasons = []
    if runner_exit:
        reasons.append(f"the runner exited {runner_exit}")
    if summary is None:
        sp = run_path / SUMMARY_JSON
        if not sp.exists():
            return reasons + ["no summary.json: the run did not finish"]
        try:
            summary = read_json_object(sp, SUMMARY_JSON, limit=RUN_JSON_BYTES)
        except InputError:
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
    return reasons


def load_baseline(path: str | Path) -> Baseline:
    """Read `baseline.json` (`records.Baseline`): ours, evalkit 0.1's, or the agent-evals
    shape (`success_rate`, `cost_per_task_usd`, `per_tag`)."""
    p = Path(path)
    if not os.path.lexists(p):
        raise InputError("baseline not found (accept one with `evalkit baseline accept RUN`)", p)
    raw = read_json_object(p, "a baseline", limit=RUN_JSON_BYTES, root=suite_folder_of(p))
    try:
        return Baseline.from_json(raw)
    except InputError as exc:
        raise InputError(exc.message, p, json_path=exc.json_path) from None


class GateOptions(TypedDict, total=False):
    """`gate`'s keywords, passed through to `gate_decision`, which holds their defaults
    (arm, alpha and runner_exit None, n_resamples 2000, seed 0): one parameter list for
    the two."""

    arm: str | None
    alpha: float | None
    runner_exit: int | None
    n_resamples: int
    seed: int


def gate(
    run: Run | str | Path,
    baseline_path: str | Path,
    thresholds: GateThresholds | None = None,
    **options: Unpack[GateOptions],
) -> GateResult:
    """Gate a run against an accepted baseline. It never writes a baseline.

    Fails, without reading any rate, on a non-zero runner exit or a `summary.json` that
    is missing or INCOMPLETE. Otherwise, on the cases both share, fails on a drop of the
    gated case score (`evalkit.numbers.metrics`) above `max_success_drop_points` overall or on
    any tag with at least `min_tag_cases` cases, or a cost-per-case increase above
    `max_cost_increase_pct` percent (thresholds from the run's `config.json` `gate`
    unless given). Each case's set is the one the run recorded (`case-table.json`), never
    the suite as it is today. By default a breach fails on its observed size (seed
    001's gate); every check carries its one-sided p-value under the within-case
    permutation null (`_Null`), Holm-adjusted across all checks, and the gate's power
    (`gate_power`). With `gate.require_significance` (the noise guard) a breach fails
    only when that adjusted p is also <= alpha (`gate.alpha`, default 0.05), which keeps
    the false-alarm rate on two runs of one model at most alpha. `alpha` given here
    overrides the config's with its meaning before issue 41: below 1 the noise guard, 1
    the plain thresholds.

    References: Holm 1979, Scand. J. Statist. 6(2) (`holm`);
    Good 2005 (permutation tests); Chen et al. 2021 and Yao et al. 2024 (pass@k, pass^k).
    """
    result = gate_decision(run, baseline_path, thresholds, **options)
    base_run, base_arm = _provenance(baseline_path)
    return replace(result, baseline_run=base_run, baseline_arm=base_arm)


def gate_decision(
    run: Run | str | Path,
    baseline: Baseline | str | Path,
    thresholds: GateThresholds | None = None,
    *,
    label: str | None = None,
    arm: str | None = None,
    alpha: float | None = None,
    runner_exit: int | None = None,
    n_resamples: int = 2000,
    seed: int = 0,
) -> GateResult:
    """`gate`'s decision without the baseline's provenance: a run that did not finish
    cleanly fails unread, a judge held reads no rate, else the checks (and the
    corrected judged check). `baseline`: a `baseline.json`, or one in hand
    (`run_as_baseline`: the explorer's diff gates RUN against another run with the
    very decision `evalkit gate` makes); `label` names it in the result (default: the
    path)."""
    run_path = Path(run.path) if isinstance(run, Run) else Path(run)
    summary = run.summary if isinstance(run, Run) else None
    label = label if label is not None else str(baseline)
    bad = run_not_clean(run_path, summary, runner_exit)
    if bad:
        return GateResult(
            passed=False,
            reasons=tuple(bad),
            read_rates=False,
            thresholds=thresholds or GateThresholds(),
            run=str(run_path),
            baseline=label,
            arm=arm,
        )
    base = baseline if isinstance(baseline, Baseline) else load_baseline(baseline)
    return _gate_read(run, base, label, thresholds, arm, alpha, n_resamples, seed)


def run_as_baseline(run: Run | str | Path, arm: str | None = None) -> Baseline:
    """Another run held as a baseline in memory, for a gate against it: its per-case
    counts (all the gate reads when they are there) and its folder (where the judged
    checks read its judged rates). Its aggregate rates are not computed (NaN, None):
    nothing reads them, and a run with a case short of k samples has none."""
    run = as_run(run)
    m = run_metrics(run, arm=arm)
    return Baseline(
        gated_case_score=math.nan, cost_per_case_usd=None, metrics=m, run_stamp=m.run_stamp, run=str(run.path)
    )


def _provenance(baseline_path: str | Path) -> tuple[str, str | None]:
    """The run (stamp) and arm a baseline was accepted from; ("", None) when it cannot
    be read (the gate's own reasons say why)."""
    try:
        b = load_baseline(baseline_path)
    except EvalkitError:
        return "", None
    return b.run_stamp or "", b.arm


def _gate_read(
    run: Run | str | Path,
    baseline: Baseline,
    label: str,
    thresholds: GateThresholds | None,
    arm: str | None,
    alpha: float | None,
    n_resamples: int,
    seed: int,
) -> GateResult:
    """`gate` on a run that finished cleanly: the rates read against the baseline."""
    run_path = Path(run.path) if isinstance(run, Run) else Path(run)
    run = as_run(run)
    t = thresholds or thresholds_from(run.config.get("config") or {})
    if alpha is not None:
        t = replace(t, alpha=alpha, require_significance=alpha < 1)
    cur = gate_run_metrics(run, label, arm=arm, baseline=baseline)
    held = _judge_held(run, cur.arm)
    if held:
        return GateResult(
            passed=False,
            reasons=(held,),
            read_rates=False,
            thresholds=t,
            alpha=t.alpha,
            run=str(run_path),
            baseline=label,
            arm=cur.arm,
        )
    result = gate_metrics(
        cur, baseline, t, n_resamples=n_resamples, seed=seed, run_label=str(run_path), baseline_label=label
    )
    if (run.config.get("config") or {}).get("judged_estimate") == "corrected":
        result = _judged_check(result, run, cur.arm, baseline, label, t)
    note = judge_version_note(baseline, cur.judge_version)
    return replace(result, notes=(*result.notes, note)) if note else result


def judge_version_note(baseline: Baseline, run_version: str | None) -> str | None:
    """A note when the run was judged with another judge version than the baseline (seed
    001: "changing the judge invalidates comparison with older runs"); None otherwise."""
    base_version = baseline.metrics.judge_version if baseline.metrics else baseline.judge_version
    if not base_version or not run_version or base_version == run_version:
        return None
    return (
        f"judge version changed: the baseline was judged with {base_version}, this run with {run_version}; "
        "judged rates are not comparable across judge versions: accept a new baseline judged with this one"
    )


def _arm_judged(run_path: Path | str | None, arm: str | None) -> dict[str, Any] | None:
    """The judged-rate block of `arm` in a run's `grades-summary.json`
    (`grading.judged_rates`), None when it has none (or the run is not there)."""
    if not run_path or not Path(run_path).is_dir():
        return None
    gs = grades_summary(run_path)
    jr = gs.judged_rates if gs is not None else None
    block = ((jr or {}).get("per_arm") or {}).get(arm or "")
    return block.get("overall") if isinstance(block, dict) else None


def _rate_and_se(block: dict[str, Any], corrected: bool = True) -> tuple[float, float, str]:
    """A judged-rate block's corrected rate and SE when people labelled it (and
    `corrected`), else the judge-only rate with the SE its Wilson interval implies; and
    which one it is. The corrected rate is the estimator's raw value: the clip to [0, 1]
    is for display and would move the observed change."""
    z = stats.normal_quantile(0.975)  # the 97.5% normal quantile (as the blocks' 95% intervals have it)
    if corrected and block.get("corrected"):
        c = block["corrected"]
        return raw_value(c), float(c.get("se") or (c["high"] - c["low"]) / (2 * z)), "corrected"
    jo = block["judge_only"]
    return float(jo["rate"]), float(jo["high"] - jo["low"]) / (2 * z), "judge only"


def _judged_check(
    result: GateResult, run: Run, arm: str | None, baseline: Baseline, baseline_path: str | Path, t: GateThresholds
) -> GateResult:
    """`"judged_estimate": "corrected"`: the gate also rests on the corrected judged
    sample pass rate (`grading.judged_rates`, PPI++): without one (fewer than 2 labels
    on the arm's judged samples) it reads no rate (judge not trusted); with one, a drop
    from the baseline run's judged rate beyond `max_success_drop_points` fails the gate
    when it is also beyond noise: a one-sided z-test on the two rates' standard errors,
    at `alpha` (not in the Holm family of the case checks). Like with like: the
    corrected rate against the baseline's corrected one (`judged:corrected`); a baseline
    with no corrected rate is compared judge-only with judge-only (`judged:judge-only`),
    the corrected figure in a note, since the judge's own bias would otherwise show as
    a change. The notes say which estimate the gate rested on."""
    cur = _arm_judged(run.path, arm)
    if cur is None:
        return result  # no judged sample on this arm: nothing rests on a judge
    if not cur.get("corrected"):
        n = (cur.get("human") or {}).get("n", 0)
        return replace(
            result,
            passed=False,
            read_rates=False,
            checks=(),
            reasons=(
                f'{GATE_CAUSE_JUDGE}: judged_estimate is "corrected" but arm {arm} has {n} fresh human label(s) '
                "on its judged samples (at least 2 needed): label some (`evalkit judge sample RUN -n 40`) and grade "
                "again",
            ),
        )
    c = cur["corrected"]
    notes = [
        f"judged rates rest on the corrected estimate (PPI++ from {c['n']} labels of {c['N']} judged samples): "
        f"{100 * c['rate']:.1f}% [{100 * c['low']:.1f}, {100 * c['high']:.1f}], the judge alone "
        f"{100 * cur['judge_only']['rate']:.1f}%"
    ]
    checks: list[GateCheck] = []
    reasons = list(result.reasons)
    base = _arm_judged(baseline.run, baseline.arm)
    if base is None:
        notes.append("the baseline run records no judged rate: the corrected rate is shown, not compared")
    else:
        like = bool(base.get("corrected"))
        (rc, sc, kind), (rb, sb, _) = _rate_and_se(cur, like), _rate_and_se(base, like)
        group = "judged:corrected" if like else "judged:judge-only"
        if not like:
            notes.append(
                f"the baseline run has no corrected judged rate (no human labels): the judge-only rates are compared "
                f"({100 * rb:.1f}% then, {100 * rc:.1f}% now), the corrected {100 * c['rate']:.1f}% is not gated "
                "(against a judge-only baseline the judge's own bias would read as a change)"
            )
        check, why = _z_check(group, int(c["N"]), (rb, sb), (rc, sc), t)
        checks.append(check)
        if check.failed:
            reasons.append(
                f"case-score drop {group}: {check.change:+.1f} points in the {kind} judged sample pass "
                f"rate against the baseline's {kind} one (beyond {t.max_success_drop_points:g} points) "
                f"(p = {check.p_value:.3g})"
            )
        elif why:
            notes.append(f"{kind} judged rate: {why}")
    case_check, case_reason, case_notes = _judged_case_score_check(run, arm, baseline, t)
    checks += [case_check] if case_check else []
    reasons += [case_reason] if case_reason else []
    notes += case_notes
    return replace(
        result,
        passed=not reasons,
        reasons=tuple(reasons),
        checks=result.checks + tuple(checks),
        notes=result.notes + tuple(notes),
    )


def _z_check(
    group: str, n: int, base: tuple[float, float], cur: tuple[float, float], t: GateThresholds
) -> tuple[GateCheck, str | None]:
    """A gate check of a corrected judged quantity (a rate or a score in [0, 1], with
    its SE) against the baseline's: a drop beyond `max_success_drop_points` fails when
    a one-sided z-test on the two SEs also calls it beyond noise at `alpha` (outside
    the Holm family of the case checks). Returns the check and, for a breach within
    noise, the sentence saying so."""
    (rb, sb), (rc, sc) = base, cur
    change = 100 * (rc - rb)
    se = 100 * math.hypot(sc, sb)
    # one-sided: P(Z <= change / se), the normal lower tail (a drop is negative)
    p = 0.5 * math.erfc(-change / se / math.sqrt(2)) if se > 0 else (0.0 if change < 0 else 1.0)
    exceeded = -change > t.max_success_drop_points + 1e-9
    failed = exceeded and p <= t.alpha
    check = GateCheck("judged", group, n, rb, rc, change, t.max_success_drop_points, exceeded, p, p, failed)
    why = None
    if exceeded and not failed:
        why = (
            f"change {change:+.1f} points breaches {t.max_success_drop_points:g} but is within its interval's "
            f"noise (p = {p:.3g} > {t.alpha:g})"
        )
    return check, why


def _arm_case_score(run_path: Path | str | None, arm: str | None) -> dict[str, Any] | None:
    """The corrected gated case score block of `arm` in a run's `grades-summary.json`
    (`grading.judged_case_score`), None when it has none."""
    if not run_path or not Path(run_path).is_dir():
        return None
    gs = grades_summary(run_path)
    jr = gs.judged_rates if gs is not None else None
    block = ((jr or {}).get("per_arm") or {}).get(arm or "")
    cs = block.get("gated_case_score") if isinstance(block, dict) else None
    return cs if isinstance(cs, dict) else None


def _judged_case_score_check(
    run: Run, arm: str | None, baseline: Baseline, t: GateThresholds
) -> tuple[GateCheck | None, str | None, list[str]]:
    """`"judged_estimate": "corrected"`: the gated case score with its judged part
    corrected (`metrics.corrected_gated_case_score`) against the baseline run's
    corrected one, by `_z_check`: like with like. A baseline with no corrected score
    (no by-case labels) gives no check: the gate's own case-score checks already compare
    the judge-only gated case score, and setting the corrected score against a
    judge-only one would read the judge's bias as a change; the note gives the
    corrected figure and says why it is not gated. Without enough whole labelled cases
    the note says the case checks rest on the judge. Returns the check, the failure
    reason and the notes."""
    cur = _arm_case_score(run.path, arm)
    if cur is None:
        return None, None, []
    cor = cur.get("corrected")
    if not cor:
        return (
            None,
            None,
            [
                f"the gated case score's judged part has {cur['n_labelled_cases']} labelled case(s) of "
                f"{cur['n_judged_cases']} (at least 2 needed; a case is labelled when people scored all its judged "
                "samples, drawn by case: `evalkit judge sample RUN --by-case`): the case-score checks rest on the "
                "judge alone"
            ],
        )
    notes = [
        f"the gated case score rests on the corrected estimate (its judged part PPI++ from {cor['n']} labelled "
        f"of {cor['N']} judged cases): {100 * cor['score']:.1f}% [{100 * cor['low']:.1f}, {100 * cor['high']:.1f}], "
        f"the judge alone {100 * cur['judge_only']['score']:.1f}%"
    ]
    base = _arm_case_score(baseline.run, baseline.arm)
    if base is None or not base.get("corrected"):
        notes.append(
            "the baseline run has no corrected gated case score (no by-case human labels): the corrected "
            f"{100 * cor['score']:.1f}% is not gated; the judge-only gated case scores are compared by the case-score "
            "checks (against a judge-only baseline the judge's own bias would read as a change)"
        )
        return None, None, notes
    rb, sb = float(base["corrected"]["score"]), float(base["corrected"]["se"])
    check, why = _z_check("judged:case-score", int(cur["n_cases"]), (rb, sb), (cor["score"], cor["se"]), t)
    reason = None
    if check.failed:
        reason = (
            f"case-score drop judged:case-score: {check.change:+.1f} points in the gated case score with its judged "
            f"part corrected against the baseline's corrected one (beyond {t.max_success_drop_points:g} points) "
            f"(p = {check.p_value:.3g})"
        )
    elif why:
        notes.append(f"corrected gated case score: {why}")
    return check, reason, notes


def _judge_held(run: Run, arm: str | None) -> str | None:
    """Why the gate reads no rate of `arm` when its grading held judged results (the
    judge is not trusted): their pass/fail must not move a gate either way."""
    g = run.grades
    if not len(g) or "judge_held" not in g.columns:
        return None
    rows = g[(g["arm"] == arm) & g["judge_held"].notna() & g["passed"].isna()]
    if not len(rows):
        return None
    return (
        f"{GATE_CAUSE_JUDGE}: {len(rows)} judged sample(s) of arm {arm} held ({rows['judge_held'].iloc[0]}): "
        "the gate reads no rate until the judge is calibrated or the suite opts out"
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
    run: Run | str | Path, baseline_path: str | Path, *, arm: str | None = None, baseline: Baseline | None = None
) -> RunMetrics:
    """The run's metrics exactly as `gate` reads them: the baseline's arm unless `arm`
    is given."""
    run = as_run(run)
    baseline = baseline if baseline is not None else load_baseline(baseline_path)
    if arm is None and baseline.arm in run.arm_names():
        arm = baseline.arm
    return run_metrics(run, arm=arm)


def _checks_against(
    cur: RunMetrics,
    base: RunMetrics,
    t: GateThresholds,
    n_resamples: int,
    seed: int,
    reasons: list[str],
    notes: list[str],
) -> list[tuple[str, str, int, float, float, float, float, float | None]]:
    """The checks of a gate against a baseline with per-case data (the noise guard on)."""
    raw: list[tuple[str, str, int, float, float, float, float, float | None]] = []
    if base.k != cur.k:
        reasons.append(
            f"k changed from the baseline's {base.k} to {cur.k}: pass@k/pass^k are not comparable; "
            "accept a new baseline"
        )
        return raw
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
        return raw
    short = [i for i in ids if cm[i].n < cur.k or bm[i].n < cur.k]
    if short:
        reasons.append(f"{len(short)} case(s) have fewer than k={cur.k} samples: {', '.join(short[:10])}")
        return raw
    null = _Null(cur, base, ids, n_resamples, seed)
    gated = [i for i in ids if cm[i].gated]
    _note_ungated(notes, cur, ids)
    groups = [("overall", gated)] + [
        (f"tag:{tag}", members) for tag, members in cur.tags(gated).items() if len(members) >= t.min_tag_cases
    ]
    for name, members in groups if gated else ():
        obs, nd = null.score(np.isin(np.array(ids), members))
        b, c = gated_case_score(base, members), gated_case_score(cur, members)
        raw.append(
            ("score", name, len(members), b, c, 100 * obs, t.max_success_drop_points, null.p_worse(obs, nd, True))
        )
    obs_c, nd_c = null.cost()
    if math.isnan(obs_c):
        notes.append("baseline cost is zero: cost not gated")
    else:
        b, c = cost_per_case(base, ids), cost_per_case(cur, ids)
        raw.append(
            ("cost", "per case", len(ids), b, c, 100 * obs_c, t.max_cost_increase_pct, null.p_worse(obs_c, nd_c, False))
        )
    return raw


def _checks_without_cases(
    cur: RunMetrics, baseline: Baseline, t: GateThresholds, notes: list[str]
) -> list[tuple[str, str, int, float, float, float, float, float | None]]:
    """The checks of a gate against a baseline of rates only (the agent-evals shape):
    thresholds without the noise guard."""
    notes.append("baseline has no per-case data (agent-evals shape): thresholds applied without the noise guard")
    raw: list[tuple[str, str, int, float, float, float, float, float | None]] = []
    ids = [c.case_id for c in cur.cases]
    gated = [c.case_id for c in cur.cases if c.gated]
    _note_ungated(notes, cur, ids)
    groups = [("overall", gated, baseline.gated_case_score)] if gated else []
    for tag, members in cur.tags(gated).items():
        if len(members) >= t.min_tag_cases and tag in baseline.per_tag:
            groups.append((f"tag:{tag}", members, baseline.per_tag[tag]))
    for name, members, b in groups:
        c = gated_case_score(cur, members)
        raw.append(("score", name, len(members), b, c, 100 * (c - b), t.max_success_drop_points, None))
    bc = baseline.cost_per_case_usd
    if bc:
        cc = cost_per_case(cur)
        raw.append(("cost", "per case", len(ids), bc, cc, 100 * (cc / bc - 1), t.max_cost_increase_pct, None))
    return raw


def gate_metrics(
    cur: RunMetrics,
    baseline: Baseline | RunMetrics,
    t: GateThresholds,
    *,
    n_resamples: int = 2000,
    seed: int = 0,
    run_label: str = "",
    baseline_label: str = "",
) -> GateResult:
    """The rate-reading half of `gate`, on metrics already extracted: `baseline` with
    per-case data (a `RunMetrics`, or a `Baseline` holding one) turns the noise guard on;
    a `Baseline` of rates only (agent-evals shape) applies the thresholds alone."""
    reasons: list[str] = []
    notes: list[str] = []
    ungraded = sum(c.ungraded for c in cur.cases)
    if ungraded:
        notes.append(f"{ungraded} sample(s) ungraded: counted as failures, never as passes")
    if cur.sets_from != "case table" and not cur.sets_from.startswith(("run", "ingest")):
        notes.append(f"case sets: {cur.sets_from}")
    base = baseline if isinstance(baseline, RunMetrics) else baseline.metrics
    if base is not None:
        raw_checks = _checks_against(cur, base, t, n_resamples, seed, reasons, notes)
    else:
        assert isinstance(baseline, Baseline)
        raw_checks = _checks_without_cases(cur, baseline, t, notes)
    power = next((gate_power(rc[2], rc[3], t) for rc in raw_checks if rc[0] == "score" and rc[1] == "overall"), None)
    adj = holm([rc[7] for rc in raw_checks if rc[7] is not None])
    checks = []
    for kind, group, n, b, c_, change, thr, p in raw_checks:
        p_adj = float(adj.pop(0)) if p is not None else None
        checks.append(
            _read_check(GateCheck(kind, group, n, b, c_, change, thr, False, p, p_adj, False), t, reasons, notes)
        )
    if power is not None and power.underpowered:
        if t.on_underpowered == "warn":
            notes.append(
                f"warning: {UNDERPOWERED_PREFIX} (gate.on_underpowered warn): {power.describe()}; {NOISE_ADVICE}"
            )
        else:
            reasons.append(f"{UNDERPOWERED_PREFIX}: {power.describe()}")
    return GateResult(
        passed=not reasons,
        reasons=tuple(reasons),
        read_rates=True,
        checks=tuple(checks),
        notes=tuple(notes),
        thresholds=t,
        alpha=t.alpha,
        run=run_label,
        baseline=baseline_label,
        arm=cur.arm,
        power=power,
    )


def _read_check(check: GateCheck, t: GateThresholds, reasons: list[str], notes: list[str]) -> GateCheck:
    """One check decided: `exceeded` when its change breaches the threshold (`change` is
    signed current - baseline: the score fails on a drop, cost on an increase), `failed`
    when it also is beyond noise or the suite did not ask for the noise guard
    (`require_significance`); its reason or note appended."""
    kind, group, change, thr, p_adj = check.kind, check.group, check.change, check.threshold, check.p_adjusted
    exceeded = (-change if kind == "score" else change) > thr + 1e-9
    beyond_noise = p_adj is None or p_adj <= t.alpha
    failed = exceeded and (beyond_noise or not t.require_significance)
    unit = " points" if kind == "score" else "%"
    if failed:
        what = "case-score drop" if kind == "score" else "cost-per-case increase"
        reasons.append(
            f"{what} {group}: {change:+.1f}{unit} (beyond {thr:g}{unit})"
            + (f" (p = {p_adj:.3g})" if p_adj is not None else "")
        )
    if exceeded and not beyond_noise:
        notes.append(
            f"{check.label}: the change {change:+.1f}{unit} fails the gate on its observed size (the seed's gate) "
            f"though it is within run-to-run noise (adjusted p = {p_adj:.3g} > {t.alpha:g}): run `evalkit noise` on "
            "two baseline runs; `gate.require_significance: true` fails only beyond noise"
            if failed
            else f"{check.label}: change {change:+.1f}{unit} breaches {thr:g} but is within run-to-run noise "
            f"(adjusted p = {p_adj:.3g} > {t.alpha:g}); run `evalkit noise` on two baseline runs"
        )
    return replace(check, exceeded=exceeded, failed=failed)


def accept_baseline(
    run: Run | str | Path, suite_dir: str | Path | None = None, *, arm: str | None = None
) -> tuple[Path, Path]:
    """Accept a run as the suite's baseline: write `baseline.json` (`records.Baseline`:
    the gated case score overall, per tag and per set, the cost per case, and the
    per-case counts the gate's noise guard needs) and `baseline-summary.md` (the run's
    summary, the provenance), each through a temporary file and a rename. Refuses a run
    that did not finish cleanly or has ungraded samples: such a run can never become a
    baseline. Gates never call this.
    """
    run = as_run(run)
    bad = run_not_clean(Path(run.path), run.summary, None)
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
    m = run_metrics(run, arm=arm)
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
        est = gated_case_score_estimate(m, ids)
        if est is not None:
            per_set[s] = SetScore(
                n_cases=len(ids),
                k=m.k,
                pass_at_k=est.value if s == "capability" else None,
                pass_at_k_se=est.se if s == "capability" else None,
                pass_hat_k=est.value if s == "regression" else None,
                pass_hat_k_se=est.se if s == "regression" else None,
                gate="pass@k" if s == "capability" else "pass^k",
                gated_case_score=est.value,
                gated_case_score_se=est.se,
                n_gated=len(ids),
            )
    overall = gated_case_score_estimate(m)
    assert overall is not None
    doc = Baseline(
        gated_case_score=overall.value,
        gated_case_score_se=overall.se,
        cost_per_case_usd=cost_per_case(m),
        metrics=m,
        per_tag={t: gated_case_score(m, ids) for t, ids in tags.items()},
        per_tag_cases={t: len(ids) for t, ids in tags.items()},
        per_set=per_set,
        run_stamp=m.run_stamp,
        run=str(run.path),
        summary=BASELINE_SUMMARY_FILE,
        accepted=datetime.now(UTC).isoformat(timespec="seconds"),
        success_rate=sample_pass_rate(sum(c.c for c in m.cases), sum(c.n for c in m.cases)),
    )
    run_md = Path(run.path) / SUMMARY_MD
    body = run_md.read_text(encoding="utf-8", errors="replace") if run_md.exists() else "(the run has no summary.md)\n"
    head = [
        f"# Baseline: run {m.run_stamp}",
        "",
        f"Accepted {doc.accepted} from `{run.path}` (arm `{m.arm}`, k = {m.k}, "
        f"config hash {m.config_hash or 'n/a'}, judge {m.judge_version or 'n/a'}).",
        "",
        "| metric | value |",
        "|---|---|",
        f"| gated case score (capability pass@{m.k}, regression pass^{m.k}) | {overall.value:.3f} |",
        f"| cost per case (USD, list price) | {doc.cost_per_case_usd:.6f} |",
    ]
    head += [f"| tag `{t}` ({len(ids)} cases) | {doc.per_tag[t]:.3f} |" for t, ids in tags.items()]
    text_md = "\n".join(head) + "\n\n## Run summary\n\n" + body
    bj, bs = suite_dir / BASELINE_FILE, suite_dir / BASELINE_SUMMARY_FILE
    # The summary first: a baseline.json never points at a summary that is not there yet.
    write_atomic(bs, text_md)
    write_atomic(bj, json.dumps(doc.to_json(), indent=2) + "\n")
    return bj, bs


def _nan_none(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


@dataclass(frozen=True)
class NoiseCheck:
    """Run-to-run noise of one gated quantity: the observed change b - a (points or
    percent), its clustered paired SE over cases (the score only), `noise95` the change
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
    not already differ by more than a threshold; never for a cache replay (`replay`),
    which measures no noise."""

    ok: bool
    checks: tuple[NoiseCheck, ...]
    notes: tuple[str, ...]
    thresholds: GateThresholds
    replay: bool = False  # the second run replays the first from the response cache: no noise measured

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["notes"] = list(self.notes)
        return d

    def render(self) -> str:
        lines = [
            (
                "NO NOISE MEASURED: the second run is a cache replay of the first (see the note)"
                if self.replay
                else "thresholds sit above the run-to-run noise"
                if self.ok
                else "thresholds do NOT sit above the run-to-run noise"
            )
        ]
        lines.append(f"{'quantity':<28} {'cases':>5} {'b - a':>8} {'SE':>7} {'noise95':>8} {'threshold':>9}  verdict")
        for c in self.checks:
            u = "pts" if c.kind == "score" else "%"
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
    run-to-run noise? For the gated case score overall and per tag with enough cases,
    and for the cost per case: the observed change, its clustered paired SE (cases are the
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
    t = thresholds or thresholds_from(a.config.get("config") or {})
    for r in (a, b):
        bad = run_not_clean(Path(r.path), r.summary, None)
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
        obs, nd = null.score(mask)
        sa = [score_of(ma, am[i]) for i in members]
        sb = [score_of(mb, bm[i]) for i in members]
        se = stats.paired_difference(sb, sa).se if len(members) >= 2 else math.nan
        n95 = float(np.quantile(np.abs(nd), 0.95)) * 100
        checks.append(
            NoiseCheck(
                "score",
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
                "per case",
                len(ids),
                100 * obs_c,
                None,
                n95,
                t.max_cost_increase_pct,
                t.max_cost_increase_pct > n95,
            )
        )
    replay = shared_requests(a, b)
    if replay:
        notes.insert(0, replay[1])
    ok = all(c.above_noise and abs(c.observed) <= c.threshold for c in checks) and not (replay and replay[0])
    return NoiseReport(ok=ok, checks=tuple(checks), notes=tuple(notes), thresholds=t, replay=bool(replay and replay[0]))


def shared_requests(a: Run, b: Run) -> tuple[bool, str] | None:
    """Whether two runs sent the very same requests (every sample's `request_hash` the
    same, sample by sample), and what that means for `noise`: with every sample of one
    run answered from the response cache it is a replay (True), which measures no noise
    at all (the runs do not record which came first, so either run may be the replay);
    with some answers cached the noise is still measured (False), its note saying how
    many were cached, since those repeat an earlier answer and shrink the noise shown;
    with fresh answers (False) the runs share their seeds, so they measure the
    endpoint's own variation, not the seed-to-seed noise. None when any request differs
    or a run records no request hashes."""
    cols = ["case_id", "arm", "index", "request_hash"]
    sa, sb = a.samples, b.samples
    if not len(sa) or not len(sb) or any(c not in s.columns for c in cols for s in (sa, sb)):
        return None
    ka = {(str(c), str(r), int(i)): h for c, r, i, h in zip(*(sa[c].tolist() for c in cols), strict=True)}
    kb = {(str(c), str(r), int(i)): h for c, r, i, h in zip(*(sb[c].tolist() for c in cols), strict=True)}
    if ka.keys() != kb.keys() or any(not h or ka[k] != h for k, h in kb.items()):
        return None
    n = len(kb)
    shared = f"the two runs share every request hash ({n} of {n})"
    cached = [int(s["cached"].fillna(False).astype(bool).sum()) if "cached" in s.columns else 0 for s in (sa, sb)]
    if max(cached) == n:
        which = "second" if cached[1] == n else "first"
        return True, (
            f"{shared} and every sample of the {which} run was answered from the response cache: a cache replay, "
            "not a second run, so it measures no run-to-run noise; re-run with `evalkit run --no-cache` (or other "
            "seeds) and compare again"
        )
    note = (
        f"{shared}: the same seeds and config, so the noise shown is the endpoint's own at those seeds; for "
        "seed-to-seed noise re-run with other seeds (or `--no-cache` where a cache answered)"
    )
    if any(cached):
        note += (
            f"; {cached[0]} of {n} sample(s) of the first run and {cached[1]} of {n} of the second were answered "
            "from the response cache: they repeat an earlier answer, so the noise shown may be understated"
        )
    return False, note


def gate_run(
    run: Run | str | Path,
    baseline_path: str | Path,
    *,
    arm: str | None = None,
    runner_exit: int | None = None,
) -> GateResult:
    """`evalkit gate`: `gate`, then the result recorded in the run's `verdicts.json`
    (when RUN is a run folder), where the report and the index read it (marked
    `recorded_by` "gate": a report never replaces it). The result
    notes the model the gated arm ran and the one the baseline was accepted on (the
    upgrade gate: an arm on the new model against the baseline of the old one)."""
    res = replace(gate(run, baseline_path, arm=arm, runner_exit=runner_exit), recorded_by=GATE_RECORDED_BY_GATE)
    path = Path(run.path) if isinstance(run, Run) else Path(run)
    models = upgrade_note(path, baseline_path, res.arm)
    if models:
        res = replace(res, notes=(*res.notes, models))
    if (path / RUN_CONFIG).is_file():
        record_verdicts(path, gate=res)
    return res


def upgrade_note(run_path: Path, baseline_path: str | Path, arm: str | None) -> str | None:
    """ "arm NEW (model M, host H) against the baseline accepted on arm OLD (model M0)":
    what an upgrade gate compares, from the two runs' `config.json` (`arm_settings`);
    None when either side's model is not known or the arm is not named."""

    def settings(folder: Path) -> dict[str, dict[str, Any]]:
        try:
            return config_arm_settings(RunFolder(folder).read_meta())
        except (OSError, EvalkitError):
            return {}

    if arm is None:
        return None
    now = settings(run_path).get(arm) or {}
    try:
        b = load_baseline(baseline_path)
    except EvalkitError:
        return None
    then = settings(Path(b.run)).get(b.arm or "") if b.run else None
    if not now.get("model") or not then or not then.get("model"):
        return None
    host = f", host {now['host']}" if now.get("host") else ""
    same = "the same model" if now["model"] == then["model"] else "another model"
    return (
        f"arm {arm} (model {now['model']}{host}) against the baseline accepted on arm {b.arm} "
        f"(model {then['model']}): {same}"
    )
