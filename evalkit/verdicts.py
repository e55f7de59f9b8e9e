"""Verdicts, power plans, gates, baselines and run-to-run noise.

Statistics come from `evalkit.stats`; this module decides what they mean for a run:

* `two_arm_verdict` pairs a run's baseline and treatment samples by (case, index), casts
  one vote per case (the unit that was sampled: repeats of one case must not inflate n)
  and turns the tally into `pass | regression | no-improvement | inconclusive` with the
  exact sign test. A clustered paired analysis of all trials is shown alongside.
* `conformance_verdict` is the single-arm verdict: every trial ran and met the threshold.
* `PowerPlan` is the pre-registered plan written to `evals/<unit>/plan.json`;
  `check_against_plan` flags a run that stopped short or changed the test.
* `gate` compares a run to an accepted baseline; `accept_baseline` is the separate act
  that writes one; `noise` says whether the gate thresholds sit above run-to-run noise.

References: Dixon & Mood 1946 (the sign test); Miller 2024, "Adding Error Bars to Evals"
(arXiv:2411.00640; clustered and paired standard errors); Chen et al. 2021 (pass@k);
Yao et al. 2024, tau-bench (pass^k); Good 2005, "Permutation, Parametric and Bootstrap
Tests of Hypotheses" (the within-case permutation test the gate uses); Holm 1979.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Literal

import numpy as np

from . import stats
from .errors import EvalkitError, InputError
from .records import GateThresholds
from .runs import RUN_JSON_BYTES, Run, find_suite_dir, iter_jsonl, load_run, write_atomic
from .suite import NO_GATE, read_json_object, set_gate, suite_folder_of

VerdictKind = Literal["pass", "regression", "no-improvement", "inconclusive"]

MIN_TRIALS = 5
# Below six discordant pairs no tally reaches p <= 0.05 two-sided: 5W/0L gives 0.0625.
MIN_DISCORDANT = 6
SIGN_TEST = "sign"  # exact two-sided binomial sign test, ties dropped
SEQUENTIAL_SIGN_TEST = "sequential-sign"
UNIT_CASE = "case (one vote per case: the majority of its repeats' wins and losses)"
UNIT_TRIAL = "trial (the tally as given)"


# ---------------------------------------------------------------------------------------
# Verdicts
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanCheck:
    """A run held against its pre-registered plan: `ok` unless it stopped short of the
    planned units or changed the test, alpha or unit (`flags` say which)."""

    ok: bool
    flags: tuple[str, ...]
    planned_trials: int
    observed_trials: int
    plan_test: str
    verdict_test: str


@dataclass(frozen=True)
class Verdict:
    """The verdict of a two-arm comparison (or of a tally from elsewhere).

    `wins/losses/ties` are counted in `unit` (for a run: one vote per case, the
    majority of its repeats); `n_trials` is the number of units, `n_pairs` the paired
    samples behind them, `errored` the units (for a run: cases) with any trial that
    errored or was unmatched; such a unit casts no vote, so wins + ties + losses +
    errored == n_trials, and its trials are named in `problems`. `p_value` is the exact
    two-sided sign test with ties dropped on the clean votes only (with errored units
    the verdict is inconclusive whatever it says), `p_one_sided` its one-sided value in
    the direction observed. `paired` is
    the clustered paired analysis of all trials (treatment minus baseline pass rate,
    clustered on the case); `sequential` the sequential test's path when the plan asked
    for one; `plan_check` the run against its plan.
    """

    kind: VerdictKind
    unit: str
    wins: int
    losses: int
    ties: int
    errored: int
    n_trials: int
    p_value: float | None
    p_one_sided: float | None
    reason: str
    test: str = SIGN_TEST
    alpha: float = 0.05
    n_pairs: int = 0
    problems: tuple[str, ...] = ()
    paired: Any = None  # stats.PairedDifference
    baseline_arm: str | None = None
    treatment_arm: str | None = None
    sequential: dict[str, Any] | None = None
    plan_check: PlanCheck | None = None
    case_votes: tuple[tuple[str, str], ...] = ()  # (case, win / loss / tie / errored), in case order
    judge: str = "direct"  # what the votes rest on: "direct" pass/fail, or the "pairwise" judge (evalkit.compare)
    judge_checks: dict[str, Any] | None = None  # what was checked of that judge (evalkit.compare)

    @property
    def discordant(self) -> int:
        return self.wins + self.losses

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k not in ("paired", "plan_check")}
        d["discordant"] = self.discordant
        d["p_value_scope"] = (
            f"clean votes only ({self.wins + self.ties + self.losses} of {self.n_trials} units; "
            f"{self.errored} errored/unmatched unit(s) cast no vote): not a verdict"
            if self.errored
            else "all units"
        )
        d["problems"] = list(self.problems)
        d["case_votes"] = [list(cv) for cv in self.case_votes]
        d["paired"] = _paired_dict(self.paired)
        d["plan_check"] = asdict(self.plan_check) if self.plan_check else None
        if d["plan_check"]:
            d["plan_check"]["flags"] = list(self.plan_check.flags)
        return d

    def render(self) -> str:
        """A few lines for a terminal or a PR comment."""
        lines = [f"verdict: {self.kind}"]
        if self.baseline_arm:
            lines.append(f"arms: treatment {self.treatment_arm!r} vs baseline {self.baseline_arm!r}")
        lines.append(f"unit of the test: {self.unit}")
        lines.append(f"judge: {judge_line(self.judge, self.judge_checks)}")
        p = "n/a" if self.p_value is None else f"{self.p_value:.4g}"
        p1 = "n/a" if self.p_one_sided is None else f"{self.p_one_sided:.4g}"
        lines.append(
            f"tally: {self.wins}W/{self.ties}T/{self.losses}L, {self.errored} errored/unmatched, "
            f"{self.n_trials} units, {self.discordant} discordant"
        )
        if self.errored:
            clean = self.wins + self.ties + self.losses
            lines.append(
                f"test: {self.test} (two-sided, ties dropped), alpha {self.alpha:g}: "
                f"exact sign-test p on the {clean} clean vote(s) only = {p} (one-sided {p1}); "
                f"not a verdict: {self.errored} errored/unmatched unit(s) cast no vote"
            )
        else:
            lines.append(
                f"test: {self.test} (two-sided, ties dropped), alpha {self.alpha:g}: "
                f"exact sign-test p = {p} (one-sided {p1})"
            )
        if self.paired is not None:
            pd_ = _paired_dict(self.paired)
            lines.append(
                f"all {pd_['n']} graded paired trials, clustered on case ({pd_.get('n_clusters')} clusters): "
                f"treatment - baseline pass rate {pd_['mean']:+.3f} (SE {_fmt(pd_['se'])}, "
                f"95% CI {_fmt(pd_['low'])} to {_fmt(pd_['high'])}), correlation {_fmt(pd_['correlation'])}"
            )
        if self.sequential:
            s = self.sequential
            lines.append(f"sequential: {s['decision']} after {s['n_used']} of {s['n_available']} units")
        if self.plan_check is not None:
            pc = self.plan_check
            lines.append("plan: " + ("followed" if pc.ok else "NOT followed: " + "; ".join(pc.flags)))
        lines.append(f"reason: {self.reason}")
        for prob in self.problems[:20]:
            lines.append(f"  - {prob}")
        if len(self.problems) > 20:
            lines.append(f"  ... and {len(self.problems) - 20} more")
        return "\n".join(lines)


def _fmt(x: float | None) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def judge_line(judge: str, checks: dict[str, Any] | None) -> str:
    """What a verdict rests on, in words (`evalkit.compare` fills `judge_checks`)."""
    c = checks or {}
    if judge == "pairwise":
        pc, bar = c.get("position_consistency"), c.get("position_consistency_bar") or 0.0
        bits = [f"position consistency {'n/a' if pc is None else f'{pc:.0%}'} (bar {bar:.0%})"]
        bits.append("trusted" if c.get("trusted") else "NOT trusted")
        if c.get("opt_out"):
            bits.append("by opt-out (uncalibrated)")
        return "the pairwise judge (" + ", ".join(bits) + ")"
    text = "each sample's pass/fail (deterministic checks"
    if c.get("judged"):
        text += ", and the direct judge: " + ("trusted" if c.get("trusted") else "NOT trusted, judged results held")
        if c.get("opt_out"):
            text += " by opt-out (uncalibrated)"
    return text + ")"


def _paired_dict(p: Any) -> dict[str, Any] | None:
    """A `stats.PairedDifference` as JSON (NaN as null)."""
    if p is None:
        return None
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in asdict(p).items()}


def verdict_from_tally(
    wins: int,
    ties: int,
    losses: int,
    errored: int = 0,
    trials: int | None = None,
    *,
    alpha: float = 0.05,
    unit: str = UNIT_TRIAL,
) -> Verdict:
    """The verdict for a win/tie/loss tally.

    `inconclusive` when any trial errored or was unmatched (`trials` larger than the
    tally accounts for), with fewer than 5 trials, or fewer than 6 discordant pairs
    (below six no tally can reach p <= 0.05); otherwise `pass` / `regression` when the
    exact two-sided sign test (ties dropped) gives p <= alpha with wins / losses ahead,
    `no-improvement` when it does not. A missing result is never a pass.

    References: Dixon & Mood 1946, "The statistical sign test", JASA 41:557-566.
    """
    for name, v in (("wins", wins), ("ties", ties), ("losses", losses), ("errored", errored)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 0:
            raise InputError(f"{name} must be a non-negative integer, got {v!r}", json_path=name)
    if not 0 < alpha < 1:
        raise InputError(f"alpha must be in (0, 1), got {alpha!r}", json_path="alpha")
    counted = wins + ties + losses + errored
    if trials is None:
        trials = counted
    if trials < counted:
        raise InputError(f"trials ({trials}) is fewer than wins+ties+losses+errored ({counted})", json_path="trials")
    unmatched = trials - counted
    st = stats.sign_test(int(wins), int(losses), int(ties))
    p = st.p_value
    # one-sided in the direction observed (wins ahead: "treatment better")
    p1 = st.p_one_sided if wins >= losses else st.p_one_sided_losses
    discordant = wins + losses
    if errored or unmatched:
        bits = []
        if errored:
            bits.append(f"{errored} trial(s) errored")
        if unmatched:
            bits.append(f"{unmatched} trial(s) unmatched")
        kind, reason = "inconclusive", " and ".join(bits) + ": no data is not a passing result"
    elif trials < MIN_TRIALS:
        kind, reason = "inconclusive", f"{trials} trial(s), fewer than the minimum {MIN_TRIALS}"
    elif discordant < MIN_DISCORDANT:
        kind, reason = (
            "inconclusive",
            (f"{discordant} discordant pair(s), fewer than {MIN_DISCORDANT}: no tally below six can reach p <= 0.05"),
        )
    elif p <= alpha:
        if wins > losses:
            kind, reason = "pass", f"significant advantage for the treatment (p = {p:.4g} <= {alpha:g})"
        else:
            kind, reason = "regression", f"significant advantage for the baseline (p = {p:.4g} <= {alpha:g})"
    else:
        kind, reason = "no-improvement", f"the margin is indistinguishable from chance (p = {p:.4g} > {alpha:g})"
    return Verdict(
        kind=kind,
        unit=unit,
        wins=int(wins),
        losses=int(losses),
        ties=int(ties),
        errored=int(errored + unmatched),
        n_trials=int(trials),
        p_value=p,
        p_one_sided=p1,
        reason=reason,
        alpha=alpha,
    )


def as_run(run: Run | str | Path) -> Run:
    """A loaded `Run` (loading it when given a path)."""
    return run if isinstance(run, Run) else load_run(run)


def _pick_arm(run: Run, arm: str | None, hint: str) -> str:
    """`arm` checked against the run's arms, or the run's only arm when None; then the
    run must be graded. `hint` finishes the message when the run has several arms."""
    arms = run.arm_names()
    if arm is None:
        if len(arms) != 1:
            raise InputError(f"the run has arms {arms}: {hint}", json_path="arm")
        arm = arms[0]
    elif arm not in arms:
        raise InputError(f"arm {arm!r} is not in the run (arms: {', '.join(arms) or 'none'})", json_path="arm")
    _require_graded(run)
    return arm


def _require_graded(run: Run) -> None:
    if len(run.samples) and not len(run.grades):
        raise InputError(
            "run is not graded (no grades.jsonl): run `evalkit grade` first", Path(run.path) / "grades.jsonl"
        )


def _grade_map(run: Run) -> dict[tuple[str, str, int], dict[str, Any]]:
    out: dict[tuple[str, str, int], dict[str, Any]] = {}
    for row in run.grades.to_dict("records"):
        out[(str(row["case_id"]), str(row["arm"]), int(row["index"]))] = row
    return out


def _passed(row: dict[str, Any] | None) -> bool | None:
    if row is None:
        return None
    v = row.get("passed")
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return bool(v)


def _case_order(run: Run) -> list[str]:
    """The run's planned cases in order, then any case that has samples but was not
    planned (an ingested run)."""
    order = dict.fromkeys(str(c) for c in (run.config.get("cases") or []))
    order.update(dict.fromkeys(str(c) for c in run.samples["case_id"].tolist()))
    return list(order)


def check_two_arms(run: Run, baseline: str, treatment: str) -> None:
    """`InputError` unless `baseline` and `treatment` are two different arms of a graded `run`."""
    arms = run.arm_names()
    for name, arm in (("--baseline", baseline), ("--treatment", treatment)):
        if arm not in arms:
            raise InputError(
                f"{name} arm {arm!r} is not in the run (arms: {', '.join(arms) or 'none'})",
                Path(run.path) / "config.json",
                json_path="$.arms",
            )
    if baseline == treatment:
        raise InputError("--baseline and --treatment name the same arm", json_path="arms")
    _require_graded(run)


def two_arm_verdict(
    run: Run | str | Path, baseline: str, treatment: str, *, alpha: float = 0.05, plan: "PowerPlan | None" = None
) -> Verdict:
    """Compare two arms of one graded run.

    Samples are paired by (case, index). A pair is a win when only the treatment
    passed, a loss when only the baseline passed, a tie otherwise. Each case casts one
    vote, the majority of its repeats' wins and losses (a win when its repeats won more
    often than they lost; equivalently the sign of the difference of the two arms'
    passes on that case), so k repeats never inflate n. An errored, ungraded or
    unmatched trial (including a planned case/index that has no sample) makes the
    verdict inconclusive and is named in `problems`; its case casts no vote and counts
    once in `errored`, and the p-value is then on the clean votes only. The clustered paired difference of
    all trials (Miller 2024) is attached. With a `plan`, the run is checked against it,
    and a sequential plan runs `stats.SequentialSignTest` over the case votes in the
    run's case order.

    References: Dixon & Mood 1946 (sign test); Miller 2024, arXiv:2411.00640 (clustered
    paired differences).
    """
    run = as_run(run)
    check_two_arms(run, baseline, treatment)
    grades = _grade_map(run)
    errors = {
        (str(r["case_id"]), str(r["arm"]), int(r["index"])): str(r.get("error") or "error")
        for r in run.errors.to_dict("records")
    }
    errored_idx: dict[str, set[int]] = defaultdict(set)
    for c, a, i in errors:
        if a in (baseline, treatment):
            errored_idx[c].add(i)
    present: dict[tuple[str, str], set[int]] = defaultdict(set)
    for r in run.samples[["case_id", "arm", "index"]].itertuples(index=False):
        present[(str(r.case_id), str(r.arm))].add(int(r.index))
    k = int(run.config.get("k") or 0)
    problems: list[str] = []
    problem_cases: set[str] = set()
    outcome_by_case: dict[str, list[int]] = defaultdict(list)
    pair_a: list[float] = []
    pair_b: list[float] = []
    pair_cluster: list[str] = []
    n_pairs = 0
    n_problem = 0
    for case in _case_order(run):
        idx = present[(case, baseline)] | present[(case, treatment)] | errored_idx[case]
        if k:
            idx |= set(range(k))  # planned indices (0-based) that never produced a line
        for i in sorted(idx):
            n_pairs += 1
            status: dict[str, bool | None] = {}
            bad = []
            for arm in (baseline, treatment):
                key = (case, arm, i)
                if i not in present[(case, arm)]:
                    why = f"errored ({errors[key]})" if key in errors else "no sample (unmatched)"
                    bad.append(f"{arm}: {why}")
                    continue
                g = grades.get(key)
                ok = _passed(g)
                if ok is None:
                    why = (
                        "not graded"
                        if g is None
                        else f"ungraded ({g.get('error') or g.get('judge_held') or 'grader error'})"
                    )
                    bad.append(f"{arm}: {why}")
                    continue
                status[arm] = ok
            if bad:
                n_problem += 1
                problem_cases.add(case)
                problems.append(f"{case}#{i}: " + "; ".join(bad))
                continue
            b, t = status[baseline], status[treatment]
            outcome_by_case[case].append((1 if t and not b else -1 if b and not t else 0))
            pair_a.append(float(t))
            pair_b.append(float(b))
            pair_cluster.append(case)
    wins = losses = ties = 0
    votes: list[int] = []
    case_votes: list[tuple[str, str]] = []
    for case in _case_order(run):
        outs = outcome_by_case.get(case)
        # A case is one unit: a case with any errored, ungraded or unmatched trial casts
        # no vote (its clean repeats alone are not the case's majority) and counts once
        # as errored, so wins + ties + losses + errored == units.
        if case in problem_cases:
            case_votes.append((case, "errored"))
            continue
        if not outs:
            continue
        net = sum(outs)
        vote = 1 if net > 0 else -1 if net < 0 else 0
        votes.append(vote)
        case_votes.append((case, "win" if vote == 1 else "loss" if vote == -1 else "tie"))
        wins += vote == 1
        losses += vote == -1
        ties += vote == 0
    errored_units = len(problem_cases)
    v = verdict_from_tally(wins, ties, losses, errored_units, None, alpha=alpha, unit=UNIT_CASE)
    if errored_units:
        v = replace(
            v,
            reason=f"{n_problem} trial(s) in {errored_units} case(s) errored or unmatched: those "
            "cases cast no vote, and no data is not a passing result",
        )
    v = replace(
        v,
        n_pairs=n_pairs,
        problems=tuple(problems),
        baseline_arm=baseline,
        treatment_arm=treatment,
        case_votes=tuple(case_votes),
    )
    if len(pair_a) >= 2:  # the clustered SE needs two pairs
        v = replace(v, paired=stats.paired_difference(pair_a, pair_b, clusters=pair_cluster))
    if plan is not None:
        if plan.test == SEQUENTIAL_SIGN_TEST:
            v = _apply_sequential(v, votes, plan)
        v = replace(v, plan_check=check_against_plan(v, plan))
    return v


def _apply_sequential(v: Verdict, votes: list[int], plan: "PowerPlan") -> Verdict:
    """Run the plan's sequential sign test over the case votes in the run's case order;
    the verdict follows its decision (still inconclusive when any trial errored). The
    path records the state after each unit.

    References: Wald 1945; Armitage, McPherson & Rowe 1969 (via stats.SequentialSignTest).
    """
    seq = stats.SequentialSignTest(**plan.sequential_params())
    path: list[dict[str, Any]] = []
    for vote in votes:
        st = seq.update(vote)
        path.append(
            {"trials": st.trials, "wins": st.wins, "losses": st.losses, "ties": st.ties, "decision": st.decision}
        )
        if st.decision != "continue":
            break
    st = seq.state
    info = {
        "decision": st.decision,
        "n_used": st.trials,
        "n_available": len(votes),
        "path": path,
        "params": plan.sequential_params(),
        "max_discordant": seq.design.max_discordant,
    }
    if v.errored:
        return replace(v, test=SEQUENTIAL_SIGN_TEST, sequential=info)
    if st.decision == "continue":
        kind, reason = "inconclusive", (f"the sequential test has not settled after {st.trials} unit(s): keep sampling")
    else:
        kind, reason = st.decision, f"sequential sign test settled on {st.decision} after {st.trials} unit(s)"
    p = stats.sign_test(st.wins, st.losses, st.ties)
    return replace(
        v,
        kind=kind,
        reason=reason,
        test=SEQUENTIAL_SIGN_TEST,
        sequential=info,
        wins=st.wins,
        losses=st.losses,
        ties=st.ties,
        n_trials=st.trials,
        p_value=p.p_value,
        p_one_sided=p.p_one_sided if st.wins >= st.losses else p.p_one_sided_losses,
    )


# ---------------------------------------------------------------------------------------
# Single-arm conformance
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConformanceVerdict:
    """Single-arm verdict: `pass` when every trial ran and met the threshold,
    `regression` when every trial ran and one fell below it, `inconclusive` when any
    trial errored (it proves nothing). `below` and `problems` name the trials."""

    kind: Literal["pass", "regression", "inconclusive"]
    unit: str
    n_trials: int
    met: int
    below: int
    errored: int
    threshold: float | None
    reason: str
    below_trials: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    arm: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["below_trials"] = list(self.below_trials)
        d["problems"] = list(self.problems)
        return d

    def render(self) -> str:
        """A few lines for a terminal or a PR comment."""
        rule = "each case's own rule" if self.threshold is None else f"share of checks >= {self.threshold:g}"
        lines = [
            f"verdict: {self.kind} (single-arm conformance{f' of arm {self.arm!r}' if self.arm else ''})",
            f"trials: {self.n_trials}: {self.met} met the threshold ({rule}), {self.below} below, "
            f"{self.errored} errored or missing",
            f"reason: {self.reason}",
        ]
        lines += [f"  below: {t}" for t in self.below_trials[:20]]
        lines += [f"  {p}" for p in self.problems[:20]]
        return "\n".join(lines)


def conformance_verdict(
    run: Run | str | Path, threshold: float | None = None, *, arm: str | None = None
) -> ConformanceVerdict:
    """The single-arm conformance verdict of a graded run (one arm).

    A trial meets the threshold when its grade passed (`threshold` None: each case's own
    rule, e.g. its judge threshold) or, with a numeric `threshold` in [0, 1], when the
    share of its checks that passed is at least `threshold`. Errored, ungraded and
    missing trials make it inconclusive: a missing result is never a pass.
    """
    run = as_run(run)
    if threshold is not None and not 0 <= threshold <= 1:
        raise InputError(f"threshold must be in [0, 1], got {threshold!r}", json_path="threshold")
    arm = _pick_arm(run, arm, "name one")
    grades = _grade_map(run)
    errors = {
        (str(r["case_id"]), int(r["index"])): str(r.get("error") or "error")
        for r in run.errors.to_dict("records")
        if str(r["arm"]) == arm
    }
    errored: dict[str, set[int]] = defaultdict(set)
    for c, i in errors:
        errored[c].add(i)
    present: dict[str, set[int]] = defaultdict(set)
    for r in run.samples[run.samples["arm"] == arm][["case_id", "index"]].itertuples(index=False):
        present[str(r.case_id)].add(int(r.index))
    k = int(run.config.get("k") or 0)
    met = below = 0
    below_trials: list[str] = []
    problems: list[str] = []
    for case in _case_order(run):
        idx = present[case] | errored[case] | (set(range(k)) if k else set())
        for i in sorted(idx):
            tag = f"{case}#{i}"
            if i not in present[case]:
                problems.append(f"{tag}: " + (f"errored ({errors[(case, i)]})" if (case, i) in errors else "no sample"))
                continue
            g = grades.get((case, arm, i))
            ok = _passed(g)
            if ok is None:
                problems.append(f"{tag}: " + ("not graded" if g is None else f"ungraded ({g.get('error')})"))
                continue
            if threshold is not None:
                checks = g.get("checks") or []
                share = (sum(1 for c in checks if c.get("passed")) / len(checks)) if checks else float(ok)
                ok = share >= threshold
            if ok:
                met += 1
            else:
                below += 1
                below_trials.append(tag)
    n = met + below + len(problems)
    if problems:
        kind, reason = "inconclusive", f"{len(problems)} trial(s) errored or missing: they prove nothing"
    elif n == 0:
        kind, reason = "inconclusive", "no trials"
    elif below:
        kind, reason = "regression", f"{below} of {n} trial(s) fell below the threshold"
    else:
        kind, reason = "pass", f"all {n} trial(s) ran and met the threshold"
    return ConformanceVerdict(
        kind=kind,
        unit="trial",
        n_trials=n,
        met=met,
        below=below,
        errored=len(problems),
        threshold=threshold,
        reason=reason,
        below_trials=tuple(below_trials),
        problems=tuple(problems),
        arm=arm,
    )


# ---------------------------------------------------------------------------------------
# Power planning and pre-registration
# ---------------------------------------------------------------------------------------

PLAN_FILE = "plan.json"


@dataclass(frozen=True)
class PowerPlan:
    """A pre-registered power plan (`evals/<unit>/plan.json`), written before the run.

    `n_trials` is the number of units to run (cases: one vote per case), the n from
    which exact power stays at or above `power` (`n_trials_first` is the first n that
    reaches it; exact power is a sawtooth). `win_rate` is the expected share of
    non-tied units the treatment wins, `tie_rate` the expected share of ties.
    `sequential` holds the sequential design's parameters when `test` is sequential.
    """

    test: str
    alpha: float
    power: float
    win_rate: float
    tie_rate: float
    n_trials: int
    n_trials_first: int
    n_trials_approx: int
    n_discordant: int
    n_discordant_first: int
    n_discordant_approx: int
    unit: str = "case"
    seed: int | None = None
    created: str = ""
    sequential: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def sequential_params(self) -> dict[str, Any]:
        """Keyword arguments for `stats.SequentialSignTest`."""
        return dict((self.sequential or {}).get("params") or {})

    def render(self) -> str:
        how = (
            "truncated two-sided SPRT on the signs, exact boundaries"
            if self.test == SEQUENTIAL_SIGN_TEST
            else "exact two-sided sign test"
        )
        lines = [
            f"test: {self.test} ({how}, ties dropped), unit: {self.unit}",
            f"alpha {self.alpha:g}, power {self.power:g}, expected win rate {self.win_rate:g} of non-tied "
            f"units, tie rate {self.tie_rate:g}",
            f"discordant pairs needed (exact): {self.n_discordant} (power stays >= {self.power:g} from here; "
            f"first reached at {self.n_discordant_first}); normal approximation {self.n_discordant_approx}",
            f"{self.unit}s needed (exact): {self.n_trials} (first reached at {self.n_trials_first}); "
            f"normal approximation {self.n_trials_approx}",
        ]
        if self.sequential:
            q = self.sequential
            e = float(q["expected_trials"])
            first = int(q.get("fixed_trials_first") or self.n_trials_first)
            stable = int(q.get("fixed_trials_stable") or q.get("fixed_trials") or self.n_trials)
            lines.append(
                f"sequential sign test: stops once settled, at most {q['max_discordant']} discordant "
                f"pairs; exact type I error {q['type_i_error']:.4f}, power {q['power_exact']:.3f}; "
                f"expected {self.unit}s at the planned effect {e:.1f}"
            )
            lines.append(
                f"fixed design for comparison: {first} {self.unit}s (first n reaching power "
                f"{self.power:g}; expected sequential / fixed = {e / first:.2f}x), {stable} {self.unit}s "
                f"(n from which power stays >= {self.power:g}; {e / stable:.2f}x)"
            )
        if self.seed is not None:
            lines.append(f"seed: {self.seed}")
        return "\n".join(lines)


def plan_power(
    win_rate: float,
    tie_rate: float = 0.0,
    alpha: float = 0.05,
    power: float = 0.8,
    *,
    sequential: bool = False,
    seed: int | None = None,
) -> PowerPlan:
    """Plan a two-arm comparison: the discordant pairs and units (cases) the exact sign
    test needs to detect `win_rate` with `power` at `alpha`, exact and approximate.

    References: Dixon & Mood 1946; Connor 1987, Biometrics 43(1); Chernick & Liu 2002
    (saw-toothed exact power) via `stats.sign_test_sample_size`.
    """
    ss = stats.sign_test_sample_size(win_rate, tie_rate, alpha, power)
    seq = None
    test = SIGN_TEST
    if sequential:
        test = SEQUENTIAL_SIGN_TEST
        seq = _sequential_design(win_rate, tie_rate, alpha, power, ss)
    return PowerPlan(
        test=test,
        alpha=alpha,
        power=power,
        win_rate=win_rate,
        tie_rate=tie_rate,
        n_trials=ss.trials_stable,
        n_trials_first=ss.trials_first,
        n_trials_approx=ss.trials_approx,
        n_discordant=ss.discordant_stable,
        n_discordant_first=ss.discordant_first,
        n_discordant_approx=ss.discordant_approx,
        seed=seed,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        sequential=seq,
    )


def _sequential_design(win_rate: float, tie_rate: float, alpha: float, power: float, ss: Any) -> dict[str, Any]:
    """The sequential design: the `stats.SequentialSignTest` arguments (`params`) and
    what they give at the planned effect (exact operating characteristics)."""
    params = {"win_rate": max(win_rate, 1 - win_rate), "alpha": alpha, "power": power}
    seq = stats.SequentialSignTest(**params)
    oc = seq.operating_characteristics(params["win_rate"], tie_rate)
    return {
        "params": params,
        "max_discordant": seq.design.max_discordant,
        "type_i_error": seq.design.type_i_error,
        "power_exact": seq.design.power_exact,
        "expected_discordant": oc.expected_discordant,
        "expected_trials": oc.expected_trials,
        # Both fixed designs: exact power is a sawtooth, so the first n reaching the
        # target (what the benchmark compares with) and the n from which it stays there.
        "fixed_trials": ss.trials_stable,
        "fixed_trials_stable": ss.trials_stable,
        "fixed_trials_first": ss.trials_first,
        "ratio_to_fixed_first": oc.expected_trials / ss.trials_first,
        "ratio_to_fixed_stable": oc.expected_trials / ss.trials_stable,
    }


def write_plan(plan: PowerPlan, suite_dir: str | Path) -> Path:
    """Write `plan.json` into the suite folder (atomically). The plan's seed defaults to
    the suite's `config.json` seed, so the run that follows is the one planned."""
    d = Path(suite_dir)
    if not d.is_dir():
        raise InputError("suite folder not found", d)
    if plan.seed is None:
        cfg = d / "config.json"
        if cfg.exists():
            seed = read_json_object(cfg, "config", root=d).get("seed")
            if isinstance(seed, int):
                plan = replace(plan, seed=seed)
    path = d / PLAN_FILE
    write_atomic(path, json.dumps(plan.to_dict(), indent=2) + "\n")
    return path


