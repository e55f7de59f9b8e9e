"""Numbers as people read them, on every page, in the index and on the CLI: one place.

A rate is a percentage, and its interval is in the same unit (`40.0% (22.1% to 58.0%)`);
money is dollars with enough digits to stay readable at $0.000003 (never `2.7e-06`);
no data is `-` (the caller says why beside it), never `nan`, `None`, or a Python
boolean. Tables (`nb.table`) pass every cell through `cell`.

Hand-written rather than babel/humanize: those format locales and large numbers, not
sub-cent costs or rate intervals, and both would still need these rules around them.
"""

from __future__ import annotations

import math
from typing import Any

NO_DATA = "-"
# One colour per arm, by the arm's place in the run's (or suite's) arm list, on every page
# and in the index: the notebooks' figures (`nb.arm_colors`) and the index's trend use it.
ARM_PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974")
NEUTRAL = "#9e9e9e"  # a group that is no arm (all arms pooled)


def missing(x: Any) -> bool:
    """True for no data: None, NaN, pandas' NA/NaT (anything that is not equal to itself)."""
    if x is None:
        return True
    try:
        return bool(x != x)
    except (TypeError, ValueError):  # pandas.NA raises on bool()
        return True


def pct(x: Any, digits: int = 1) -> str:
    """A rate in [0, 1] as a percentage: `pct(0.4)` -> `40.0%`; no data -> `-`.

    Exactly 0 and 1 are shown without decimals (`0%`, `100%`)."""
    if missing(x):
        return NO_DATA
    v = float(x) * 100
    if v in (0.0, 100.0):
        return f"{v:.0f}%"
    return f"{v:.{digits}f}%"


def pct_range(low: Any, high: Any, digits: int = 1) -> str:
    """An interval of rates, in percent: `22.1% to 58.0%`; no data -> `-`.

    Bounds are clipped to [0%, 100%] (a normal interval can run past them)."""
    if missing(low) or missing(high):
        return NO_DATA
    lo, hi = min(max(float(low), 0.0), 1.0), min(max(float(high), 0.0), 1.0)
    return f"{pct(lo, digits)} to {pct(hi, digits)}"


def pct_ci(rate: Any, low: Any, high: Any, digits: int = 1) -> str:
    """A rate with its interval, both in percent: `40.0% (22.1% to 58.0%)`."""
    if missing(rate):
        return NO_DATA
    if missing(low) or missing(high):
        return pct(rate, digits)
    return f"{pct(rate, digits)} ({pct_range(low, high, digits)})"


def fraction(x: Any, digits: int = 3) -> str:
    """A share in [0, 1] without its leading zero, as the tau-bench paper prints pass^k:
    0.42 -> '.420'; '-' for no data."""
    if missing(x):
        return NO_DATA
    text = f"{float(x) + 0.0:.{digits}f}"  # + 0.0: no "-0.000"
    if text.startswith(("0.", "-0.")):
        text = text.replace("0.", ".", 1)
    return "." + "0" * digits if text == "-." + "0" * digits else text


def curve(values: Any, digits: int = 3) -> str:
    """A curve (pass@j or pass^j for j = 1..k) compact: '.420/.273/.220/.200'."""
    return "/".join(fraction(v, digits) for v in values) if values is not None and len(values) else NO_DATA


def points(x: Any, digits: int = 1, *, signed: bool = True) -> str:
    """A difference of two rates in percentage points, with its sign (`+40.0 pts`), or
    without one for a spread such as a standard error (`signed=False`: `7.8 pts`)."""
    if missing(x):
        return NO_DATA
    return f"{float(x) * 100:{'+' if signed else ''}.{digits}f} pts"


def points_interval(low: Any, high: Any, digits: int = 1) -> str:
    """An interval of a difference of two rates, `-12.0 pts to +30.0 pts`, each end held to
    the possible range (-100 to +100 points: a normal-theory interval of a difference near
    the edge runs past it; the record keeps the raw ends)."""

    def held(x: Any) -> Any:
        return x if missing(x) else min(1.0, max(-1.0, float(x)))

    return f"{points(held(low), digits)} to {points(held(high), digits)}"


