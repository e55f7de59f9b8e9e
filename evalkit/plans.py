"""Power plans and pre-registration: how many units a two-arm comparison needs, the plan
written to the suite (`evals/<unit>/plan.json`) before the run, and a verdict held
against it (`check_against_plan`).

References: Dixon & Mood 1946 (the sign test); Connor 1987, Biometrics 43(1); Chernick
& Liu 2002 (saw-toothed exact power); Wald 1945 (sequential tests).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from . import stats
from ._io import read_json_object, suite_folder_of, write_atomic
from .errors import InputError
from .layout import CONFIG_FILE, PLAN_FILE

SIGN_TEST = "sign"  # exact two-sided binomial sign test, ties dropped
SEQUENTIAL_SIGN_TEST = "sequential-sign"


class Tested(Protocol):
    """What `check_against_plan` reads of a verdict (`verdicts.Verdict`)."""

    test: str
    alpha: float
    unit: str
    n_trials: int
    sequential: dict[str, Any] | None


@dataclass(frozen=True)
class PlanCheck:
    """A run held against its pre-registered plan: `ok` unless it stopped short of the
    planned units or changed the test, alpha or unit (`flags` say which)."""

    ok: bool
    flags: tuple[str, ...]
    planned_trials: int
    observed_trials: int
    plan_test: str
    verdict_test: str


@dataclass(frozen=True)
class PowerPlan:
    """A pre-registered power plan (`evals/<unit>/plan.json`), written before the run.

    `n_trials` is the number of units to run (cases: one vote per case), the n from
    which exact power stays at or above `power` (`n_trials_first` is the first n that
    reaches it; exact power is a sawtooth). `win_rate` is the expected share of
    non-tied units the treatment wins, `tie_rate` the expected share of ties.
    `sequential` holds the sequential design's parameters when `test` is sequential.
    """

    test: str
    alpha: float
    power: float
    win_rate: float
    tie_rate: float
    n_trials: int
    n_trials_first: int
    n_trials_approx: int
    n_discordant: int
    n_discordant_first: int
    n_discordant_approx: int
    unit: str = "case"
    seed: int | None = None
    created: str = ""
    sequential: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def sequential_params(self) -> dict[str, Any]:
        """Keyword arguments for `stats.SequentialSignTest`."""
        return dict((self.sequential or {}).get("params") or {})

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
        if self.seed is not None:
            lines.append(f"seed: {self.seed}")
        return "\n".join(lines)


def plan_power(
    win_rate: float,
    tie_rate: float = 0.0,
    alpha: float = 0.05,
    power: float = 0.8,
    *,
    sequential: bool = False,
    seed: int | None = None,
) -> PowerPlan:
    """Plan a two-arm comparison: the discordant pairs and units (cases) the exact sign
    test needs to detect `win_rate` with `power` at `alpha`, exact and approximate.

    References: Dixon & Mood 1946; Connor 1987, Biometrics 43(1); Chernick & Liu 2002
    (saw-toothed exact power) via `stats.sign_test_sample_size`.
    """
    ss = stats.sign_test_sample_size(win_rate, tie_rate, alpha, power)
    seq = None
    test = SIGN_TEST
    if sequential:
        test = SEQUENTIAL_SIGN_TEST
        seq = _sequential_design(win_rate, tie_rate, alpha, power, ss)
    return PowerPlan(
        test=test,
        alpha=alpha,
        power=power,
        win_rate=win_rate,
        tie_rate=tie_rate,
        n_trials=ss.trials_stable,
        n_trials_first=ss.trials_first,
        n_trials_approx=ss.trials_approx,
        n_discordant=ss.discordant_stable,
        n_discordant_first=ss.discordant_first,
        n_discordant_approx=ss.discordant_approx,
        seed=seed,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        sequential=seq,
    )


def _sequential_design(win_rate: float, tie_rate: float, alpha: float, power: float, ss: Any) -> dict[str, Any]:
    """The sequential design: the `stats.SequentialSignTest` arguments (`params`) and
    what they give at the planned effect (exact operating characteristics)."""
    params = {"win_rate": max(win_rate, 1 - win_rate), "alpha": alpha, "power": power}
    seq = stats.SequentialSignTest(**params)
    oc = seq.operating_characteristics(params["win_rate"], tie_rate)
    return {
        "params": params,
        "max_discordant": seq.design.max_discordant,
        "type_i_error": seq.design.type_i_error,
        "power_exact": seq.design.power_exact,
        "expected_discordant": oc.expected_discordant,
        "expected_trials": oc.expected_trials,
        # Both fixed designs: exact power is a sawtooth, so the first n reaching the
        # target (what the benchmark compares with) and the n from which it stays there.
        "fixed_trials": ss.trials_stable,
        "fixed_trials_stable": ss.trials_stable,
        "fixed_trials_first": ss.trials_first,
        "ratio_to_fixed_first": oc.expected_trials / ss.trials_first,
        "ratio_to_fixed_stable": oc.expected_trials / ss.trials_stable,
    }


def write_plan(plan: PowerPlan, suite_dir: str | Path) -> Path:
    """Write `plan.json` into the suite folder (atomically). The plan's seed defaults to
    the suite's `config.json` seed, so the run that follows is the one planned."""
    d = Path(suite_dir)
    if not d.is_dir():
        raise InputError("suite folder not found", d)
    if plan.seed is None:
        cfg = d / CONFIG_FILE
        if cfg.exists():
            seed = read_json_object(cfg, "config", root=d).get("seed")
            if isinstance(seed, int):
                plan = replace(plan, seed=seed)
    path = d / PLAN_FILE
    write_atomic(path, json.dumps(plan.to_dict(), indent=2) + "\n")
    return path


