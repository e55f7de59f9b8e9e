"""evalkit.numbers.stats against independent references, published tables and seeded simulations.

No reference value here was made by the calls evalkit.numbers.stats wraps (scipy, statsmodels,
krippendorff). They live in tests/data, each with the command that made it:

- tests/data/stats_exact.json: exact enumeration in rational arithmetic from the
  published definitions, standard library only (`python3 tests/data/make_stats_exact.py`).
  Compared at a relative 1e-12.
- tests/data/R/stats_reference.json: R's binom.test, prop.test, mcnemar.test, qbeta,
  dbinom/dmultinom sums, vcd::Kappa, psych::cohen.kappa, sandwich::vcovCL and
  Krippendorff's coincidences written in R (`Rscript tests/data/R/stats_reference.R`;
  R is not in CI, the tests read the recorded output). R wrote 15 significant digits;
  R's and scipy's floating point differ by up to 6e-14 on these values, so 1e-12.
- tests/data/stats_published.json: values typed in from papers, textbooks, R's and the
  human-eval repository's documentation, compared to their printed digits.

Simulations are seeded and vectorised; larger ones are in benchmarks/bench_sequential.py.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as st

from evalkit.numbers import stats as S
from evalkit.foundations.errors import InputError

DATA = Path(__file__).parent / "data"
EXACT = json.loads((DATA / "stats_exact.json").read_text())
RREF = json.loads((DATA / "R" / "stats_reference.json").read_text())
PUB = json.loads((DATA / "stats_published.json").read_text())
EXACT_REL = 1e-12
R_REL = 1e-12


def exact(value: str | int) -> float:
    """A value of stats_exact.json ("p/q", an int, or 40 significant digits) as a float."""
    return float(Fraction(value))


def close(got: float, want: float, rel: float) -> bool:
    # No absolute slack: where a reference is exactly 0, evalkit must return 0.
    return math.isclose(got, want, rel_tol=rel, abs_tol=0.0)


def printed(got: float, want: float, decimals: int) -> bool:
    """`got` shows as `want` when printed to `decimals` places (half a unit either way)."""
    return abs(got - want) <= 0.5 * 10**-decimals + 1e-12


# ------------------------------------------------------------------ pass@k / pass^k


@pytest.mark.parametrize("row", EXACT["pass_k"]["rows"], ids=lambda r: f"n{r['n']}c{r['c']}k{r['k']}")
def test_pass_k_match_exact_rationals(row):
    # The grid includes n = 1000 and 2000, where C(n, n/2) overflows a float: the
    # product forms evalkit uses must still agree with the exact ratio of binomials.
    n, c, k = row["n"], row["c"], row["k"]
    assert close(S.pass_at_k(n, c, k), exact(row["pass_at_k"]), EXACT_REL)
    assert close(S.pass_hat_k(n, c, k), exact(row["pass_hat_k"]), EXACT_REL)
    assert close(S.plugin_pass_hat_k(n, c, k), exact(row["plugin_pass_hat_k"]), EXACT_REL)


def test_pass_at_k_reproduces_the_human_eval_readme():
    # The README's sanity check: 3 of 6 samples correct, pass@1 printed as
    # 0.4999999999999999 by the numpy product form (the exact value is 1/2).
    he = PUB["human_eval_readme"]
    got = S.pass_at_k(he["n"], he["c"], he["k"])
    assert printed(got, he["pass_at_k"], he["decimals"])
    assert abs(got - 0.5) < 1e-15


def test_pass_k_are_averages_over_k_subsets():
    # Both estimators equal the mean, over all k-subsets of the n samples, of "any
    # correct" / "all correct": check by enumeration.
    samples = [1, 0, 1, 1, 0, 0, 1]
    n, c = len(samples), sum(samples)
    for k in range(1, n + 1):
        subsets = list(itertools.combinations(samples, k))
        assert S.pass_at_k(n, c, k) == pytest.approx(np.mean([any(s) for s in subsets]))
        assert S.pass_hat_k(n, c, k) == pytest.approx(np.mean([all(s) for s in subsets]))


def test_cached_pass_k_values_are_the_computed_ones_for_every_spelling_of_the_counts():
    """pass@k and pass^k are cached by (n, c, k): whatever spelling of a count comes first
    (int, float, numpy int), each call gets the value computed afresh for its own
    arguments, bit for bit; a refused call raises every time, cached or not."""
    for fn, raw in ((S.pass_at_k, S._pass_at_k.__wrapped__), (S.pass_hat_k, S._pass_hat_k.__wrapped__)):
        for n in range(1, 13):
            for c in range(n + 1):
                for k in range(1, n + 1):
                    for spelling in ((float(n), c, k), (np.int64(n), np.int64(c), k), (n, c, float(k)), (n, c, k)):
                        assert fn(*spelling) == raw(*spelling) and type(fn(*spelling)) is float
        for _ in range(2):
            with pytest.raises(S.StatsInputError):
                fn(3, 4, 1)
            with pytest.raises(S.StatsInputError):
                fn(3, 1, 4)


def test_pass_k_takes_counts_that_cannot_be_cache_keys_as_it_always_did():
    """A count the cache cannot hash (a 0-d numpy array, as `np.asarray` of a count
    gives) is computed as before the cache, not refused with a TypeError."""
    for fn, raw in ((S.pass_at_k, S._pass_at_k.__wrapped__), (S.pass_hat_k, S._pass_hat_k.__wrapped__)):
        assert fn(np.asarray(10), 3, np.asarray(2)) == raw(10, 3, 2) == fn(10, 3, 2)
        with pytest.raises(S.StatsInputError):
            fn(np.asarray(3), 4, 1)


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


@pytest.mark.parametrize("row", EXACT["suite"]["rows"], ids=lambda r: f"{len(r['counts'])}cases-k{r['k']}")
def test_suite_estimates_match_exact_mean_and_se_across_cases(row):
    counts = [tuple(nc) for nc in row["counts"]]
    for name, suite in (("pass_at_k", S.suite_pass_at_k), ("pass_hat_k", S.suite_pass_hat_k)):
        est = suite(counts, row["k"])
        assert close(est.value, exact(row[name]["value"]), EXACT_REL)
        assert close(est.se, exact(row[name]["se"]), EXACT_REL)
        assert est.n == len(counts)


def test_suite_estimate_of_one_case_has_no_se_and_k_above_n_is_refused():
    assert math.isnan(S.suite_pass_at_k([(4, 2)], 2).se)
    with pytest.raises(ValueError, match="k=5 is larger"):
        S.suite_pass_at_k([(10, 3), (4, 1)], 5)


# ------------------------------------------------------------------ intervals


@pytest.mark.parametrize("method", ["wilson", "clopper-pearson", "jeffreys"])
@pytest.mark.parametrize("row", RREF["intervals"]["rows"], ids=lambda r: f"{r['successes']}/{r['n']}a{r['alpha']}")
def test_intervals_match_r(row, method):
    # Jeffreys at x = 0 and x = n: R's reference sets Brown, Cai & DasGupta's end
    # points (0 and 1), which statsmodels alone does not.
    iv = S.proportion_interval(row["successes"], row["n"], method, row["alpha"])
    lo, hi = row[method]
    assert close(iv.low, lo, R_REL) and close(iv.high, hi, R_REL), (iv.low, iv.high, lo, hi)
    assert iv.method == method


def test_intervals_match_published_examples():
    nc = PUB["newcombe_1998_table1"]
    for r in nc["rows"]:
        for method in ("wilson", "clopper-pearson"):
            iv = S.proportion_interval(r["successes"], r["n"], method)
            assert printed(iv.low, r[method][0], nc["decimals"]) and printed(iv.high, r[method][1], nc["decimals"])
    m = PUB["r_binom_test_mendel"]
    iv = S.proportion_interval(m["successes"], m["n"], "clopper-pearson")
    assert printed(iv.low, m["clopper-pearson"][0], m["decimals"])
    assert printed(iv.high, m["clopper-pearson"][1], m["decimals"])
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
        exact_cov = sum(st.binom.pmf(x, n, p) for x, iv in zip(k, ivs) if iv.low <= p <= iv.high)
        assert abs(cov - exact_cov) < 0.006
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


def test_mean_and_se_match_r_sd_and_sandwich_cluster_se():
    m = RREF["mean_and_se"]["data"]
    clt = S.mean_and_se(m["values"])
    assert close(clt.value, m["mean"], R_REL) and close(clt.se, m["se"], R_REL)
    cl = S.mean_and_se(m["values"], clusters=m["clusters"])
    assert close(cl.se, m["se_clustered"], R_REL)
    assert cl.n_clusters == len(set(m["clusters"]))


def test_paired_difference_matches_r_t_test_and_sandwich():
    r = RREF["paired_difference"]["data"]
    pd_ = S.paired_difference(r["a"], r["b"])
    for field in ("mean", "se", "correlation", "low", "high", "se_unpaired"):
        assert close(getattr(pd_, field), r[field], R_REL), field
    assert close(S.paired_difference(r["a"], r["b"], clusters=r["clusters"]).se, r["se_clustered"], R_REL)


# ------------------------------------------------------------------ sign test, McNemar


@pytest.mark.parametrize("row", EXACT["sign_test"]["rows"], ids=lambda r: f"{r['wins']}-{r['losses']}")
def test_sign_test_matches_exact_enumeration(row):
    w, l = row["wins"], row["losses"]
    t = S.sign_test(w, l, ties=7)
    assert (t.wins, t.losses, t.ties, t.n) == (w, l, 7, w + l)
    assert close(t.p_value, exact(row["two_sided"]), EXACT_REL)
    assert close(t.p_one_sided, exact(row["greater"]), EXACT_REL)
    assert close(t.p_one_sided_losses, exact(row["less"]), EXACT_REL)


@pytest.mark.parametrize("row", RREF["sign_test"]["rows"], ids=lambda r: f"{r['wins']}-{r['losses']}")
def test_sign_test_matches_r_binom_test(row):
    t = S.sign_test(row["wins"], row["losses"])
    assert close(t.p_value, row["two_sided"], R_REL)
    assert close(t.p_one_sided, row["greater"], R_REL)
    assert close(t.p_one_sided_losses, row["less"], R_REL)


def test_sign_test_critical_values_match_exact_r_and_a_published_table():
    for row in EXACT["sign_critical"]["rows"]:
        alpha = exact(row["alpha"])
        d0 = row["discordant_from"]
        assert [S.sign_test_critical_value(d0 + i, alpha) for i in range(len(row["critical"]))] == row["critical"]
    for row in RREF["sign_critical"]["rows"]:
        assert [S.sign_test_critical_value(d, row["alpha"]) for d in row["discordant"]] == row["critical"]
    table = PUB["triola_sign_test_table"]
    for alpha, column in table["two_sided_alpha"].items():
        assert [S.sign_test_critical_value(d, float(alpha)) for d in table["discordant"]] == column, alpha


def test_sign_test_agrees_with_scipy_binomtest_over_a_grid_and_at_large_n():
    """The sign test sums binomial coefficients exactly (no scipy import for `evalkit
    verdict`): held to scipy.stats.binomtest, an independent implementation, over every
    tally up to 40 discordant pairs and a few large ones."""
    large = [(520, 480), (2400, 2600), (3, 1200), (5000, 5100), (6900, 3100), (9990, 10010), (10000, 10100)]
    assert S.EXACT_SIGN_MAX_N < 10000 + 10100  # the last past it: scipy's own
    for w, l in [(w, n - w) for n in range(1, 16) for w in range(n + 1)] + large:
        t = S.sign_test(w, l)
        for got, alt in ((t.p_value, "two-sided"), (t.p_one_sided, "greater"), (t.p_one_sided_losses, "less")):
            want = st.binomtest(w, w + l, 0.5, alternative=alt).pvalue
            assert got == pytest.approx(want, rel=1e-9, abs=1e-300), (w, l, alt)
    for n in range(16, 41):  # the tails alone past that (binomtest is slow per call): scipy's binom, vectorised
        w = np.arange(n + 1)
        got = np.array([[S.sign_test(int(x), n - int(x)).p_one_sided, S.sign_test(int(x), n - int(x)).p_value]
                        for x in w])
        assert np.allclose(got[:, 0], st.binom.sf(w - 1, n, 0.5), rtol=1e-9, atol=0)
        assert np.allclose(got[:, 1], np.minimum(1.0, 2 * st.binom.cdf(np.minimum(w, n - w), n, 0.5)), rtol=1e-9, atol=0)


def test_power_past_the_recursion_agrees_with_the_recursion(monkeypatch):
    """Past `RECURSION_MAX_N` pairs the rejection probabilities and the discordant-count
    distribution come from scipy.stats (O(n) where the recursion is O(n^2)): held to the
    recursion (itself held to scipy below) at sizes past the threshold, and the power is
    never past 1."""
    n0 = S.RECURSION_MAX_N
    cases = [(n0 + 200, 0.8, 0.3), (n0 + 1000, 0.55, 0.5), (n0 + 1, 0.52, 0.1), (n0 + 3000, 0.51, 0.0),
             (n0 + 500, 0.3, 0.2)]
    fast = [S.sign_test_power(n, w, t) for n, w, t in cases]
    r_fast = S._reject_prob(n0 + 700, 0.6, 0.01)
    monkeypatch.setattr(S, "RECURSION_MAX_N", 10**9)
    slow = [S.sign_test_power(n, w, t) for n, w, t in cases]
    r_slow = S._reject_prob(n0 + 700, 0.6, 0.01)
    for (n, w, t), a, b in zip(cases, fast, slow):
        assert 0 <= a <= 1 and a == pytest.approx(b, rel=1e-12, abs=1e-300), (n, w, t)
    assert ((r_fast == 0) == (r_slow == 0)).all()
    assert np.allclose(r_fast, r_slow, rtol=1e-11, atol=1e-290) and (r_fast <= 1).all()


def test_power_curves_agree_with_scipy_binom_over_a_grid():
    """The rejection regions (exact integers) and the binomial power curves (a recursion:
    `evalkit power` loads no scipy) held to scipy.stats.binom, an independent
    implementation, at every d up to 1500, and the power with ties to binom.pmf."""
    d = np.arange(1501)
    for alpha in (0.05, 0.01, 0.1, 0.05 / 3, 0.001):
        c = st.binom.ppf(alpha / 2, d, 0.5)
        want = np.maximum(np.where(2 * st.binom.cdf(c, d, 0.5) <= alpha, c, c - 1), -1).astype(int)
        assert (S._critical_values(1500, alpha) == want).all(), alpha
        for w in (0.55, 0.7, 0.9, 0.3):
            ref = np.where(want >= 0, st.binom.sf(d - want - 1, d, w) + st.binom.cdf(want, d, w), 0.0)
            got = S._reject_prob(1500, w, alpha)
            assert ((got == 0) == (ref == 0)).all()
            assert np.allclose(got, ref, rtol=1e-11, atol=0), (alpha, w)
    for n, w, t in [(300, 0.6, 0.4), (1000, 0.55, 0.1)]:
        r = S._reject_prob(n, w, 0.05)
        assert S.sign_test_power(n, w, t) == pytest.approx(float(np.dot(st.binom.pmf(d[: n + 1], n, 1 - t), r)),
                                                          rel=1e-11)


def test_the_power_curve_is_the_power_at_each_n_and_scipy_s_binomial_sum():
    """`sign_test_power_curve` gives, at every n, the float `sign_test_power(n)` gives (the
    same sums, done once), and the power scipy's binomial gives: the rejection region's
    mass under Bin(d, w) weighted by Bin(n, 1 - t) over the discordant count d."""
    for w, t, alpha in [(0.7, 0.0, 0.05), (0.8, 0.3, 0.05), (0.6, 0.6, 0.01), (0.35, 0.1, 0.1)]:
        curve = S.sign_test_power_curve(80, w, t, alpha)
        assert len(curve) == 81
        assert [float(v) for v in curve] == [S.sign_test_power(n, w, t, alpha) for n in range(81)]
        for n in (1, 17, 80):
            d = np.arange(n + 1)
            c = st.binom.ppf(alpha / 2, d, 0.5)
            crit = np.maximum(np.where(2 * st.binom.cdf(c, d, 0.5) <= alpha, c, c - 1), -1)
            reject = np.where(crit >= 0, st.binom.sf(d - crit - 1, d, w) + st.binom.cdf(crit, d, w), 0.0)
            assert curve[n] == pytest.approx(float(np.dot(st.binom.pmf(d, n, 1 - t), reject)), rel=1e-10, abs=1e-15)


def test_sign_test_ties_do_not_change_p_and_no_pairs_is_p_one():
    assert S.sign_test(9, 3, 0).p_value == S.sign_test(9, 3, 50).p_value
    assert S.sign_test(0, 0, 5).p_value == 1.0
    # Six discordant pairs is the least that can reach p <= 0.05 (two-sided).
    assert S.sign_test(5, 0).p_value > 0.05 and S.sign_test(6, 0).p_value <= 0.05
    assert S.sign_test_critical_value(5) == -1 and S.sign_test_critical_value(6) == 0
    with pytest.raises(InputError):
        S.sign_test(-1, 2)


@pytest.mark.parametrize("row", RREF["mcnemar"]["rows"], ids=lambda r: f"{r['b']}-{r['c']}")
def test_mcnemar_matches_r_mcnemar_test_and_binom_test(row):
    # Rows with b == c: R applies no continuity correction there (statistic 0, p 1).
    b, c = row["b"], row["c"]
    ex = S.mcnemar(b, c, exact=True)
    assert close(ex.p_value, row["exact_p"], R_REL) and ex.exact
    # the exact McNemar test is the sign test on the discordant pairs (statsmodels sums in floats,
    # the sign test exactly in integers: equal to the last few bits)
    assert ex.p_value == pytest.approx(S.sign_test(b, c).p_value, rel=1e-12)
    ch = S.mcnemar(b, c, exact=False)
    assert close(ch.statistic, row["chi2"], R_REL) and close(ch.p_value, row["chi2_p"], R_REL)
    assert S.mcnemar(b, c).exact == (b + c < 25)


# ------------------------------------------------------------------ power


@pytest.mark.parametrize("row", EXACT["power"]["rows"], ids=lambda r: f"n{r['n_trials']}w{r['win_rate']}t{r['tie_rate']}")
def test_exact_power_matches_exact_enumeration(row):
    got = S.sign_test_power(row["n_trials"], exact(row["win_rate"]), exact(row["tie_rate"]), exact(row["alpha"]))
    assert close(got, exact(row["power"]), EXACT_REL)


@pytest.mark.parametrize("row", RREF["power"]["rows"], ids=lambda r: f"n{r['n_trials']}w{r['win_rate']}t{r['tie_rate']}")
def test_power_and_connor_approximation_match_r(row):
    args = (row["n_trials"], row["win_rate"], row["tie_rate"], row["alpha"])
    assert close(S.sign_test_power(*args), row["power"], R_REL)
    assert close(S.sign_test_power_approx(*args), row["power_connor"], R_REL)


@pytest.mark.parametrize("row", RREF["paired_proportion_power"]["rows"], ids=lambda r: f"n{r['n_pairs']}")
def test_paired_proportion_power_matches_r_trinomial_enumeration(row):
    got = S.paired_proportion_power(row["n_pairs"], row["p_first_only"], row["p_second_only"], row["alpha"])
    assert close(got, row["power"], R_REL)


def test_critical_values_agree_with_sign_test():
    for d in range(1, 120):
        c = S.sign_test_critical_value(d)
        assert (S.sign_test(c, d - c).p_value <= 0.05) if c >= 0 else True
        assert S.sign_test(c + 1, d - c - 1).p_value > 0.05


@pytest.mark.parametrize("row", EXACT["sample_size"]["rows"], ids=lambda r: f"w{r['win_rate']}t{r['tie_rate']}")
def test_sample_size_matches_exact_power_curve(row):
    w, t = exact(row["win_rate"]), exact(row["tie_rate"])
    ss = S.sign_test_sample_size(w, t, exact(row["alpha"]), exact(row["power"]))
    assert (ss.trials_first, ss.trials_stable) == (row["first"], row["stable"])
    if t == 0:
        assert (ss.discordant_first, ss.discordant_stable) == (row["first"], row["stable"])
    assert close(ss.power_at_first, exact(row["power_at_first"]), EXACT_REL)
    assert close(ss.power_at_stable, exact(row["power_at_stable"]), EXACT_REL)


@pytest.mark.parametrize("row", RREF["sample_size"]["rows"], ids=lambda r: f"w{r['win_rate']}t{r['tie_rate']}a{r['alpha']}")
def test_sample_size_matches_r(row):
    ss = S.sign_test_sample_size(row["win_rate"], row["tie_rate"], row["alpha"], row["power"])
    for field in ("discordant_first", "discordant_stable", "trials_first", "trials_stable",
                  "discordant_approx", "trials_approx"):
        assert getattr(ss, field) == row[field], field
    assert close(ss.power_at_first, row["power_at_first"], R_REL)
    assert close(ss.power_at_stable, row["power_at_stable"], R_REL)


def test_sample_size_sawtooth_first_and_stable():
    ss = S.sign_test_sample_size(0.75, 0.0, 0.05, 0.8)
    curve = [S.sign_test_power(n, 0.75) for n in range(0, 3 * ss.discordant_stable)]
    first = next(n for n, p in enumerate(curve) if p >= 0.8)
    stable = max(n for n, p in enumerate(curve) if p < 0.8) + 1
    assert (ss.discordant_first, ss.discordant_stable) == (first, stable)
    assert curve[first + 1] < 0.8  # the sawtooth: one more pair loses power again
    assert ss.trials_first == first and ss.power_at_first == curve[first]
    assert abs(ss.discordant_approx - first) <= 3
    # With ties the trial count scales roughly by 1 / (1 - tie rate).
    sst = S.sign_test_sample_size(0.75, 0.3, 0.05, 0.8)
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


def _raters_from_table(table: list[list[int]]) -> tuple[list[int], list[int]]:
    """Two raters' labels (category positions 0..K-1) whose confusion matrix is `table`."""
    a: list[int] = []
    b: list[int] = []
    for i, row in enumerate(table):
        for j, count in enumerate(row):
            a += [i] * count
            b += [j] * count
    return a, b


