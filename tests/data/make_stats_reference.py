"""Regenerate tests/data/stats_reference.json: reference values for tests/test_stats.py.

Run once, by hand, from the repository root:

    .venv/bin/python tests/data/make_stats_reference.py

Every value comes from an implementation other than `evalkit.stats`, or from a
published example, so the tests compare evalkit against something it did not compute:

- pass@k: the HumanEval numpy estimator (Chen et al. 2021, `human_eval/evaluation.py`,
  `estimate_pass_at_k`'s inner `estimator`), re-typed below, and exact rationals
  1 - C(n-c,k)/C(n,k) from `math.comb` + `fractions`.
- pass^k: exact rationals C(c,k)/C(n,k).
- proportion intervals: scipy's own implementations (`binomtest(...).proportion_ci`,
  methods "wilson" and "exact") and Jeffreys from `scipy.stats.beta.ppf` directly;
  evalkit uses statsmodels, so these are independent. Published: R's
  `binom.test(682, 925, p = 3/4)` example (Mendel's peas), and Newcombe 1998 Table I.
- sign test: scipy `binomtest` p-values (two-sided, greater, less).
- McNemar: statsmodels `mcnemar`, exact and chi-square with continuity correction.
- Cohen's kappa: statsmodels `cohens_kappa` (unweighted, linear, quadratic) on fixed
  tables, and the textbook 2x2 example (kappa = 0.4).
- Krippendorff's alpha: the published values for the 4-coder x 12-unit example of
  Krippendorff 2011 and the 3-coder example on Wikipedia.

The published values are typed in from their sources (cited beside them) and are never
regenerated.
"""
from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import scipy
import statsmodels
from scipy import stats
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.inter_rater import cohens_kappa

OUT = Path(__file__).with_name("stats_reference.json")


def humaneval_estimator(n: int, c: int, k: int) -> float:
    """Chen et al. 2021, HumanEval `estimate_pass_at_k` inner estimator (numpy)."""
    if n - c < k:
        return 1.0
    return 1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1))


def exact_pass_at_k(n: int, c: int, k: int) -> float:
    return float(1 - Fraction(math.comb(n - c, k), math.comb(n, k)))


def exact_pass_hat_k(n: int, c: int, k: int) -> float:
    return float(Fraction(math.comb(c, k), math.comb(n, k)))


