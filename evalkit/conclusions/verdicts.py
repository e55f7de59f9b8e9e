"""Verdicts: what the statistics of `evalkit.numbers.stats` mean for a run.

* `two_arm_verdict` pairs a run's baseline and treatment samples by (case, index), casts
  one vote per case (the unit that was sampled: repeats of one case must not inflate n)
  and turns the tally into `pass | regression | no-improvement | inconclusive` with the
  exact sign test. A clustered paired analysis of all trials is shown alongside; a
  pre-registered plan (`evalkit.numbers.plans`) is checked, and a sequential plan is run.
* `verdict_from_tally` is the same verdict for a tally from elsewhere.
* `conformance_verdict` is the single-arm verdict: every trial ran and met the threshold.

References: Dixon & Mood 1946 (the sign test); Miller 2024, "Adding Error Bars to Evals"
(arXiv:2411.00640; clustered and paired standard errors); Wald 1945; Armitage,
McPherson & Rowe 1969 (the sequential sign test).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from evalkit.foundations.errors import InputError
from evalkit.foundations.layout import RUN_CONFIG
from evalkit.foundations.records import (
    SEQUENTIAL_SIGN_TEST,
    SIGN_TEST,
    ConformanceKind,
    ConformanceVerdict,
    Plan,
    PlanCheck,
    RunVerdicts,
    Verdict,
    VerdictKind,
    records_frame,
)
from evalkit.numbers import stats
from evalkit.numbers.plans import check_against_plan, find_plan, load_plan
from evalkit.runfolder.runs import RunFolder, decided_keys, stopping_record

if TYPE_CHECKING:
    import pandas as pd

    from evalkit.runfolder.runload import Run, SampleKeys

__all__ = ["SEQUENTIAL_SIGN_TEST", "SIGN_TEST", "ConformanceVerdict", "PlanCheck", "Verdict", "VerdictKind"]


MIN_TRIALS = 5
# Below six discordant pairs no tally reaches p <= 0.05 two-sided: 5W/0L gives 0.0625.
MIN_DISCORDANT = 6
UNIT_CASE = "case (one vote per case: the majority of its repeats' wins and losses)"
UNIT_TRIAL = "trial (the tally as given)"
UNIT_SKRAFT = "trial (SKRAFT count: trials = stimuli x runs, floor 5; repeats of a case counted as independent)"


# ---------------------------------------------------------------------------------------
# Verdicts
# ---------------------------------------------------------------------------------------


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
    kind: VerdictKind
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


Outcome = Literal["win", "loss", "tie", "errored"]  # of one paired trial


@dataclass(frozen=True)
class PairedTrial:
    """One (case, index) of a two-arm comparison: whether each arm's sample passed (None
    when it has no grade), the pair's `outcome` (`win`: only the treatment passed,
    `loss`: only the baseline, `tie`, or `errored`) and, for an errored one, why."""

    case_id: str
    index: int
    baseline_passed: bool | None
    treatment_passed: bool | None
    outcome: Outcome
    problem: str | None = None


def paired_trials(
    run: Run | str | Path, baseline: str, treatment: str, overrides: Mapping[tuple[str, str, int], bool] | None = None
) -> list[PairedTrial]:
    """Every paired trial of two arms of a graded run, in the run's case order: each
    planned case and index (k of them per case), and any other index a sample or an
    error names. A trial with an errored, missing or ungraded sample is `errored` and
    says why: no data is never a win, a loss or a tie. `overrides`: (case, arm, index)
    -> pass/fail that replaces a graded sample's own (people's verdict on a labelled
    judged sample, `compare.direct_verdict` with the corrected estimate). A key that
    per-case stopping skipped, its case's gate decided, is a failed sample (decided, not
    missing): both arms follow the same rule, so under no difference the vote stays
    symmetric."""
    # lazy: pandas only where a run is read (`evalkit verdict` on a tally stays light)
    from evalkit.runfolder.runload import as_run, case_order, grade_values, passed_value, require_graded

    run = as_run(run)
    require_graded(run)
    pairs = None if overrides else _CleanPairs.of(run, baseline, treatment)
    if pairs is not None:  # every trial clean: read column by column (`_CleanPairs`)
        return pairs.trials()
    held_col = ("judge_held",) if "judge_held" in run.grades.columns else ()  # older runs have no held results
    grades = grade_values(run, ("passed", "error", *held_col))
    errors = {
        (str(r["case_id"]), str(r["arm"]), int(r["index"])): str(r.get("error") or "error")
        for r in run.errors.to_dict("records")
    }
    errored_idx: dict[str, set[int]] = defaultdict(set)
    for c, a, i in errors:
        if a in (baseline, treatment):
            errored_idx[c].add(i)
    present: dict[tuple[str, str], set[int]] = defaultdict(set)
    s = run.samples
    for case_id, arm_name, index in zip(s["case_id"].tolist(), s["arm"].tolist(), s["index"].tolist(), strict=True):
        present[(str(case_id), str(arm_name))].add(int(index))
    decided = decided_keys(run.summary)  # a per-case stopping run's skipped keys (`runs.decided_keys`)
    k = int(run.config.get("k") or 0)
    planned = set(range(k))  # planned indices (0-based), also those that never produced a line
    out: list[PairedTrial] = []
    for case in case_order(run):
        has = {arm: present[(case, arm)] for arm in (baseline, treatment)}
        idx = has[baseline] | has[treatment] | errored_idx[case] | planned
        for i in sorted(idx):
            status: dict[str, bool | None] = {}
            bad = []
            for arm in (baseline, treatment):
                key = (case, arm, i)
                if i not in has[arm] and key in decided:  # skipped by per-case stopping: a failed sample
                    status[arm] = False
                    continue
                if i not in has[arm]:
                    why = f"errored ({errors[key]})" if key in errors else "no sample (unmatched)"
                    bad.append(f"{arm}: {why}")
                    status[arm] = None
                    continue
                g = grades.get(key)
                status[arm] = ok = None if g is None else passed_value(g[0])
                if g is not None and overrides and key in overrides:
                    status[arm] = ok = bool(overrides[key])
                if ok is None:
                    held = g[2] if g is not None and len(g) > 2 else None
                    why = "not graded" if g is None else f"ungraded ({_said(g[1]) or _said(held) or 'grader error'})"
                    bad.append(f"{arm}: {why}")
            b, t = status[baseline], status[treatment]
            if bad:
                out.append(PairedTrial(case, i, b, t, "errored", "; ".join(bad)))
            else:
                outcome: Outcome = "win" if t and not b else "loss" if b and not t else "tie"
                out.append(PairedTrial(case, i, b, t, outcome))
    return out


def paired_frame(run: Run | str | Path, baseline: str, treatment: str) -> pd.DataFrame:
    """`paired_trials` as a DataFrame, one row per trial, the `PairedTrial` fields as
    columns in their order (what the comparison page tabulates and counts). A clean run's
    is built column by column (`_CleanPairs`): 100,000 trial records made and read back
    cost the page 1 s."""
    import pandas as pd  # lazy: pandas only where a run is read (`evalkit verdict` on a tally stays light)

    from evalkit.runfolder.runload import as_run, require_graded

    run = as_run(run)
    require_graded(run)
    pairs = _CleanPairs.of(run, baseline, treatment)
    names = [f.name for f in fields(PairedTrial)]
    if pairs is None:
        return records_frame(paired_trials(run, baseline, treatment), PairedTrial)
    b, t = pairs.b.tolist(), pairs.t.tolist()
    columns = (pairs.cases(), list(range(pairs.k)) * len(pairs.order), b, t, pairs.outcomes(), [None] * len(b))
    return pd.DataFrame(dict(zip(names, columns, strict=True)))


def check_two_arms(run: Run, baseline: str, treatment: str) -> None:
    """`InputError` unless `baseline` and `treatment` are two different arms of a graded `run`."""
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
    # lazy: pandas only where a run is read (`evalkit verdict` on a tally stays light)
    from evalkit.runfolder.runload import require_graded

    require_graded(run)


def two_arm_verdict(
    run: Run | str | Path,
    baseline: str,
    treatment: str,
    *,
    alpha: float = 0.05,
    plan: Plan | None = None,
    overrides: Mapping[tuple[str, str, int], bool] | None = None,
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
    run's case order. `overrides` replace graded samples' pass/fail (`paired_trials`).

    References: Dixon & Mood 1946 (sign test); Miller 2024, arXiv:2411.00640 (clustered
    paired differences).
    """
    # lazy: pandas only where a run is read (`evalkit verdict` on a tally stays light)
    from evalkit.runfolder.runload import as_run, case_order

    run = as_run(run)
    check_two_arms(run, baseline, treatment)
    pairs = None if overrides or stopped_early(run) else _CleanPairs.of(run, baseline, treatment)
    if pairs is not None:  # every case decided, every trial clean: counted column by column
        tally = pairs.tally()
    else:
        order = decided_cases(run, case_order(run))
        decided = set(order)  # built once: inside the comprehension it was rebuilt per trial (O(trials x cases))
        trials = [t for t in paired_trials(run, baseline, treatment, overrides) if t.case_id in decided]
        tally = _Tally.of(trials, order)
    v = verdict_from_tally(
        tally.wins, tally.ties, tally.losses, len(tally.problem_cases), None, alpha=alpha, unit=UNIT_CASE
    )
    if tally.problem_cases:
        v = replace(
            v,
            reason=f"{len(tally.problems)} trial(s) in {len(tally.problem_cases)} case(s) errored or unmatched: "
            "those cases cast no vote, and no data is not a passing result",
        )
    v = replace(
        v,
        n_pairs=tally.n_pairs,
        problems=tuple(tally.problems),
        baseline_arm=baseline,
        treatment_arm=treatment,
        case_votes=tuple(tally.case_votes),
    )
    stopped = stopped_early(run)
    # the clustered SE needs two pairs, a fixed n (not a stopped run's) and drawn samples only
    # (a per-case run's skipped samples count as failures in the votes, not as pass-rate data)
    if len(tally.pair_a) >= 2 and not stopped and not decided_keys(run.summary):
        v = replace(v, paired=stats.paired_difference(tally.pair_a, tally.pair_b, clusters=tally.pair_cluster))
    if plan is not None and plan.test == SEQUENTIAL_SIGN_TEST:
        v = _apply_sequential(v, tally.votes, plan)
    elif stopped:
        v = _no_fixed_verdict(v)
    if plan is not None:
        v = replace(v, plan_check=check_against_plan(v, plan))
    return v


