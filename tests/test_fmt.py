"""One formatting layer: rates in percent with intervals in the same unit, money readable
at any size, '-' for no data, never nan/None or a Python boolean."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from evalkit.foundations import fmt


@pytest.mark.parametrize("x, want", [(0.4, "40.0%"), (1.0, "100%"), (0.0, "0%"), (0.6533, "65.3%"),
                                     (None, "-"), (math.nan, "-"), (pd.NA, "-")])
def test_pct(x, want):
    assert fmt.pct(x) == want


def test_interval_in_the_same_unit_clipped_and_never_nan():
    assert fmt.pct_ci(0.4, 0.221, 0.58) == "40.0% (22.1% to 58.0%)"
    assert fmt.pct_range(-0.03, 1.2) == "0% to 100%"
    assert fmt.pct_ci(0.5, math.nan, math.nan) == "50.0%"  # a single case: no interval, the rate alone
    assert fmt.pct_ci(None, 0.1, 0.2) == "-"


@pytest.mark.parametrize("x, want", [(0.000003, "$0.000003"), (2.719e-06, "$0.0000027"), (0.0421, "$0.0421"),
                                     (12.345, "$12.35"), (0, "$0"), (1234.5, "$1,234.50"), (None, "-"),
                                     (-0.5, "-$0.5")])
def test_usd_has_no_exponent(x, want):
    assert fmt.usd(x) == want
    assert "e" not in fmt.usd(x).lower()


def test_cells_for_people():
    assert [fmt.cell(v) for v in (True, False, np.bool_(True), None, math.nan, 3, np.int64(7), 0.65333, 1.5e-7,
                                  [], ["a", "b"], "text")] == [
        "yes", "no", "yes", "-", "-", "3", "7", "0.6533", "0.00000015", "-", "a, b", "text"]


def test_pvalue_and_points_and_counts():
    assert fmt.pvalue(0.0004883) == "0.00049" and fmt.pvalue(0.031) == "0.031" and fmt.pvalue(1.0) == "1"
    assert fmt.points(0.4) == "+40.0 pts" and fmt.points(-0.012) == "-1.2 pts"
    assert fmt.count(1, "case") == "1 case" and fmt.count(3, "repetition") == "3 repetitions"
def test_points_unsigned():
    from evalkit.foundations import fmt
    assert fmt.points(0.078, signed=False) == "7.8 pts"


def test_fraction_and_curve_as_the_tau_bench_paper_prints_them():
    assert fmt.fraction(0.42) == ".420" and fmt.fraction(1.0) == "1.000" and fmt.fraction(0.0) == ".000"
    assert fmt.fraction(-0.0) == ".000" and fmt.fraction(-0.25, 2) == "-.25" and fmt.fraction(None) == "-"
    assert fmt.curve([0.42, 0.27333, 0.22, 0.2]) == ".420/.273/.220/.200"
    assert fmt.curve([]) == "-" and fmt.curve([0.5, float("nan")]) == ".500/-"


def test_a_correlation_that_is_not_defined_says_why():
    # issue 33: "correlation -" with no reason when one arm passed every paired sample
    import math

    from evalkit.foundations import fmt as _fmt
    from evalkit.numbers.stats import paired_difference

    pdiff = paired_difference([1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 1.0, 0.0])  # the first arm never varies
    assert math.isnan(pdiff.correlation)
    shown = _fmt.correlation(pdiff.correlation)
    assert shown.startswith("- (undefined: an arm passed or failed every paired sample")
    assert _fmt.correlation(0.25) == "0.25"


def test_an_interval_of_a_difference_is_held_to_plus_minus_100_points():
    """A newcomer saw `95% CI +56.7 pts to +110.0 pts` for a pass-rate difference: the
    normal-theory interval runs past what a difference of two rates can be."""
    assert fmt.points_interval(0.567, 1.10) == "+56.7 pts to +100.0 pts"
    assert fmt.points_interval(-1.3, -0.2) == "-100.0 pts to -20.0 pts"
    assert fmt.points_interval(None, 0.1) == f"{fmt.NO_DATA} to +10.0 pts"
