"""Which judge a two-arm verdict rests on: pass/fail, or the pairwise judge.

`compare_arms` is what `evalkit compare` and the skill-comparison page call:

* `judge="direct"`: `verdicts.two_arm_verdict` over each sample's pass/fail (its
  deterministic checks and the direct judge's score against the case threshold). A
  judged sample whose pass/fail the grading held (the judge is not trusted: not
  calibrated, and no opt-out) casts no vote: its case is errored and the verdict says
  why; it never moves the tally.
* `judge="pairwise"`: `pairwise_verdict`, the tally of the position-swapped pairwise
  judge (`pairwise.jsonl`, written by `evalkit grade --pairwise BASE,TREAT`): one vote
  per case, the majority of its repeats; a repeat counts only when both orders were
  asked (orders that disagree make it a tie); a case with an errored or unmatched
  repeat casts no vote, and any such case makes the verdict inconclusive. The verdict
  is also inconclusive when the pairwise judge is position-biased (consistency under
  `judge.POSITION_CONSISTENCY_BAR`) or not trusted (`judge.JudgeTrust`), naming why.
* `judge=None`: the suite's choice, `verdict_judge` in the config the run recorded
  (default "direct").

`compare` is `evalkit compare`: `compare_arms` held to the run's plan, recorded in the
run's `verdicts.json`. `compare_many` is `evalkit compare` on more than two arms: every
pair (or a control arm against each other arm), Holm-corrected across the pairs.

Every verdict records the judge it rests on (`Verdict.judge`) and what was checked of
it (`Verdict.judge_checks`).

References: Dixon & Mood 1946 (the sign test, via `verdicts.verdict_from_tally`); Zheng
et al. 2023, arXiv:2306.05685 (position consistency of LLM judges); Holm 1979, Scand. J.
Statist. 6(2) (the step-down correction across pairs, via statsmodels' `multipletests`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from evalkit.checking.judge import POSITION_CONSISTENCY_BAR, pairwise_bias, pairwise_tally, read_pairwise
from evalkit.conclusions import verdicts as V
from evalkit.foundations._io import RUN_JSON_BYTES, read_json_object
from evalkit.foundations.errors import InputError
from evalkit.foundations.layout import GRADES_SUMMARY, PAIRWISE
from evalkit.foundations.records import SEQUENTIAL_SIGN_TEST, ArmComparisons, Plan, Verdict, VerdictKind
from evalkit.numbers.plans import check_against_plan
from evalkit.runfolder.runload import Run, as_run, case_order

JUDGES = ("direct", "pairwise")
UNIT_PAIRWISE_CASE = "case (one vote per case: the majority of its repeats' pairwise judgements, both orders asked)"


def grades_summary(run: Run) -> dict[str, Any]:
    """The run's `grades-summary.json`, or {} when it has none (an ingested run)."""
    p = Path(run.path) / GRADES_SUMMARY
    return read_json_object(p, GRADES_SUMMARY, limit=RUN_JSON_BYTES) if p.exists() else {}


def verdict_judge_of(run: Run) -> str:
    """The judge the run's suite chose for its verdicts (`verdict_judge`), "direct" by default."""
    cfg = run.config.get("config")
    choice = (cfg.get("verdict_judge") if isinstance(cfg, dict) else None) or "direct"
    return choice if choice in JUDGES else "direct"


def verdict_unit_of(run: Run) -> str:
    """The unit the run's suite chose for its recorded verdict (`verdict_unit`), "case" by default."""
    cfg = run.config.get("config")
    return "trial" if isinstance(cfg, dict) and cfg.get("verdict_unit") == "trial" else "case"


def _trust_reason(summary: dict[str, Any]) -> tuple[bool, str, bool]:
    """(trusted, why, opted out) from a grading's `judge_trust`."""
    trust = summary.get("judge_trust")
    if not isinstance(trust, dict):
        return False, "the grading recorded no judge trust (graded by an older evalkit, or without a judge)", False
    return bool(trust.get("trusted")), str(trust.get("reason") or ""), bool(trust.get("opt_out"))