@dataclass(frozen=True)
class _Tally:
    """What `two_arm_verdict` counts of a run's trials: each case's vote (1, 0, -1) in
    the run's order and the tally of them, the problems and the cases they void, and the
    clean pairs (treatment and baseline passed as 1.0/0.0, each trial's case)."""

    votes: list[int]
    case_votes: list[tuple[str, str]]
    problems: list[str]
    problem_cases: set[str]
    pair_a: list[float]
    pair_b: list[float]
    pair_cluster: list[str]
    n_pairs: int

    @property
    def wins(self) -> int:
        return self.votes.count(1)

    @property
    def losses(self) -> int:
        return self.votes.count(-1)

    @property
    def ties(self) -> int:
        return self.votes.count(0)

    @classmethod
    def of(cls, trials: list[PairedTrial], order: list[str]) -> _Tally:
        """The tally of `trials` (those of the cases in `order`)."""
        problems = [f"{t.case_id}#{t.index}: {t.problem}" for t in trials if t.problem]
        problem_cases = {t.case_id for t in trials if t.problem}
        outcome_by_case: dict[str, list[int]] = defaultdict(list)
        clean = [t for t in trials if not t.problem]
        for t in clean:
            outcome_by_case[t.case_id].append(_VOTE.get(t.outcome, 0))
        votes: list[int] = []
        case_votes: list[tuple[str, str]] = []
        for case in order:
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
            case_votes.append((case, _VOTE_NAME[vote]))
        return cls(
            votes,
            case_votes,
            problems,
            problem_cases,
            [float(bool(t.treatment_passed)) for t in clean],
            [float(bool(t.baseline_passed)) for t in clean],
            [t.case_id for t in clean],
            len(trials),
        )


