"""Verdicts and gates: `Verdict`, `ConformanceVerdict`, what a gate reads of a run
(`CaseResult`, `RunMetrics`), the gate's causes, checks, power and `GateResult`. Split out of
`evalkit.foundations.records`, which re-exports every public name.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import PurePath
from typing import Any, Literal

from evalkit.foundations import fmt
from evalkit.foundations.records_base import NO_GATE, _check_schema, _num_or_none, set_gate
from evalkit.foundations.records_plan import SIGN_TEST, PairedDifference, PlanCheck
from evalkit.foundations.records_suite import GateThresholds

# --- verdicts -----------------------------------------------------------------------------

VerdictKind = Literal["pass", "regression", "no-improvement", "inconclusive"]
ConformanceKind = Literal["pass", "regression", "inconclusive"]


# A judge whose pass/fail counted although it is not calibrated (by default or by opt-out)
UNCALIBRATED_COUNTED = "although NOT calibrated (counted, flagged: by default or by opt-out)"


def judge_line(judge: str, checks: dict[str, Any] | None) -> str:
    """What a verdict rests on, in words (`evalkit.conclusions.compare` fills `judge_checks`)."""
    c = checks or {}
    if judge == "pairwise":
        pc, bar = c.get("position_consistency"), c.get("position_consistency_bar") or 0.0
        bits = [f"position consistency {fmt.pct(pc, 0)} (bar {fmt.pct(bar, 0)})"]
        bits.append("trusted" if c.get("trusted") else "NOT trusted")
        if c.get("opt_out"):
            bits.append(UNCALIBRATED_COUNTED)
        return "the pairwise judge (" + ", ".join(bits) + ")"
    text = "each sample's pass/fail (deterministic checks"
    if c.get("judged"):
        text += ", and the direct judge: " + ("trusted" if c.get("trusted") else "NOT trusted, judged results held")
        if c.get("opt_out"):
            text += f" {UNCALIBRATED_COUNTED}"
    cor = c.get("corrected") if isinstance(c.get("corrected"), dict) else None
    if cor is not None:  # judged_estimate "corrected" (evalkit.conclusions.compare._rest_on_corrected)
        text += f"; people's labels in place of the judge on {cor.get('human_votes', 0)} labelled sample(s)"
        d = cor.get("difference")
        if isinstance(d, dict):
            text += (
                f"; corrected judged pass rate difference {100 * d['value']:+.1f} points "
                f"[{100 * d['low']:+.1f}, {100 * d['high']:+.1f}] (PPI++ per arm)"
            )
    return text + ")"


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
    the direction observed. `paired` is the clustered paired analysis of all trials
    (treatment minus baseline pass rate, clustered on the case); `sequential` the
    sequential test's path when the plan asked for one; `plan_check` the run against its
    plan.
    """

    SCHEMA = "evalkit.verdict/1"

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
    paired: PairedDifference | None = None
    baseline_arm: str | None = None
    treatment_arm: str | None = None
    sequential: dict[str, Any] | None = None
    plan_check: PlanCheck | None = None
    case_votes: tuple[tuple[str, str], ...] = ()  # (case, win / loss / tie / errored), in case order
    judge: str = (
        "direct"  # what the votes rest on: "direct" pass/fail, or the "pairwise" judge (evalkit.conclusions.compare)
    )
    judge_checks: dict[str, Any] | None = None  # what was checked of that judge (evalkit.conclusions.compare)
    # the same comparison counted in the other unit, shown beside and never deciding: under a
    # suite's `verdict_unit: "trial"` (SKRAFT's count decides) the case-level verdict
    beside: Verdict | None = None

    @property
    def discordant(self) -> int:
        return self.wins + self.losses

    def disagreement(self) -> str | None:
        """One sentence where the case-level sign test (the verdict) and the trial-level
        paired difference disagree: one significant and the other not (the test at the
        verdict's alpha, the interval excluding zero or not), or opposite directions. It
        says which answers: the verdict, because the repeats of one case share its
        prompt and difficulty and are not independent evidence, and the sign test is
        the pre-registered test. None where they agree or either is missing.

        References: Miller 2024, arXiv:2411.00640 (clustered SE: repeats within a
        cluster are not independent); Dixon & Mood 1946 (the sign test)."""
        pd_ = self.paired
        if pd_ is None or self.p_value is None or fmt.missing(pd_.low) or fmt.missing(pd_.high):
            return None
        significant = self.p_value <= self.alpha
        excludes_zero = pd_.low > 0 or pd_.high < 0
        opposite = significant and excludes_zero and (pd_.low > 0) != (self.wins > self.losses)
        if significant == excludes_zero and not opposite:
            return None
        level = round(100 * (1 - pd_.alpha))
        planned = " (pre-registered)" if self.plan_check is not None and self.plan_check.ok else ""
        return (
            f"Why the two differ: the verdict is the case-level sign test{planned} "
            f"({self.wins}W/{self.losses}L, p = {fmt.pvalue(self.p_value)}, "
            f"{'' if significant else 'not '}significant at alpha "
            f"{self.alpha:g}), while the trial-level paired difference ({fmt.points(pd_.mean)}, {level}% CI "
            f"{fmt.points_interval(pd_.low, pd_.high)}) {'excludes' if excludes_zero else 'includes'} zero; "
            f"its {pd_.n} trials are repeats of {pd_.n_clusters or self.n_trials} cases, and repeats within a case "
            "are not independent evidence, so the verdict (one vote per case) is the answer and the paired "
            "difference is context."
        )

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"schema": self.SCHEMA}
        for f in fields(self):
            d[f.name] = getattr(self, f.name)
        d["discordant"] = self.discordant
        d["p_value_scope"] = (
            f"clean votes only ({self.wins + self.ties + self.losses} of {self.n_trials} units; "
            f"{self.errored} errored/unmatched unit(s) cast no vote): not a verdict"
            if self.errored
            else "all units"
        )
        d["problems"] = list(self.problems)
        d["case_votes"] = [list(cv) for cv in self.case_votes]
        d["paired"] = self.paired.to_json() if self.paired is not None else None
        d["plan_check"] = self.plan_check.to_json() if self.plan_check is not None else None
        d["p_value"], d["p_one_sided"] = _num_or_none(self.p_value), _num_or_none(self.p_one_sided)
        d["beside"] = self.beside.to_json() if self.beside is not None else None
        return d

    @classmethod
    def from_json(cls, d: Any) -> Verdict:
        d = _check_schema(d, cls.SCHEMA, "a verdict")
        kw = {f.name: d[f.name] for f in fields(cls) if f.name in d}
        kw["problems"] = tuple(d.get("problems") or ())
        kw["case_votes"] = tuple((str(c), str(v)) for c, v in d.get("case_votes") or ())
        kw["paired"] = PairedDifference.from_json(d["paired"]) if d.get("paired") else None
        kw["plan_check"] = PlanCheck.from_json(d["plan_check"]) if d.get("plan_check") else None
        kw["beside"] = Verdict.from_json(d["beside"]) if d.get("beside") else None
        return cls(**kw)

    def render(self) -> str:
        """A few lines for a terminal or a PR comment."""
        lines = [f"verdict: {self.kind}"]
        if self.plan_check is not None:  # second: a verdict that did not follow its plan says so first
            pc = self.plan_check
            lines.append(
                "plan: "
                + (
                    f"followed ({pc.units()})"
                    if pc.ok
                    else "NOT followed: " + "; ".join(pc.flags) + " (not the pre-registered test)"
                )
            )
        elif self.baseline_arm:
            lines.append(
                "plan: none (exploratory: no pre-registered plan.json; write one with `evalkit power --write`)"
            )
        if self.baseline_arm:
            lines.append(f"arms: treatment {self.treatment_arm!r} vs baseline {self.baseline_arm!r}")
        lines.append(f"unit of the test: {self.unit}")
        lines.append(f"judge: {judge_line(self.judge, self.judge_checks)}")
        p, p1 = fmt.pvalue(self.p_value), fmt.pvalue(self.p_one_sided)
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
            pd_ = self.paired
            lines.append(
                f"all {pd_.n} graded paired trials, clustered on case ({pd_.n_clusters} clusters): "
                f"treatment - baseline pass rate {fmt.points(pd_.mean)} (SE {fmt.points(pd_.se, signed=False)}, "
                f"95% CI {fmt.points_interval(pd_.low, pd_.high)}), "
                f"correlation {fmt.correlation(pd_.correlation)}"
            )
            why = self.disagreement()
            if why:
                lines.append(why)
        if self.sequential:
            s = self.sequential
            lines.append(f"sequential: {s['decision']} after {s['n_used']} of {s['n_available']} units")
        lines.append(f"reason: {self.reason}")
        if self.beside is not None:
            b = self.beside
            lines.append(
                f"beside it (not deciding): {b.kind} by {b.unit}: {b.wins}W/{b.ties}T/{b.losses}L, "
                f"{b.errored} errored/unmatched, p = {fmt.pvalue(b.p_value)}"
            )
        for prob in self.problems[:20]:
            lines.append(f"  - {prob}")
        if len(self.problems) > 20:
            lines.append(f"  ... and {len(self.problems) - 20} more")
        return "\n".join(lines)