def load_plan(path: str | Path) -> PowerPlan:
    """Read a `plan.json` (a suite folder is accepted too). A plan in a suite folder must
    resolve inside it (`suite.read_file_bytes`)."""
    p = Path(path)
    if p.is_dir():
        p = p / PLAN_FILE
    if not os.path.lexists(p):
        raise InputError("plan not found (write one with `evalkit power --write`)", p)
    raw = read_json_object(p, "a plan", root=suite_folder_of(p))
    names = {f for f in PowerPlan.__dataclass_fields__}
    required = ("test", "alpha", "power", "win_rate", "tie_rate", "n_trials")
    for key in required:
        if key not in raw:
            raise InputError(f"missing field {key!r}", p, json_path=f"$.{key}")
    if raw["test"] not in (SIGN_TEST, SEQUENTIAL_SIGN_TEST):
        raise InputError(f"unknown test {raw['test']!r}", p, json_path="$.test")
    d = {k: v for k, v in raw.items() if k in names}
    for k in ("n_trials_first", "n_trials_approx", "n_discordant", "n_discordant_first", "n_discordant_approx"):
        d.setdefault(k, 0)
    return PowerPlan(**d)


def check_against_plan(verdict: Verdict, plan: PowerPlan) -> PlanCheck:
    """Hold a verdict to its plan: flag a changed test, alpha or unit, a run that
    stopped short of the planned units (for a sequential plan: stopped before the test
    settled), and one that ran past them (topping up a noisy comparison)."""
    flags: list[str] = []
    if verdict.test != plan.test:
        flags.append(f"changed the test: planned {plan.test!r}, ran {verdict.test!r}")
    if not math.isclose(verdict.alpha, plan.alpha):
        flags.append(f"changed alpha: planned {plan.alpha:g}, ran {verdict.alpha:g}")
    if not verdict.unit.startswith(plan.unit):
        flags.append(f"changed the unit: planned {plan.unit!r}, ran {verdict.unit.split(' ')[0]!r}")
    n = verdict.n_trials
    if plan.test == SEQUENTIAL_SIGN_TEST and verdict.sequential:
        if verdict.sequential.get("decision") == "continue":
            flags.append(
                f"stopped short: the sequential test had not settled after "
                f"{verdict.sequential.get('n_available')} units"
            )
    elif n < plan.n_trials:
        flags.append(f"stopped short: {n} of {plan.n_trials} planned units")
    elif n > plan.n_trials and plan.test == SIGN_TEST:
        flags.append(f"ran past the plan: {n} units against {plan.n_trials} planned")
    return PlanCheck(
        ok=not flags,
        flags=tuple(flags),
        planned_trials=plan.n_trials,
        observed_trials=n,
        plan_test=plan.test,
        verdict_test=verdict.test,
    )


