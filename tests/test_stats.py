"""evalkit.stats against other implementations, published examples and seeded simulations.

Reference values live in tests/data/stats_reference.json (made by
tests/data/make_stats_reference.py from scipy, statsmodels, the HumanEval estimator and
published examples). Simulations are seeded and vectorised; larger ones are in
benchmarks/bench_sequential.py.
"""
from __future__ import annotations

import itertools
import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as st

from evalkit import stats as S
from evalkit.errors import InputError

REF = json.loads((Path(__file__).parent / "data" / "stats_reference.json").read_text())
PUB = REF["published"]


# ------------------------------------------------------------------ pass@k / pass^k


@pytest.mark.parametrize("row", REF["pass_k"], ids=lambda r: f"n{r['n']}c{r['c']}k{r['k']}")
def test_pass_k_match_humaneval_and_exact_rationals(row):
    n, c, k = row["n"], row["c"], row["k"]
    assert S.pass_at_k(n, c, k) == pytest.approx(row["pass_at_k_humaneval"], rel=1e-12, abs=1e-15)
    assert S.pass_at_k(n, c, k) == pytest.approx(row["pass_at_k_exact"], rel=1e-9, abs=1e-12)
    assert S.pass_hat_k(n, c, k) == pytest.approx(row["pass_hat_k_exact"], rel=1e-9, abs=1e-15)


def test_pass_k_are_averages_over_k_subsets():
    # Both estimators equal the mean, over all k-subsets of the n samples, of "any
    # correct" / "all correct": check by enumeration.
    samples = [1, 0, 1, 1, 0, 0, 1]
    n, c = len(samples), sum(samples)
    for k in range(1, n + 1):
        subsets = list(itertools.combinations(samples, k))
        assert S.pass_at_k(n, c, k) == pytest.approx(np.mean([any(s) for s in subsets]))
        assert S.pass_hat_k(n, c, k) == pytest.approx(np.mean([all(s) for s in subsets]))


def test_pass_k_stable_for_large_n():
    # C(2000, 1000) overflows a float; the product forms do not.
    assert S.pass_at_k(2000, 3, 1000) == pytest.approx(1 - float(Fraction(math.comb(1997, 1000), math.comb(2000, 1000))))
    assert S.pass_hat_k(2000, 1990, 1000) == pytest.approx(float(Fraction(math.comb(1990, 1000), math.comb(2000, 1000))))


def test_harness_booleans_and_plugin_differ_as_documented():
    # n == k: the estimators are the harness's per-case booleans.
    assert S.pass_at_k(3, 1, 3) == 1.0 and S.pass_at_k(3, 0, 3) == 0.0
    assert S.pass_hat_k(3, 3, 3) == 1.0 and S.pass_hat_k(3, 2, 3) == 0.0
    # The plug-in is biased upward: n=4, c=2, k=2 -> 0.25 vs 1/6.
    assert S.plugin_pass_hat_k(4, 2, 2) == 0.25
    assert S.pass_hat_k(4, 2, 2) == pytest.approx(1 / 6)


@pytest.mark.parametrize("fn", [S.pass_at_k, S.pass_hat_k, S.plugin_pass_hat_k])
def test_k_above_n_is_refused(fn):
    with pytest.raises(ValueError, match=r"k=5 is larger than the n=4"):
        fn(4, 2, 5)
    with pytest.raises(InputError):
        fn(4, 5, 1)


def test_suite_estimates_average_cases_with_se_across_cases():
    counts = [(4, 0), (4, 1), (4, 4), (5, 2), (10, 9)]
    for fn, suite in ((S.pass_at_k, S.suite_pass_at_k), (S.pass_hat_k, S.suite_pass_hat_k)):
        per_case = [fn(n, c, 2) for n, c in counts]
        est = suite(counts, 2)
        assert est.value == pytest.approx(sum(per_case) / 5)
        assert est.se == pytest.approx(st.sem(per_case))
        assert est.n == 5
    with pytest.raises(ValueError, match="k=5 is larger"):
        S.suite_pass_at_k([(10, 3), (4, 1)], 5)


# ------------------------------------------------------------------ intervals