@dataclass(frozen=True)
class ConformanceVerdict:
    """Single-arm verdict: `pass` when every trial ran and met the threshold,
    `regression` when every trial ran and one fell below it, `inconclusive` when any
    trial errored (it proves nothing). `below` and `problems` name the trials."""

    SCHEMA = "evalkit.conformance/1"

    kind: ConformanceKind
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

    def to_json(self) -> dict[str, Any]:
        d = {"schema": self.SCHEMA, **{f.name: getattr(self, f.name) for f in fields(self)}}
        d["below_trials"], d["problems"] = list(self.below_trials), list(self.problems)
        return d

    @classmethod
    def from_json(cls, d: Any) -> ConformanceVerdict:
        d = _check_schema(d, cls.SCHEMA, "a conformance verdict")
        kw = {f.name: d[f.name] for f in fields(cls) if f.name in d}
        kw["below_trials"], kw["problems"] = tuple(d.get("below_trials") or ()), tuple(d.get("problems") or ())
        return cls(**kw)

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


# --- what a gate reads of a run -----------------------------------------------------------


@dataclass(frozen=True)
class CaseResult:
    """One case of one arm of a run: `n` samples (ungraded ones included, never as
    passes), `c` that passed, each sample's list-price cost (generator + what the cache
    avoided + judge: what it would have cost without the cache), its set and tags."""

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

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.case_id,
            "set": self.set,
            "tags": list(self.tags),
            "n": self.n,
            "c": self.c,
            "ungraded": self.ungraded,
            "costs": [round(x, 10) for x in self.costs],
        }

    @classmethod
    def from_json(cls, c: dict[str, Any]) -> CaseResult:
        return cls(
            case_id=str(c["id"]),
            set=str(c.get("set") or "capability"),
            tags=tuple(c.get("tags") or ()),
            n=int(c["n"]),
            c=int(c["c"]),
            costs=tuple(float(x) for x in c.get("costs") or ()),
            ungraded=int(c.get("ungraded", 0)),
        )


