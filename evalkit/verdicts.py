"""Verdicts: what the statistics of `evalkit.stats` mean for a run.

* `two_arm_verdict` pairs a run's baseline and treatment samples by (case, index), casts
  one vote per case (the unit that was sampled: repeats of one case must not inflate n)
  and turns the tally into `pass | regression | no-improvement | inconclusive` with the
  exact sign test. A clustered paired analysis of all trials is shown alongside; a
  pre-registered plan (`evalkit.plans`) is checked, and a sequential plan is run.
* `verdict_from_tally` is the same verdict for a tally from elsewhere.
* `conformance_verdict` is the single-arm verdict: every trial ran and met the threshold.

References: Dixon & Mood 1946 (the sign test); Miller 2024, "Adding Error Bars to Evals"
(arXiv:2411.00640; clustered and paired standard errors); Wald 1945; Armitage,
McPherson & Rowe 1969 (the sequential sign test).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from . import stats
from .errors import InputError
from .layout import RUN_CONFIG
from .plans import SEQUENTIAL_SIGN_TEST, SIGN_TEST, PlanCheck, PowerPlan, check_against_plan
from .runload import Run, as_run, case_order, grade_map, grade_passed, pick_arm, require_graded

__all__ = ["SEQUENTIAL_SIGN_TEST", "SIGN_TEST"]

VerdictKind = Literal["pass", "regression", "no-improvement", "inconclusive"]

MIN_TRIALS = 5
# Below six discordant pairs no tally reaches p <= 0.05 two-sided: 5W/0L gives 0.0625.
MIN_DISCORDANT = 6
UNIT_CASE = "case (one vote per case: the majority of its repeats' wins and losses)"
UNIT_TRIAL = "trial (the tally as given)"


# ---------------------------------------------------------------------------------------
# Verdicts
# ---------------------------------------------------------------------------------------


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


def two_arm_verdict(
    run: Run | str | Path, baseline: str, treatment: str, *, alpha: float = 0.05, plan: PowerPlan | None = None
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
    arms = run.arm_names()
    for name, arm in (("--baseline", baseline), ("--treatment", treatment)):
        if arm not in arms:
            raise InputError(
                f"{name} arm {arm!r} is not in the run (arms: {', '.join(arms) or 'none'})",
                Path(run.path) / RUN_CONFIG,
                json_path="$.arms",
            )
    if baseline == treatment:
        raise InputError("--baseline and --treatment name the same arm", json_path="arms")
    require_graded(run)
    grades = grade_map(run)
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
    for case in case_order(run):
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
                ok = grade_passed(g)
                if ok is None:
                    why = "not graded" if g is None else f"ungraded ({g.get('error') or 'grader error'})"
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
    for case in case_order(run):
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


def _apply_sequential(v: Verdict, votes: list[int], plan: PowerPlan) -> Verdict:
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

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["below_trials"] = list(self.below_trials)
        d["problems"] = list(self.problems)
        return d


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
    arm = pick_arm(run, arm, "name one")
    grades = grade_map(run)
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
    for case in case_order(run):
        idx = present[case] | errored[case] | (set(range(k)) if k else set())
        for i in sorted(idx):
            tag = f"{case}#{i}"
            if i not in present[case]:
                problems.append(f"{tag}: " + (f"errored ({errors[(case, i)]})" if (case, i) in errors else "no sample"))
                continue
            g = grades.get((case, arm, i))
            ok = grade_passed(g)
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
    )