@pytest.mark.parametrize("row", REF["intervals"], ids=lambda r: f"{r['successes']}/{r['n']}a{r['alpha']}")
def test_intervals_match_scipy(row):
    for method in ("wilson", "clopper-pearson", "jeffreys"):
        iv = S.proportion_interval(row["successes"], row["n"], method, row["alpha"])
        lo, hi = row[method]
        assert (iv.low, iv.high) == pytest.approx((lo, hi), abs=1e-9), method
        assert iv.method == method


def test_intervals_match_published_examples():
    for r in PUB["newcombe_1998_table1"]["rows"]:
        for method in ("wilson", "clopper-pearson"):
            iv = S.proportion_interval(r["successes"], r["n"], method)
            assert (round(iv.low, 4), round(iv.high, 4)) == tuple(r[method])
    m = PUB["r_binom_test_mendel"]
    iv = S.proportion_interval(m["successes"], m["n"], "clopper-pearson")
    assert (iv.low, iv.high) == pytest.approx(m["conf_int"], abs=5e-8)
    assert S.proportion_interval(3, 10, "beta").method == "clopper-pearson"
    with pytest.raises(InputError, match="unknown interval method"):
        S.proportion_interval(3, 10, "wald")


def _jeffreys_coverage_simulated(n: int, p: float, reps: int, rng) -> float:
    x = rng.binomial(n, p, size=reps)
    # The public function on each distinct count, then looked up per replicate.
    bounds = np.array([[S.proportion_interval(int(k), n, "jeffreys").low, S.proportion_interval(int(k), n, "jeffreys").high] for k in range(n + 1)])
    lo, hi = bounds[x, 0], bounds[x, 1]
    return float(np.mean((lo <= p) & (p <= hi)))


def test_jeffreys_95_interval_covers_between_93_5_and_96_5_percent():
    # Method chosen: Jeffreys at n = 60 (Wilson at n = 60 covers only ~93.4% at p = 0.3,
    # and Clopper-Pearson over-covers at ~97%). Seeded simulation plus the exact coverage.
    rng = np.random.default_rng(20240501)
    n = 60
    for p in np.round(np.arange(0.1, 0.91, 0.1), 1):
        cov = _jeffreys_coverage_simulated(n, p, 20_000, rng)
        assert 0.935 <= cov <= 0.965, (p, cov)
        k = np.arange(n + 1)
        ivs = [S.proportion_interval(int(x), n, "jeffreys") for x in k]
        exact = sum(st.binom.pmf(x, n, p) for x, iv in zip(k, ivs) if iv.low <= p <= iv.high)
        assert abs(cov - exact) < 0.006
    # The same check for Wilson at n = 60 fails at p = 0.3: the method choice matters.
    ivs = [S.proportion_interval(int(x), n, "wilson") for x in range(n + 1)]
    wilson_03 = sum(st.binom.pmf(x, n, 0.3) for x, iv in enumerate(ivs) if iv.low <= 0.3 <= iv.high)
    assert wilson_03 < 0.935


# ------------------------------------------------------------------ error bars


def test_mean_and_se_clt_and_clustered_match_statsmodels():
    import statsmodels.api as sm

    rng = np.random.default_rng(7)
    case_effect = rng.normal(0, 1, 30)
    clusters = np.repeat(np.arange(30), 4)
    y = (case_effect[clusters] + rng.normal(0, 0.5, clusters.size) > 0).astype(float)
    clt = S.mean_and_se(y)
    assert clt.value == pytest.approx(y.mean())
    assert clt.se == pytest.approx(y.std(ddof=1) / math.sqrt(y.size))
    cl = S.mean_and_se(y, clusters=[f"case-{c}" for c in clusters])
    fit = sm.OLS(y, np.ones_like(y)).fit(cov_type="cluster", cov_kwds={"groups": clusters, "use_correction": False})
    assert cl.se == pytest.approx(float(fit.bse[0]), rel=1e-10)
    assert cl.n_clusters == 30 and cl.n == 120
    # Four correlated samples per case: the clustered SE is larger than the naive one.
    assert cl.se > 1.3 * clt.se
    with pytest.raises(InputError, match="one label per value"):
        S.mean_and_se(y, clusters=[1, 2])