@dataclass(frozen=True)
class RunMetrics:
    """What a gate reads from one arm of a run: per-case counts at the run's k
    (`gates.run_metrics`). The measures over it (`metrics.gated_case_score`,
    `metrics.cost_per_case`) are defined once in `evalkit.numbers.metrics`."""

    SCHEMA = "evalkit.run-metrics/1"

    k: int
    cases: tuple[CaseResult, ...]
    arm: str | None = None
    run_stamp: str | None = None
    config_hash: str | None = None
    judge_version: str | None = None
    sets_from: str = "case table"  # where the cases' sets came from (an old run: its suite)

    def by_id(self) -> Mapping[str, CaseResult]:
        """Case id -> its counts: built once per record (it is frozen) and read-only, as
        callers ask for it once per case (a page lists the planned cases not run)."""
        return self._by_id

    @functools.cached_property
    def _by_id(self) -> Mapping[str, CaseResult]:
        return types.MappingProxyType({c.case_id: c for c in self.cases})

    def select(self, ids: Iterable[str] | None = None) -> list[CaseResult]:
        """The cases `ids` names (all of them for None), in the order given."""
        if ids is None:
            return list(self.cases)
        m = self.by_id()
        return [m[i] for i in ids if i in m]

    def tags(self, ids: Iterable[str] | None = None) -> dict[str, list[str]]:
        """Tag -> the ids of its cases (among `ids`), tags sorted."""
        out: dict[str, list[str]] = {}
        for c in self.select(ids):
            for t in c.tags:
                out.setdefault(t, []).append(c.case_id)
        return dict(sorted(out.items()))

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.SCHEMA,
            "k": self.k,
            "arm": self.arm,
            "run_stamp": self.run_stamp,
            "config_hash": self.config_hash,
            "judge_version": self.judge_version,
            "sets_from": self.sets_from,
            "cases": [c.to_json() for c in self.cases],
        }

    @classmethod
    def from_json(cls, d: Any) -> RunMetrics:
        d = _check_schema(d, cls.SCHEMA, "run metrics")
        jv = d.get("judge_version")
        return cls(
            k=int(d["k"]),
            arm=d.get("arm"),
            run_stamp=d.get("run_stamp"),
            config_hash=d.get("config_hash"),
            judge_version=jv if isinstance(jv, str) else None,  # 0.1 wrote NaN for an unjudged run
            sets_from=str(d.get("sets_from") or "case table"),
            cases=tuple(CaseResult.from_json(c) for c in d["cases"]),
        )