def pairwise_verdict(
    run: Run | str | Path, baseline: str, treatment: str, *, alpha: float = 0.05, plan: Plan | None = None
) -> Verdict:
    """The two-arm verdict from the pairwise judge's tally (see the module docstring).
    `InputError` when the run has no `pairwise.jsonl` from its latest grading, or one
    asked for other arms."""
    run = as_run(run)
    V.check_two_arms(run, baseline, treatment)
    summary = grades_summary(run)
    path = Path(run.path) / PAIRWISE
    if not path.exists() or not isinstance(summary.get("pairwise"), dict):
        raise InputError(
            "no pairwise judge in the latest grading: grade with `evalkit grade RUN --pairwise "
            f'{baseline},{treatment}` (or set "verdict_judge": "pairwise" in config.json)',
            path,
        )
    outcomes = read_pairwise(path)
    tally = pairwise_tally(outcomes, baseline, treatment, case_order=case_order(run), k=int(run.config.get("k") or 0))
    v = V.verdict_from_tally(tally.wins, tally.ties, tally.losses, tally.errored, alpha=alpha, unit=UNIT_PAIRWISE_CASE)
    n_bad = sum(1 for p in tally.problems)
    if tally.errored:
        v = replace(
            v,
            reason=f"{n_bad} pairwise trial(s) in {tally.errored} case(s) errored or unmatched: those cases "
            "cast no vote, and no data is not a passing result",
        )
    v = replace(
        v,
        n_pairs=tally.n_pairs,
        problems=tally.problems,
        baseline_arm=baseline,
        treatment_arm=treatment,
        case_votes=tally.case_votes,
    )
    if plan is not None:
        if plan.test == SEQUENTIAL_SIGN_TEST:
            v = V._apply_sequential(v, list(tally.votes), plan)
        v = replace(v, plan_check=check_against_plan(v, plan))
    bias = pairwise_bias(outcomes, same_model=bool(summary.get("judge_same_model_override")))
    trusted, why, opted = _trust_reason(summary)
    blockers = []
    if bias.position_biased:
        blockers.append(
            f"position bias: the pairwise judge kept its answer in {bias.position_consistency:.0%} of "
            f"{bias.n_pairs - bias.n_errored} swapped pair(s), under the {POSITION_CONSISTENCY_BAR:.0%} bar: "
            "the order the texts were shown in would decide the verdict"
        )
    if not trusted:
        blockers.append(f"the judge is not trusted: {why}")
    if blockers:
        v = replace(v, kind="inconclusive", reason="; ".join(blockers) + f" (the tally would say: {v.reason})")
    checks = {
        "position_consistency": bias.position_consistency,
        "position_consistency_bar": POSITION_CONSISTENCY_BAR,
        "position_biased": bias.position_biased,
        "inconsistent_tie_share": bias.inconsistent_tie_share,
        "length_preference": {
            "decisive_pairs": bias.n_length_decisive,
            "longer_won": bias.longer_won,
            "shorter_won": bias.shorter_won,
            "p_value": bias.length_p_value,
            "biased": bias.length_biased,
        },
        "same_model": bias.same_model,
        "trusted": trusted,
        "trust": why,
        "opt_out": opted,
        "subjects": sorted({o.subject for o in outcomes}),
        "findings": [{"level": lv, "message": m} for lv, m in bias.findings],
    }
    return replace(v, judge="pairwise", judge_checks=checks)


def direct_verdict(
    run: Run | str | Path, baseline: str, treatment: str, *, alpha: float = 0.05, plan: Plan | None = None
) -> Verdict:
    """`verdicts.two_arm_verdict` over pass/fail, saying when held judged results (an
    untrusted judge) kept cases from voting."""
    run = as_run(run)
    summary = grades_summary(run)
    cfg = run.config.get("config")
    corrected = isinstance(cfg, dict) and cfg.get("judged_estimate") == "corrected"
    rates = summary.get("judged_rates") if isinstance(summary.get("judged_rates"), dict) else None
    overrides = _human_overrides(rates, (baseline, treatment)) if corrected else {}
    v = V.two_arm_verdict(run, baseline, treatment, alpha=alpha, plan=plan, overrides=overrides)
    trusted, why, opted = _trust_reason(summary)
    g = run.grades
    held = 0
    held_cases: set[str] = set()
    if len(g) and "judge_held" in g.columns:
        rows = g[g["arm"].isin([baseline, treatment]) & g["judge_held"].notna() & g["passed"].isna()]
        held, held_cases = len(rows), {str(c) for c in rows["case_id"]}
    if held:
        v = replace(
            v,
            reason=f"judged results held: {held} judged sample(s) in {len(held_cases)} case(s) cast no vote "
            f"because the judge is not trusted ({why}); {v.reason}",
        )
    judged = bool(summary.get("judge"))
    checks: dict[str, Any] = {"judged": judged, "trusted": trusted if judged else None}
    checks |= {"trust": why if judged else None, "opt_out": opted, "held_samples": held}
    if corrected and rates is not None:
        v, checks = _rest_on_corrected(v, checks, rates, baseline, treatment, len(overrides))
    return replace(v, judge="direct", judge_checks=checks)


