"""Exact statistics for evals: pass@k / pass^k, intervals, error bars, paired tests,
power and sample size, judge agreement, and a sequential sign test.

Every function here is pure (no I/O, no global state) and names the definition it
implements in a ``References:`` line. scipy and statsmodels do the work wherever they
have the method; the rest is written here, with a comment saying why.

Three meanings of "pass@k" and "pass^k" users meet
--------------------------------------------------
1. **Unbiased estimators from n >= k samples per case** (this module's `pass_at_k` and
   `pass_hat_k`). Draw n samples, count c correct, and estimate the probability that k
   fresh samples contain at least one correct answer (pass@k, Chen et al. 2021) or are
   all correct (pass^k, Yao et al. 2024). Both average over every k-subset of the n
   samples, so they are unbiased for the case's true value and use all n samples.
2. **The agent-evals harness's per-case booleans** (e.g. a `run-evals` script that
   runs exactly k samples and marks a case "pass@k" when any of them passed and "pass^k"
   when all of them passed). With n == k these booleans *are* the estimators above
   (``pass_at_k(k, c, k) == (c > 0)``, ``pass_hat_k(k, c, k) == (c == k)``); with n > k
   they are the estimators evaluated on one arbitrary k-subset, so they are unbiased but
   noisier, and two runs of the same model disagree more often.
3. **The plug-in p^k** (`plugin_pass_hat_k`): estimate p = c/n and raise it to the k-th
   power. It is *biased upward* for pass^k on a single case (E[(c/n)^k] >= p^k by
   Jensen), e.g. n=4, c=2, k=2 gives 0.25 where the unbiased value is 1/6. It is offered
   only under its own name, for comparison with reports that use it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from statistics import NormalDist
from typing import Any, Literal

import numpy as np

from evalkit.foundations.errors import InputError
from evalkit.foundations.records import PairedDifference
from evalkit.numbers.detectable import cases_for_drop, detectable_drop, planning_rate


class _ScipyStats:
    """`scipy.stats`, imported on first use: it costs most of a second to import, and
    `evalkit verdict` (the sign test, exact integer arithmetic here) needs none of it."""

    def __getattr__(self, name: str) -> Any:
        from scipy import stats  # lazy: see the class docstring

        return getattr(stats, name)


_st = _ScipyStats()


def normal_quantile(p: float) -> float:
    """The standard normal's quantile at `p`, from the standard library (Wichura's AS241,
    `statistics.NormalDist.inv_cdf`): it agrees with `scipy.stats.norm.ppf` to within
    1e-15 of the value (at most 6 units in the last place over 200,000 points of (0, 1);
    tests/test_stats.py holds it to both and to published values), and an interval then
    needs no scipy import, most of a second of `evalkit compare`.

    References: Wichura, M. J. (1988). Algorithm AS 241: The percentage points of the
    normal distribution. Applied Statistics 37(3), 477-484."""
    return NormalDist().inv_cdf(p)


__all__ = [
    "StatsInputError",
    "Estimate",
    "Interval",
    "PairedDifference",
    "SignTest",
    "McNemar",
    "SampleSize",
    "Agreement",
    "SequentialDesign",
    "SequentialState",
    "OperatingCharacteristics",
    "SequentialSignTest",
    "pass_at_k",
    "pass_hat_k",
    "detectable_drop",
    "cases_for_drop",
    "planning_rate",
    "plugin_pass_hat_k",
    "suite_pass_at_k",
    "suite_pass_hat_k",
    "proportion_interval",
    "mean_and_se",
    "paired_difference",
    "sign_test",
    "sign_test_critical_value",
    "mcnemar",
    "sign_test_power",
    "sign_test_power_approx",
    "sign_test_sample_size",
    "paired_proportion_power",
    "paired_proportion_sample_size",
    "agreement",
    "krippendorff_alpha",
    "PPIEstimate",
    "ppi_mean",
]


class StatsInputError(InputError, ValueError):
    """An argument outside a statistic's domain (k > n, a rate outside (0, 1), ...).

    It is a `ValueError` for library callers and an `InputError` (exit 2) for the CLI.
    """


def _fail(message: str) -> None:
    raise StatsInputError(message)


def _check_counts(n: int, c: int, k: int) -> None:
    for name, v in (("n", n), ("c", c), ("k", k)):
        if int(v) != v:
            _fail(f"{name} must be an integer, got {v!r}")
    if n < 1:
        _fail(f"n must be at least 1 sample, got n={n}")
    if not 0 <= c <= n:
        _fail(f"c must be between 0 and n={n}, got c={c}")
    if k < 1:
        _fail(f"k must be at least 1, got k={k}")
    if k > n:
        _fail(f"k={k} is larger than the n={n} samples drawn: pass@k and pass^k need k <= n")


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its standard error. `n` is the number of values (cases for
    suite-level estimates); `n_clusters` is set when the SE is clustered."""

    value: float
    se: float
    n: int
    n_clusters: int | None = None

    def interval(self, alpha: float = 0.05) -> tuple[float, float]:
        """Normal (CLT) interval value +- z * se, as Miller 2024 recommends for evals."""
        z = normal_quantile(1 - alpha / 2)
        return (self.value - z * self.se, self.value + z * self.se)


@dataclass(frozen=True)
class Interval:
    """A confidence interval for a proportion, and the method that made it."""

    low: float
    high: float
    method: str
    estimate: float = math.nan
    successes: int = 0
    n: int = 0
    alpha: float = 0.05


@dataclass(frozen=True)
class SignTest:
    """Exact sign test on a win/loss tally, ties dropped.

    `p_value` is two-sided; `p_one_sided` is for "wins more likely than losses"
    (treatment better); `p_one_sided_losses` for the opposite direction.
    """

    wins: int
    losses: int
    ties: int
    n: int
    p_value: float
    p_one_sided: float
    p_one_sided_losses: float = 1.0


@dataclass(frozen=True)
class McNemar:
    """McNemar's test on the discordant cells of a paired pass/fail table.

    `b`: pairs that passed only in the first arm, `c`: only in the second. `exact` says
    whether the exact binomial version was used (else chi-square with continuity
    correction)."""

    b: int
    c: int
    statistic: float
    p_value: float
    exact: bool


@dataclass(frozen=True)
class SampleSize:
    """Sample size for the exact two-sided sign test (ties dropped) at `alpha`/`power`.

    Exact power is a sawtooth in n, so two answers are given: `*_first` is the first n
    whose exact power reaches `power`; `*_stable` is the n from which power never falls
    below it again. `discordant_*` count non-tied pairs (the test's n), `trials_*` count
    all paired trials given `tie_rate`. `*_approx` are the normal approximations."""

    win_rate: float
    tie_rate: float
    alpha: float
    power: float
    discordant_first: int
    discordant_stable: int
    trials_first: int
    trials_stable: int
    discordant_approx: int
    trials_approx: int
    power_at_first: float
    power_at_stable: float


@dataclass(frozen=True)
class Agreement:
    """Agreement between two raters over the same items.

    `exact`: share of items with the same label; `within_one`: share whose labels are at
    most one category apart in `labels` order; `kappa*`: Cohen's kappa unweighted, with
    linear and quadratic weights (on category positions); `kappa_se`, `kappa_low`,
    `kappa_high`: asymptotic SE and 95% interval of unweighted kappa (statsmodels);
    `confusion[i][j]`: items rater a labelled labels[i] and rater b labelled labels[j]."""

    n: int
    labels: tuple[Hashable, ...]
    exact: float
    within_one: float
    kappa: float
    kappa_linear: float
    kappa_quadratic: float
    kappa_se: float
    kappa_low: float
    kappa_high: float
    confusion: tuple[tuple[int, ...], ...]