_VOTE = {"win": 1, "loss": -1}
_VOTE_NAME = {1: "win", -1: "loss", 0: "tie"}


@dataclass(frozen=True)
class _CleanPairs:
    """The trials of a run whose two arms each have exactly one sample at every planned
    (case, index), each graded true or false, no key errored, skipped or overridden: the
    common run, read column by column (numpy) instead of a trial at a time. `b` and `t`:
    each arm's passes over the grid, case by case in the run's order, indices 0..k-1.
    Written by hand because it is the report's critical path: the trials of a
    200,000-sample run paired one at a time took 1.0 s, and their tally 0.4 s more."""

    order: list[str]
    k: int
    b: np.ndarray
    t: np.ndarray

    @classmethod
    def of(cls, run: Run, baseline: str, treatment: str) -> _CleanPairs | None:
        """The run's clean grid of the two arms, or None when any trial is not clean
        (the caller then pairs them one at a time, which says why)."""
        # lazy: pandas only where a run is read (`evalkit verdict` on a tally stays light)
        import pandas as pd

        from evalkit.runfolder.runload import case_order, keys_typed, sample_keys

        k = int(run.config.get("k") or 0)
        s, g = run.samples, run.grades
        if k <= 0 or not len(s) or not len(g) or len(run.errors) or decided_keys(run.summary):
            return None
        if not (keys_typed(s) and keys_typed(g)) or g["passed"].dtype != np.dtype(bool):
            return None
        if s["index"].dtype != np.int64 or g["index"].dtype != np.int64:  # an index past 2**63 reads as uint64
            return None
        order = case_order(run)
        keys = sample_keys(run)  # each sample's grade row: the last grade of its key, as everywhere
        # each sample's case's place in `order` (-1: not a planned case), its index and the
        # grades' verdicts: read once, for both arms
        case_pos = pd.Index(order).get_indexer(keys.case_ids)[keys.case]
        index, passed = s["index"].to_numpy(), g["passed"].to_numpy()
        grids = [_grid(keys, case_pos, index, passed, arm, len(order), k) for arm in (baseline, treatment)]
        if grids[0] is None or grids[1] is None:
            return None
        return cls(order, k, grids[0], grids[1])

    def cases(self) -> list[str]:
        """Each trial's case, in the grid's order."""
        return [c for c in self.order for _ in range(self.k)]

    def outcomes(self) -> list[Outcome]:
        """Each trial's outcome, in the grid's order."""
        return [_OUTCOME[i] for i in (2 * self.b.astype(np.intp) + self.t).tolist()]

    def trials(self) -> list[PairedTrial]:
        b, t = self.b.tolist(), self.t.tolist()
        return list(map(PairedTrial, self.cases(), list(range(self.k)) * len(self.order), b, t, self.outcomes()))

    def tally(self) -> _Tally:
        net = (self.t.astype(np.int64) - self.b.astype(np.int64)).reshape(len(self.order), self.k).sum(axis=1)
        votes = np.sign(net).tolist()
        return _Tally(
            votes,
            [(c, _VOTE_NAME[v]) for c, v in zip(self.order, votes, strict=True)],
            [],
            set(),
            self.t.astype(float).tolist(),
            self.b.astype(float).tolist(),
            self.cases(),
            self.b.size,
        )