def _human_overrides(rates: dict[str, Any] | None, arms: tuple[str, str]) -> dict[tuple[str, str, int], bool]:
    """(case, arm, index) -> people's pass/fail for the labelled judged samples of `arms`
    (`judged_rates.human_pass` of the grading)."""
    out: dict[tuple[str, str, int], bool] = {}
    for item, ok in ((rates or {}).get("human_pass") or {}).items():
        case, arm, index = str(item).rsplit("/", 2)
        if arm in arms:
            out[(case, arm, int(index))] = bool(ok)
    return out


def _rest_on_corrected(
    v: Verdict, checks: dict[str, Any], rates: dict[str, Any], baseline: str, treatment: str, n_human: int
) -> tuple[Verdict, dict[str, Any]]:
    """`"judged_estimate": "corrected"`: the sign test's votes counted people's verdict
    in place of the judge's on every labelled judged sample (`_human_overrides`); beside
    it, each arm's corrected judged sample pass rate (`grading.judged_rates`, PPI++) and
    their difference (`metrics.corrected_rate_difference`). An arm with judged samples
    but fewer than 2 labels has no corrected rate: the verdict is inconclusive, naming
    it, as the gate reads no rate then.

    References: Dixon & Mood 1946 (sign test); Angelopoulos et al. 2023, Science 382
    (PPI); Angelopoulos, Duchi & Zrnic 2023, arXiv:2311.01453 (PPI++)."""
    from evalkit.numbers.metrics import corrected_rate_difference  # lazy: the metrics import scipy

    per_arm = rates.get("per_arm") or {}
    blocks = {a: (per_arm.get(a) or {}).get("overall") for a in (baseline, treatment)}
    block: dict[str, Any] = {"estimate": "corrected", "human_votes": n_human, "difference": None}
    for a, b in blocks.items():
        if isinstance(b, dict):
            block[a] = {"judge_only": b["judge_only"]["rate"], "corrected": b.get("corrected")}
    missing = [a for a, b in blocks.items() if isinstance(b, dict) and not b.get("corrected")]
    reason = v.reason
    if missing:
        n = {a: ((blocks[a] or {}).get("human") or {}).get("n", 0) for a in missing}
        why = ", ".join(f"arm {a} has {n[a]} fresh human label(s)" for a in missing)
        v = replace(
            v,
            kind="inconclusive",
            reason=f'judged_estimate is "corrected" but {why} on its judged samples (at least 2 needed): label '
            f"some (`evalkit judge sample RUN -n 40`) and grade again (the tally would say: {reason})",
        )
    elif all(isinstance(b, dict) for b in blocks.values()):
        bb, bt = _as_block(blocks[baseline]), _as_block(blocks[treatment])
        d = corrected_rate_difference(bb["corrected"], bt["corrected"])
        block["difference"] = d
        v = replace(
            v,
            reason=f"{reason}; votes count people's labels in place of the judge on {n_human} labelled sample(s); "
            f"corrected judged pass rate {100 * bt['corrected']['rate']:.1f}% vs {100 * bb['corrected']['rate']:.1f}%, "
            f"difference {100 * d['value']:+.1f} points [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}] (PPI++)",
        )
    else:
        v = replace(v, reason=f"{reason}; votes count people's labels in place of the judge on {n_human} sample(s)")
    return v, {**checks, "corrected": block}


def _as_block(b: Any) -> dict[str, Any]:
    """A judged-rate block read from `grades-summary.json` (a JSON object)."""
    return b if isinstance(b, dict) else {}


def compare_arms(
    run: Run | str | Path,
    baseline: str,
    treatment: str,
    *,
    judge: str | None = None,
    alpha: float = 0.05,
    plan: Plan | None = None,
) -> Verdict:
    """The two-arm verdict of a graded run, resting on `judge` (None: the suite's
    `verdict_judge`); see the module docstring."""
    run = as_run(run)
    choice = judge or verdict_judge_of(run)
    if choice not in JUDGES:
        raise InputError(f"judge must be one of {', '.join(JUDGES)}, got {choice!r}", json_path="judge")
    if choice == "pairwise":
        return pairwise_verdict(run, baseline, treatment, alpha=alpha, plan=plan)
    v = direct_verdict(run, baseline, treatment, alpha=alpha, plan=plan)
    if verdict_unit_of(run) == "trial":  # SKRAFT's count decides, the case-level verdict beside it
        trial = V.skraft_trial_verdict(run, baseline, treatment, alpha=alpha)
        return replace(trial, plan_check=v.plan_check, judge_checks=v.judge_checks, beside=v)
    return v