# ---------------------------------------------------------------------------------------
# Run metrics for gates, baselines and noise
# ---------------------------------------------------------------------------------------


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
    p = Path(suite_dir) / "cases.jsonl"
    if not p.exists():  # an evals.json / eval.yaml suite: its cases come through the importer
        from .suite import load_suite

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
    arm = _pick_arm(run, arm, "name the one to gate with --arm")
    # the suite's sets; a run ingested from a source with sets (agent-evals) carries its own
    sets = _case_sets(Path(suite_dir) if suite_dir else suite_dir_of(run)) or dict(run.config.get("case_sets") or {})
    grades = _grade_map(run)
    samples = run.samples[run.samples["arm"] == arm]
    per: dict[str, dict[str, Any]] = {}
    judge_versions: Counter = Counter()
    for row in samples.to_dict("records"):
        cid = str(row["case_id"])
        d = per.setdefault(cid, {"tags": tuple(row.get("tags") or ()), "n": 0, "c": 0, "costs": [], "ungraded": 0})
        g = grades.get((cid, arm, int(row["index"])))
        ok = _passed(g)
        d["n"] += 1
        d["c"] += ok is True
        d["ungraded"] += ok is None
        cost = _num(row.get("cost_usd")) + _num(row.get("cost_avoided_usd")) + _num((g or {}).get("judge_cost_usd"))
        d["costs"].append(cost)
        if g and g.get("judge_version"):
            judge_versions[g["judge_version"]] += 1
    kk = int(k or run.config.get("k") or max((d["n"] for d in per.values()), default=1))
    order = [c for c in _case_order(run) if c in per]
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