_OUTCOME: tuple[Outcome, ...] = ("tie", "win", "loss", "tie")  # by 2 * baseline passed + treatment passed


def _grid(
    keys: SampleKeys, case_pos: np.ndarray, index: np.ndarray, passed: np.ndarray, arm: str, n_cases: int, k: int
) -> np.ndarray | None:
    """`arm`'s passes at each (case, index) of the grid of `n_cases` planned cases x
    0..k-1, when it has exactly one sample at each and no other, and a grade at each
    (`keys`: the samples' keys and grade rows, `runload.sample_keys`; per sample row
    `case_pos` its case's place in the plan, -1 for none, and `index` its index; `passed`
    the grades' verdicts); else None."""
    if arm not in keys.arms:
        return None
    mine = keys.arm == keys.arms.index(arm)
    n = n_cases * k
    if int(mine.sum()) != n:
        return None
    idx = index[mine]
    pos = case_pos[mine] * k + idx
    rows = keys.grade_row[mine]
    if ((idx < 0) | (idx >= k) | (pos < 0) | (rows < 0)).any() or np.unique(pos).size != n:
        return None
    out = np.zeros(n, dtype=bool)
    out[pos] = passed[rows]
    return out


def stopped_early(run: Run) -> bool:
    """Whether `run` stopped drawing cases once its sequential test decided (`summary.json`
    ``stopping``): which cases it holds was chosen by that test's look after each case."""
    stop = stopping_record(run.summary)
    return bool(stop and stop.get("mode") == "sequential" and stop.get("stopped_early"))