@pytest.mark.parametrize("row", EXACT["kappa"]["rows"], ids=lambda r: str(r["table"]))
def test_kappa_matches_exact_rationals(row):
    table = row["table"]
    ag = S.agreement(*_raters_from_table(table), labels=list(range(len(table))))
    assert [list(r) for r in ag.confusion] == table
    assert close(ag.kappa, exact(row["kappa"]), EXACT_REL)
    assert close(ag.kappa_linear, exact(row["linear"]), EXACT_REL)
    assert close(ag.kappa_quadratic, exact(row["quadratic"]), EXACT_REL)
    k, n = len(table), sum(map(sum, table))
    assert ag.exact == sum(table[i][i] for i in range(k)) / n
    assert ag.within_one == sum(table[i][j] for i in range(k) for j in range(k) if abs(i - j) <= 1) / n


@pytest.mark.parametrize("row", RREF["kappa"]["rows"], ids=lambda r: str(r["table"]))
def test_kappa_and_its_se_match_r_vcd_and_psych(row):
    table = row["table"]
    ag = S.agreement(*_raters_from_table(table), labels=list(range(len(table))))
    for field, key in (("kappa", "kappa"), ("kappa_se", "kappa_se"), ("kappa_low", "kappa_low"),
                       ("kappa_high", "kappa_high"), ("kappa_linear", "linear"), ("kappa_quadratic", "quadratic"),
                       ("kappa", "psych_kappa"), ("kappa_se", "psych_kappa_se"), ("kappa_quadratic", "psych_quadratic")):
        assert close(getattr(ag, field), row[key], R_REL), key