# --------------------------------------------------------------------------- pass@k


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k).

    Computed in the numerically stable product form 1 - prod_{i=n-c+1}^{n} (1 - k/i),
    which never forms the binomial coefficients. Refuses k > n.

    References: Chen et al. 2021, "Evaluating Large Language Models Trained on Code"
    (HumanEval), section 2.1 and its numpy estimator.
    """
    return _cached(_pass_at_k, n, c, k)


def _cached(fn: Any, n: int, c: int, k: int) -> float:
    """`fn(n, c, k)` from its cache, or computed as it is when a count cannot be a cache
    key (a 0-d numpy array): the cache must not narrow what the function takes."""
    try:
        hash((n, c, k))
    except TypeError:
        return float(fn.__wrapped__(n, c, k))
    return float(fn(n, c, k))


# pass@k and pass^k of a case depend on (n, c, k) alone, and a suite's cases share a few
# of those (k samples each, c from 0 to k): a 100,000-sample report asks for 200,000
# values, 121 of them different. Cached by value (10 and 10.0 are one key, and give one
# value); a call that is refused raises every time.
@lru_cache(maxsize=4096)
def _pass_at_k(n: int, c: int, k: int) -> float:
    _check_counts(n, c, k)
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k: the probability that k samples drawn without replacement from the
    n are all correct, C(c, k) / C(n, k).

    Stable form prod_{i=0}^{k-1} (c - i) / (n - i), with no large binomials. Refuses k > n.

    References: Yao et al. 2024, "tau-bench: A Benchmark for Tool-Agent-User Interaction
    in Real-World Domains", section 3 (pass^k).
    """
    return _cached(_pass_hat_k, n, c, k)


@lru_cache(maxsize=4096)
def _pass_hat_k(n: int, c: int, k: int) -> float:
    _check_counts(n, c, k)
    if c < k:
        return 0.0
    i = np.arange(k)
    return float(np.prod((c - i) / (n - i)))


def plugin_pass_hat_k(n: int, c: int, k: int) -> float:
    """Plug-in pass^k, (c/n)^k: biased upward for a single case; see the module
    docstring. Offered for comparison with reports that use it. Refuses k > n so that it
    is never quoted for a k the data cannot support.

    References: Yao et al. 2024 (tau-bench) define pass^k; the plug-in is the naive
    estimator they improve on with C(c, k)/C(n, k).
    """
    _check_counts(n, c, k)
    return (c / n) ** k


def _suite(counts: Iterable[tuple[int, int]], k: int, per_case: Callable[[int, int, int], float]) -> Estimate:
    pairs = [(int(n), int(c)) for n, c in counts]
    if not pairs:
        _fail("no cases: a suite-level estimate needs at least one (n, c) pair")
    # each distinct (n, c) once: a suite's cases share a few (5,000 cases at k = 10: 11)
    value = {pair: per_case(pair[0], pair[1], k) for pair in dict.fromkeys(pairs)}
    return mean_and_se([value[pair] for pair in pairs])  # the CLT SE across cases


def suite_pass_at_k(counts: Iterable[tuple[int, int]], k: int) -> Estimate:
    """Suite pass@k: the mean over cases of `pass_at_k`, with the standard error across
    cases (sample SD / sqrt(cases); nan for one case). `counts` holds (n, c) per case.

    References: Chen et al. 2021 (mean of per-problem estimates); Miller 2024, "Adding
    Error Bars to Evals", arXiv:2411.00640, eq. 1-2 (SE over questions).
    """
    return _suite(counts, k, pass_at_k)


def suite_pass_hat_k(counts: Iterable[tuple[int, int]], k: int) -> Estimate:
    """Suite pass^k: the mean over cases of `pass_hat_k`, with the standard error across
    cases. `counts` holds (n, c) per case.

    References: Yao et al. 2024 (tau-bench, pass^k averaged over tasks); Miller 2024,
    arXiv:2411.00640 (SE over questions).
    """
    return _suite(counts, k, pass_hat_k)


# --------------------------------------------------------------------------- intervals

_INTERVAL_METHODS = {
    "wilson": "wilson",
    "clopper-pearson": "beta",
    "beta": "beta",
    "exact": "beta",
    "jeffreys": "jeffreys",
}


def proportion_interval(successes: int, n: int, method: str = "wilson", alpha: float = 0.05) -> Interval:
    """Confidence interval for a binomial proportion: Wilson score ("wilson"),
    Clopper-Pearson ("clopper-pearson", alias "beta"/"exact") or Jeffreys ("jeffreys"),
    computed by statsmodels `proportion_confint`.

    For 95% intervals on eval pass rates, Jeffreys and Wilson keep coverage near the
    nominal level; Clopper-Pearson is conservative (covers more than 95%). Jeffreys is
    the equal-tailed Beta(x + 1/2, n - x + 1/2) interval with Brown, Cai & DasGupta's
    end points: lower 0 when x = 0 and upper 1 when x = n (their section 4.1.2; without
    it the coverage tends to zero as p goes to 0 or 1).

    References: Brown, Cai & DasGupta 2001, "Interval Estimation for a Binomial
    Proportion", Statistical Science 16(2); statsmodels.stats.proportion.proportion_confint.
    """
    from statsmodels.stats.proportion import proportion_confint  # lazy: statsmodels takes ~0.5 s to import

    key = method.lower()
    if key not in _INTERVAL_METHODS:
        _fail(f"unknown interval method {method!r}; use one of wilson, clopper-pearson, jeffreys")
    if int(n) != n or n < 1:
        _fail(f"n must be a positive integer, got {n!r}")
    if int(successes) != successes or not 0 <= successes <= n:
        _fail(f"successes must be an integer between 0 and n={n}, got {successes!r}")
    if not 0 < alpha < 1:
        _fail(f"alpha must be in (0, 1), got {alpha!r}")
    low, high = proportion_confint(int(successes), int(n), alpha=alpha, method=_INTERVAL_METHODS[key])
    if key == "jeffreys":
        # statsmodels returns the plain Beta quantiles (e.g. a lower end of 4.8e-05 for
        # 0 of 10); Brown, Cai & DasGupta 2001, section 4.1.2, set the ends at 0 and 1.
        low = 0.0 if successes == 0 else low
        high = 1.0 if successes == n else high
    name = "clopper-pearson" if _INTERVAL_METHODS[key] == "beta" else key
    return Interval(float(max(0.0, low)), float(min(1.0, high)), name, successes / n, int(successes), int(n), alpha)


# --------------------------------------------------------------------------- error bars


def _as_clusters(clusters: Sequence[Hashable] | None, n: int) -> np.ndarray | None:
    if clusters is None:
        return None
    labels = list(clusters)
    if len(labels) != n:
        _fail(f"clusters has {len(labels)} labels for {n} values; give one label per value")
    # each label's rank among the distinct labels in sorted order (what np.unique's inverse
    # gives), from a dict: np.unique sorts all 100,000 labels of a 200,000-sample run's
    # trials (0.07 s a call), where only the 10,000 distinct ones need sorting
    names = [str(x) for x in labels]
    rank = {u: i for i, u in enumerate(sorted(dict.fromkeys(names)))}
    return np.fromiter(map(rank.__getitem__, names), dtype=np.intp, count=len(names))


def _clustered_se(resid: np.ndarray, codes: np.ndarray) -> float:
    # Cluster-robust (sandwich) SE of a mean: sqrt(sum_c (sum_{i in c} e_i)^2) / n.
    # Miller 2024 eq. 4 (SE_CLT^2 plus within-cluster cross terms, SE_CLT with the 1/n
    # variance). Written here because statsmodels offers it only through a regression fit.
    sums = np.bincount(codes, weights=resid)
    return float(math.sqrt(float(np.sum(sums**2))) / resid.size)


def mean_and_se(values: Iterable[float], clusters: Sequence[Hashable] | None = None) -> Estimate:
    """Mean of per-item scores with its standard error.

    Without `clusters`: the CLT SE, sample SD (ddof=1) / sqrt(n). With `clusters` (one
    label per value, e.g. the case id when k samples share a case): the clustered SE,
    which counts the sampled unit (the case) rather than the sample, so repeats of one
    case do not shrink the error bar as if they were independent questions.

    References: Miller 2024, "Adding Error Bars to Evals", arXiv:2411.00640, eq. 2 (CLT)
    and eq. 4 (clustered standard errors).
    """
    arr = np.asarray(list(values), dtype=float)
    return _mean_and_se(arr, _as_clusters(clusters, arr.size))


