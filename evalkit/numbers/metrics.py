"""One definition per number: every metric a page, a file or a CLI line shows is computed
here, once, and named for what it is (docs/formats.md, "Metrics").

* **sample pass rate**: samples whose every check (judge included) passed / the samples
  the run was expected to produce. A missing or errored sample is a failure.
* **case score**: a case's pass@k (capability) or pass^k (regression) from its n samples
  with c passes, by the unbiased estimators of `evalkit.numbers.stats`; a case in another set
  is gated on neither (gate `none`).
* **gated case score**: the mean of the case scores over a group's gated cases (what a
  gate and a baseline read; `max_success_drop_points` is a drop of it in points).
* **cost per sample** / **cost per case**: at list price, what the samples would have
  cost without the response cache: generator cost paid + cost the cache avoided + judge
  cost, per sample that ran, and per case (the sum over its samples, averaged over the
  cases; about k times the cost per sample). List price, so a run replayed from the
  cache costs what a live one would and a gate compares like with like.
* **errored** and **missing** (`missing_and_errored`): the two ways an expected sample
  has no verdict, one meaning in `summary.json`, `grade`, the report and the index. An
  *errored* sample ran and gave no usable result: the run recorded an error for it
  (an `errors.jsonl` line, no result), or its grading failed (a judge error). A
  *missing* one has neither a result nor an error: it never ran (the run stopped
  first). Both are failures.
* **judged sample pass rate**: over the judged samples the judge scored, the share that
  pass (checks and judge); given two ways (`judged_rate_block`): the judge's own, and
  corrected by the human labels (PPI++) where people labelled some of them.
* **corrected gated case score** (`corrected_gated_case_score`): the gated case score
  with its judged part (the judged cases' mean case score) corrected by the human
  labels (PPI++ over cases), where people labelled every judged sample of at least
  `PPI_MIN_LABELS` judged cases.
* **paid** and **cache avoided**: what was paid for those samples (generator + judge)
  and what the cache saved, shown beside the costs. (A run's `spend_usd` in
  `summary.json` is the ledger's total, errored calls included.)

References: Chen et al. 2021 (pass@k); Yao et al. 2024, tau-bench (pass^k); Miller 2024,
"Adding Error Bars to Evals", arXiv:2411.00640 (the SE across cases).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from evalkit.foundations.records import NO_GATE, CaseResult, CurvePoint, RunMetrics, SetScore, set_gate
from evalkit.numbers import stats


def missing_and_errored(
    expected: Iterable[tuple[str, str, int]],
    results: Iterable[tuple[str, str, int]],
    run_errors: Iterable[tuple[str, str, int]],
    grading_errors: int = 0,
) -> tuple[int, int]:
    """(missing, errored) among the `expected` sample keys (case, arm, index), given
    those with a result, those the run recorded an error for, and how many results
    could not be graded (see the module docstring). A key with a result and an earlier
    error (it errored, then a resume ran it) is neither."""
    no_result = set(expected) - set(results)
    errored = no_result & set(run_errors)
    return len(no_result) - len(errored), len(errored) + int(grading_errors)


def sample_pass_rate(passed: int, expected: int) -> float | None:
    """Passed / expected samples; None when none was expected."""
    return passed / expected if expected else None


def case_score(case_set: str, n: int, c: int, k: int) -> float:
    """pass^k for a regression case, pass@k for any other (capability, or a set with
    gate `none`, whose score is shown but never gated)."""
    return stats.pass_hat_k(n, c, k) if case_set == "regression" else stats.pass_at_k(n, c, k)


@functools.lru_cache(maxsize=4096)
def score_table(case_set: str, n: int, k: int) -> tuple[float, ...]:
    """A case's score for every pass count c = 0..n (the gate's permutation null indexes it)."""
    return tuple(case_score(case_set, n, c, k) for c in range(n + 1))


def score_of(m: RunMetrics, case: CaseResult) -> float:
    """The case score of one case of `m`, at `m.k`."""
    return score_table(case.set, case.n, m.k)[case.c]


def gated_case_score(m: RunMetrics, ids: Iterable[str] | None = None) -> float:
    """The mean case score over the gated cases among `ids` (all for None); NaN when
    there is none."""
    sel = [c for c in m.select(ids) if c.gated]
    return math.fsum(score_of(m, c) for c in sel) / len(sel) if sel else math.nan


def gated_case_score_estimate(m: RunMetrics, ids: Iterable[str] | None = None) -> stats.Estimate | None:
    """`gated_case_score` with its standard error across cases (None without a gated case)."""
    sel = [c for c in m.select(ids) if c.gated]
    return stats.mean_and_se([score_of(m, c) for c in sel]) if sel else None


def cost_per_case(m: RunMetrics, ids: Iterable[str] | None = None) -> float:
    """The mean over the cases among `ids` of their samples' list-price cost; NaN without
    a case."""
    sel = m.select(ids)
    return math.fsum(math.fsum(c.costs) for c in sel) / len(sel) if sel else math.nan


def list_price(paid_generator: float, avoided: float, judge: float, judge_avoided: float = 0.0) -> float:
    """A sample's cost at list price: what it would have cost without the cache. Paid
    now plus what the caches avoided, for the generator and the judge alike (a cached
    answer's avoided cost is what it cost when first paid), so a first grade, a re-grade
    from the judge cache, a resumed grade and an identical run give one number."""
    return paid_generator + avoided + judge + judge_avoided


@dataclass(frozen=True)
class Costs:
    """The cost figures of a group of samples (see the module notes)."""

    n_samples: int
    n_cases: int
    generator_usd: float  # paid
    judge_usd: float  # paid
    cache_avoided_usd: float  # generator and judge
    cost_per_sample_usd: float | None
    cost_per_case_usd: float | None
    judge_cache_avoided_usd: float = 0.0  # the judge's part of cache_avoided_usd

    @property
    def paid_usd(self) -> float:
        return self.generator_usd + self.judge_usd


def costs(samples: Sequence[tuple[str, float, float, float, float]]) -> Costs:
    """The cost figures of samples given as (case id, generator cost paid, cost the
    response cache avoided, judge cost paid, cost the judge cache avoided)."""
    per_case: dict[str, float] = {}
    for case, gen, avoided, judge, judge_avoided in samples:
        per_case[case] = per_case.get(case, 0.0) + list_price(gen, avoided, judge, judge_avoided)
    total = math.fsum(per_case.values())
    judge_avoided_usd = math.fsum(s[4] for s in samples)
    return Costs(
        n_samples=len(samples),
        n_cases=len(per_case),
        generator_usd=math.fsum(s[1] for s in samples),
        judge_usd=math.fsum(s[3] for s in samples),
        cache_avoided_usd=math.fsum(s[2] for s in samples) + judge_avoided_usd,
        cost_per_sample_usd=total / len(samples) if samples else None,
        cost_per_case_usd=total / len(per_case) if per_case else None,
        judge_cache_avoided_usd=judge_avoided_usd,
    )


def pass_curve(counts: Sequence[tuple[int, int]], k: int) -> tuple[CurvePoint, ...]:
    """pass@j and pass^j with their SE across cases for j = 1..k, from (n, c) per case
    (n >= k): the curve, not only its last point (tau-bench reports pass^1..pass^k).

    References: Chen et al. 2021 (pass@k); Yao et al. 2024, tau-bench (pass^k)."""
    out = []
    for j in range(1, k + 1):
        at, hat = stats.suite_pass_at_k(counts, j), stats.suite_pass_hat_k(counts, j)
        out.append(CurvePoint(j, at.value, at.se, hat.value, hat.se))
    return tuple(out)


def set_score(cases: Sequence[tuple[str, int, int]], k: int) -> SetScore:
    """pass@k, pass^k and the gated case score (means over cases, SE across cases) of
    cases given as (set, n, c) at `k`. A case with fewer than k samples counts its
    missing ones as failures (n is raised to k)."""
    counts = [(max(n, k), c) for _, n, c in cases]
    sets = {s for s, _, _ in cases}
    gate = set_gate(next(iter(sets))) if len(sets) == 1 else "mixed"
    if not counts or k < 1:
        return SetScore(len(cases), k, None, None, None, None, gate)
    at, hat = stats.suite_pass_at_k(counts, k), stats.suite_pass_hat_k(counts, k)
    gated = [case_score(s, max(n, k), c, k) for s, n, c in cases if set_gate(s) != NO_GATE]
    est = stats.mean_and_se(gated) if gated else None
    return SetScore(
        curve=pass_curve(counts, k),
        n_cases=len(cases),
        k=k,
        pass_at_k=at.value,
        pass_at_k_se=at.se,
        pass_hat_k=hat.value,
        pass_hat_k_se=hat.se,
        gate=gate,
        gated_case_score=est.value if est else None,
        gated_case_score_se=est.se if est else None,
        n_gated=len(gated),
    )


PPI_ADJUST = 1.0  # pseudo-observations per (human, judge) cell in the corrected interval (stats.ppi_mean)
PPI_MIN_LABELS = 2  # labelled judged samples a group needs for a corrected rate


@dataclass(frozen=True)
class JudgedRow:
    """One judged sample as the rates see it: its arm, set and tags, whether the judge
    (with the deterministic checks) passed it, and, when a person labelled it, whether
    the person's score (with the same checks) passes it."""

    arm: str
    set: str
    tags: tuple[str, ...]
    judge_pass: bool
    human_pass: bool | None


def judged_rate_block(rows: Sequence[JudgedRow], estimate: str) -> dict[str, Any]:
    """The **judged sample pass rate** of one group of judged samples, two ways: the
    judge's own (`judge_only`: passed for the judge / N, Wilson interval) and, with at
    least `PPI_MIN_LABELS` labelled samples, `corrected` by the human labels (the PPI++
    estimate, `stats.ppi_mean` with `adjust=PPI_ADJUST`), with the labels' own rate
    (`human`) and the judge's bias (judge minus human on the labelled samples). The block
    `grades-summary.json` keeps per group (`grading.judged_rates`).

    References: Angelopoulos et al. 2023, Science 382 (PPI); Angelopoulos, Duchi & Zrnic
    2023, arXiv:2311.01453 (PPI++).
    """
    big_n = len(rows)
    passed = sum(1 for r in rows if r.judge_pass)
    ci = stats.proportion_interval(passed, big_n)
    labelled = [r for r in rows if r.human_pass is not None]
    out: dict[str, Any] = {
        "estimate": estimate,
        "judge_only": {
            "rate": passed / big_n,
            "n": big_n,
            "N": big_n,
            "low": ci.low,
            "high": ci.high,
            "method": ci.method,
        },
        "human": {
            "rate": (sum(1 for r in labelled if r.human_pass) / len(labelled)) if labelled else None,
            "n": len(labelled),
        },
        "corrected": None,
        "bias": None,
    }
    if len(labelled) >= PPI_MIN_LABELS:
        e = stats.ppi_mean(
            [float(bool(r.human_pass)) for r in labelled],
            [float(r.judge_pass) for r in labelled],
            [float(r.judge_pass) for r in rows],
            adjust=PPI_ADJUST,
        )
        out["corrected"] = _ppi_json(e, "rate")
        bias, low, high, note = in_range(e.bias, e.bias_low, e.bias_high, -1.0, 1.0, "judge bias")
        out["bias"] = {"value": bias, "low": low, "high": high, "n": e.n, "clipped": note}
    return out


def in_range(
    value: float, low: float, high: float, lowest: float, highest: float, what: str
) -> tuple[float, float, float, str | None]:
    """An estimate and its normal interval held to the range the quantity can take (a
    rate to [0, 1], a judge's bias or a difference of rates to [-1, 1]): each end
    clipped, with a note saying so (None when nothing was clipped). A PPI++ rate or a
    bias from a few labels can leave its range; the true value cannot, so the part of
    an interval outside it holds no possible value (the SE kept beside it is unclipped)."""
    clipped = tuple(min(max(float(x), lowest), highest) for x in (value, low, high))
    if clipped == (value, low, high):
        return value, low, high, None
    note = (
        f"{what} {100 * value:.1f} [{100 * low:.1f} to {100 * high:.1f}] reaches outside the possible "
        f"{100 * lowest:.0f} to {100 * highest:.0f}: shown clipped to that range"
    )
    return clipped[0], clipped[1], clipped[2], note


# The SD of one case's score is at most 1/2 (a score lies in [0, 1]): the SE a stratum
# of one deterministic case is given in the corrected gated case score, where its own
# spread cannot be estimated.
MAX_CASE_SCORE_SD = 0.5


def _ppi_json(e: stats.PPIEstimate, value_key: str) -> dict[str, Any]:
    """A PPI++ estimate as `grades-summary.json` holds it (the value under `value_key`:
    `rate` for a judged sample pass rate, `score` for the judged part of a case score).
    The value and interval shown are held to [0, 1]; `raw` keeps the estimator's own value
    (unbiased, so it can fall outside), which every computation on it reads (`raw_value`)."""
    value, low, high, note = in_range(e.value, e.low, e.high, 0.0, 1.0, f"the corrected {value_key} (PPI++)")
    return {
        value_key: value,
        "raw": e.value,
        "n": e.n,
        "N": e.N,
        "low": low,
        "high": high,
        "clipped": note,
        "se": e.se,
        "lam": e.lam,
        "adjust": e.adjust,
        "clt_low": e.clt_low,
        "clt_high": e.clt_high,
        "method": "ppi++",
    }


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


@dataclass(frozen=True)
class JudgedCase:
    """One case of an arm as the corrected gated case score sees it: its set, the
    samples the run planned for it (`n`), the passes the judge's verdicts give it
    (`c_judge`, with the deterministic checks) and, when people labelled every one of
    its judge-scored samples, the passes their scores give it (`c_human`, None: not
    labelled); `judged`: a judged case (else its score holds no judge and is exact);
    `scored`: how many of its samples the judge scored. A judged case with none (every
    sample missing, errored or unscored by the judge: each fails, for the judge and for
    people alike) holds no judge either: its score is exact, and it can never be
    labelled."""

    set: str
    n: int
    c_judge: int
    c_human: int | None
    judged: bool
    scored: int


def corrected_gated_case_score(cases: Sequence[JudgedCase], k: int) -> dict[str, Any] | None:
    """The gated case score of one arm with its **judged part corrected** by the human
    labels. The gated cases fall in two strata fixed by the suite: deterministic cases,
    whose case scores hold no judge, and judged cases, whose case scores come from the
    judge's verdicts. The judged stratum's mean is estimated by PPI++ over cases
    (`stats.ppi_mean`): the judge's case score on all N judged cases, corrected by the
    judge-minus-human case score on the n *labelled* cases (a case is labelled when
    people scored every one of its judge-scored samples; its human case score counts the
    samples whose checks and human score pass). With `adjust=PPI_ADJUST` when every case
    score is 0 or 1 (n = k: pass@k and pass^k are then 0/1), else 0 (plain PPI++).
    A judged case the judge scored no sample of (`scored` 0: its samples all fail, as the
    plain gated case score counts them) is exact too, and can never be labelled: it
    joins the exact stratum, so the correction measured on judge-scored cases is applied
    to judge-scored cases only (leaving it among them biased the estimate towards the
    judge's error on cases people never see).
    The whole score is the stratified mean (N_e exact: deterministic and unscored
    judged cases, N_j judge-scored judged cases, N_g gated):
    (sum of the exact scores + N_j * theta) / N_g, with SE
    sqrt((N_e/N_g)^2 se_e^2 + (N_j/N_g)^2 se_ppi^2), se_e the exact stratum's SE
    across its cases (`MAX_CASE_SCORE_SD` for a stratum of one), and a 95% normal
    interval (post-stratified: the strata sizes are taken as given). `judge_only` is the
    plain gated case score (`gated_case_score`, SE across cases). None when the arm has
    no gated judged case; `corrected` None with fewer than `PPI_MIN_LABELS` labelled
    judged cases. The labelled cases must be a uniform random subset of the
    judge-scored judged cases (a by-case draw, `judge sample --by-case`) for the
    estimate to be unbiased.

    References: Angelopoulos et al. 2023, Science 382 (PPI); Angelopoulos, Duchi & Zrnic
    2023, arXiv:2311.01453 (PPI++); Cochran 1977, Sampling Techniques, ch. 5 (the
    stratified mean and its variance).
    """
    gated = [c for c in cases if set_gate(c.set) != NO_GATE]
    if not any(c.judged for c in gated):
        return None
    judged = [c for c in gated if c.judged and c.scored > 0]
    unscored = [c for c in gated if c.judged and c.scored <= 0]

    def score(c: JudgedCase, passes: int) -> float:
        return case_score(c.set, max(c.n, k), passes, k)

    z = stats.normal_quantile(0.975)  # the 97.5% normal quantile, as every interval of evalkit has it
    every = stats.mean_and_se([score(c, c.c_judge) for c in gated])
    yhat_all = [score(c, c.c_judge) for c in judged]
    part = stats.mean_and_se(yhat_all or [0.0])
    labelled = [c for c in judged if c.c_human is not None]
    y = [score(c, int(c.c_human)) for c in labelled if c.c_human is not None]
    out: dict[str, Any] = {
        "n_cases": len(gated),
        "n_judged_cases": len(judged) + len(unscored),
        "n_unscored_cases": len(unscored),
        "n_labelled_cases": len(labelled),
        "judge_only": {"score": every.value, "se": _finite(every.se), "N": len(gated)},
        "judged_part": {
            "judge_only": {"score": part.value, "se": _finite(part.se), "N": len(judged)} if judged else None,
            "human": {"score": math.fsum(y) / len(y) if y else None, "n": len(y)},
            "corrected": None,
        },
        "corrected": None,
    }
    if len(labelled) < PPI_MIN_LABELS:
        return out
    yhat = [score(c, c.c_judge) for c in labelled]
    binary = all(v in (0.0, 1.0) for v in (*y, *yhat_all))
    adjust = PPI_ADJUST if binary else 0.0
    e = stats.ppi_mean(y, yhat, yhat_all, adjust=adjust)
    out["judged_part"]["corrected"] = _ppi_json(e, "score")
    det = [score(c, c.c_judge) for c in gated if not c.judged]
    exact = det + [score(c, c.c_judge) for c in unscored]
    n_g, n_e, n_j = len(gated), len(exact), len(judged)
    se_e = (stats.mean_and_se(exact).se if n_e > 1 else MAX_CASE_SCORE_SD) if exact else 0.0
    value = (math.fsum(exact) + n_j * e.value) / n_g
    se = math.hypot(n_e / n_g * se_e, n_j / n_g * e.se)
    out["corrected"] = {
        "score": value,
        "se": se,
        "low": value - z * se,
        "high": value + z * se,
        "n": e.n,
        "N": e.N,
        "n_deterministic": len(det),
        "n_unscored": len(unscored),
        "method": "ppi++ on the judged cases, stratified",
    }
    return out


def raw_value(block: dict[str, Any], value_key: str = "rate") -> float:
    """The estimator's own value of a corrected (PPI++) block, before the clip to [0, 1]
    that only the display gets; a file written before `raw` was kept gives its shown value."""
    raw = block.get("raw")
    return float(raw if raw is not None else block[value_key])


def corrected_rate_difference(baseline: dict[str, Any], treatment: dict[str, Any]) -> dict[str, Any]:
    """Treatment minus baseline of two arms' corrected judged sample pass rates (the
    `corrected` parts of `judged_rate_block`), with a 95% normal interval of SE
    sqrt(se_b^2 + se_t^2): each arm's PPI++ estimate is computed on its own samples and
    labels, and the covariance the two arms' shared cases give them is left out; it is
    positive when a case that is hard for one arm is hard for the other, so the interval
    is conservative then. `clt_low`..`clt_high` is the same from the arms' plain CLT
    intervals (ppi-python's `ppi_mean_ci` on each arm), `low`..`high` from the intervals
    evalkit reports. The value is the difference of the arms' raw (unclipped) estimates.

    References: Angelopoulos et al. 2023, Science 382 (PPI); Angelopoulos, Duchi & Zrnic
    2023, arXiv:2311.01453 (PPI++).
    """
    z = stats.normal_quantile(0.975)  # the 97.5% normal quantile (as the blocks' 95% intervals have it)
    value = raw_value(treatment) - raw_value(baseline)
    se = math.hypot(float(treatment["se"]), float(baseline["se"]))
    clt = math.hypot(*((float(b["clt_high"]) - float(b["clt_low"])) / (2 * z) for b in (treatment, baseline)))
    _, low, high, note = in_range(value, value - z * se, value + z * se, -1.0, 1.0, "the corrected difference")
    return {
        "value": value,
        "se": se,
        "low": low,
        "high": high,
        "clipped": note,
        "clt_low": value - z * clt,
        "clt_high": value + z * clt,
        "method": "ppi++ per arm, independent arms (conservative under positive case correlation)",
    }