def test_kappa_matches_published_sas_and_irr_printouts():
    sas = PUB["sas_kappa"]
    ag = S.agreement(*_raters_from_table(sas["table"]), labels=[0, 1, 2])
    for field in ("kappa", "kappa_se", "kappa_low", "kappa_high", "kappa_linear"):
        assert printed(getattr(ag, field), sas[field], sas["decimals"]), field
    irr = PUB["irr_kappa2_anxiety"]
    ag = S.agreement(irr["rater2"], irr["rater3"])  # default labels: the levels present, sorted
    assert ag.labels == (1, 2, 3, 4, 6)
    for field in ("kappa", "kappa_linear", "kappa_quadratic"):
        want = irr[field]
        assert abs(getattr(ag, field) - want) <= 0.5 * 10 ** (math.floor(math.log10(abs(want))) - irr["significant_digits"] + 1)


def test_kappa_textbook_example_and_label_order():
    ex = PUB["cohen_kappa_2x2"]
    (yy, yn), (ny, nn) = ex["table"]
    a = ["yes"] * (yy + yn) + ["no"] * (ny + nn)
    b = ["yes"] * yy + ["no"] * yn + ["yes"] * ny + ["no"] * nn
    assert printed(S.agreement(a, b, labels=["yes", "no"]).kappa, ex["kappa"], ex["decimals"])
    # Label order changes weighted kappa, not the unweighted one.
    x, y = [1, 2, 3, 3, 1, 2], [1, 3, 3, 2, 2, 2]
    assert S.agreement(x, y, labels=[1, 2, 3]).kappa == pytest.approx(S.agreement(x, y, labels=[3, 1, 2]).kappa)
    assert S.agreement(x, y, labels=[1, 2, 3]).kappa_linear != pytest.approx(S.agreement(x, y, labels=[3, 1, 2]).kappa_linear)
    assert math.isnan(S.agreement([1, 1], [1, 1]).kappa)
    with pytest.raises(InputError, match="not among the categories"):
        S.agreement([1, 4], [1, 2], labels=[1, 2, 3])