def _mean_and_se(arr: np.ndarray, codes: np.ndarray | None) -> Estimate:
    """`mean_and_se` of `arr`, its clusters as codes (`_as_clusters`)."""
    if arr.size == 0:
        _fail("no values: a mean needs at least one")
    if not np.all(np.isfinite(arr)):
        _fail("values contain NaN or infinity; drop or score them first")
    mean = float(arr.mean())
    if codes is None:
        se = float(arr.std(ddof=1) / math.sqrt(arr.size)) if arr.size > 1 else math.nan
        return Estimate(mean, se, int(arr.size))
    return Estimate(mean, _clustered_se(arr - mean, codes), int(arr.size), int(codes.max() + 1))


def paired_difference(
    a: Sequence[float],
    b: Sequence[float],
    clusters: Sequence[Hashable] | None = None,
    alpha: float = 0.05,
) -> PairedDifference:
    """Paired difference a - b over the same items (e.g. treatment and baseline scores
    on the same cases): mean, SE of the per-item differences (clustered when `clusters`
    is given), the correlation of a and b, a normal (1 - alpha) interval, and the
    unpaired SE for comparison. Pairing removes the between-item variance both arms
    share, so positive correlation shrinks the SE.

    References: Miller 2024, "Adding Error Bars to Evals", arXiv:2411.00640, section 4.2
    (paired differences, eq. 8: Var(a-b) = Var(a) + Var(b) - 2 Cov(a, b)).
    """
    xa = np.asarray(list(a), dtype=float)
    xb = np.asarray(list(b), dtype=float)
    if xa.size != xb.size:
        _fail(f"paired_difference needs equal lengths, got {xa.size} and {xb.size}")
    if xa.size < 2:
        _fail("paired_difference needs at least two pairs")
    codes = _as_clusters(clusters, xa.size)  # read once for the three estimates
    diff = _mean_and_se(xa - xb, codes)
    ea, eb = _mean_and_se(xa, codes), _mean_and_se(xb, codes)
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = float(np.corrcoef(xa, xb)[0, 1]) if xa.std() > 0 and xb.std() > 0 else math.nan
    low, high = diff.interval(alpha)
    return PairedDifference(
        mean=diff.value,
        se=diff.se,
        correlation=corr,
        low=low,
        high=high,
        n=diff.n,
        se_unpaired=float(math.sqrt(ea.se**2 + eb.se**2)),
        n_clusters=diff.n_clusters,
        alpha=alpha,
    )


# --------------------------------------------------------------------------- paired tests


def _check_tally(**counts: int) -> None:
    for name, v in counts.items():
        if int(v) != v or v < 0:
            _fail(f"{name} must be a non-negative integer, got {v!r}")


# integer tails up to here (the time grows with n squared: 30 ms at 10,000 pairs, 0.11 s at
# 20,000, 0.66 s at 50,000), scipy's binomtest beyond: the import of scipy.stats costs 0.7 to
# 1.2 s, which a 200,000-sample report paid on its critical path at 5,000 (issue 44)
EXACT_SIGN_MAX_N = 20_000


def sign_test(wins: int, losses: int, ties: int = 0) -> SignTest:
    """Exact sign test of wins against losses with ties dropped: a binomial test of
    `wins` out of `wins + losses` at p = 1/2 (exact, as scipy `binomtest`), two-sided and both
    one-sided p-values. With no discordant pair every p-value is 1.

    References: Dixon & Mood 1946, "The Statistical Sign Test", JASA 41(236) (ties
    dropped); scipy.stats.binomtest.
    """
    _check_tally(wins=wins, losses=losses, ties=ties)
    wins, losses, ties = int(wins), int(losses), int(ties)
    n = wins + losses
    if n == 0:
        return SignTest(wins, losses, ties, 0, 1.0, 1.0, 1.0)
    # At p = 1/2 every binomial tail is a sum of binomial coefficients over 2^n: summed
    # exactly in integers rather than through scipy.stats.binomtest, whose
    # import costs `evalkit verdict` most of a second; the two-sided p-value is twice
    # the smaller tail (the distribution is symmetric), capped at 1, as binomtest's.
    # Held to binomtest and to R's binom.test in tests/test_stats.py. Past EXACT_SIGN_MAX_N
    # pairs the big integers cost more than the import: scipy's binomtest does it then.
    if n > EXACT_SIGN_MAX_N:
        p2 = _st.binomtest(wins, n, 0.5, alternative="two-sided").pvalue
        pg = _st.binomtest(wins, n, 0.5, alternative="greater").pvalue
        pl = _st.binomtest(wins, n, 0.5, alternative="less").pvalue
        return SignTest(wins, losses, ties, n, float(p2), float(pg), float(pl))
    whole = 2**n

    def count_at_most(k: int) -> int:  # sum of C(n, i) for i <= k, the coefficients built up in turn
        c = total = 1
        for i in range(k):
            c = c * (n - i) // (i + 1)
            total += c
        return total

    def at_most(k: int) -> float:  # P(W <= k), correctly rounded; the shorter tail summed
        if k >= n:
            return 1.0
        return float((count_at_most(k) if 2 * k < n else whole - count_at_most(n - k - 1)) / whole)

    p2 = min(1.0, 2 * at_most(min(wins, losses)))
    pg = at_most(losses)  # P(W >= wins) = P(L <= losses)
    pl = at_most(wins)
    return SignTest(wins, losses, ties, n, float(p2), float(pg), float(pl))


def mcnemar(b: int, c: int, exact: bool | None = None) -> McNemar:
    """McNemar's test for paired pass/fail on the discordant counts b (pass only in the
    first arm) and c (pass only in the second), via statsmodels. `exact=None` uses the
    exact binomial test when b + c < 25 and the continuity-corrected chi-square above:
    (|b - c| - 1)^2 / (b + c), uncorrected when b == c (statistic 0, p = 1), as R's
    `mcnemar.test` does; the correction moves the statistic toward 0, never past it.

    References: McNemar 1947, Psychometrika 12(2); Edwards 1948 (continuity correction);
    statsmodels.stats.contingency_tables.mcnemar.
    """
    from statsmodels.stats.contingency_tables import mcnemar as _sm_mcnemar  # lazy: statsmodels is slow to import

    _check_tally(b=b, c=c)
    if exact is None:
        exact = (b + c) < 25
    if b + c == 0:
        return McNemar(int(b), int(c), 0.0, 1.0, bool(exact))
    # statsmodels corrects b == c too, giving 1 / (b + c) and p < 1 for a perfect tie.
    res = _sm_mcnemar([[0, int(b)], [int(c), 0]], exact=bool(exact), correction=b != c)
    return McNemar(int(b), int(c), float(res.statistic), float(min(1.0, res.pvalue)), bool(exact))


# --------------------------------------------------------------------------- power


def _check_rates(win_rate: float, tie_rate: float, alpha: float) -> None:
    if not 0 < win_rate < 1:
        _fail(f"win rate must be in (0, 1) (share of non-tied trials the treatment wins), got {win_rate!r}")
    if not 0 <= tie_rate < 1:
        _fail(f"tie rate must be in [0, 1), got {tie_rate!r}")
    if not 0 < alpha < 1:
        _fail(f"alpha must be in (0, 1), got {alpha!r}")