# --- gates --------------------------------------------------------------------------------

GATE_CAUSE_INCOMPLETE = "incomplete run"
GATE_CAUSE_SCORE = "case score drop"
GATE_CAUSE_COST = "cost increase"
GATE_CAUSE_NOT_COMPARABLE = "not comparable with the baseline"
GATE_CAUSE_JUDGE = "judge not trusted"  # judged results held (evalkit.conclusions.grading): no rate was read
GATE_CAUSE_UNDERPOWERED = "underpowered"  # the gated set cannot detect a drop of the threshold
UNDERPOWERED_PREFIX = "UNDERPOWERED"
GATE_POWER = 0.8  # the power at which the gate's detectable drop is computed
# who recorded a run's gate in verdicts.json: `evalkit gate` (never replaced by a report) or `evalkit report`
GATE_RECORDED_BY_GATE = "gate"
GATE_RECORDED_BY_REPORT = "report"
# Reasons that mean the gate failed without reading a rate (the run did not finish cleanly).
NOT_CLEAN_PREFIXES = ("the runner exited", "no summary", "summary.json is not valid", "INCOMPLETE")
SCORE_DROP_PREFIXES = ("case-score drop", "success-rate drop")  # the second: gates of evalkit 0.1
COST_RISE_PREFIXES = ("cost-per-case increase", "cost-per-task increase")


def gate_failure_causes(reasons: Iterable[str], read_rates: bool | None = None) -> list[str]:
    """Why a gate failed, from its reasons: `judge not trusted` when judged results were
    held, `incomplete run` when it failed on the run's exit status or summary without
    reading any rate (never a regression: nothing was measured), otherwise `case score
    drop` and/or `cost increase`, or `not comparable with the baseline` (k changed, no
    shared case, short cases). Empty for a gate that passed."""
    reasons = [str(r) for r in reasons]
    if any(r.startswith(GATE_CAUSE_JUDGE) for r in reasons):
        return [GATE_CAUSE_JUDGE]
    if read_rates is False or any(r.startswith(NOT_CLEAN_PREFIXES) for r in reasons):
        return [GATE_CAUSE_INCOMPLETE]
    causes = []
    if any(r.startswith(SCORE_DROP_PREFIXES) for r in reasons):
        causes.append(GATE_CAUSE_SCORE)
    if any(r.startswith(COST_RISE_PREFIXES) for r in reasons):
        causes.append(GATE_CAUSE_COST)
    if any(r.startswith(UNDERPOWERED_PREFIX) for r in reasons):
        causes.append(GATE_CAUSE_UNDERPOWERED)
    if reasons and not causes:
        causes.append(GATE_CAUSE_NOT_COMPARABLE)
    return causes


