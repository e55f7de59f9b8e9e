"""Regenerate tests/data/stats_exact.json: exact reference values for tests/test_stats.py.

Run by hand, from the repository root (standard library only):

    python3 tests/data/make_stats_exact.py

Every value is computed from its published definition by enumeration in rational
arithmetic (`fractions`, `math.comb`). The script imports neither evalkit nor numpy,
scipy or statsmodels, so it shares no code with what the tests check. Values are written
as exact fractions "p/q" where numerator and denominator are short, otherwise as the
exact value rounded to 40 significant digits; square roots (standard errors) are
rounded to 40 digits. Either form parses with `fractions.Fraction`.

The definitions, each cited in its block of the JSON:

- pass@k = 1 - C(n-c, k) / C(n, k) (Chen et al. 2021, eq. 1); pass^k = C(c, k) / C(n, k)
  (Yao et al. 2024); the plug-in (c/n)^k. Suite values: the mean over cases and the
  standard error sd / sqrt(cases) with the n - 1 sample variance (Miller 2024, eq. 1-2).
- The exact sign test at p = 1/2: one-sided tails, and the two-sided p-value as the sum
  of the probabilities no larger than the observed one; critical values; exact power
  with ties as binomial thinning; first and stable sample sizes of the sawtooth.
- Cohen's kappa (Cohen 1960) and weighted kappa (Cohen 1968) with linear and quadratic
  disagreement weights on category positions.
- Krippendorff's alpha at the four levels, from the coincidence matrix (Krippendorff
  2011, section C).
- Operating characteristics of a truncated sequential sign test with fixed boundaries,
  by forward recursion over (pairs, wins) with absorbed mass removed.
"""
from __future__ import annotations

import json
import math
import platform
from decimal import Decimal, getcontext
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

OUT = Path(__file__).with_name("stats_exact.json")
COMMAND = "python3 tests/data/make_stats_exact.py"
DIGITS = 40
getcontext().prec = DIGITS + 10


def show(x: Fraction | int) -> str | int:
    """An exact value as JSON: an int, "p/q" when short, else 40 significant digits."""
    x = Fraction(x)
    if x.denominator == 1 and abs(x.numerator) < 2**53:
        return int(x)
    if len(str(x.numerator)) <= 30 and len(str(x.denominator)) <= 30:
        return f"{x.numerator}/{x.denominator}"
    return format(Decimal(x.numerator) / Decimal(x.denominator), f".{DIGITS - 1}e")


def show_sqrt(x: Fraction) -> str:
    """sqrt of an exact non-negative rational, to 40 significant digits."""
    return format((Decimal(x.numerator) / Decimal(x.denominator)).sqrt(), f".{DIGITS - 1}e")


# --------------------------------------------------------------------- pass@k, pass^k