def _critical_values(d_max: int, alpha: float) -> np.ndarray:
    """c_d for d = 0..d_max: the largest c with 2 * P(Bin(d, 1/2) <= c) <= alpha (the
    exact two-sided sign test rejects when min(wins, losses) <= c_d); -1 when none.

    Exact, in integers: 2 * sum_{k <= c} C(d, k) * den <= num * 2^d with alpha = num/den,
    walked up d with c_{d+1} in {c_d, c_d + 1}, so each step is a few big-integer
    operations. Written here rather than through scipy's binomial quantile so that
    `evalkit power` loads no scipy (its import costs several times the command)."""
    num, den = Fraction(alpha).as_integer_ratio()
    out = np.empty(d_max + 1, dtype=int)
    c, s, t, nxt = -1, 0, 0, 1  # c_d; S = sum_{k<=c} C(d, k); T = C(d, c); N = C(d, c + 1)
    for d in range(d_max + 1):
        if d:
            # S(c, d) = 2 S(c, d-1) - C(d-1, c); C(d, c) = C(d-1, c) d / (d - c); C(d, c+1) = C(d-1, c+1) + C(d-1, c)
            s, t, nxt = 2 * s - t, (t * d // (d - c) if c >= 0 else 0), nxt + t
        while c + 1 <= d and 2 * (s + nxt) * den <= num << d:
            c += 1
            s, t = s + nxt, nxt
            nxt = nxt * (d - c) // (c + 1)
        out[d] = c
    return out


def _binomial_pmfs(n_max: int, p: float) -> Iterator[np.ndarray]:
    """The pmf of Bin(n, p) over 0..n for n = 0..n_max (one buffer, advanced a trial at a
    time: pmf_{n+1}(k) = (1-p) pmf_n(k) + p pmf_n(k-1)). Written here instead of scipy's
    binomial for the start-up of `evalkit power` (see `_critical_values`); the
    recursion adds positive terms only, so its relative error stays within n ulps.
    Only the window holding mass above 1e-300 is advanced (the rest is set to 0): the
    far tails would otherwise decay into subnormal numbers, whose arithmetic is slow,
    and all of them together weigh less than n_max * 1e-300."""
    pd = np.zeros(n_max + 1)
    pd[0] = 1.0
    q = 1.0 - p
    lo = hi = 0  # pd is 0 outside lo..hi
    for n in range(n_max + 1):
        yield pd[: n + 1]
        if n < n_max:
            pd[lo + 1 : hi + 2] = pd[lo + 1 : hi + 2] * q + pd[lo : hi + 1] * p
            pd[lo] *= q
            hi += 1
            while lo < hi and pd[lo] < _NEGLIGIBLE:
                pd[lo] = 0.0
                lo += 1
            while hi > lo and pd[hi] < _NEGLIGIBLE:
                pd[hi] = 0.0
                hi -= 1


_NEGLIGIBLE = 1e-300


def sign_test_critical_value(discordant: int, alpha: float = 0.05) -> int:
    """The largest c such that the exact two-sided sign test on `discordant` non-tied
    pairs rejects at `alpha` when min(wins, losses) <= c; -1 when no tally can reject
    (fewer than 6 discordant pairs at alpha = 0.05).

    References: Dixon & Mood 1946; exact binomial tail at p = 1/2.
    """
    _check_tally(discordant=discordant)
    return int(_critical_values(int(discordant), alpha)[-1])


# Past this many pairs the binomial probabilities come from scipy.stats (one vectorised
# call for every d) instead of the recursion (`_binomial_pmfs`), whose O(n^2) flops cost 0.6 s
# at 10,000 pairs (the power at the observed effect of a 10,000-case run, on the report's
# critical path: issue 44), more than the import of scipy.stats (0.7 s, once; the report's
# kernels have it already). Below it `evalkit power` loads no scipy.
RECURSION_MAX_N = 5000


def _reject_prob(d_max: int, win_rate: float, alpha: float) -> np.ndarray:
    """P(the exact two-sided sign test rejects | d discordant pairs), d = 0..d_max."""
    c = _critical_values(d_max, alpha)
    if d_max > RECURSION_MAX_N:  # P(W >= d - c) + P(W <= c), W ~ Bin(d, win_rate), from scipy
        ds = np.arange(d_max + 1)
        tails = _st.binom.sf(ds - c - 1, ds, win_rate) + _st.binom.cdf(c, ds, win_rate)
        return np.where(c >= 0, np.minimum(tails, 1.0), 0.0)  # two tails summed may round past 1
    out = np.zeros(d_max + 1)
    for d, pmf in enumerate(_binomial_pmfs(d_max, win_rate)):
        cd = int(c[d])
        if cd >= 0:  # P(W >= d - c) + P(W <= c)
            out[d] = float(pmf[d - cd :].sum()) + float(pmf[: cd + 1].sum())
    return np.minimum(out, 1.0)  # a sum of rounded terms may pass 1 by an ulp


def sign_test_power(n_trials: int, win_rate: float, tie_rate: float = 0.0, alpha: float = 0.05) -> float:
    """Exact power of the two-sided exact sign test (ties dropped) at level `alpha` after
    `n_trials` paired trials, when each trial is a tie with probability `tie_rate` and a
    non-tied trial is a win with probability `win_rate` (0.5 means no effect).

    Power = sum_d P(D = d) * P(reject | d), with D ~ Bin(n_trials, 1 - tie_rate) the
    discordant count and the rejection region of the exact test at each d. Power counts
    rejections in either direction (the standard definition); for win_rate > 0.5 the
    wrong-direction share is negligible.

    References: Dixon & Mood 1946; exact binomial power as in G*Power's "exact sign test"
    (Faul et al. 2007), with ties as a binomial thinning.
    """
    _check_tally(n_trials=n_trials)
    _check_rates(win_rate, tie_rate, alpha)
    n = int(n_trials)
    r = _reject_prob(n, win_rate, alpha)
    if tie_rate == 0:
        return float(r[n])
    if n > RECURSION_MAX_N:
        pd = _st.binom.pmf(np.arange(n + 1), n, 1 - tie_rate)
    else:
        *_, pd = _binomial_pmfs(n, 1 - tie_rate)
    return min(1.0, float(np.dot(pd, r)))  # a sum of rounded terms may pass 1 by an ulp


def sign_test_power_curve(n_max: int, win_rate: float, tie_rate: float = 0.0, alpha: float = 0.05) -> np.ndarray:
    """`sign_test_power(n, win_rate, tie_rate, alpha)` for every n = 0..n_max at once:
    the same sums, with the rejection probabilities computed once (the power curves of
    the power-planning page: 480 calls of O(n^2) each, now one per curve).

    References: Dixon & Mood 1946; exact binomial power as in G*Power's "exact sign test"
    (Faul et al. 2007), with ties as a binomial thinning.
    """
    _check_tally(n_trials=n_max)
    _check_rates(win_rate, tie_rate, alpha)
    r = _reject_prob(int(n_max), win_rate, alpha)
    if tie_rate == 0:
        return r
    out = np.empty(int(n_max) + 1)
    for n, pd in enumerate(_binomial_pmfs(int(n_max), 1 - tie_rate)):
        out[n] = float(np.dot(pd, r[: n + 1]))
    return np.minimum(out, 1.0)  # a sum of rounded terms may pass 1 by an ulp


def sign_test_power_approx(n_trials: int, win_rate: float, tie_rate: float = 0.0, alpha: float = 0.05) -> float:
    """Normal approximation to the sign test's power (one tail), unconditional on the
    number of discordant pairs: Phi((|delta| sqrt(n) - z_{1-alpha/2} sqrt(psi)) /
    sqrt(psi - delta^2)), psi = 1 - tie_rate the discordance rate and
    delta = (2 win_rate - 1) psi the difference in marginal pass rates.

    References: Connor 1987, "Sample size for testing differences in proportions for the
    paired-sample design", Biometrics 43(1).
    """
    _check_tally(n_trials=n_trials)
    _check_rates(win_rate, tie_rate, alpha)
    psi = 1.0 - tie_rate
    delta = abs(2 * win_rate - 1) * psi
    za = NormalDist().inv_cdf(1 - alpha / 2)
    return NormalDist().cdf((delta * math.sqrt(n_trials) - za * math.sqrt(psi)) / math.sqrt(psi - delta**2))


def _first_and_stable(power_curve: np.ndarray, target: float) -> tuple[int, int]:
    ok = power_curve >= target
    if not ok.any() or not ok[-1]:
        return -1, -1
    first = int(np.argmax(ok))
    below = np.nonzero(~ok)[0]
    stable = int(below[-1] + 1) if below.size else 0
    return first, stable


def sign_test_sample_size(
    win_rate: float, tie_rate: float = 0.0, alpha: float = 0.05, power: float = 0.8
) -> SampleSize:
    """Sample size of the exact two-sided sign test to detect `win_rate` (share of
    non-tied trials won; != 0.5) with `power` at `alpha`, given the tie rate.

    Exact power is a sawtooth in n (the rejection region jumps as n grows), so this
    reports both the first n whose power reaches the target and the n from which it
    stays above (searched up to three times the approximate n, where the sawtooth's lower
    envelope is far above the target). Both are given for discordant pairs (power of the
    test on exactly d non-tied pairs) and for trials (ties random, as `sign_test_power`),
    with the normal approximations: discordant ((z_{1-a/2}/2 + z_b sqrt(w(1-w)))/(w-1/2))^2
    and trials by Connor's formula.

    References: Dixon & Mood 1946; Connor 1987, Biometrics 43(1) (approximate n for
    paired proportions); Chernick & Liu 2002, "The saw-toothed behavior of power versus
    sample size and software solutions", The American Statistician 56(2).
    """
    _check_rates(win_rate, tie_rate, alpha)
    if not 0 < power < 1:
        _fail(f"power must be in (0, 1), got {power!r}")
    if win_rate == 0.5:
        _fail("win rate 0.5 is no effect: no sample size gives power above alpha")
    w = max(win_rate, 1 - win_rate)
    za, zb = NormalDist().inv_cdf(1 - alpha / 2), NormalDist().inv_cdf(power)
    d_approx = math.ceil(((za * 0.5 + zb * math.sqrt(w * (1 - w))) / (w - 0.5)) ** 2)
    psi = 1 - tie_rate
    delta = (2 * w - 1) * psi
    n_approx = math.ceil(((za * math.sqrt(psi) + zb * math.sqrt(psi - delta**2)) / delta) ** 2)

    d_max = max(3 * d_approx, d_approx + 100)
    while True:
        r = _reject_prob(d_max, w, alpha)
        d_first, d_stable = _first_and_stable(r, power)
        if d_first >= 0 and d_stable * 2 <= d_max:
            break
        d_max *= 2
    if tie_rate == 0:
        t_first, t_stable, p_first, p_stable = d_first, d_stable, r[d_first], r[d_stable]
    else:
        n_max = max(3 * n_approx, n_approx + 100)
        while True:
            curve = _trial_power_curve(n_max, w, tie_rate, alpha)
            t_first, t_stable = _first_and_stable(curve, power)
            if t_first >= 0 and t_stable * 2 <= n_max:
                break
            n_max *= 2
        p_first, p_stable = curve[t_first], curve[t_stable]
    return SampleSize(
        win_rate=win_rate,
        tie_rate=tie_rate,
        alpha=alpha,
        power=power,
        discordant_first=d_first,
        discordant_stable=d_stable,
        trials_first=t_first,
        trials_stable=t_stable,
        discordant_approx=d_approx,
        trials_approx=n_approx,
        power_at_first=float(p_first),
        power_at_stable=float(p_stable),
    )


def _trial_power_curve(n_max: int, win_rate: float, tie_rate: float, alpha: float) -> np.ndarray:
    # Exact power for every n = 0..n_max at once: the discordant-count distribution is
    # advanced one trial at a time (a binomial recursion), which is O(n_max^2) flops but
    # only n_max numpy calls.
    r = _reject_prob(n_max, win_rate, alpha)
    out = np.empty(n_max + 1)
    pd = np.zeros(n_max + 1)
    pd[0] = 1.0
    q = 1 - tie_rate
    for n in range(n_max + 1):
        out[n] = float(np.dot(pd[: n + 1], r[: n + 1]))
        if n < n_max:
            pd[1 : n + 2] = pd[1 : n + 2] * tie_rate + pd[: n + 1] * q
            pd[0] *= tie_rate
    return np.minimum(out, 1.0)  # a sum of rounded terms may pass 1 by an ulp


def paired_proportion_power(n_pairs: int, p_first_only: float, p_second_only: float, alpha: float = 0.05) -> float:
    """Exact power of the exact McNemar (= sign) test for paired pass/fail after
    `n_pairs` pairs, from the discordance probabilities: `p_first_only` = P(first arm
    passes, second fails), `p_second_only` the reverse. The discordance rate
    psi = p_first_only + p_second_only is the non-tie rate and p_first_only / psi the win
    rate, so this is `sign_test_power(n_pairs, p_first_only/psi, 1 - psi, alpha)`.

    References: Connor 1987, Biometrics 43(1); Lachenbruch 1992, "On the sample size for
    studies based upon McNemar's test", Statistics in Medicine 11(11).
    """
    psi = _discordance(p_first_only, p_second_only)
    return sign_test_power(n_pairs, p_first_only / psi, 1 - psi, alpha)


def paired_proportion_sample_size(
    p_first_only: float, p_second_only: float, alpha: float = 0.05, power: float = 0.8
) -> SampleSize:
    """Pairs needed for the exact McNemar test, from the discordance probabilities (see
    `paired_proportion_power`); the `trials_*` fields are pairs.

    References: Connor 1987, Biometrics 43(1).
    """
    psi = _discordance(p_first_only, p_second_only)
    return sign_test_sample_size(p_first_only / psi, 1 - psi, alpha, power)


def _discordance(p1: float, p2: float) -> float:
    if p1 < 0 or p2 < 0 or p1 + p2 <= 0 or p1 + p2 > 1:
        _fail(f"discordance probabilities must be >= 0 with 0 < sum <= 1, got {p1!r} and {p2!r}")
    return p1 + p2


# --------------------------------------------------------------------------- agreement


def agreement(a: Sequence[Hashable], b: Sequence[Hashable], labels: Sequence[Hashable] | None = None) -> Agreement:
    """Agreement of two raters on the same items (judge calibration): exact and
    within-one agreement, Cohen's kappa (unweighted, linear, quadratic weights) via
    statsmodels `cohens_kappa`, and the confusion matrix.

    `labels` fixes the category order (it matters for weighted kappa and within-one;
    weights use category positions 0..K-1); by default the sorted union of both raters'
    labels. Kappa is nan when chance agreement is 1 (one category only); its SE and
    interval are nan when either rater gave every item the same label (kappa is then 0
    whatever the other rater did, and the asymptotic SE is a degenerate 0).

    References: Cohen 1960, Educ. Psychol. Meas. 20(1); Cohen 1968, Psychol. Bull. 70(4)
    (weighted kappa); Fleiss, Cohen & Everitt 1969 (variance);
    statsmodels.stats.inter_rater.cohens_kappa.
    """
    from statsmodels.stats.inter_rater import cohens_kappa  # lazy: statsmodels is slow to import

    xa, xb = list(a), list(b)
    if len(xa) != len(xb):
        _fail(f"the two raters label different numbers of items: {len(xa)} and {len(xb)}")
    if not xa:
        _fail("no items to compare")
    if labels is None:
        try:
            cats = tuple(sorted(set(xa) | set(xb)))  # type: ignore[type-var]  # unorderable: TypeError, below
        except TypeError:
            cats = tuple(dict.fromkeys(xa + xb))
    else:
        cats = tuple(labels)
        if len(set(cats)) != len(cats):
            _fail(f"labels repeat a category: {list(cats)!r}")
    index = {v: i for i, v in enumerate(cats)}
    missing = [v for v in dict.fromkeys(xa + xb) if v not in index]
    if missing:
        _fail(f"labels {missing!r} are not among the categories {list(cats)!r}")
    ia = np.array([index[v] for v in xa])
    ib = np.array([index[v] for v in xb])
    k = len(cats)
    table = np.zeros((k, k), dtype=int)
    np.add.at(table, (ia, ib), 1)
    n = len(xa)
    exact = float(np.mean(ia == ib))
    within = float(np.mean(np.abs(ia - ib) <= 1))

    rows, cols = table.sum(1) / n, table.sum(0) / n
    if k < 2 or float(np.dot(rows, cols)) >= 1.0 - 1e-12:
        nan = math.nan
        kap = kl = kq = se = lo = hi = nan
    elif min(np.count_nonzero(rows), np.count_nonzero(cols)) < 2:
        # one rater gave every item the same label: every kappa is 0 by construction (the
        # observed agreement is the chance agreement) and the large-sample SE collapses to
        # 0, so "[0.00 to 0.00]" would claim a certainty the data cannot give: undefined
        kap = kl = kq = 0.0
        se = lo = hi = math.nan
    else:
        res = cohens_kappa(table)
        kap, se, lo, hi = float(res.kappa), float(res.std_kappa), float(res.kappa_low), float(res.kappa_upp)
        kl = float(cohens_kappa(table, wt="linear", return_results=False))
        kq = float(cohens_kappa(table, wt="quadratic", return_results=False))
    return Agreement(
        n=n,
        labels=cats,
        exact=exact,
        within_one=within,
        kappa=kap,
        kappa_linear=kl,
        kappa_quadratic=kq,
        kappa_se=se,
        kappa_low=lo,
        kappa_high=hi,
        confusion=tuple(tuple(int(x) for x in row) for row in table),
    )


def krippendorff_alpha(
    ratings: Sequence[Sequence[object]],
    level: Literal["nominal", "ordinal", "interval", "ratio"] = "ordinal",
    value_domain: Sequence[Hashable] | None = None,
) -> float:
    """Krippendorff's alpha for any number of raters with missing ratings, via the
    `krippendorff` package. `ratings[r][u]` is rater r's label of unit u (None or NaN
    when missing). Non-numeric labels are mapped to their position in `value_domain`
    (required for ordered levels; nominal defaults to first appearance).

    Returns nan when every present rating is the same label (or there are none): the
    expected disagreement is then zero and alpha is undefined (0/0), as `agreement`
    returns nan for kappa when chance agreement is 1. Perfect agreement on a single
    label says nothing about reliability.

    References: Krippendorff 2011, "Computing Krippendorff's Alpha-Reliability"
    (Annenberg School, U. Pennsylvania); Castro 2017, fast-krippendorff.
    """
    import krippendorff  # lazy: only Krippendorff's alpha needs it

    if level not in ("nominal", "ordinal", "interval", "ratio"):
        _fail(f"unknown level {level!r}; use nominal, ordinal, interval or ratio")
    rows = [list(r) for r in ratings]
    if len(rows) < 2:
        _fail("Krippendorff's alpha needs at least two raters")
    if len({len(r) for r in rows}) != 1:
        _fail("every rater's row must cover the same units (use None for a missing rating)")

    def missing(v: object) -> bool:
        return v is None or (isinstance(v, float) and math.isnan(v))

    present = [v for r in rows for v in r if not missing(v)]
    if len(set(present)) < 2:
        # One label only: no expected disagreement, alpha = 1 - 0/0 is undefined (the
        # krippendorff package raises ValueError here, or warns and returns nan when a
        # wider value_domain is given); report it as nan, consistently.
        if value_domain is not None:
            outside = [v for v in present if v not in set(value_domain)]
            if outside:
                _fail(f"ratings {sorted(set(map(str, outside)))} are outside value_domain {list(value_domain)!r}")
        return math.nan
    numeric = all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) for v in present)
    index: dict[Any, int] | None = None  # label -> position, for labels that are not numbers
    domain = None
    if value_domain is not None:
        places = {v: i for i, v in enumerate(value_domain)}
        bad = [v for v in present if v not in places]
        if bad:
            _fail(f"ratings {sorted(set(map(str, bad)))} are outside value_domain {list(value_domain)!r}")
        domain = np.asarray(list(value_domain), dtype=float) if numeric else np.arange(len(value_domain), dtype=float)
        index = None if numeric else places
    elif not numeric:
        if level != "nominal":
            _fail(f"non-numeric labels at level {level!r} need an ordered value_domain")
        index = {v: i for i, v in enumerate(dict.fromkeys(present))}

    def value(v: Any) -> float:
        return math.nan if missing(v) else float(v if index is None else index[v])

    data = np.array([[value(v) for v in r] for r in rows])
    return float(krippendorff.alpha(reliability_data=data, level_of_measurement=level, value_domain=domain))