def _no_fixed_verdict(v: Verdict) -> Verdict:
    """A fixed-n test on a run that stopped when its sequential test decided: inconclusive.
    The run stopped on a look at these very votes, so a fixed sign test on them (or its
    p-value) would not hold its alpha; only the pre-registered sequential plan may judge.

    References: Armitage, McPherson & Rowe 1969 (repeated significance tests)."""
    return replace(
        v,
        kind="inconclusive",
        p_value=None,
        p_one_sided=None,
        reason="the run stopped early when its sequential test decided: a fixed sign test on the cases it "
        "stopped at ignores that optional stopping; compare it with the suite's sequential plan.json "
        "(the plan the run was started with)",
    )


def decided_cases(run: Run, order: list[str]) -> list[str]:
    """The cases a verdict counts, in the run's order: for a run that stopped once its
    sequential test decided (`summary.json` ``stopping``), the cases the test used (a case
    drawn after them, its calls in flight, is not a unit of the design); else all."""
    if stopped_early(run):
        return order[: int((stopping_record(run.summary) or {}).get("at_case") or 0)]
    return order


def skraft_trial_verdict(run: Run | str | Path, baseline: str, treatment: str, *, alpha: float = 0.05) -> Verdict:
    """The SKRAFT count of a two-arm comparison (seed 002), for comparison with a SKRAFT
    verdict: every paired trial (case x index, "stimuli x runs") is a unit of the sign
    test, with the floor of 5 trials and 6 discordant pairs. Not evalkit's verdict:
    the k repeats of one case are not independent, so counting them as units
    overstates n (`two_arm_verdict` casts one vote per case); `compare --unit trial`
    shows this beside the case-level verdict, and it is the recorded verdict only where
    the suite asks for it (`verdict_unit: "trial"`, `compare.compare_arms`), the
    case-level one then beside it. An errored or unmatched trial makes it inconclusive.

    References: Dixon & Mood 1946, "The statistical sign test", JASA 41:557-566.
    """
    from evalkit.runfolder.runload import as_run  # lazy: pandas only for a verdict on a run (`verdict` stays fast)

    run = as_run(run)
    check_two_arms(run, baseline, treatment)
    trials = paired_trials(run, baseline, treatment)
    tally = {"win": 0, "tie": 0, "loss": 0, "errored": 0}
    for t in trials:
        tally[t.outcome] += 1
    v = verdict_from_tally(
        tally["win"], tally["tie"], tally["loss"], tally["errored"], len(trials), alpha=alpha, unit=UNIT_SKRAFT
    )
    problems = tuple(f"{t.case_id}#{t.index}: {t.problem}" for t in trials if t.problem)
    return replace(v, n_pairs=len(trials), problems=problems, baseline_arm=baseline, treatment_arm=treatment)


def _apply_sequential(v: Verdict, votes: list[int], plan: Plan) -> Verdict:
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
    kind: VerdictKind
    if st.decision == "continue":
        kind, reason = "inconclusive", (f"the sequential test has not settled after {st.trials} unit(s): keep sampling")
    else:
        kind, reason = st.decision, f"sequential sign test settled on {st.decision} after {st.trials} unit(s)"
    # No fixed-n p-value: the test stopped where its boundary was crossed, and a sign test's
    # p-value on that tally ignores the optional stopping (the design's alpha holds instead).
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
        p_value=None,
        p_one_sided=None,
    )


# ---------------------------------------------------------------------------------------
# Single-arm conformance
# ---------------------------------------------------------------------------------------