def usd(x: Any) -> str:
    """Dollars, readable at any size: `$12.35`, `$0.0421`, `$0.0000027`, `$0`; no data -> `-`.

    Two significant digits below a cent (three from a cent up), fixed-point, never
    scientific notation."""
    if missing(x):
        return NO_DATA
    v = float(x)
    if v == 0:
        return "$0"
    sign = "-" if v < 0 else ""
    a = abs(v)
    if a >= 1:
        return f"{sign}${a:,.2f}"
    sig = 3 if a >= 0.01 else 2
    decimals = sig - 1 - math.floor(math.log10(a))
    s = f"{a:.{decimals}f}".rstrip("0").rstrip(".")
    return f"{sign}${s}"


def ms(x: Any) -> str:
    """A duration in milliseconds: `3,432 ms`, `4.9 ms`; no data -> `-`."""
    if missing(x):
        return NO_DATA
    v = float(x)
    return f"{v:,.0f} ms" if abs(v) >= 100 else f"{v:.1f} ms"


def pvalue(p: Any) -> str:
    """A p-value: `0.00049`, `0.031`, `1`; no data -> `-`."""
    if missing(p):
        return NO_DATA
    v = float(p)
    if v >= 0.9995:
        return "1"
    if v < 1e-6:
        return "< 0.000001"
    return f"{v:.2g}" if v < 0.001 else f"{v:.3f}".rstrip("0").rstrip(".")


def number(x: Any) -> str:
    """A plain number: integers as they are (with thousands separators), others to four
    significant digits without scientific notation; no data -> `-`."""
    if missing(x):
        return NO_DATA
    if isinstance(x, bool):
        return yes_no(x)
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) < 1e15):
        return f"{int(x):,}"
    v = float(x)
    if abs(v) >= 1e-4:
        return f"{v:,.4g}" if abs(v) < 1e6 else f"{v:,.0f}"
    digits = 3 - 1 - math.floor(math.log10(abs(v)))
    return f"{v:.{digits}f}".rstrip("0")


def yes_no(x: Any) -> str:
    """A boolean for people: `yes`/`no`; no data -> `-`."""
    if missing(x):
        return NO_DATA
    return "yes" if x else "no"


def cell(v: Any) -> str:
    """Any table cell as text: `-` for no data, yes/no for booleans, `number` for numbers,
    lists joined by commas, anything else as `str`."""
    if isinstance(v, (list, tuple)):
        return ", ".join(cell(x) for x in v) if v else NO_DATA
    if missing(v):
        return NO_DATA
    if isinstance(v, bool):
        return yes_no(v)
    if hasattr(v, "item") and not isinstance(v, str):  # numpy scalars
        try:
            v = v.item()
        except (TypeError, ValueError):
            pass
        if isinstance(v, bool):
            return yes_no(v)
    if isinstance(v, (int, float)):
        return number(v)
    return str(v)


def count(n: Any, unit: str, plural: str | None = None) -> str:
    """`3 cases`, `1 case`: a count that names its unit."""
    if missing(n):
        return f"{NO_DATA} {plural or unit + 's'}"
    k = int(n)
    return f"{k:,} {unit if k == 1 else (plural or unit + 's')}"


def plan_check(pc: Any) -> tuple[str, str]:
    """A verdict's plan check (`records.PlanCheck`, or None) as (banner kind, sentence),
    the same words on the comparison page, the index and `compare`'s first lines."""
    if pc is None:
        return (
            "inconclusive",
            "No pre-registered plan: this verdict is exploratory (write one with `evalkit power --write`).",
        )
    where = f" ({pc.plan})" if getattr(pc, "plan", "") else ""
    if pc.ok:
        return "pass", f"Followed its pre-registered plan{where}: {pc.units()}."
    return "regression", f"Did NOT follow its pre-registered plan{where}: " + "; ".join(pc.flags) + "."


def correlation(x: Any) -> str:
    """The correlation of two arms' paired results (`PairedDifference.correlation`): the
    number, or `-` with why there is none (an arm that passed, or failed, every paired
    sample does not vary, and a correlation with a constant is undefined)."""
    if missing(x):
        return f"{NO_DATA} (undefined: an arm passed or failed every paired sample, so its results do not vary)"
    return number(x)