@dataclass(frozen=True)
class GateCheck:
    """One comparison of a gate: `kind` `score` (the gated case score, in points) or
    `cost` (the cost per case, in percent), the group (`overall` or `tag:<name>`),
    baseline and current values, the signed change (current minus baseline: points for
    the score, so a drop is negative; percent for cost, so an increase is positive), the
    threshold (a magnitude: the largest drop in points, or increase in percent,
    allowed), whether the change breached it, the one-sided p-value of the change under
    run-to-run noise (Holm-adjusted in `p_adjusted`; None when the baseline has no
    per-case data), and whether it failed the gate."""

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

    @property
    def label(self) -> str:
        """`case score overall`, `case score tag:x`, `cost per case`, `judged sample pass rate (corrected)`,
        `judged sample pass rate (judge only)`, `gated case score (corrected)`."""
        if self.kind == "judged":
            if self.group == "judged:case-score":
                return "gated case score (corrected)"
            if self.group == "judged:judge-only":
                return "judged sample pass rate (judge only)"
            return "judged sample pass rate (corrected)"
        return f"case score {self.group}" if self.kind == "score" else "cost per case"

    def to_json(self) -> dict[str, Any]:
        return {
            f.name: (
                _num_or_none(getattr(self, f.name))
                if isinstance(getattr(self, f.name), float)
                else getattr(self, f.name)
            )
            for f in fields(self)
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> GateCheck:
        kw: dict[str, Any] = {f.name: d.get(f.name) for f in fields(cls)}
        kw["kind"] = "score" if d.get("kind") == "success" else d.get("kind")  # 0.1 called it success
        return cls(**kw)


@dataclass(frozen=True)
class GatePower:
    """What the gate can see: the smallest drop of the overall gated case score (points)
    that `n_cases` gated cases detect at the gate's one-sided `alpha` with `power`
    (`stats.detectable_drop`, planned at `planning_rate`: the baseline's score shrunk by
    Laplace's rule), the threshold, the gated cases a drop of the threshold would need
    (`stats.cases_for_drop`), whether the gate is underpowered (detectable drop above
    the threshold) and what an underpowered gate does (`on_underpowered`)."""

    n_cases: int
    alpha: float
    power: float
    planning_rate: float
    detectable_drop_points: float
    threshold_points: float
    cases_needed: int
    underpowered: bool
    on_underpowered: str = "fail"

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, d: Any) -> GatePower:
        return cls(
            n_cases=int(d["n_cases"]),
            alpha=float(d["alpha"]),
            power=float(d["power"]),
            planning_rate=float(d["planning_rate"]),
            detectable_drop_points=float(d["detectable_drop_points"]),
            threshold_points=float(d["threshold_points"]),
            cases_needed=int(d["cases_needed"]),
            underpowered=bool(d["underpowered"]),
            on_underpowered=str(d.get("on_underpowered", "fail")),
        )

    def describe(self) -> str:
        return (
            f"{self.n_cases} gated case(s) detect "
            + (
                f"a drop of {self.detectable_drop_points:.1f} points or more "
                if self.detectable_drop_points <= 100
                else "no drop (not even 100 points) "
            )
            + f"(one-sided alpha {self.alpha:g}, power {self.power:.0%}, planned at a {self.planning_rate:.1%} score), "
            f"the threshold is {self.threshold_points:g} points: a drop of it needs {self.cases_needed:,} gated cases"
        )