def test_paired_difference_se_and_correlation():
    rng = np.random.default_rng(11)
    base = rng.normal(0.6, 0.2, 200)
    a = base + 0.05 + rng.normal(0, 0.05, 200)
    b = base + rng.normal(0, 0.05, 200)
    pdiff = S.paired_difference(a, b)
    d = a - b
    assert pdiff.mean == pytest.approx(d.mean())
    assert pdiff.se == pytest.approx(d.std(ddof=1) / math.sqrt(200))
    assert pdiff.correlation == pytest.approx(st.pearsonr(a, b)[0])
    # Miller eq. 8: Var(a - b) = Var(a) + Var(b) - 2 Cov(a, b).
    va, vb, cov = np.var(a, ddof=1), np.var(b, ddof=1), np.cov(a, b)[0, 1]
    assert pdiff.se == pytest.approx(math.sqrt((va + vb - 2 * cov) / 200))
    assert pdiff.se_unpaired > 3 * pdiff.se  # strong correlation: pairing pays
    z = st.norm.ppf(0.975)
    assert (pdiff.low, pdiff.high) == pytest.approx((d.mean() - z * pdiff.se, d.mean() + z * pdiff.se))


# ------------------------------------------------------------------ sign test, McNemar


@pytest.mark.parametrize("row", REF["sign_test"], ids=lambda r: f"{r['wins']}-{r['losses']}")
def test_sign_test_matches_scipy_and_exact_sums(row):
    w, l = row["wins"], row["losses"]
    t = S.sign_test(w, l, ties=7)
    assert (t.wins, t.losses, t.ties, t.n) == (w, l, 7, w + l)
    assert t.p_value == pytest.approx(row["two_sided"], rel=1e-10)
    assert t.p_one_sided == pytest.approx(row["greater"], rel=1e-10)
    assert t.p_one_sided_losses == pytest.approx(row["less"], rel=1e-10)
    n = w + l
    pmf = [Fraction(math.comb(n, i), 2**n) for i in range(n + 1)]
    assert t.p_one_sided == pytest.approx(float(sum(pmf[w:])), rel=1e-9)
    assert t.p_value == pytest.approx(min(1.0, float(2 * sum(pmf[: min(w, l) + 1]))), rel=1e-9)


def test_sign_test_ties_do_not_change_p_and_no_pairs_is_p_one():
    assert S.sign_test(9, 3, 0).p_value == S.sign_test(9, 3, 50).p_value
    assert S.sign_test(0, 0, 5).p_value == 1.0
    # Six discordant pairs is the least that can reach p <= 0.05 (two-sided).
    assert S.sign_test(5, 0).p_value > 0.05 and S.sign_test(6, 0).p_value <= 0.05
    assert S.sign_test_critical_value(5) == -1 and S.sign_test_critical_value(6) == 0
    with pytest.raises(InputError):
        S.sign_test(-1, 2)


@pytest.mark.parametrize("row", REF["mcnemar"], ids=lambda r: f"{r['b']}-{r['c']}")
def test_mcnemar_matches_statsmodels_and_formula(row):
    b, c = row["b"], row["c"]
    ex = S.mcnemar(b, c, exact=True)
    assert ex.p_value == pytest.approx(row["exact_p"], rel=1e-10) and ex.exact
    assert ex.p_value == pytest.approx(S.sign_test(b, c).p_value, rel=1e-10)
    ch = S.mcnemar(b, c, exact=False)
    assert ch.statistic == pytest.approx(row["chi2"]) and ch.p_value == pytest.approx(row["chi2_p"])
    if b + c:
        assert ch.statistic == pytest.approx((abs(b - c) - 1) ** 2 / (b + c))
    assert S.mcnemar(b, c).exact == (b + c < 25)


# ------------------------------------------------------------------ power


