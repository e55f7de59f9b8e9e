"""The statistics a record carries (`PairedDifference`) and the plans a comparison is decided
by (`Plan`, `PlanCheck`). Split out of `evalkit.foundations.records`, which re-exports every
public name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from evalkit.foundations.errors import InputError
from evalkit.foundations.records_base import _check_schema, _num_or_none

# --- statistics a record carries -----------------------------------------------------------


@dataclass(frozen=True)
class PairedDifference:
    """Mean of a - b over paired items with its (optionally clustered) SE, the Pearson
    correlation of a and b, a normal interval, and the SE an unpaired analysis would give
    (the pairing gain is se_unpaired / se). Made by `stats.paired_difference`."""

    mean: float
    se: float
    correlation: float
    low: float
    high: float
    n: int
    se_unpaired: float
    n_clusters: int | None = None
    alpha: float = 0.05

    def to_json(self) -> dict[str, Any]:
        return {
            k: (_num_or_none(v) if isinstance(v, float) else v)
            for k, v in ((f.name, getattr(self, f.name)) for f in fields(self))
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PairedDifference:
        nan = float("nan")
        kw: dict[str, Any] = {
            f.name: (nan if d.get(f.name) is None and f.type == "float" else d.get(f.name)) for f in fields(cls)
        }
        return cls(**kw)


# --- plans -----------------------------------------------------------------------------------

SIGN_TEST = "sign"  # exact two-sided binomial sign test, ties dropped
SEQUENTIAL_SIGN_TEST = "sequential-sign"


@dataclass(frozen=True)
class Plan:
    """A pre-registered power plan (`evals/<unit>/plan.json`), written before the run.

    `n_trials` is the number of units to run (cases: one vote per case), the n from
    which exact power stays at or above `power` (`n_trials_first` is the first n that
    reaches it; exact power is a sawtooth). `win_rate` is the expected share of
    non-tied units the treatment wins, `tie_rate` the expected share of ties.
    `sequential` holds the sequential design's parameters when `test` is sequential.
    """

    SCHEMA = "evalkit.plan/1"
    REQUIRED = ("test", "alpha", "power", "win_rate", "tie_rate", "n_trials")

    test: str
    alpha: float
    power: float
    win_rate: float
    tie_rate: float
    n_trials: int
    n_trials_first: int = 0
    n_trials_approx: int = 0
    n_discordant: int = 0
    n_discordant_first: int = 0
    n_discordant_approx: int = 0
    unit: str = "case"
    seed: int | None = None
    created: str = ""
    sequential: dict[str, Any] | None = None
    path: str = field(default="", compare=False)  # the file it was read from (not written)
    # More than two arms (`power --arms N`): the comparisons the family holds (every pair,
    # or a control against each other arm) and the correction across them; each pair is
    # planned at alpha / comparisons, the level Holm's first step tests the smallest p at.
    arms: int = 2
    comparisons: int = 1
    correction: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"schema": self.SCHEMA, **{f.name: getattr(self, f.name) for f in fields(self) if f.name != "path"}}

    @classmethod
    def from_json(cls, d: Any) -> Plan:
        """A plan from its JSON; `InputError` (with the JSON path) for a missing field or
        an unknown test."""
        d = _check_schema(d, cls.SCHEMA, "a plan")
        for key in cls.REQUIRED:
            if key not in d:
                raise InputError(f"missing field {key!r}", json_path=f"$.{key}")
        if d["test"] not in (SIGN_TEST, SEQUENTIAL_SIGN_TEST):
            raise InputError(f"unknown test {d['test']!r}", json_path="$.test")
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d and f.name != "path"})

    def sequential_params(self) -> dict[str, Any]:
        """Keyword arguments for `stats.SequentialSignTest`."""
        return dict((self.sequential or {}).get("params") or {})

    def max_trials(self) -> int:
        """The most units the plan's design may need: for a sequential plan its cap on
        discordant pairs at the planned tie rate (recorded as ``max_trials``; a plan
        written before that is computed the same way, `stats.SequentialSignTest.max_trials`),
        else `n_trials`. A suite with fewer units does not hold the planned power."""
        q = self.sequential or {}
        if self.test != SEQUENTIAL_SIGN_TEST or "max_discordant" not in q:
            return self.n_trials
        if "max_trials" in q:
            return int(q["max_trials"])
        return math.ceil(int(q["max_discordant"]) / (1 - self.tie_rate) - 1e-9)

    def render(self) -> str:
        how = (
            "truncated two-sided SPRT on the signs, exact boundaries"
            if self.test == SEQUENTIAL_SIGN_TEST
            else "exact two-sided sign test"
        )
        lines = [
            f"test: {self.test} ({how}, ties dropped), unit: {self.unit}",
            f"alpha {self.alpha:g}, power {self.power:g}, expected win rate {self.win_rate:g} of non-tied "
            f"units, tie rate {self.tie_rate:g}",
        ]
        if self.comparisons > 1:
            lines.append(
                f"{self.arms} arms, {self.comparisons} comparisons, {self.correction}-corrected: each pair is "
                f"planned at alpha {self.alpha:g} / {self.comparisons} = {self.alpha / self.comparisons:.4g} "
                "(the level Holm's first step tests at: the power holds for every pair)"
            )
        lines += [
            f"discordant pairs needed (exact): {self.n_discordant} (power stays >= {self.power:g} from here; "
            f"first reached at {self.n_discordant_first}); normal approximation {self.n_discordant_approx}",
            f"{self.unit}s needed (exact): {self.n_trials} (first reached at {self.n_trials_first}); "
            f"normal approximation {self.n_trials_approx}",
        ]
        if self.sequential:
            q = self.sequential
            e = float(q["expected_trials"])
            first = int(q.get("fixed_trials_first") or self.n_trials_first)
            stable = int(q.get("fixed_trials_stable") or q.get("fixed_trials") or self.n_trials)
            lines.append(
                f"sequential sign test: stops once settled, at most {q['max_discordant']} discordant "
                f"pairs; exact type I error {q['type_i_error']:.4f}, power {q['power_exact']:.3f}; "
                f"expected {self.unit}s at the planned effect {e:.1f}"
            )
            lines.append(
                f"fixed design for comparison: {first} {self.unit}s (first n reaching power "
                f"{self.power:g}; expected sequential / fixed = {e / first:.2f}x), {stable} {self.unit}s "
                f"(n from which power stays >= {self.power:g}; {e / stable:.2f}x)"
            )
            lines.append(
                f"most {self.unit}s the sequential design may need: {self.max_trials()} (its cap of "
                f"{q['max_discordant']} discordant pairs at tie rate {self.tie_rate:g}); a suite with fewer "
                f"{self.unit}s has less power than planned"
            )
            if "suite_cases" in q:
                lines.append(_suite_line(q, self.unit))
        if self.seed is not None:
            lines.append(f"seed: {self.seed}")
        return "\n".join(lines)


def _suite_line(q: dict[str, Any], unit: str) -> str:
    """What `render` says of the suite the plan was written for (``suite_cases``)."""
    n, pw = int(q["suite_cases"]), float(q["power_at_suite"])
    if q.get("fits_suite"):
        return (
            f"the suite's {n} {unit}s hold the design: the cap was chosen among those whose most {unit}s "
            f"fit the suite (power at {n} {unit}s {pw:.3f})"
        )
    return (
        f"the suite has {n} {unit}s, fewer than any candidate design may need: power at the planned effect "
        f"on {n} {unit}s is {pw:.3f}, not {q['power_exact']:.3f}; add {unit}s or plan for a larger effect"
    )


@dataclass(frozen=True)
class PlanCheck:
    """A run held against its pre-registered plan: `ok` unless it stopped short of the
    planned units or changed the test, alpha or unit (`flags` say which). `plan` is the
    plan file it was held against."""

    ok: bool
    flags: tuple[str, ...]
    planned_trials: int
    observed_trials: int
    plan_test: str
    verdict_test: str
    plan: str = ""

    def to_json(self) -> dict[str, Any]:
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, "flags": list(self.flags)}

    def units(self) -> str:
        """The units run against the planned ones, in words: "48 of 48 planned units", or
        for a run past its plan "51 units, 48 planned (more than planned only adds power)"."""
        if self.observed_trials > self.planned_trials:
            return f"{self.observed_trials} units, {self.planned_trials} planned (more than planned only adds power)"
        return f"{self.observed_trials} of {self.planned_trials} planned units"

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PlanCheck:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d} | {"flags": tuple(d.get("flags") or ())})