# --------------------------------------------------------------------------- sequential

Decision = Literal["continue", "pass", "regression", "no-improvement"]


@dataclass(frozen=True)
class OperatingCharacteristics:
    """Exact behaviour of a sequential design at a true win rate (and tie rate):
    probabilities of each verdict and the expected discordant pairs and trials used."""

    win_rate: float
    tie_rate: float
    p_pass: float
    p_regression: float
    p_no_improvement: float
    expected_discordant: float
    expected_trials: float


@dataclass(frozen=True)
class SequentialDesign:
    """Boundaries of a truncated two-sided SPRT on discordant pairs, calibrated exactly.

    After d discordant pairs (d = 1..max_discordant) with W wins and L = d - W losses:
    `pass` when W >= pass_at[d]; `regression` when L >= pass_at[d]; `no-improvement`
    when max(W, L) <= futility_at[d] (or d reaches max_discordant); else continue.
    `type_i_error` is the exact P(pass or regression | win rate 1/2) and `power_exact`
    the exact P(pass | win_rate). `fixed_discordant`/`fixed_power` describe the fixed-n
    exact sign test at the same alpha and power it is measured against."""

    win_rate: float
    alpha: float
    power: float
    max_discordant: int
    log_upper: float
    log_futility: float
    pass_at: tuple[int, ...]
    futility_at: tuple[int, ...]
    type_i_error: float
    power_exact: float
    fixed_discordant: int
    fixed_power: float