@pytest.mark.parametrize("row", EXACT["krippendorff"]["rows"], ids=lambda r: r["name"])
def test_krippendorff_alpha_matches_exact_rationals(row):
    for level, want in row["alpha"].items():
        assert close(S.krippendorff_alpha(row["ratings"], level), exact(want), EXACT_REL), level


@pytest.mark.parametrize("row", RREF["krippendorff"]["rows"], ids=lambda r: r["name"])
def test_krippendorff_alpha_matches_r(row):
    for level, want in row["alpha"].items():
        assert close(S.krippendorff_alpha(row["ratings"], level), want, R_REL), level


def test_krippendorff_alpha_published_values_and_value_domain():
    for name in ("krippendorff_2011", "krippendorff_wikipedia"):
        kr = PUB[name]
        for level, published in kr["alpha"].items():
            assert printed(S.krippendorff_alpha(kr["ratings"], level), published, kr["decimals"]), (name, level)
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


@pytest.mark.parametrize("row", EXACT["sequential"]["rows"], ids=lambda r: f"w{r['win_rate']}t{r['tie_rate']}")
def test_sequential_operating_characteristics_match_exact_recursion(row):
    # Fixed boundaries (Wald's SPRT of 3/4 against 1/2, truncated at 40 pairs) put in
    # place of the calibrated ones: the exact crossing probabilities of any boundaries.
    ref = EXACT["sequential"]
    test = S.SequentialSignTest(win_rate=0.75)
    test.design = dataclasses.replace(test.design, pass_at=tuple(ref["pass_at"]),
                                      futility_at=tuple(ref["futility_at"]), max_discordant=ref["max_discordant"])
    oc = test.operating_characteristics(exact(row["win_rate"]), exact(row["tie_rate"]))
    for field in ("p_pass", "p_regression", "p_no_improvement", "expected_discordant", "expected_trials"):
        assert close(getattr(oc, field), exact(row[field]), EXACT_REL), field


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
    from evalkit.numbers.stats import SequentialSignTest

    assert SequentialSignTest(max_discordant=40.0).design == SequentialSignTest(max_discordant=40).design