# ---------------------------------------------------------------------------------------
# Gate
# ---------------------------------------------------------------------------------------


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
GATE_CAUSE_JUDGE = "judge not trusted"  # judged results held (evalkit.grading): no rate was read
# Prefixes of the reasons `_run_not_clean` gives (the gate failed without reading a rate).
_NOT_CLEAN_PREFIXES = ("the runner exited", "no summary", "summary.json is not valid", "INCOMPLETE")


def gate_failure_causes(reasons: Iterable[str], read_rates: bool | None = None) -> list[str]:
    """Why a gate failed, from its reasons (as a report's sidecar keeps them): `incomplete
    run` when it failed on the run's exit status or summary without reading any rate
    (never a regression: nothing was measured), otherwise `success drop` and/or `cost
    increase`, or `not comparable with the baseline` (k changed, no shared case, short
    cases). Empty for a gate that passed."""
    reasons = [str(r) for r in reasons]
    if any(r.startswith(GATE_CAUSE_JUDGE) for r in reasons):
        return [GATE_CAUSE_JUDGE]
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
        sp = run_path / "summary.json"
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
    md = run_path / "summary.md"
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
    held = _judge_held(run, cur.arm)
    if held:
        return GateResult(
            passed=False,
            reasons=(held,),
            read_rates=False,
            thresholds=t,
            alpha=alpha,
            run=str(run_path),
            baseline=str(baseline_path),
        )
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
    run: Run | str | Path, baseline_path: str | Path, *, arm: str | None = None, baseline: dict[str, Any] | None = None
) -> RunMetrics:
    """The run's metrics exactly as `gate` reads them: the baseline's arm unless `arm`
    is given, case sets from the baseline's suite folder."""
    run = as_run(run)
    baseline = baseline if baseline is not None else load_baseline(baseline_path)
    suite_dir = Path(baseline_path).parent
    if arm is None and baseline.get("arm") in run.arm_names():
        arm = baseline["arm"]
    return run_metrics(run, arm=arm, suite_dir=suite_dir if (suite_dir / "cases.jsonl").exists() else None)


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


# ---------------------------------------------------------------------------------------
# Baseline
# ---------------------------------------------------------------------------------------


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
                Path(run.path) / "config.json",
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
        "summary": "baseline-summary.md",
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
    run_md = Path(run.path) / "summary.md"
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
    bj, bs = suite_dir / "baseline.json", suite_dir / "baseline-summary.md"
    # The summary first: a baseline.json never points at a summary that is not there yet.
    write_atomic(bs, text_md)
    write_atomic(bj, json.dumps(doc, indent=2) + "\n")
    return bj, bs


def _nan_none(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


# ---------------------------------------------------------------------------------------
# Noise
# ---------------------------------------------------------------------------------------


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