def _power_by_enumeration(n_trials: int, w: float, t: float, alpha: float) -> float:
    # Independent of evalkit's critical values: decide each (wins, losses) by the public
    # sign_test p-value and sum the trinomial probabilities.
    total = 0.0
    for d in range(n_trials + 1):
        pd = st.binom.pmf(d, n_trials, 1 - t)
        for wins in range(d + 1):
            if S.sign_test(wins, d - wins).p_value <= alpha:
                total += pd * st.binom.pmf(wins, d, w)
    return total


@pytest.mark.parametrize("n,w,t", [(20, 0.75, 0.0), (30, 0.7, 0.25), (12, 0.9, 0.1), (25, 0.3, 0.4)])
def test_exact_power_equals_enumeration(n, w, t):
    assert S.sign_test_power(n, w, t) == pytest.approx(_power_by_enumeration(n, w, t, 0.05), abs=1e-10)


def test_critical_values_agree_with_sign_test():
    for d in range(1, 120):
        c = S.sign_test_critical_value(d)
        assert (S.sign_test(c, d - c).p_value <= 0.05) if c >= 0 else True
        assert S.sign_test(c + 1, d - c - 1).p_value > 0.05


def test_sample_size_sawtooth_first_and_stable():
    ss = S.sign_test_sample_size(0.75, 0.0, 0.05, 0.8)
    curve = [S.sign_test_power(n, 0.75) for n in range(0, 3 * ss.discordant_stable)]
    first = next(n for n, p in enumerate(curve) if p >= 0.8)
    stable = max(n for n, p in enumerate(curve) if p < 0.8) + 1
    assert (ss.discordant_first, ss.discordant_stable) == (first, stable) == (30, 35)
    assert curve[31] < 0.8  # the sawtooth: n = 31 loses power again
    assert ss.trials_first == 30 and ss.power_at_first == pytest.approx(curve[30])
    assert abs(ss.discordant_approx - first) <= 3
    # With ties the trial count scales roughly by 1 / (1 - tie rate) and is exact.
    sst = S.sign_test_sample_size(0.75, 0.3, 0.05, 0.8)
    assert S.sign_test_power(sst.trials_first, 0.75, 0.3) >= 0.8 > S.sign_test_power(sst.trials_first - 1, 0.75, 0.3)
    assert all(S.sign_test_power(n, 0.75, 0.3) >= 0.8 for n in range(sst.trials_stable, sst.trials_stable + 40))
    assert S.sign_test_power(sst.trials_stable - 1, 0.75, 0.3) < 0.8
    assert 0.9 < sst.trials_approx / (sst.discordant_approx / 0.7) < 1.2
    with pytest.raises(InputError, match="no effect"):
        S.sign_test_sample_size(0.5)


def test_normal_approximation_and_paired_proportions():
    # Connor 1987's formula agrees with exact power to a few points at moderate n.
    for n, w, t in [(60, 0.7, 0.2), (100, 0.62, 0.5)]:
        assert abs(S.sign_test_power_approx(n, w, t) - S.sign_test_power(n, w, t)) < 0.05
    # Paired proportions: P(first only) = 0.2, P(second only) = 0.05 is a 0.8 win rate
    # among 25% discordant pairs.
    assert S.paired_proportion_power(80, 0.2, 0.05) == pytest.approx(S.sign_test_power(80, 0.8, 0.75))
    ss = S.paired_proportion_sample_size(0.2, 0.05)
    assert S.paired_proportion_power(ss.trials_first, 0.2, 0.05) >= 0.8


def _simulate_tallies(n_trials: int, w: float, t: float, reps: int, rng) -> tuple[np.ndarray, np.ndarray]:
    d = rng.binomial(n_trials, 1 - t, size=reps)
    wins = rng.binomial(d, w)
    return wins, d - wins


def _rejects(wins: np.ndarray, losses: np.ndarray, alpha: float = 0.05) -> np.ndarray:
    # The public sign_test on each distinct tally, looked up per replicate.
    pairs = np.stack([wins, losses], 1)
    uniq, inv = np.unique(pairs, axis=0, return_inverse=True)
    p = np.array([S.sign_test(int(a), int(b)).p_value for a, b in uniq])
    return p[inv.ravel()] <= alpha


