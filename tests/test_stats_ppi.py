"""The prediction-powered estimate (`stats.ppi_mean`) held to the authors' own
implementation, `ppi-python` (dev lock only: evalkit never imports it), on seeded
synthetic judge-vs-human data, and its coverage by a fast seeded simulation (the full
one, 2,000 replications per n, is benchmarks/bench_ppi_coverage.py)."""

from __future__ import annotations

import math

import numpy as np
import ppi_py
import pytest

from evalkit.numbers import stats as S


def _judge_data(seed: int, N: int = 500, n: int = 40, p: float = 0.6, up: float = 0.09, down: float = 0.01):
    """A run of N judged samples with a true human pass rate p and a generous judge:
    it passes a failing sample for `up` of all samples and fails a passing one for
    `down` (+8 points of bias, 10% disagreement for the defaults); n of them labelled."""
    rng = np.random.default_rng(seed)
    y = rng.random(N) < p
    u = rng.random(N)
    yhat = np.where(y, u >= down / p, u < up / (1 - p))
    idx = rng.choice(N, n, replace=False)
    return y[idx].astype(float), yhat[idx].astype(float), yhat.astype(float), y


@pytest.mark.parametrize("seed,n", [(0, 20), (1, 40), (2, 80), (3, 7), (4, 200)])
def test_ppi_mean_equals_ppi_python(seed, n):
    Y, Yh, Yu, _ = _judge_data(seed, n=n)
    e = S.ppi_mean(Y, Yh, Yu)  # power-tuned (PPI++), plain CLT interval
    point = float(np.squeeze(ppi_py.ppi_mean_pointestimate(Y, Yh, Yu)))
    low, high = (float(np.squeeze(x)) for x in ppi_py.ppi_mean_ci(Y, Yh, Yu, alpha=0.05))
    assert e.value == pytest.approx(point, abs=1e-9)
    assert (e.low, e.high) == pytest.approx((low, high), abs=1e-9)
    assert (e.clt_low, e.clt_high) == (e.low, e.high) and e.adjust == 0
    assert 0 <= e.lam <= 1 and (e.n, e.N) == (n, 500)
    for lam in (0.0, 0.5, 1.0):  # fixed weights: plain PPI and the classical estimate
        f = S.ppi_mean(Y, Yh, Yu, lam=lam, alpha=0.1)
        assert f.value == pytest.approx(float(np.squeeze(ppi_py.ppi_mean_pointestimate(Y, Yh, Yu, lam=lam))), abs=1e-9)
        ci = ppi_py.ppi_mean_ci(Y, Yh, Yu, alpha=0.1, lam=lam)
        assert (f.low, f.high) == pytest.approx((float(np.squeeze(ci[0])), float(np.squeeze(ci[1]))), abs=1e-9)
    assert S.ppi_mean(Y, Yh, Yu, lam=0).value == pytest.approx(Y.mean(), abs=1e-12)


def test_adjusted_interval_keeps_the_estimate_and_widens_a_disagreement_free_label_set():
    Y, Yh, Yu, _ = _judge_data(5, n=20)
    plain, adj = S.ppi_mean(Y, Yh, Yu), S.ppi_mean(Y, Yh, Yu, adjust=1.0)
    assert adj.value == plain.value and adj.lam == plain.lam
    assert (adj.clt_low, adj.clt_high) == (plain.low, plain.high)
    # 20 labels in full agreement with the judge: the plain rectifier variance is 0
    Y0 = np.array([1.0] * 12 + [0.0] * 8)
    flat = S.ppi_mean(Y0, Y0, Yu)
    wide = S.ppi_mean(Y0, Y0, Yu, adjust=1.0)
    assert wide.high - wide.low > 2 * (flat.high - flat.low)
    # the judge's bias: judge minus human on the labelled items
    assert adj.bias == pytest.approx(float((Yh - Y).mean()), abs=1e-12)
    assert adj.bias_low < adj.bias < adj.bias_high


def test_ppi_mean_refuses_bad_input():
    with pytest.raises(ValueError, match="at least 2 labelled"):
        S.ppi_mean([1.0], [1.0], [1.0, 0.0])
    with pytest.raises(ValueError, match="0/1 labels"):
        S.ppi_mean([0.5, 1.0], [1.0, 1.0], [1.0, 0.0], adjust=1.0)
    with pytest.raises(ValueError, match="lam must be in"):
        S.ppi_mean([0.0, 1.0], [1.0, 1.0], [1.0, 0.0], lam=2.0)
    with pytest.raises(ValueError, match="finite"):
        S.ppi_mean([0.0, math.nan], [1.0, 1.0], [1.0, 0.0])


def test_coverage_seeded_fast():
    """400 replications at n = 40: the adjusted interval covers the human rate 95% of the
    time (band +-3.3 points: 3 binomial SEs of sqrt(.95 * .05 / 400) = 1.1 points); the
    judge-only Wilson interval, 8 points off, almost never does."""
    rng = np.random.default_rng(20231)
    reps, covered, naive = 400, 0, 0
    for _ in range(reps):
        Y, Yh, Yu, _ = _judge_data(int(rng.integers(2**31)), n=40)
        e = S.ppi_mean(Y, Yh, Yu, adjust=1.0)
        covered += e.low <= 0.6 <= e.high
        ci = S.proportion_interval(int(Yu.sum()), Yu.size)
        naive += ci.low <= 0.6 <= ci.high
    se = math.sqrt(0.95 * 0.05 / reps)
    assert abs(covered / reps - 0.95) <= 3 * se, covered / reps
    assert naive / reps < 0.2