@dataclass(frozen=True)
class SequentialState:
    """Where a sequential sign test stands after the outcomes seen so far."""

    decision: Decision
    trials: int
    wins: int
    losses: int
    ties: int

    @property
    def discordant(self) -> int:
        return self.wins + self.losses


def _sprt_bounds(a: np.ndarray, b: np.ndarray, w1: float, d_max: int) -> tuple[np.ndarray, np.ndarray]:
    # Log-likelihood ratio of w1 against 1/2 after W wins in d pairs is
    # W*log(2 w1) + (d - W)*log(2 (1 - w1)); it is linear in W, so each threshold is a
    # minimum (pass) or maximum (futility) win count per d.
    lp, lq = math.log(2 * w1), math.log(2 * (1 - w1))
    s = lp - lq
    d = np.arange(d_max + 1)
    u = np.ceil((a[:, None] - d * lq) / s - 1e-9).astype(np.int64)
    f = np.floor((b[:, None] - d * lq) / s + 1e-9).astype(np.int64)
    u = np.maximum(u, 0)
    u[:, 0] = 1  # nothing is decided before the first discordant pair
    f[:, 0] = -1
    return u, f


def _sequential_oc(u: np.ndarray, f: np.ndarray, w: float, d_max: int) -> tuple[np.ndarray, ...]:
    """Exact P(pass), P(regression), P(no-improvement), E[discordant pairs] and P(pass
    within d pairs) for d = 0..d_max, for each
    row of boundaries, by forward recursion over the binomial lattice (W wins after d
    pairs) with absorbed mass removed at each boundary. Hand-written: neither scipy nor
    statsmodels computes crossing probabilities of arbitrary binomial boundaries."""
    m = u.shape[0]
    prob = np.zeros((m, d_max + 1))
    prob[:, 0] = 1.0
    wins = np.arange(d_max + 1)
    p_pass, p_reg, p_none, e_d = (np.zeros(m) for _ in range(4))
    pass_by = np.zeros((m, d_max + 1))  # P(pass within d pairs)
    for d in range(1, d_max + 1):
        prob[:, 1 : d + 1] = prob[:, 1 : d + 1] * (1 - w) + prob[:, :d] * w
        prob[:, 0] *= 1 - w
        wd = wins[: d + 1]
        pd = prob[:, : d + 1]
        ud, fd = u[:, d, None], f[:, d, None]
        is_pass = wd >= ud
        is_reg = (d - wd) >= ud
        is_fut = (wd <= fd) & ((d - wd) <= fd)
        a = np.where(is_pass, pd, 0.0).sum(1)
        b = np.where(is_reg, pd, 0.0).sum(1)
        c = np.where(is_fut, pd, 0.0).sum(1)
        pd[is_pass | is_reg | is_fut] = 0.0
        if d == d_max:
            c = c + pd.sum(1)
            pd[:] = 0.0
        p_pass += a
        p_reg += b
        p_none += c
        e_d += d * (a + b + c)
        pass_by[:, d] = p_pass
    return p_pass, p_reg, p_none, e_d, pass_by