def test_sign_test_false_positive_rate_at_most_5_percent():
    rng = np.random.default_rng(3)
    for n_trials, t in [(20, 0.0), (40, 0.3), (100, 0.5)]:
        wins, losses = _simulate_tallies(n_trials, 0.5, t, 20_000, rng)
        rate = _rejects(wins, losses).mean()
        assert rate <= 0.05, (n_trials, t, rate)
        assert rate == pytest.approx(S.sign_test_power(n_trials, 0.5, t), abs=0.006)


def test_exact_power_predicts_simulated_power_within_003():
    rng = np.random.default_rng(5)
    for n_trials, w, t in [(30, 0.75, 0.0), (50, 0.7, 0.2), (40, 0.65, 0.1), (25, 0.25, 0.3)]:
        wins, losses = _simulate_tallies(n_trials, w, t, 5_000, rng)
        sim = _rejects(wins, losses).mean()
        assert abs(sim - S.sign_test_power(n_trials, w, t)) <= 0.03, (n_trials, w, t, sim)


# ------------------------------------------------------------------ agreement


def _kappa_by_formula(table: np.ndarray, weights: str | None) -> float:
    k = table.shape[0]
    i, j = np.indices((k, k))
    if weights is None:
        dis = (i != j).astype(float)
    elif weights == "linear":
        dis = np.abs(i - j) / (k - 1)
    else:
        dis = ((i - j) / (k - 1)) ** 2
    p = table / table.sum()
    expected = np.outer(p.sum(1), p.sum(0))
    return 1 - (dis * p).sum() / (dis * expected).sum()


@pytest.mark.parametrize("row", REF["kappa"], ids=lambda r: f"{len(r['table'])}x{len(r['table'])}")
def test_kappa_matches_statsmodels_and_formula(row):
    table = np.array(row["table"])
    k = table.shape[0]
    a, b = [], []
    for i in range(k):
        for j in range(k):
            a += [i + 1] * int(table[i, j])
            b += [j + 1] * int(table[i, j])
    ag = S.agreement(a, b)
    assert np.array_equal(np.array(ag.confusion), table)
    assert ag.kappa == pytest.approx(row["kappa"]) == pytest.approx(_kappa_by_formula(table, None))
    assert ag.kappa_linear == pytest.approx(row["linear"]) == pytest.approx(_kappa_by_formula(table, "linear"))
    assert ag.kappa_quadratic == pytest.approx(row["quadratic"]) == pytest.approx(_kappa_by_formula(table, "quadratic"))
    assert ag.kappa_se == pytest.approx(row["kappa_se"])
    assert ag.exact == pytest.approx(np.trace(table) / table.sum())
    near = sum(table[i, j] for i in range(k) for j in range(k) if abs(i - j) <= 1)
    assert ag.within_one == pytest.approx(near / table.sum())


def test_kappa_textbook_example_and_label_order():
    ex = PUB["cohen_kappa_2x2"]
    (yy, yn), (ny, nn) = ex["table"]
    a = ["yes"] * (yy + yn) + ["no"] * (ny + nn)
    b = ["yes"] * yy + ["no"] * yn + ["yes"] * ny + ["no"] * nn
    assert S.agreement(a, b, labels=["yes", "no"]).kappa == pytest.approx(ex["kappa"])
    # Label order changes weighted kappa, not the unweighted one.
    x, y = [1, 2, 3, 3, 1, 2], [1, 3, 3, 2, 2, 2]
    assert S.agreement(x, y, labels=[1, 2, 3]).kappa == pytest.approx(S.agreement(x, y, labels=[3, 1, 2]).kappa)
    assert S.agreement(x, y, labels=[1, 2, 3]).kappa_linear != pytest.approx(S.agreement(x, y, labels=[3, 1, 2]).kappa_linear)
    assert math.isnan(S.agreement([1, 1], [1, 1]).kappa)
    with pytest.raises(InputError, match="not among the categories"):
        S.agreement([1, 4], [1, 2], labels=[1, 2, 3])