def compare(
    run: Run | str | Path,
    baseline: str,
    treatment: str,
    *,
    plan: str | Path | None = None,
    alpha: float | None = None,
    judge: str | None = None,
) -> Verdict:
    """`evalkit compare`: the two-arm verdict of a graded run (`compare_arms`, resting on
    `judge`) held to its plan (`verdicts.run_plan`; alpha from the plan unless given,
    else 0.05), recorded in the run's `verdicts.json`."""
    loaded = as_run(run)
    p = V.run_plan(loaded, plan)
    a = alpha if alpha is not None else (p.alpha if p else 0.05)
    v = compare_arms(loaded, baseline, treatment, judge=judge, alpha=a, plan=p)
    V.record_verdicts(loaded.path, comparison=v)
    return v


def arm_pairs(arms: list[str], control: str | None = None) -> list[tuple[str, str]]:
    """The (baseline, treatment) pairs a many-arm comparison tests: `control` against
    each other arm, else every pair in the run's arm order (the earlier arm the baseline)."""
    if control is not None:
        if control not in arms:
            raise InputError(f"--control {control!r} is not an arm of the run (it has {', '.join(arms)})")
        return [(control, a) for a in arms if a != control]
    return [(a, b) for i, a in enumerate(arms) for b in arms[i + 1 :]]


def holm_corrected(v: Verdict, p_adjusted: float | None, alpha: float, n_pairs: int) -> Verdict:
    """A pair's verdict after Holm's correction: an inconclusive one stays so; otherwise
    pass or regression when the adjusted p-value is at most alpha, else no-improvement."""
    if v.kind == "inconclusive" or p_adjusted is None:
        return v
    note = f"Holm-adjusted across {n_pairs} pairs: p = {p_adjusted:.4g}"
    if p_adjusted <= alpha:
        side = "treatment" if v.wins > v.losses else "baseline"
        kind: VerdictKind = "pass" if v.wins > v.losses else "regression"
        return replace(v, kind=kind, reason=f"significant advantage for the {side} ({note} <= {alpha:g})")
    return replace(v, kind="no-improvement", reason=f"the margin is indistinguishable from chance ({note} > {alpha:g})")


def compare_many(
    run: Run | str | Path,
    arms: list[str] | None = None,
    *,
    control: str | None = None,
    plan: str | Path | None = None,
    alpha: float | None = None,
    judge: str | None = None,
) -> ArmComparisons:
    """`evalkit compare` on more than two arms: each pair's verdict (`compare_arms`, held
    to the run's plan), the pairs' p-values Holm-adjusted as one family at alpha (the
    plan's unless given, else 0.05), each pair's corrected verdict recorded in the run's
    `verdicts.json`. A pair with no p-value counts in the family at p = 1.

    References: Holm 1979, Scand. J. Statist. 6(2) (statsmodels `multipletests`)."""
    from statsmodels.stats.multitest import multipletests  # lazy: statsmodels takes ~0.5 s to import

    loaded = as_run(run)
    names = list(arms) if arms is not None else loaded.arm_names()
    pairs = arm_pairs(names, control)
    if not pairs:
        raise InputError(f"the run has arm(s) {', '.join(names)}: nothing to compare")
    p = V.run_plan(loaded, plan)
    a = alpha if alpha is not None else (p.alpha if p else 0.05)
    raw = [compare_arms(loaded, b, t, judge=judge, alpha=a, plan=p) for b, t in pairs]
    ps = [1.0 if v.p_value is None or v.p_value != v.p_value else float(v.p_value) for v in raw]
    _, adjusted, _, _ = multipletests(ps, alpha=a, method="holm")
    adj = [float(x) for x in adjusted]
    corrected = tuple(holm_corrected(v, q, a, len(pairs)) for v, q in zip(raw, adj, strict=True))
    matrix = ArmComparisons(arms=tuple(names), control=control, alpha=a, pairs=corrected, p_adjusted=tuple(adj))
    for v in corrected:
        V.record_verdicts(loaded.path, comparison=v)
    V.record_verdicts(loaded.path, arm_comparisons=matrix)
    return matrix