def load_plan(path: str | Path) -> PowerPlan:
    """Read a `plan.json` (a suite folder is accepted too). A plan in a suite folder must
    resolve inside it (`suite.read_file_bytes`)."""
    p = Path(path)
    if p.is_dir():
        p = p / PLAN_FILE
    if not os.path.lexists(p):
        raise InputError("plan not found (write one with `evalkit power --write`)", p)
    raw = read_json_object(p, "a plan", root=suite_folder_of(p))
    names = {f for f in PowerPlan.__dataclass_fields__}
    required = ("test", "alpha", "power", "win_rate", "tie_rate", "n_trials")
    for key in required:
        if key not in raw:
            raise InputError(f"missing field {key!r}", p, json_path=f"$.{key}")
    if raw["test"] not in (SIGN_TEST, SEQUENTIAL_SIGN_TEST):
        raise InputError(f"unknown test {raw['test']!r}", p, json_path="$.test")
    d = {k: v for k, v in raw.items() if k in names}
    for k in ("n_trials_first", "n_trials_approx", "n_discordant", "n_discordant_first", "n_discordant_approx"):
        d.setdefault(k, 0)
    return PowerPlan(**d)


def check_against_plan(verdict: Tested, plan: PowerPlan) -> PlanCheck:
    """Hold a verdict to its plan: flag a changed test, alpha or unit, a run that
    stopped short of the planned units (for a sequential plan: stopped before the test
    settled), and one that ran past them (topping up a noisy comparison)."""
    flags: list[str] = []
    if verdict.test != plan.test:
        flags.append(f"changed the test: planned {plan.test!r}, ran {verdict.test!r}")
    if not math.isclose(verdict.alpha, plan.alpha):
        flags.append(f"changed alpha: planned {plan.alpha:g}, ran {verdict.alpha:g}")
    if not verdict.unit.startswith(plan.unit):
        flags.append(f"changed the unit: planned {plan.unit!r}, ran {verdict.unit.split(' ')[0]!r}")
    n = verdict.n_trials
    if plan.test == SEQUENTIAL_SIGN_TEST and verdict.sequential:
        if verdict.sequential.get("decision") == "continue":
            flags.append(
                f"stopped short: the sequential test had not settled after "
                f"{verdict.sequential.get('n_available')} units"
            )
    elif n < plan.n_trials:
        flags.append(f"stopped short: {n} of {plan.n_trials} planned units")
    elif n > plan.n_trials and plan.test == SIGN_TEST:
        flags.append(f"ran past the plan: {n} units against {plan.n_trials} planned")
    return PlanCheck(
        ok=not flags,
        flags=tuple(flags),
        planned_trials=plan.n_trials,
        observed_trials=n,
        plan_test=plan.test,
        verdict_test=verdict.test,
    )