def _alpha_by_coincidences(ratings, level: str) -> float:
    # Krippendorff 2011, section C: coincidence matrix over pairable values.
    values = sorted({v for r in ratings for v in r if v is not None})
    idx = {v: i for i, v in enumerate(values)}
    o = np.zeros((len(values), len(values)))
    for u in range(len(ratings[0])):
        vals = [r[u] for r in ratings if r[u] is not None]
        m = len(vals)
        if m < 2:
            continue
        for i, j in itertools.permutations(range(m), 2):
            o[idx[vals[i]], idx[vals[j]]] += 1 / (m - 1)
    nc = o.sum(1)
    n = nc.sum()
    v = np.array(values, dtype=float)
    if level == "nominal":
        delta = (v[:, None] != v[None, :]).astype(float)
    else:  # interval
        delta = (v[:, None] - v[None, :]) ** 2
    do = (o * delta).sum() / n
    de = (np.outer(nc, nc) * delta).sum() / (n * (n - 1))
    return 1 - do / de


def test_krippendorff_alpha_published_values_and_independent_computation():
    kr = PUB["krippendorff_2011"]
    for level, published in kr["alpha"].items():
        assert round(S.krippendorff_alpha(kr["ratings"], level), 3) == published
    for level in ("nominal", "interval"):
        assert S.krippendorff_alpha(kr["ratings"], level) == pytest.approx(_alpha_by_coincidences(kr["ratings"], level))
    wk = PUB["krippendorff_wikipedia"]
    assert round(S.krippendorff_alpha(wk["ratings"], "nominal"), 3) == wk["alpha"]["nominal"]
    words = [["lo", "hi", None], ["lo", "mid", "hi"]]
    assert S.krippendorff_alpha(words, "ordinal", value_domain=["lo", "mid", "hi"]) == pytest.approx(
        S.krippendorff_alpha([[0, 2, None], [0, 1, 2]], "ordinal", value_domain=[0, 1, 2])
    )
    with pytest.raises(InputError, match="value_domain"):
        S.krippendorff_alpha(words, "ordinal")


@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval", "ratio"])
def test_krippendorff_alpha_is_nan_when_every_rating_is_one_label(level, recwarn):
    # Review finding: a raw ValueError from the krippendorff package. Alpha is 0/0 here
    # (no expected disagreement): nan, like agreement()'s kappa with one category.
    assert math.isnan(S.krippendorff_alpha([[3, 3, 3], [3, 3, 3]], level))
    assert math.isnan(S.krippendorff_alpha([[3, None, 3], [3, 3, None]], level, value_domain=[1, 2, 3, 4, 5]))
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
    if level == "nominal":
        assert math.isnan(S.krippendorff_alpha([["a", "a"], ["a", "a"]], level))
        assert math.isnan(S.agreement([3, 3, 3], [3, 3, 3]).kappa)  # the same convention
    with pytest.raises(InputError, match="value_domain"):
        S.krippendorff_alpha([[9, 9], [9, 9]], level, value_domain=[1, 2, 3])
    # two labels present: a number again
    assert S.krippendorff_alpha([[3, 3, 3], [3, 3, 2]], level) < 1


# ------------------------------------------------------------------ sequential


def _simulate_sequential(design: S.SequentialDesign, w: float, t: float, reps: int, rng):
    """Vectorised replay of the design's boundaries on seeded outcome streams; returns
    (decision codes 1 pass / -1 regression / 0 no-improvement, trials used)."""
    horizon = int(design.max_discordant / (1 - t) * 2 + 60)
    u = rng.random((reps, horizon))
    step = np.where(u < t, 0, np.where(u < t + (1 - t) * w, 1, -1))
    wins = np.cumsum(step == 1, 1)
    d = np.cumsum(step != 0, 1)
    losses = d - wins
    dd = np.minimum(d, design.max_discordant)
    pa, fu = np.asarray(design.pass_at)[dd], np.asarray(design.futility_at)[dd]
    moved = step != 0
    is_pass = moved & (wins >= pa)
    is_reg = moved & (losses >= pa)
    is_none = moved & ((np.maximum(wins, losses) <= fu) | (d >= design.max_discordant))
    stop = is_pass | is_reg | is_none
    assert stop.any(1).all(), "horizon too short"
    first = stop.argmax(1)
    rows = np.arange(reps)
    code = np.where(is_pass[rows, first], 1, np.where(is_reg[rows, first], -1, 0))
    return code, first + 1