# The standard normal's quantiles at four points, to 15 significant digits as they are
# commonly tabulated (the 9-decimal tables of Abramowitz & Stegun 1964, ch. 26, agree)
NORMAL_QUANTILES = {0.95: 1.64485362695147, 0.975: 1.95996398454005, 0.995: 2.57582930354890,
                    0.9995: 3.29052673149193}


def test_the_normal_quantile_is_the_published_one_and_scipys_to_2e_15():
    for p, z in NORMAL_QUANTILES.items():
        assert S.normal_quantile(p) == pytest.approx(z, abs=1e-13)
        assert S.normal_quantile(1 - p) == pytest.approx(-z, abs=1e-13)
    for p in [1e-12, 1e-6, 0.001, 0.0125, 0.05 / 7, *np.linspace(0.001, 0.999, 997), 1 - 1e-9]:
        ours, theirs = S.normal_quantile(float(p)), float(st.norm.ppf(p))
        assert abs(ours - theirs) <= 2e-15 * abs(theirs), (p, ours, theirs)


def test_an_estimates_interval_is_the_normal_interval_scipy_gives():
    e = S.Estimate(value=0.4, se=0.05, n=60)
    for alpha in (0.01, 0.05, 0.1, 0.05 / 3):
        lo, hi = e.interval(alpha)
        ref_lo, ref_hi = st.norm.interval(1 - alpha, loc=0.4, scale=0.05)
        assert (lo, hi) == (pytest.approx(ref_lo, abs=1e-15), pytest.approx(ref_hi, abs=1e-15))


def test_cluster_codes_are_each_labels_rank_among_the_sorted_distinct_labels():
    """`_as_clusters` numbers the labels as numpy's sorted unique does (ranks by the
    labels' text), so a clustered SE sums the clusters in the same order."""
    rnd = np.random.default_rng(4)
    labels = [rnd.choice(["b", "a", "Zé", "case 10", "case 9", 3, 2.5]) for _ in range(500)]
    _, want = np.unique(np.asarray([str(x) for x in labels], dtype=object), return_inverse=True)
    got = S._as_clusters(labels, len(labels))
    assert got is not None and got.tolist() == want.tolist()


def test_a_power_is_never_past_one():
    """Power sums rounded probabilities: where it is 1 to the last bit the sums could reach
    1 + 2**-52 (`sign_test_power(25, 0.999)` did); every path is held to [0, 1]."""
    assert S.sign_test_power(25, 0.999) <= 1 and S.sign_test_power(179, 0.99) <= 1
    assert S.sign_test_power_curve(300, 0.99).max() <= 1 and S.sign_test_power_curve(800, 0.99, 0.1).max() <= 1
    assert S._reject_prob(400, 0.995, 0.05).max() <= 1 and S._trial_power_curve(300, 0.99, 0.1, 0.05).max() <= 1
