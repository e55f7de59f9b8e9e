"""The smallest drop a gate can detect, and the cases a drop needs: the power of the
gate's comparison of two runs (`evalkit.conclusions.gates`, `evalkit lint`).

Pure, standard library only (`statistics.NormalDist` for the normal quantiles), so
`evalkit lint` can warn about an underpowered gate without loading scipy; `evalkit.numbers.stats`
re-exports every function here.

References: Cohen 1988, "Statistical Power Analysis for the Behavioral Sciences", ch. 6;
Fleiss, Levin & Paik 2003, "Statistical Methods for Rates and Proportions", sec. 4.2.
"""

from __future__ import annotations

import math
from statistics import NormalDist

from evalkit.foundations.errors import InputError

__all__ = ["cases_for_drop", "detectable_drop", "planning_rate"]


def _fail(message: str) -> None:
    raise InputError(message)


def _z(alpha: float, power: float) -> float:
    """z_{1-alpha} + z_{power}: the one-sided level plus the power, in standard units."""
    n = NormalDist()
    return n.inv_cdf(1 - alpha) + n.inv_cdf(power)


def planning_rate(score: float, n: int) -> float:
    """The score a detectable-drop computation plans at: the observed rate shrunk by
    Laplace's rule of succession, (n * score + 1) / (n + 2), so a suite at 0% or 100%
    still has the variance of a rate that n cases cannot pin to its edge.

    References: Laplace 1814 (rule of succession); Agresti & Coull 1998, The American
    Statistician 52(2) (adding pseudo-counts to a binomial rate).
    """
    if n < 1:
        _fail(f"n must be at least 1, got {n!r}")
    if not 0 <= score <= 1:
        _fail(f"score must be in [0, 1], got {score!r}")
    return (n * score + 1) / (n + 2)


def detectable_drop(n: int, p: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest drop of a rate p (a fraction; points / 100) that a one-sided level-
    `alpha` comparison of two runs of `n` cases each detects with probability `power`:

        delta = (z_{1-alpha} + z_{power}) * sqrt(2 p (1 - p) / n)

    the normal approximation for two independent proportions with a common rate p. The
    gate's test pairs the runs case by case, which can only see more than this, so the
    figure is conservative: a gate whose threshold is below it cannot promise to see a
    drop of its own threshold. alpha 1 (no noise guard) sees every drop: 0.

    References: Cohen 1988, "Statistical Power Analysis for the Behavioral Sciences",
    ch. 6; Fleiss, Levin & Paik 2003, "Statistical Methods for Rates and Proportions",
    sec. 4.2 (statsmodels' `NormalIndPower` computes the same, checked in the tests).
    """
    if n < 1:
        _fail(f"n must be at least 1, got {n!r}")
    if not 0 < p < 1:
        _fail(f"p must be in (0, 1), got {p!r}")
    if not 0 < alpha <= 1 or not 0 < power < 1:
        _fail(f"alpha must be in (0, 1] and power in (0, 1), got {alpha!r} and {power!r}")
    if alpha >= 1:
        return 0.0
    z = _z(alpha, power)
    return max(0.0, z * math.sqrt(2 * p * (1 - p) / n))


def cases_for_drop(drop: float, p: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """The fewest cases per run at which `detectable_drop(n, p, alpha, power) <= drop`
    (a fraction): ceil(2 p (1 - p) (z_{1-alpha} + z_{power})^2 / drop^2).

    References: as `detectable_drop`.
    """
    if not 0 < drop <= 1:
        _fail(f"drop must be in (0, 1], got {drop!r}")
    if not 0 < p < 1:
        _fail(f"p must be in (0, 1), got {p!r}")
    if alpha >= 1:
        return 1
    z = _z(alpha, power)
    n = max(1, math.ceil(2 * p * (1 - p) * z * z / (drop * drop) - 1e-9))
    while n > 1 and detectable_drop(n - 1, p, alpha, power) <= drop:  # guard the ceil against rounding
        n -= 1
    return n
