"""A grades summary (`grades-summary.json`): `GroupMetrics`, `ArmSummary`, `JudgeTrust`,
`GradesSummary`. Split out of `evalkit.foundations.records`, which re-exports every public
name.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from evalkit.foundations.errors import InputError
from evalkit.foundations.records_base import _check_schema, _num_or_none
from evalkit.foundations.records_baseline import SetScore, _items

# --- grades summaries ---------------------------------------------------------------------


@dataclass(frozen=True)
class GroupMetrics:
    """The metrics of one group of samples (all of a run, an arm, an arm's tag) in
    `grades-summary.json`. One definition each (evalkit.numbers.metrics, docs/formats.md):

    * `sample_pass_rate`: samples whose every check (judge included) passed / the samples
      the run was expected to produce (a missing or errored sample is a failure);
    * `cost_per_sample_usd` / `cost_per_case_usd`: list price (generator + what the cache
      avoided + judge: what the samples would have cost without the cache) per sample
      that ran, and per case (the sum over its samples, averaged over cases);
      `paid_usd` is what was paid for them (generator + judge), `cache_avoided_usd` what
      the cache saved;
    * the rest as `evalkit.conclusions.grading` documents them. None where there is nothing to
      measure (no check of that kind, no sample)."""

    n_expected: int = 0
    n_graded: int = 0
    n_missing: int = 0
    n_errored: int = 0
    n_held: int = 0  # graded, but the judge's pass/fail is held (not trusted): never a pass
    n_samples: int = 0
    n_cases: int = 0
    sample_pass_rate: float | None = None
    correct_rate: float | None = None
    tool_call_correctness: float | None = None
    n_tool_call_checks: int = 0
    hallucination_rate: float | None = None
    n_grounding_checks: int = 0
    refusal_rate: float | None = None
    refusal_rate_golden: float | None = None
    n_golden: int = 0
    refusal_rate_should_refuse: float | None = None
    n_should_refuse: int = 0
    activation_rate: float | None = None
    n_activation: int = 0
    false_activation_rate: float | None = None
    n_non_activation: int = 0
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None
    # samples whose latency is a cache replay's: the latency first measured, not this run's
    n_latency_replays: int = 0
    generator_cost_usd: float = 0.0
    judge_cost_usd: float = 0.0
    paid_usd: float = 0.0
    cache_avoided_usd: float | None = 0.0  # generator and judge caches
    cost_per_sample_usd: float | None = None
    cost_per_case_usd: float | None = None
    judge_mean_score: float | None = None
    n_judged: int = 0
    judge_errors: int = 0
    n_judged_samples: int = 0
    judge_cache_avoided_usd: float = 0.0  # the judge cache's part of cache_avoided_usd

    RENAMED = {"success_rate": "sample_pass_rate"}  # evalkit 0.1's keys

    def to_json(self) -> dict[str, Any]:
        return {f.name: (_num_or_none(v) if isinstance(v, float) else v) for f, v in _items(self)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> GroupMetrics:
        """Of this version, or of evalkit 0.1: `success_rate` is the sample pass rate;
        its `cost_per_task_usd` (what was paid per sample, the cache's savings left out)
        has no counterpart, so the costs of such a summary are unknown (None) until the
        run is graded again, which replays the judge from its cache at no cost."""
        kw = {cls.RENAMED.get(k, k): v for k, v in d.items()}
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in kw.items() if k in names}
        if "paid_usd" not in d:
            kw["paid_usd"] = float(d.get("generator_cost_usd") or 0) + float(d.get("judge_cost_usd") or 0)
            kw["cache_avoided_usd"] = None
        return cls(**kw)


@dataclass(frozen=True)
class ArmSummary:
    """One arm of a grades summary: its metrics overall and per tag, and its gated case
    scores (pass@k and pass^k with SE) per set and per tag."""

    overall: GroupMetrics
    per_tag: dict[str, GroupMetrics] = field(default_factory=dict)
    per_set_scores: dict[str, SetScore] = field(default_factory=dict)
    per_tag_scores: dict[str, SetScore] = field(default_factory=dict)
    scores: SetScore | None = None  # all the arm's cases

    def to_json(self) -> dict[str, Any]:
        return {
            "overall": self.overall.to_json(),
            "per_tag": {t: m.to_json() for t, m in self.per_tag.items()},
            "scores": self.scores.to_json() if self.scores else None,
            "per_set_scores": {s: v.to_json() for s, v in self.per_set_scores.items()},
            "per_tag_scores": {t: v.to_json() for t, v in self.per_tag_scores.items()},
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ArmSummary:
        return cls(
            GroupMetrics.from_json(d.get("overall") or {}),
            {t: GroupMetrics.from_json(m) for t, m in (d.get("per_tag") or {}).items()},
            {s: SetScore.from_json(v) for s, v in (d.get("per_set_scores") or {}).items()},
            {t: SetScore.from_json(v) for t, v in (d.get("per_tag_scores") or {}).items()},
            SetScore.from_json(d["scores"]) if d.get("scores") else None,
        )


# Human labels a judge is calibrated on (seed 001: "Sample 20 judged items ... score them
# by hand"; a human sample under 20 items is a MEDIUM finding)
HUMAN_LABELS_FOR_CALIBRATION = 20


def uncalibrated_note(n_labels: int) -> str:
    """The flag of a judge whose pass/fail counts uncalibrated: "judge not calibrated (n
    of 20 labels)", or, on enough labels that missed the bars, that its calibration failed."""
    if n_labels >= HUMAN_LABELS_FOR_CALIBRATION:
        return f"judge calibration NOT passed ({n_labels} labels)"
    return f"judge not calibrated ({n_labels} of {HUMAN_LABELS_FOR_CALIBRATION} labels)"


@dataclass(frozen=True)
class JudgeTrust:
    """Whether the judge's pass/fail counted, as the grading recorded it
    (`grades-summary.json` -> `judge_trust`, written from `judge.decide_trust`):
    `trusted`, on what `basis` ("labels": this run's fresh human labels;
    "calibration.json": the suite's accepted record for this very judge; "uncalibrated":
    counted by default although not calibrated; "opt-out"; "none"), why, whether the
    judged pass/fail counted uncalibrated (`opt_out`: by default or by the suite's
    opt-out; `uncalibrated` is the flag shown with it), this run's own `calibration` and the
    accepted `record` used (as JSON objects: `judge.Calibration.to_json`), and the
    accepted records that were void for this judge. `trusted` is None only for a summary
    of an older evalkit that recorded agreement without a decision."""

    SCHEMA = "evalkit.checking.judge-trust/2"

    trusted: bool | None
    basis: str
    reason: str
    opt_out: bool = False
    calibration: dict[str, Any] | None = None
    record: dict[str, Any] | None = None
    invalidated: tuple[str, ...] = ()

    @property
    def n_labels(self) -> int:
        """Fresh human labels this run's calibration rests on (0 without one)."""
        return int((self.calibration or {}).get("n") or 0)

    @property
    def uncalibrated(self) -> str | None:
        """The flag every output of the run shows (terminal, RESULTS, pages, CI summary)
        when judged samples counted by the judge's score although it is not calibrated:
        "judge not calibrated (n of 20 labels)" and how it came to count; None otherwise."""
        if not self.opt_out:
            return None
        how = (
            "the suite opted out (allow_uncalibrated_judge)"
            if self.basis == "opt-out"
            else "judge.require_calibration or --require-calibrated-judge holds them instead"
        )
        return f"{uncalibrated_note(self.n_labels)}: judged samples count by the judge's score; {how}"

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.SCHEMA,
            "trusted": self.trusted,
            "basis": self.basis,
            "reason": self.reason,
            "opt_out": self.opt_out,
            "calibration": self.calibration,
            "record": self.record,
            "invalidated": list(self.invalidated),
        }

    @classmethod
    def from_json(cls, d: Any) -> JudgeTrust:
        if not isinstance(d, dict):
            raise InputError(f"a judge trust record must be a JSON object, got {type(d).__name__}", json_path="$")
        if "basis" in d:
            return cls(
                trusted=d.get("trusted"),
                basis=str(d.get("basis") or "none"),
                reason=str(d.get("reason") or ""),
                opt_out=bool(d.get("opt_out")),
                calibration=d.get("calibration") if isinstance(d.get("calibration"), dict) else None,
                record=d.get("record") if isinstance(d.get("record"), dict) else None,
                invalidated=tuple(str(x) for x in d.get("invalidated") or ()),
            )
        # evalkit 0.1's `human_agreement` ({"n", "exact", "within_one"}) and 1's agreement
        # record: figures without a decision on them
        n = int(d.get("n") or 0)
        exact, within = d.get("exact"), d.get("within_one")
        figures = (
            f"{exact:.0%} exact / {within:.0%} within one on {n} label(s)"
            if isinstance(exact, (int, float)) and isinstance(within, (int, float))
            else f"{n} label(s)"
        )
        return cls(
            trusted=d.get("trusted") if isinstance(d.get("trusted"), bool) else None,
            basis="none",
            reason=str(d.get("reason") or f"recorded by an older evalkit without a verdict: {figures}"),
            calibration={"n": n, "exact": exact, "within_one": within} if n else None,
        )