@dataclass(frozen=True)
class GateResult:
    """The gate's outcome. `read_rates` is False when it failed on the run's exit status
    or INCOMPLETE summary without reading any rate."""

    SCHEMA = "evalkit.gate/1"

    passed: bool
    reasons: tuple[str, ...]
    read_rates: bool
    checks: tuple[GateCheck, ...] = ()
    notes: tuple[str, ...] = ()
    thresholds: GateThresholds = field(default_factory=lambda: GateThresholds())
    alpha: float = 0.05
    run: str = ""
    baseline: str = ""
    arm: str | None = None
    power: GatePower | None = None  # what the gate can see (None: it read no rate)
    baseline_run: str = ""  # the run the baseline was accepted from (its stamp), "" when not known
    baseline_arm: str | None = None  # the arm it was accepted from
    recorded_by: str = ""  # GATE_RECORDED_BY_GATE or _REPORT once written to verdicts.json

    def against(self) -> str:
        """Which arm was gated against which baseline run and arm, in words (every page
        that shows the gate says it)."""
        run = PurePath(self.run).name if self.run else "this run"
        base = f"run {self.baseline_run}" if self.baseline_run else "the baseline"
        by = {GATE_RECORDED_BY_GATE: "; by `evalkit gate`", GATE_RECORDED_BY_REPORT: "; by `evalkit report`"}
        return (
            f"arm {self.arm or '(the only one)'} of {run} against {base}, arm {self.baseline_arm or '(not recorded)'}"
            + (f" ({self.baseline})" if self.baseline else "")
            + by.get(self.recorded_by, "")
        )

    @property
    def status(self) -> str:
        """PASS, FAIL (a measured regression or a run that cannot be compared), or
        UNDERPOWERED (failed only because the suite cannot see its threshold)."""
        if self.passed:
            return "PASS"
        return "UNDERPOWERED" if self.causes == [GATE_CAUSE_UNDERPOWERED] else "FAIL"

    @property
    def causes(self) -> list[str]:
        """Why it failed (`gate_failure_causes`): empty when it passed."""
        return [] if self.passed else gate_failure_causes(self.reasons, self.read_rates)

    @property
    def regression(self) -> bool:
        """A measured worsening (a case-score drop or a cost increase), not a run that
        could not be compared: only this is shown as a regression."""
        causes = set(self.causes)
        causes.discard(GATE_CAUSE_UNDERPOWERED)  # a gate that cannot see measured no worsening
        return bool(causes) and not ({GATE_CAUSE_INCOMPLETE, GATE_CAUSE_NOT_COMPARABLE, GATE_CAUSE_JUDGE} & causes)

    def to_json(self) -> dict[str, Any]:
        t = self.thresholds
        return {
            "schema": self.SCHEMA,
            "passed": self.passed,
            "causes": self.causes,
            "reasons": list(self.reasons),
            "read_rates": self.read_rates,
            "checks": [c.to_json() for c in self.checks],
            "notes": list(self.notes),
            "thresholds": {
                "max_success_drop_points": t.max_success_drop_points,
                "max_cost_increase_pct": t.max_cost_increase_pct,
                "min_tag_cases": t.min_tag_cases,
                "alpha": t.alpha,
                "on_underpowered": t.on_underpowered,
                "require_significance": t.require_significance,
            },
            "alpha": self.alpha,
            "run": self.run,
            "baseline": self.baseline,
            "arm": self.arm,
            "status": self.status,
            "power": self.power.to_json() if self.power is not None else None,
            "baseline_run": self.baseline_run,
            "baseline_arm": self.baseline_arm,
            "recorded_by": self.recorded_by,
        }

    @classmethod
    def from_json(cls, d: Any) -> GateResult:
        d = _check_schema(d, cls.SCHEMA, "a gate result")
        t = d.get("thresholds") or {}
        return cls(
            passed=bool(d["passed"]),
            reasons=tuple(d.get("reasons") or ()),
            read_rates=bool(d.get("read_rates", True)),
            checks=tuple(GateCheck.from_json(c) for c in d.get("checks") or ()),
            notes=tuple(d.get("notes") or ()),
            thresholds=GateThresholds(
                **{
                    k: t[k]
                    for k in (
                        "max_success_drop_points",
                        "max_cost_increase_pct",
                        "min_tag_cases",
                        "alpha",
                        "on_underpowered",
                    )
                    if k in t
                },
                # a gate recorded before issue 41 had the noise guard unless its alpha was 1
                require_significance=bool(t.get("require_significance", float(t.get("alpha", 0.05)) < 1)),
            ),
            alpha=float(d.get("alpha", 0.05)),
            run=str(d.get("run") or ""),
            baseline=str(d.get("baseline") or ""),
            arm=d.get("arm"),
            power=GatePower.from_json(d["power"]) if isinstance(d.get("power"), dict) else None,
            baseline_run=str(d.get("baseline_run") or ""),
            baseline_arm=d.get("baseline_arm"),
            recorded_by=str(d.get("recorded_by") or ""),
        )

    def render(self) -> str:
        lines = [
            f"Gate: {self.status if self.status != 'FAIL' else 'FAIL: ' + ' / '.join(self.causes)}"
            + ("" if self.passed else f" ({'; '.join(self.reasons)})"),
            f"gated: {self.against()}",
        ]
        if not self.read_rates:
            lines.append("rates not read: a run that did not finish cleanly is not comparable")
            return "\n".join(lines)
        t = self.thresholds
        lines.append(
            f"thresholds: gated case score drop > {t.max_success_drop_points:g} points (overall, tags with >= "
            f"{t.min_tag_cases} cases), cost per case increase > {t.max_cost_increase_pct:g}%; "
            + (
                f"a breach fails when beyond run-to-run noise (Holm-adjusted p <= {self.alpha:g}; "
                "gate.require_significance); "
                if t.require_significance
                else "a breach fails on the observed change (p(noise) is shown, not required); "
            )
            + "change = current - baseline"
        )
        lines.append(
            f"{'check':<28} {'cases':>5} {'baseline':>10} {'current':>10} {'change':>9} {'p(noise)':>9}  result"
        )
        for c in self.checks:
            unit = " pts" if c.kind != "cost" else "%"
            shown = f"{c.baseline:.3f}" if c.kind != "cost" else f"${c.baseline:.4g}"
            now = f"{c.current:.3f}" if c.kind != "cost" else f"${c.current:.4g}"
            p = "-" if c.p_adjusted is None else f"{c.p_adjusted:.3g}"
            within = c.p_adjusted is not None and c.p_adjusted > self.alpha
            res = (
                ("FAIL (within noise)" if within else "FAIL") if c.failed else ("within noise" if c.exceeded else "ok")
            )
            lines.append(f"{c.label:<28} {c.n_cases:>5} {shown:>10} {now:>10} {c.change:>+7.1f}{unit:<3}{p:>8}  {res}")
        if self.power is not None:
            lines.append(f"power: {self.power.describe()}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)