def pass_at_k(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def pass_hat_k(n: int, c: int, k: int) -> Fraction:
    return Fraction(math.comb(c, k), math.comb(n, k))


def plugin(n: int, c: int, k: int) -> Fraction:
    return Fraction(c, n) ** k


def pass_k_block() -> dict:
    grid = sorted(
        {
            (n, c, k)
            for n in (1, 2, 4, 5, 10, 20, 50, 200)
            for c in {0, 1, n // 3, n // 2, n - 1, n}
            for k in {1, 2, 3, n // 2, n}
            if 0 <= c <= n and 1 <= k <= n
        }
        | {(2000, 3, 1000), (2000, 1990, 1000), (1000, 10, 500), (6, 3, 1)}
    )
    rows = [
        {"n": n, "c": c, "k": k, "pass_at_k": show(pass_at_k(n, c, k)),
         "pass_hat_k": show(pass_hat_k(n, c, k)), "plugin_pass_hat_k": show(plugin(n, c, k))}
        for n, c, k in grid
    ]
    return {
        "definition": "pass@k = 1 - C(n-c,k)/C(n,k); pass^k = C(c,k)/C(n,k); plug-in (c/n)^k",
        "reference": "Chen et al. 2021, 'Evaluating Large Language Models Trained on Code', arXiv:2107.03374, "
        "section 2.1 eq. 1; Yao et al. 2024, 'tau-bench', arXiv:2406.12045, section 3",
        "rows": rows,
    }


def suite_block() -> dict:
    cases = [
        ([(4, 0), (4, 1), (4, 4), (5, 2), (10, 9)], 2),
        ([(10, 3), (10, 0), (10, 10), (10, 7), (12, 5), (20, 1)], 3),
        ([(5, 5), (5, 4)], 1),
        ([(200, 17), (200, 150), (100, 99), (50, 0)], 10),
    ]
    rows = []
    for counts, k in cases:
        row: dict = {"counts": [list(nc) for nc in counts], "k": k}
        for name, fn in (("pass_at_k", pass_at_k), ("pass_hat_k", pass_hat_k)):
            vals = [fn(n, c, k) for n, c in counts]
            m = len(vals)
            mean = sum(vals, Fraction(0)) / m
            var = sum(((v - mean) ** 2 for v in vals), Fraction(0)) / (m - 1)
            row[name] = {"value": show(mean), "se": show_sqrt(var / m)}
        rows.append(row)
    return {
        "definition": "mean over cases of the per-case estimator; se = sqrt(sample variance (n - 1) / cases)",
        "reference": "Chen et al. 2021 (mean of per-problem estimates); Miller 2024, 'Adding Error Bars to Evals', "
        "arXiv:2411.00640, eq. 1-2",
        "rows": rows,
    }


# --------------------------------------------------------------------- sign test


def pmf_half(n: int, i: int) -> Fraction:
    return Fraction(math.comb(n, i), 2**n)


def two_sided(w: int, n: int) -> Fraction:
    """Sum of the Bin(n, 1/2) probabilities no larger than that of the observed count."""
    if n == 0:
        return Fraction(1)
    obs = math.comb(n, w)
    return Fraction(sum(math.comb(n, i) for i in range(n + 1) if math.comb(n, i) <= obs), 2**n)


def sign_block() -> dict:
    tallies = [(1, 0), (0, 1), (5, 0), (6, 0), (5, 1), (9, 3), (12, 4), (20, 20), (30, 18),
               (3, 17), (100, 70), (250, 200), (7, 8), (0, 0)]
    rows = []
    for w, l in tallies:
        n = w + l
        rows.append({
            "wins": w, "losses": l,
            "two_sided": show(two_sided(w, n)),
            "greater": show(sum((pmf_half(n, i) for i in range(w, n + 1)), Fraction(0)) if n else Fraction(1)),
            "less": show(sum((pmf_half(n, i) for i in range(0, w + 1)), Fraction(0)) if n else Fraction(1)),
        })
    return {
        "definition": "wins ~ Bin(wins + losses, 1/2): greater = P(X >= wins), less = P(X <= wins), two-sided = "
        "sum of P(X = i) over i with P(X = i) <= P(X = wins); all 1 when there is no discordant pair",
        "reference": "Dixon & Mood 1946, 'The Statistical Sign Test', JASA 41(236)",
        "rows": rows,
    }


@lru_cache(maxsize=None)
def critical(d: int, alpha: Fraction) -> int:
    """Largest c <= d/2 with two_sided(c, d) <= alpha, from cumulative binomial sums; -1 if none."""
    total, best = 0, -1
    for c in range(d // 2 + 1):
        total += math.comb(d, c)
        if 2 * total <= alpha * 2**d:
            best = c
        else:
            break
    return best


ALPHAS = (Fraction(1, 100), Fraction(1, 50), Fraction(1, 20), Fraction(1, 10))


def critical_block() -> dict:
    # The cumulative-sum rule agrees with the definition by point probabilities (the
    # Bin(d, 1/2) pmf is symmetric and unimodal); checked here, not assumed.
    for d in range(1, 61):
        for a in ALPHAS:
            by_definition = [c for c in range(d // 2 + 1) if two_sided(c, d) <= a]
            assert critical(d, a) == (max(by_definition) if by_definition else -1), (d, a)
    return {
        "definition": "largest c <= d/2 such that the two-sided p-value of c wins in d pairs is <= alpha; -1 if none",
        "reference": "Dixon & Mood 1946",
        "rows": [{"alpha": show(a), "critical": [critical(d, a) for d in range(1, 121)], "discordant_from": 1}
                 for a in ALPHAS],
    }


@lru_cache(maxsize=None)
def reject_numerator(d: int, w: Fraction, alpha: Fraction) -> int:
    """P(reject | d pairs) * w.denominator**d, an integer."""
    c = critical(d, alpha)
    if c < 0:
        return 0
    a, b = w.numerator, w.denominator - w.numerator
    region = list(range(c + 1)) + list(range(d - c, d + 1))
    return sum(math.comb(d, x) * a**x * b ** (d - x) for x in region)


def power(n: int, w: Fraction, t: Fraction, alpha: Fraction) -> Fraction:
    """sum_d P(D = d) P(reject | d), D ~ Bin(n, 1 - t), in integers over a common denominator."""
    wd, td = w.denominator, t.denominator
    q, s = td - t.numerator, t.numerator
    num = sum(math.comb(n, d) * q**d * s ** (n - d) * reject_numerator(d, w, alpha) * wd ** (n - d)
              for d in range(n + 1))
    return Fraction(num, (td * wd) ** n)


def power_block() -> dict:
    cases = [(20, "3/4", "0", "1/20"), (30, "7/10", "1/4", "1/20"), (12, "9/10", "1/10", "1/20"),
             (25, "3/10", "2/5", "1/20"), (60, "7/10", "1/5", "1/20"), (100, "31/50", "1/2", "1/20"),
             (80, "4/5", "3/4", "1/20"), (40, "3/4", "1/10", "1/100"), (50, "1/2", "3/10", "1/20"),
             (40, "1/2", "0", "1/20")]
    rows = []
    for n, w, t, a in cases:
        rows.append({"n_trials": n, "win_rate": w, "tie_rate": t, "alpha": a,
                     "power": show(power(n, Fraction(w), Fraction(t), Fraction(a)))})
    return {
        "definition": "sum over d of C(n,d) (1-t)^d t^(n-d) times the Bin(d, w) probability of the exact two-sided "
        "test's rejection region {x <= c_d} u {x >= d - c_d}",
        "reference": "Dixon & Mood 1946; G*Power's exact sign test (Faul et al. 2007), ties as binomial thinning",
        "rows": rows,
    }


def first_and_stable(curve: list[Fraction], target: Fraction) -> tuple[int, int]:
    below = [n for n, p in enumerate(curve) if p < target]
    first = next(n for n, p in enumerate(curve) if p >= target)
    return first, below[-1] + 1


def sample_size_block() -> dict:
    rows = []
    for w, t, a, target, n_max in (("3/4", "0", "1/20", "4/5", 150), ("13/20", "0", "1/20", "9/10", 400),
                                   ("3/4", "3/10", "1/20", "4/5", 160)):
        W, T, A, P = Fraction(w), Fraction(t), Fraction(a), Fraction(target)
        curve = [power(n, W, T, A) for n in range(n_max + 1)]
        first, stable = first_and_stable(curve, P)
        assert 2 * stable <= n_max, "search range too short for the stable n"
        rows.append({"win_rate": w, "tie_rate": t, "alpha": a, "power": target, "searched_to": n_max,
                     "first": first, "stable": stable,
                     "power_at_first": show(curve[first]), "power_at_stable": show(curve[stable])})
    return {
        "definition": "the exact power curve for n = 0..searched_to trials; first n with power >= target, and one "
        "past the last n below it (tie rate 0: n counts discordant pairs)",
        "reference": "Chernick & Liu 2002, 'The saw-toothed behavior of power versus sample size', "
        "The American Statistician 56(2)",
        "rows": rows,
    }


# --------------------------------------------------------------------- agreement


def kappa_weighted(table: list[list[int]], weight: str) -> Fraction:
    k = len(table)
    n = sum(map(sum, table))
    rows = [Fraction(sum(r), n) for r in table]
    cols = [Fraction(sum(table[i][j] for i in range(k)), n) for j in range(k)]

    def dis(i: int, j: int) -> Fraction:
        if weight == "none":
            return Fraction(int(i != j))
        d = Fraction(abs(i - j), k - 1)
        return d if weight == "linear" else d * d

    observed = sum(dis(i, j) * Fraction(table[i][j], n) for i in range(k) for j in range(k))
    expected = sum(dis(i, j) * rows[i] * cols[j] for i in range(k) for j in range(k))
    return 1 - observed / expected


KAPPA_TABLES = [
    [[20, 5], [10, 15]],
    [[45, 15], [25, 15]],
    [[25, 35], [5, 35]],
    [[0, 4, 1], [0, 8, 0], [0, 1, 5]],
    [[10, 4, 1], [3, 12, 5], [0, 6, 14]],
    [[30, 6, 2, 0], [4, 25, 7, 1], [1, 5, 20, 6], [0, 1, 4, 18]],
]


def kappa_block() -> dict:
    return {
        "definition": "kappa_w = 1 - sum d_ij p_ij / sum d_ij p_i. p_.j with d_ij = [i != j] (Cohen's kappa), "
        "|i-j|/(K-1) (linear) or ((i-j)/(K-1))^2 (quadratic) on category positions",
        "reference": "Cohen 1960, Educ. Psychol. Meas. 20(1); Cohen 1968, Psychol. Bull. 70(4)",
        "rows": [{"table": t, "kappa": show(kappa_weighted(t, "none")), "linear": show(kappa_weighted(t, "linear")),
                  "quadratic": show(kappa_weighted(t, "quadratic"))} for t in KAPPA_TABLES],
    }


def krippendorff(ratings: list[list[int | None]], level: str) -> Fraction:
    values = sorted({v for r in ratings for v in r if v is not None})
    o = {(a, b): Fraction(0) for a in values for b in values}
    for u in range(len(ratings[0])):
        present = [r[u] for r in ratings if r[u] is not None]
        m = len(present)
        for i in range(m):
            for j in range(m):
                if i != j:
                    o[present[i], present[j]] += Fraction(1, m - 1)
    nc = {a: sum(o[a, b] for b in values) for a in values}
    n = sum(nc.values())

    def delta2(a: int, b: int) -> Fraction:
        if level == "nominal":
            return Fraction(int(a != b))
        if level == "interval":
            return Fraction(a - b) ** 2
        if level == "ratio":
            return Fraction(a - b, a + b) ** 2
        lo, hi = min(a, b), max(a, b)  # ordinal
        return (sum(nc[g] for g in values if lo <= g <= hi) - (nc[a] + nc[b]) / 2) ** 2

    do = sum(o[a, b] * delta2(a, b) for a in values for b in values) / n
    de = sum(nc[a] * nc[b] * delta2(a, b) for a in values for b in values) / (n * (n - 1))
    return 1 - do / de


KRIPPENDORFF_SETS = {
    # Krippendorff 2011, section C (4 observers x 12 units).
    "krippendorff_2011": [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
        [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
    ],
    # Wikipedia "Krippendorff's alpha", computational example (3 coders x 15 units).
    "wikipedia": [
        [None, None, None, None, None, 3, 4, 1, 2, 1, 1, 3, 3, None, 3],
        [1, None, 2, 1, 3, 3, 4, 3, None, None, None, None, None, None, None],
        [None, None, 2, 1, 3, 4, 4, None, 2, 1, 1, 3, 3, None, 4],
    ],
    "three_raters": [
        [1, 2, 2, 3, 5, 4, 1, None],
        [1, 2, 3, 3, 4, 4, 2, 2],
        [2, 2, 3, None, 5, 5, 1, 2],
    ],
}


def krippendorff_block() -> dict:
    return {
        "definition": "alpha = 1 - D_o / D_e from the coincidence matrix o_ck (each unit's m values paired, "
        "weight 1/(m-1)); metric differences nominal [c != k], ordinal (sum_{g=c..k} n_g - (n_c + n_k)/2)^2, "
        "interval (c-k)^2, ratio ((c-k)/(c+k))^2",
        "reference": "Krippendorff 2011, 'Computing Krippendorff's Alpha-Reliability', Annenberg School, "
        "U. Pennsylvania, section C",
        "rows": [{"name": name, "ratings": r,
                  "alpha": {lvl: show(krippendorff(r, lvl)) for lvl in ("nominal", "ordinal", "interval", "ratio")}}
                 for name, r in KRIPPENDORFF_SETS.items()],
    }


# --------------------------------------------------------------------- sequential


def sequential_oc(pass_at: list[int], futility_at: list[int], d_max: int, w: Fraction) -> dict[str, Fraction]:
    """Exact verdict probabilities and expected discordant pairs of a truncated sequential
    sign test: after d pairs with W wins, pass if W >= pass_at[d], regression if
    d - W >= pass_at[d], no-improvement if max(W, d - W) <= futility_at[d] or d = d_max."""
    alive = {0: Fraction(1)}
    out = {"p_pass": Fraction(0), "p_regression": Fraction(0), "p_no_improvement": Fraction(0),
           "expected_discordant": Fraction(0)}
    for d in range(1, d_max + 1):
        step: dict[int, Fraction] = {}
        for wins, p in alive.items():
            step[wins + 1] = step.get(wins + 1, Fraction(0)) + p * w
            step[wins] = step.get(wins, Fraction(0)) + p * (1 - w)
        alive = {}
        for wins, p in step.items():
            losses = d - wins
            if wins >= pass_at[d]:
                verdict = "p_pass"
            elif losses >= pass_at[d]:
                verdict = "p_regression"
            elif max(wins, losses) <= futility_at[d] or d == d_max:
                verdict = "p_no_improvement"
            else:
                alive[wins] = p
                continue
            out[verdict] += p
            out["expected_discordant"] += d * p
    assert not alive and sum(out[k] for k in ("p_pass", "p_regression", "p_no_improvement")) == 1
    return out


def sequential_block() -> dict:
    # Boundaries of Wald's SPRT of win rate 3/4 against 1/2 on the discordant pairs, upper
    # log-threshold log 40 and futility log(1/5), truncated at 40 pairs: the log
    # likelihood ratio after W wins in d pairs is W log 3 - d log 2.
    d_max = 40
    log3, log2 = math.log(3), math.log(2)
    pass_at = [1] + [math.ceil((math.log(40) + d * log2) / log3) for d in range(1, d_max + 1)]
    futility_at = [-1] + [math.floor((math.log(1 / 5) + d * log2) / log3) for d in range(1, d_max + 1)]
    assert all(2 * pass_at[d] > d and futility_at[d] < pass_at[d] for d in range(d_max + 1))
    rows = []
    for w, t in (("1/2", "0"), ("3/4", "0"), ("3/5", "1/5"), ("1/4", "1/2")):
        oc = sequential_oc(pass_at, futility_at, d_max, Fraction(w))
        row = {"win_rate": w, "tie_rate": t, **{k: show(v) for k, v in oc.items()},
               "expected_trials": show(oc["expected_discordant"] / (1 - Fraction(t)))}
        rows.append(row)
    return {
        "definition": "forward recursion over (pairs d, wins W), mass absorbed at the boundaries; "
        "expected trials = expected pairs / (1 - tie rate) (Wald's identity)",
        "reference": "Wald 1945, Ann. Math. Statist. 16(2); Armitage, McPherson & Rowe 1969, JRSS A 132(2)",
        "max_discordant": d_max, "pass_at": pass_at, "futility_at": futility_at,
        "rows": rows,
    }


def main() -> None:
    ref = {
        "command": COMMAND,
        "python": platform.python_version(),
        "format": "exact fractions 'p/q' (or ints); otherwise the exact value to 40 significant digits",
        "pass_k": pass_k_block(),
        "suite": suite_block(),
        "sign_test": sign_block(),
        "sign_critical": critical_block(),
        "power": power_block(),
        "sample_size": sample_size_block(),
        "kappa": kappa_block(),
        "krippendorff": krippendorff_block(),
        "sequential": sequential_block(),
    }
    tmp = OUT.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(ref, indent=1) + "\n")
    tmp.replace(OUT)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