@dataclass(frozen=True)
class GradesSummary:
    """`grades-summary.json`, written by `evalkit grade` (and by `evalkit ingest` for the
    runs of other tools): the metrics of the whole run (`overall`, `per_tag`) and of each
    arm (`per_arm`), at the run's `k`, with the judge, the pairwise judge, the privacy
    scan and the findings. `from_json` reads evalkit 0.1's summaries too."""

    SCHEMA = "evalkit.grades-summary/1"

    complete: bool
    k: int | None
    overall: GroupMetrics
    per_tag: dict[str, GroupMetrics] = field(default_factory=dict)
    per_arm: dict[str, ArmSummary] = field(default_factory=dict)
    run: str = ""
    suite: str | None = None
    judge_version: str | None = None
    judge_files: tuple[str, ...] = ()
    judge_model: str | None = None
    judge_same_model_override: bool = False
    judge: dict[str, Any] | None = None  # the judge's identity (`judge.JudgeIdentity.to_json`)
    judge_trust: JudgeTrust | None = None
    human_agreement: dict[str, Any] | None = None  # the figures of this run's calibration, if any
    judge_spend_usd: float = 0.0  # paid for the judge by this grading pass
    cache_hits: int = 0
    run_spend_usd: float | None = None
    cap_usd: float | None = None
    # paid for the judge over every pass on the run's ledger (a stopped pass and the one
    # that finished it), open reservations at their worst case; None: not recorded
    judge_ledger_usd: float | None = None
    stop_reason: str | None = None
    stop_detail: str | None = None
    privacy: dict[str, Any] | None = None
    pairwise: dict[str, Any] | None = None
    findings: tuple[Any, ...] = ()  # findings.Finding as JSON objects {"level", "message"}
    source: str = "grade"  # grade | ingest
    # judge-only and prediction-powered (human-corrected) rates of the judged samples
    # (`grading.judged_rates`; formats.md, "Corrected judged rates"); None: no judged sample
    judged_rates: dict[str, Any] | None = None
    # the judge asked again on a sample of items (`grade --judge-repeats`): flip rates per rubric version
    judge_consistency: dict[str, Any] | None = None

    @property
    def n_expected(self) -> int:
        return self.overall.n_expected

    @property
    def n_graded(self) -> int:
        return self.overall.n_graded

    @property
    def n_missing(self) -> int:
        return self.overall.n_missing

    @property
    def n_errored(self) -> int:
        return self.overall.n_errored

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.SCHEMA,
            "source": self.source,
            "run": self.run,
            "suite": self.suite,
            "complete": self.complete,
            "k": self.k,
            "n_expected": self.n_expected,
            "n_graded": self.n_graded,
            "n_missing": self.n_missing,
            "n_errored": self.n_errored,
            "judge_version": self.judge_version,
            "judge_files": list(self.judge_files),
            "judge_model": self.judge_model,
            "judge_same_model_override": self.judge_same_model_override,
            "overall": self.overall.to_json(),
            "per_tag": {t: m.to_json() for t, m in self.per_tag.items()},
            "per_arm": {a: s.to_json() for a, s in self.per_arm.items()},
            "judge": self.judge,
            "judge_trust": self.judge_trust.to_json() if self.judge_trust else None,
            "human_agreement": self.human_agreement,
            "judge_spend_usd": self.judge_spend_usd,
            "cache_hits": self.cache_hits,
            "run_spend_usd": self.run_spend_usd,
            "cap_usd": self.cap_usd,
            "judge_ledger_usd": self.judge_ledger_usd,
            **({"stop_reason": self.stop_reason} if self.stop_reason else {}),
            **({"stop_detail": self.stop_detail} if self.stop_detail else {}),
            "privacy": self.privacy,
            **({"pairwise": self.pairwise} if self.pairwise is not None else {}),
            "findings": [dict(f) for f in self.findings],
            **({"judged_rates": self.judged_rates} if self.judged_rates is not None else {}),
            **({"judge_consistency": self.judge_consistency} if self.judge_consistency is not None else {}),
        }

    @classmethod
    def from_json(cls, d: Any) -> GradesSummary:
        d = _check_schema(d, cls.SCHEMA, "a grades summary")
        trust = d.get("judge_trust") or d.get("human_agreement")
        agreement = d.get("human_agreement") if d.get("judge_trust") else None
        return cls(
            complete=bool(d.get("complete")),
            k=d.get("k"),
            overall=GroupMetrics.from_json(d.get("overall") or {}),
            per_tag={t: GroupMetrics.from_json(m) for t, m in (d.get("per_tag") or {}).items()},
            per_arm={a: ArmSummary.from_json(s) for a, s in (d.get("per_arm") or {}).items()},
            run=str(d.get("run") or ""),
            suite=d.get("suite"),
            judge_version=d.get("judge_version"),
            judge_files=tuple(d.get("judge_files") or ()),
            judge_model=d.get("judge_model"),
            judge_same_model_override=bool(d.get("judge_same_model_override")),
            judge=d.get("judge") if isinstance(d.get("judge"), dict) else None,
            judge_trust=JudgeTrust.from_json(trust) if trust else None,
            human_agreement=agreement if isinstance(agreement, dict) else None,
            judge_spend_usd=float(d.get("judge_spend_usd") or 0.0),
            cache_hits=int(d.get("cache_hits") or 0),
            run_spend_usd=d.get("run_spend_usd"),
            cap_usd=d.get("cap_usd"),
            judge_ledger_usd=d.get("judge_ledger_usd"),
            stop_reason=d.get("stop_reason"),
            stop_detail=d.get("stop_detail"),
            privacy=d.get("privacy"),
            pairwise=d.get("pairwise"),
            findings=tuple(d.get("findings") or ()),
            source=str(d.get("source") or "grade"),
            judged_rates=d.get("judged_rates") if isinstance(d.get("judged_rates"), dict) else None,
            judge_consistency=d.get("judge_consistency") if isinstance(d.get("judge_consistency"), dict) else None,
        )