@lru_cache(maxsize=64)
def _design(win_rate: float, alpha: float, power: float, max_discordant: int | None) -> SequentialDesign:
    fixed = sign_test_sample_size(win_rate, 0.0, alpha, power)
    # Default: no loss of power against the fixed design. Under a caller's cap the
    # planned power itself is the requirement.
    required = power if max_discordant else max(power, fixed.power_at_first)
    d_max = max_discordant or max(12, math.ceil(1.5 * fixed.discordant_first))
    a_safe = math.log(2 / alpha)  # Wald: P(any crossing of log LR >= a | H0) <= 2 e^-a
    b_wald = math.log((1 - power) / (1 - alpha / 2))
    while True:
        # Futility thresholds to try; for each, the smallest upper threshold whose exact
        # two-sided type I error is <= alpha (bisection, all futility rows at once).
        b = b_wald * np.concatenate([np.linspace(0.05, 1.0, 12), np.linspace(1.1, 3.0, 8)])
        lo, hi = np.zeros_like(b), np.full_like(b, a_safe)
        for _ in range(16):
            mid = (lo + hi) / 2
            u, f = _sprt_bounds(mid, b, win_rate, d_max)
            pp, pr, *_ = _sequential_oc(u, f, 0.5, d_max)
            ok = pp + pr <= alpha
            hi = np.where(ok, mid, hi)
            lo = np.where(ok, lo, mid)
        u, f = _sprt_bounds(hi, b, win_rate, d_max)
        pw, _, _, ed1, _ = _sequential_oc(u, f, win_rate, d_max)
        feasible = pw >= required
        if feasible.any():
            i = int(np.argmin(np.where(feasible, ed1, np.inf)))
            break
        if max_discordant is not None:
            _fail(
                f"max_discordant={max_discordant} is too small to reach power {required:.3f} "
                f"at win rate {win_rate} (the fixed design needs {fixed.discordant_first}; a sequential "
                f"design needs more at most, e.g. the default cap of 1.5x: leave max_discordant unset)"
            )
        d_max = math.ceil(1.25 * d_max)
    pp, pr, *_ = _sequential_oc(u[i : i + 1], f[i : i + 1], 0.5, d_max)
    return SequentialDesign(
        win_rate=win_rate,
        alpha=alpha,
        power=power,
        max_discordant=d_max,
        log_upper=float(hi[i]),
        log_futility=float(b[i]),
        pass_at=tuple(int(x) for x in u[i]),
        futility_at=tuple(int(x) for x in f[i]),
        type_i_error=float(pp[0] + pr[0]),
        power_exact=float(pw[i]),
        fixed_discordant=fixed.discordant_first,
        fixed_power=float(fixed.power_at_first),
    )


_OUTCOMES = {"win": 1, "loss": -1, "tie": 0, 1: 1, -1: -1, 0: 0}


class SequentialSignTest:
    """A sequential sign test that stops as soon as the verdict is settled.

    Design: a truncated two-sided SPRT on the discordant pairs (ties are counted but move
    nothing). Treatment-better is tested against no effect with the log-likelihood ratio
    of `win_rate` (the planned effect: share of non-tied trials the treatment wins) vs
    1/2; treatment-worse symmetrically with 1 - win_rate. It stops with `pass` or
    `regression` when either ratio reaches the upper threshold, with `no-improvement`
    when both fall to the futility threshold or after `max_discordant` pairs (default
    1.5x the fixed design's). The thresholds are calibrated by exact recursion over the
    binomial lattice, not Wald's approximations: the two-sided type I error
    P(pass or regression | no effect) is at most `alpha` exactly (see `design`), and the
    power at `win_rate` is at least that of the fixed-n exact sign test at the same alpha
    and power (its first n reaching `power`; with an explicit `max_discordant`, at least
    `power`), with the futility threshold chosen to minimise the expected pairs at
    `win_rate`. A cap too small for that power is refused.

    Incremental use::

        test = SequentialSignTest(win_rate=0.75, alpha=0.05, power=0.8)
        state = test.update("win")     # or "loss", "tie", +1, -1, 0
        if test.decision != "continue": ...

    Batch use: ``SequentialSignTest(...).run(outcomes)`` consumes outcomes until the
    verdict and returns the final state (its `trials` says how many it used).
    After a verdict, `update` refuses further outcomes: the test has stopped.

    References: Wald 1945, "Sequential Tests of Statistical Hypotheses", Ann. Math.
    Statist. 16(2); Armitage, McPherson & Rowe 1969, "Repeated significance tests on
    accumulating data", JRSS A 132(2) (exact crossing probabilities by recursion).
    """

    def __init__(
        self,
        win_rate: float = 0.75,
        alpha: float = 0.05,
        power: float = 0.8,
        max_discordant: int | None = None,
    ) -> None:
        _check_rates(win_rate, 0.0, alpha)
        if not 0.5 < win_rate < 1:
            _fail(f"the planned win rate must be above 0.5 (an improvement), got {win_rate!r}")
        if not 0 < power < 1:
            _fail(f"power must be in (0, 1), got {power!r}")
        if max_discordant is not None and (int(max_discordant) != max_discordant or max_discordant < 6):
            _fail(f"max_discordant must be an integer >= 6, got {max_discordant!r}")
        self.design: SequentialDesign = _design(
            float(win_rate), float(alpha), float(power), None if max_discordant is None else int(max_discordant)
        )
        self._state = SequentialState("continue", 0, 0, 0, 0)

    @property
    def state(self) -> SequentialState:
        return self._state

    @property
    def decision(self) -> Decision:
        return self._state.decision

    def reset(self) -> None:
        self._state = SequentialState("continue", 0, 0, 0, 0)

    def update(
        self, outcome: str | int | None = None, *, win: bool | None = None, tie: bool = False
    ) -> SequentialState:
        """Add one paired trial's outcome: "win", "loss", "tie" or +1, -1, 0 (or the
        keywords ``win=True/False`` / ``tie=True``)."""
        if outcome is None:
            if tie:
                outcome = "tie"
            elif win is not None:
                outcome = "win" if win else "loss"
        if isinstance(outcome, bool) or outcome not in _OUTCOMES:
            _fail(f"outcome must be 'win', 'loss', 'tie', 1, -1 or 0, got {outcome!r}")
        s = self._state
        if s.decision != "continue":
            _fail(f"the sequential test already stopped with {s.decision!r} after {s.trials} trials")
        step = _OUTCOMES[outcome]
        wins, losses, ties = s.wins + (step == 1), s.losses + (step == -1), s.ties + (step == 0)
        decision: Decision = "continue"
        d = wins + losses
        if step != 0:
            dz = self.design
            if wins >= dz.pass_at[d]:
                decision = "pass"
            elif losses >= dz.pass_at[d]:
                decision = "regression"
            elif max(wins, losses) <= dz.futility_at[d] or d >= dz.max_discordant:
                decision = "no-improvement"
        self._state = SequentialState(decision, s.trials + 1, wins, losses, ties)
        return self._state

    def run(self, outcomes: Iterable[str | int]) -> SequentialState:
        """Feed outcomes until a verdict (or until they run out: then `continue`)."""
        for o in outcomes:
            if self.update(o).decision != "continue":
                break
        return self._state

    def operating_characteristics(self, win_rate: float, tie_rate: float = 0.0) -> OperatingCharacteristics:
        """Exact verdict probabilities and expected pairs/trials at a true win rate; the
        expected trials are expected pairs / (1 - tie_rate) (Wald's identity)."""
        _check_rates(win_rate, tie_rate, self.design.alpha)
        dz = self.design
        u = np.asarray(dz.pass_at)[None, :]
        f = np.asarray(dz.futility_at)[None, :]
        pp, pr, pn, ed, _ = _sequential_oc(u, f, float(win_rate), dz.max_discordant)
        return OperatingCharacteristics(
            win_rate, tie_rate, float(pp[0]), float(pr[0]), float(pn[0]), float(ed[0]), float(ed[0] / (1 - tie_rate))
        )

    def max_trials(self, tie_rate: float = 0.0) -> int:
        """The most units (cases) the design may need: its cap on discordant pairs at the
        expected share of them among units, ceil(max_discordant / (1 - tie_rate)). A suite
        with fewer units can run out before the cap, and the design's power is then lower
        (`power_within`)."""
        return math.ceil(self.design.max_discordant / (1 - tie_rate) - 1e-9)

    def power_within(self, n_trials: int, win_rate: float, tie_rate: float = 0.0) -> float:
        """Exact P(pass) at a true win rate when only `n_trials` units exist: the run stops
        undecided when they run out. The discordant pairs among n units are binomial
        (n, 1 - tie_rate); the pass probability within d pairs comes from the exact lattice
        recursion (`_sequential_oc`).

        References: Armitage, McPherson & Rowe 1969 (exact crossing probabilities)."""
        _check_rates(win_rate, tie_rate, self.design.alpha)
        dz = self.design
        u = np.asarray(dz.pass_at)[None, :]
        f = np.asarray(dz.futility_at)[None, :]
        pass_by = _sequential_oc(u, f, float(win_rate), dz.max_discordant)[4][0]
        d = np.arange(int(n_trials) + 1)
        weights = _st.binom.pmf(d, int(n_trials), 1 - tie_rate)
        return float(np.sum(weights * pass_by[np.minimum(d, dz.max_discordant)]))