def test_sequential_type_one_error_at_most_alpha_exact_and_simulated():
    test = S.SequentialSignTest(win_rate=0.75, alpha=0.05, power=0.8)
    dz = test.design
    assert dz.type_i_error <= 0.05
    oc = test.operating_characteristics(0.5, tie_rate=0.2)
    assert oc.p_pass + oc.p_regression == pytest.approx(dz.type_i_error)
    rng = np.random.default_rng(17)
    reps = 20_000
    code, trials = _simulate_sequential(dz, 0.5, 0.2, reps, rng)
    rate = float(np.mean(code != 0))
    se = math.sqrt(dz.type_i_error * (1 - dz.type_i_error) / reps)
    assert abs(rate - dz.type_i_error) < 3 * se
    assert rate <= 0.05 + 2 * se
    assert trials.mean() == pytest.approx(oc.expected_trials, rel=0.03)
    # The designs for other effects hold alpha too.
    for w in (0.65, 0.9):
        assert S.SequentialSignTest(win_rate=w).design.type_i_error <= 0.05


def test_sequential_power_no_less_than_fixed_design():
    test = S.SequentialSignTest(win_rate=0.75, alpha=0.05, power=0.8)
    dz = test.design
    fixed = S.sign_test_sample_size(0.75, 0.0, 0.05, 0.8)
    assert dz.fixed_discordant == fixed.discordant_first
    oc = test.operating_characteristics(0.75)
    assert oc.p_pass == pytest.approx(dz.power_exact) and oc.p_pass >= fixed.power_at_first
    assert oc.expected_discordant < 0.75 * fixed.discordant_first
    code, trials = _simulate_sequential(dz, 0.75, 0.0, 20_000, np.random.default_rng(23))
    assert abs(np.mean(code == 1) - oc.p_pass) < 0.01


def test_sequential_incremental_and_batch_agree_with_boundaries():
    rng = np.random.default_rng(29)
    test = S.SequentialSignTest(win_rate=0.75)
    dz = test.design
    names = np.array(["loss", "tie", "win"])
    streams = rng.choice(3, size=(300, 200), p=[0.3, 0.2, 0.5]) - 1
    for s in streams:
        test.reset()
        state = test.run(names[s + 1])
        assert state.decision != "continue"
        assert state.trials == state.wins + state.losses + state.ties
        # Re-play one by one: same verdict, and every earlier state said "continue".
        inc = S.SequentialSignTest(win_rate=0.75)
        for i, o in enumerate(s[: state.trials]):
            st_ = inc.update(int(o))
            assert (st_.decision == "continue") == (i < state.trials - 1)
        assert st_ == state
        d, w = state.discordant, state.wins
        if state.decision == "pass":
            assert w >= dz.pass_at[d]
        elif state.decision == "regression":
            assert d - w >= dz.pass_at[d]
        else:
            assert max(w, d - w) <= dz.futility_at[d] or d == dz.max_discordant
        with pytest.raises(InputError, match="already stopped"):
            inc.update("win")
    with pytest.raises(InputError, match="outcome must be"):
        S.SequentialSignTest().update("draw")
    kw = S.SequentialSignTest(win_rate=0.75)
    assert kw.update(win=True).wins == 1 and kw.update(tie=True).ties == 1 and kw.update(win=False).losses == 1


def test_sequential_refuses_a_cap_too_small_for_the_power():
    with pytest.raises(InputError, match="too small to reach power"):
        S.SequentialSignTest(win_rate=0.75, max_discordant=30)
    capped = S.SequentialSignTest(win_rate=0.75, max_discordant=60).design
    assert capped.max_discordant == 60 and capped.type_i_error <= 0.05 and capped.power_exact >= 0.8


def test_sequential_sign_test_takes_a_whole_float_max_discordant():
    # Review finding: 40.0 passed the check and then failed building the design.
    from evalkit.stats import SequentialSignTest

    assert SequentialSignTest(max_discordant=40.0).design == SequentialSignTest(max_discordant=40).design