def main() -> None:
    grid = [(n, c, k) for n in (1, 2, 4, 5, 10, 20, 50, 200) for c in sorted({0, 1, n // 3, n // 2, n - 1, n}) if 0 <= c <= n for k in sorted({1, 2, 3, n // 2, n}) if 1 <= k <= n]
    pass_k = [
        {
            "n": n,
            "c": c,
            "k": k,
            "pass_at_k_humaneval": float(humaneval_estimator(n, c, k)),
            "pass_at_k_exact": exact_pass_at_k(n, c, k),
            "pass_hat_k_exact": exact_pass_hat_k(n, c, k),
        }
        for n, c, k in grid
    ]

    intervals = []
    for x, n in [(0, 10), (1, 10), (5, 10), (10, 10), (3, 40), (17, 60), (81, 263), (199, 200), (682, 925)]:
        for alpha in (0.05, 0.1):
            ci = stats.binomtest(x, n).proportion_ci
            w = ci(confidence_level=1 - alpha, method="wilson")
            e = ci(confidence_level=1 - alpha, method="exact")
            j_lo = stats.beta.ppf(alpha / 2, x + 0.5, n - x + 0.5)
            j_hi = stats.beta.ppf(1 - alpha / 2, x + 0.5, n - x + 0.5)
            intervals.append(
                {
                    "successes": x,
                    "n": n,
                    "alpha": alpha,
                    "wilson": [w.low, w.high],
                    "clopper-pearson": [e.low, e.high],
                    "jeffreys": [float(j_lo), float(j_hi)],
                }
            )

    sign = []
    for w, l in [(0, 0), (1, 0), (5, 0), (6, 0), (5, 1), (9, 3), (12, 4), (20, 20), (30, 18), (3, 17), (100, 70)]:
        n = w + l
        if n == 0:
            continue
        sign.append(
            {
                "wins": w,
                "losses": l,
                "two_sided": stats.binomtest(w, n, 0.5).pvalue,
                "greater": stats.binomtest(w, n, 0.5, alternative="greater").pvalue,
                "less": stats.binomtest(w, n, 0.5, alternative="less").pvalue,
            }
        )

    mcn = []
    for b, c in [(3, 10), (0, 7), (12, 12), (30, 14), (150, 86)]:
        ex = mcnemar([[0, b], [c, 0]], exact=True)
        ch = mcnemar([[0, b], [c, 0]], exact=False, correction=True)
        mcn.append({"b": b, "c": c, "exact_p": ex.pvalue, "chi2": ch.statistic, "chi2_p": ch.pvalue})

    kappa = []
    for table in (
        [[20, 5], [10, 15]],
        [[10, 4, 1], [3, 12, 5], [0, 6, 14]],
        [[30, 6, 2, 0], [4, 25, 7, 1], [1, 5, 20, 6], [0, 1, 4, 18]],
    ):
        t = np.array(table)
        kappa.append(
            {
                "table": table,
                "kappa": float(cohens_kappa(t, return_results=False)),
                "linear": float(cohens_kappa(t, wt="linear", return_results=False)),
                "quadratic": float(cohens_kappa(t, wt="quadratic", return_results=False)),
                "kappa_se": float(cohens_kappa(t).std_kappa),
            }
        )

    ref = {
        "_generated_by": "tests/data/make_stats_reference.py",
        "_versions": {"numpy": np.__version__, "scipy": scipy.__version__, "statsmodels": statsmodels.__version__},
        "pass_k": pass_k,
        "intervals": intervals,
        "sign_test": sign,
        "mcnemar": mcn,
        "kappa": kappa,
        "published": {
            "r_binom_test_mendel": {
                "source": "R documentation ?binom.test example: binom.test(c(682, 243), p = 3/4)",
                "successes": 682,
                "n": 925,
                "p": 0.75,
                "p_value": 0.3825,
                "conf_int": [0.7076683, 0.7654066],
            },
            "newcombe_1998_table1": {
                "source": "Newcombe 1998, Statistics in Medicine 17:857-872, Table I (95%, 4 d.p.)",
                "rows": [
                    {"successes": 81, "n": 263, "wilson": [0.2553, 0.3662], "clopper-pearson": [0.2527, 0.3676]},
                    {"successes": 15, "n": 148, "wilson": [0.0624, 0.1605], "clopper-pearson": [0.0578, 0.1617]},
                    {"successes": 0, "n": 20, "wilson": [0.0, 0.1611], "clopper-pearson": [0.0, 0.1684]},
                    {"successes": 1, "n": 29, "wilson": [0.0061, 0.1718], "clopper-pearson": [0.0009, 0.1776]},
                ],
            },
            "cohen_kappa_2x2": {
                "source": "Textbook 2x2 example (e.g. Wikipedia 'Cohen's kappa', 50 proposals): po=0.7, pe=0.5",
                "table": [[20, 5], [10, 15]],
                "kappa": 0.4,
            },
            "krippendorff_2011": {
                "source": "Krippendorff 2011, 'Computing Krippendorff's Alpha-Reliability', section C (4 observers x 12 units)",
                "ratings": [
                    [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
                    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
                    [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
                    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
                ],
                "alpha": {"nominal": 0.743, "ordinal": 0.815, "interval": 0.849, "ratio": 0.797},
            },
            "krippendorff_wikipedia": {
                "source": "Wikipedia 'Krippendorff's alpha', computational example (3 coders x 15 units)",
                "ratings": [
                    [None, None, None, None, None, 3, 4, 1, 2, 1, 1, 3, 3, None, 3],
                    [1, None, 2, 1, 3, 3, 4, 3, None, None, None, None, None, None, None],
                    [None, None, 2, 1, 3, 4, 4, None, 2, 1, 1, 3, 3, None, 4],
                ],
                "alpha": {"nominal": 0.691},
            },
        },
    }
    tmp = OUT.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(ref, indent=1) + "\n")
    tmp.replace(OUT)
    print(f"wrote {OUT} ({len(pass_k)} pass@k rows, {len(intervals)} intervals)")


if __name__ == "__main__":
    main()