# --------------------------------------------------------------------------- prediction-powered inference


@dataclass(frozen=True)
class PPIEstimate:
    """A prediction-powered estimate of a mean (a judged pass rate corrected by human
    labels): `value` with its interval `low`..`high` at level 1 - `alpha`, the
    power-tuning weight `lam` (1: plain PPI, 0: the labels alone), `n` labelled and
    `N` predicted items. `clt_low`..`clt_high` is the plain CLT interval (ppi-python's
    `ppi_mean_ci`); `low`..`high` equals it when `adjust` is 0, else its rectifier
    variance is taken on the labelled table with `adjust` pseudo-observations per
    (human, judge) cell (see `ppi_mean`). `bias` is the judge's mean minus the human
    mean on the labelled items, with its interval `bias_low`..`bias_high` (same
    adjustment)."""

    value: float
    se: float
    low: float
    high: float
    lam: float
    n: int
    N: int
    alpha: float
    clt_se: float
    clt_low: float
    clt_high: float
    adjust: float
    judge_mean: float  # the judge's mean on the N items (the judge-only estimate)
    bias: float
    bias_low: float
    bias_high: float


def _cell_adjusted_var(d: np.ndarray, pseudo: np.ndarray, adjust: float) -> tuple[float, float]:
    """Population variance of `d` with `adjust` weight on each of the `pseudo` values
    (one per cell of the 2x2 table) added, and the total weight."""
    w = np.concatenate([np.ones(d.size), np.full(pseudo.size, adjust)])
    x = np.concatenate([d, pseudo])
    m = float((w * x).sum() / w.sum())
    return float((w * (x - m) ** 2).sum() / w.sum()), float(w.sum())


def ppi_mean(
    y: Sequence[float],
    yhat: Sequence[float],
    yhat_all: Sequence[float],
    *,
    lam: float | None = None,
    alpha: float = 0.05,
    adjust: float = 0.0,
) -> PPIEstimate:
    """The PPI++ estimate of the mean of `y` (human labels on n items, `yhat` the
    judge on those same items) with the judge's predictions `yhat_all` on all N items:
    theta = lam * mean(yhat_all) + mean(y - lam * yhat), with the normal interval of
    variance lam^2 var(yhat_all) / N + var(y - lam * yhat) / n (population variances,
    ddof 0). `lam=None` tunes it as PPI++ does (the variance-minimising weight,
    estimated at the lam = 1 estimate and clipped to [0, 1]); `lam=1` is plain PPI,
    `lam=0` the classical mean of the labels. Written here because the authors'
    `ppi-python` is not a runtime dependency; tests hold it to that package to 1e-9
    (same formulas: its `ppi_mean_pointestimate`, `ppi_mean_ci` and `_calc_lam_glm`).
    When the judge's predictions do not vary, every lam gives the same estimate and
    lam is reported as 1.

    `adjust` > 0 (0/1 labels and predictions only) keeps the estimate and lam but takes
    the rectifier's variance over the labelled items plus `adjust` pseudo-observations
    in each cell of the (human, judge) 2x2 table, as Agresti & Caffo's add-one
    interval does for a difference of proportions: with 20-40 labels and a judge that
    disagrees with people on one item in ten, the labelled set often holds no
    disagreement at all and the plain interval's rectifier variance is 0 (coverage
    83% at n = 20 in benchmarks/bench_ppi_coverage.py; 95% with `adjust=1`).

    References: Angelopoulos, Bates, Fannjiang, Jordan & Zrnic 2023, "Prediction-powered
    inference", Science 382(6671); Angelopoulos, Duchi & Zrnic 2023, "PPI++: Efficient
    Prediction-Powered Inference", arXiv:2311.01453 (power tuning); Agresti & Caffo 2000,
    "Simple and effective confidence intervals for proportions and differences of
    proportions result from adding two successes and two failures", Am. Stat. 54(4);
    Agresti & Min 2005, "Simple improved confidence intervals for comparing matched
    proportions", Stat. Med. 24(5).
    """
    ya = np.asarray(y, dtype=float).ravel()
    ha = np.asarray(yhat, dtype=float).ravel()
    hu = np.asarray(yhat_all, dtype=float).ravel()
    n, big_n = ya.size, hu.size
    if n < 2 or ha.size != n:
        _fail(
            f"ppi_mean needs at least 2 labelled items with one prediction each (got {n} labels, {ha.size} predictions)"
        )
    if big_n < 1:
        _fail("ppi_mean needs the predictions on all items (yhat_all is empty)")
    if not (np.isfinite(ya).all() and np.isfinite(ha).all() and np.isfinite(hu).all()):
        _fail("ppi_mean: labels and predictions must be finite numbers")
    if not 0 < alpha < 1:
        _fail(f"alpha must be in (0, 1), got {alpha!r}")
    if not adjust >= 0:
        _fail(f"adjust must be >= 0, got {adjust!r}")
    if adjust and not all(np.isin(a, (0.0, 1.0)).all() for a in (ya, ha, hu)):
        _fail("ppi_mean: adjust > 0 needs 0/1 labels and predictions (a pass rate)")
    if lam is None:
        theta1 = hu.mean() + (ya - ha).mean()  # the lam = 1 estimate the gradients are taken at
        g, gh = ya - theta1, ha - theta1
        cov = 2 * float(((g - g.mean()) * (gh - gh.mean())).mean())
        var_hat = float(np.var(np.concatenate([gh, hu - theta1]), ddof=1))
        denom = 2 * (1 + n / big_n) * var_hat
        lam = float(np.clip(cov / denom, 0.0, 1.0)) if denom > 0 else 1.0
    elif not 0 <= lam <= 1:
        _fail(f"lam must be in [0, 1], got {lam!r}")
    lam = float(lam)
    value = float(lam * hu.mean() + (ya - lam * ha).mean())
    imputed = float(np.var(lam * hu)) / big_n
    clt_se = float(math.sqrt(imputed + float(np.var(ya - lam * ha)) / n))
    cells_y, cells_h = np.array([1.0, 1.0, 0.0, 0.0]), np.array([1.0, 0.0, 1.0, 0.0])
    if adjust:
        v, _ = _cell_adjusted_var(ya - lam * ha, cells_y - lam * cells_h, adjust)
        se = float(math.sqrt(imputed + v / (n + 4 * adjust)))
        vb, _ = _cell_adjusted_var(ha - ya, cells_h - cells_y, adjust)
        bias_se = float(math.sqrt(vb / (n + 4 * adjust)))
    else:
        se = clt_se
        bias_se = float(math.sqrt(float(np.var(ha - ya)) / n))
    z = normal_quantile(1 - alpha / 2)
    bias = float((ha - ya).mean())
    return PPIEstimate(
        value=value,
        se=se,
        low=value - z * se,
        high=value + z * se,
        lam=lam,
        n=n,
        N=big_n,
        alpha=float(alpha),
        clt_se=clt_se,
        clt_low=value - z * clt_se,
        clt_high=value + z * clt_se,
        adjust=float(adjust),
        judge_mean=float(hu.mean()),
        bias=bias,
        bias_low=bias - z * bias_se,
        bias_high=bias + z * bias_se,
    )