def conformance_verdict(
    run: Run | str | Path, threshold: float | None = None, *, arm: str | None = None
) -> ConformanceVerdict:
    """The single-arm conformance verdict of a graded run (one arm).

    A trial meets the threshold when its grade passed (`threshold` None: each case's own
    rule, e.g. its judge threshold) or, with a numeric `threshold` in [0, 1], when the
    share of its checks that passed is at least `threshold`. Errored, ungraded and
    missing trials make it inconclusive: a missing result is never a pass.
    """
    # lazy: pandas only where a run is read (`evalkit verdict` on a tally stays light)
    from evalkit.runfolder.runload import as_run, case_order, grade_values, passed_value, pick_arm

    run = as_run(run)
    if threshold is not None and not 0 <= threshold <= 1:
        raise InputError(f"threshold must be in [0, 1], got {threshold!r}", json_path="threshold")
    arm = pick_arm(run, arm, "name one")
    grades = grade_values(run, ("passed", "error", "checks"))
    errors = {
        (str(r["case_id"]), int(r["index"])): str(r.get("error") or "error")
        for r in run.errors.to_dict("records")
        if str(r["arm"]) == arm
    }
    errored: dict[str, set[int]] = defaultdict(set)
    for c, i in errors:
        errored[c].add(i)
    present: dict[str, set[int]] = defaultdict(set)
    s = run.samples[run.samples["arm"] == arm]
    for case_id, index in zip(s["case_id"].tolist(), s["index"].tolist(), strict=True):
        present[str(case_id)].add(int(index))
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
            ok = None if g is None else passed_value(g[0])
            if ok is None or g is None:
                problems.append(f"{tag}: " + ("not graded" if g is None else f"ungraded ({g[1]})"))
                continue
            if threshold is not None:
                checks = g[2] or []
                share = (sum(1 for c in checks if c.get("passed")) / len(checks)) if checks else float(ok)
                ok = share >= threshold
            if ok:
                met += 1
            else:
                below += 1
                below_trials.append(tag)
    n = met + below + len(problems)
    kind: ConformanceKind
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


_UNSET: Any = object()


def record_verdicts(
    run_path: str | Path,
    *,
    comparison: Verdict | None = None,
    gate: Any = _UNSET,
    judge_trust: Any = _UNSET,
    conformance: Any = _UNSET,
    microtest: Any = _UNSET,
    arm_comparisons: Any = _UNSET,
) -> RunVerdicts:
    """Write what a step concluded into the run's `verdicts.json` (`records.RunVerdicts`):
    each part given replaces that part (a comparison replaces the one of the same two
    arms), the others stay as they were. Returns what was written."""
    # lazy: pandas only where a run is read (`evalkit verdict` on a tally stays light)
    from evalkit.runfolder.runload import run_verdicts

    path = Path(run_path)
    v = run_verdicts(path)
    if comparison is not None:
        v = v.with_comparison(comparison)
    changes = {
        name: value
        for name, value in (
            ("gate", gate),
            ("judge_trust", judge_trust),
            ("conformance", conformance),
            ("microtest", microtest),
            ("arm_comparisons", arm_comparisons),
        )
        if value is not _UNSET
    }
    v = replace(v, run=path.name, updated=datetime.now(UTC).isoformat(timespec="seconds"), **changes)
    RunFolder(path).write_verdicts(v)
    return v


def run_plan(run: Run, plan_path: str | Path | None = None) -> Plan | None:
    """The plan a run is held to: the one named, else its suite's pre-registered
    `plan.json` (`plans.find_plan`), else none."""
    # lazy: pandas only where a run is read (`evalkit verdict` on a tally stays light)
    from evalkit.runfolder.runload import suite_dir_of

    path = plan_path if plan_path is not None else find_plan(suite_dir_of(run))
    return load_plan(path) if path is not None else None


def _said(v: Any) -> str | None:
    """A grade's text field (an error, why a judge result is held) or None when it has
    none (null, NaN from a DataFrame column, empty)."""
    if v is None or (isinstance(v, float) and v != v) or v == "":
        return None
    return str(v)
