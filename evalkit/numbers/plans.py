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
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from evalkit.foundations._io import read_json_object, suite_folder_of, write_atomic
from evalkit.foundations.errors import InputError
from evalkit.foundations.layout import CONFIG_FILE, PLAN_FILE
from evalkit.foundations.records import SEQUENTIAL_SIGN_TEST, SIGN_TEST, Plan, PlanCheck
from evalkit.numbers import stats

__all__ = ["SEQUENTIAL_SIGN_TEST", "SIGN_TEST", "Plan", "PlanCheck"]


class Tested(Protocol):
    """What `check_against_plan` reads of a verdict (`records.Verdict`)."""

    @property
    def test(self) -> str: ...
    @property
    def alpha(self) -> float: ...
    @property
    def unit(self) -> str: ...
    @property
    def n_trials(self) -> int: ...
    @property
    def sequential(self) -> dict[str, Any] | None: ...


def find_plan(suite_dir: str | Path | None) -> Path | None:
    """The suite's pre-registered `plan.json`, when it has one (the one place that looks)."""
    if suite_dir is None:
        return None
    p = Path(suite_dir) / PLAN_FILE
    return p if os.path.lexists(p) else None


def plan_power(
    win_rate: float,
    tie_rate: float = 0.0,
    alpha: float = 0.05,
    power: float = 0.8,
    *,
    sequential: bool = False,
    seed: int | None = None,
    arms: int = 2,
    control: bool = False,
    suite_cases: int | None = None,
) -> Plan:
    """Plan a two-arm comparison: the discordant pairs and units (cases) the exact sign
    test needs to detect `win_rate` with `power` at `alpha`, exact and approximate.
    With `arms` > 2, a comparison of every pair (or, `control`, of one arm against each
    other) under Holm's correction: each pair is planned at alpha / m for its m
    comparisons, the level Holm's first step tests the smallest p-value at, so the power
    holds for any pair (Bonferroni's bound, which Holm never needs more than).

    References: Dixon & Mood 1946; Connor 1987, Biometrics 43(1); Chernick & Liu 2002
    (saw-toothed exact power) via `stats.sign_test_sample_size`; Holm 1979, Scand. J.
    Statist. 6(2).

    A sequential plan for a suite of `suite_cases` cases takes, among its candidate
    truncations, the one with the fewest expected pairs whose most cases fit the suite,
    and records the power at the suite's size (`_sequential_design`).
    """
    if isinstance(arms, bool) or not isinstance(arms, int) or arms < 2:
        raise InputError(f"arms must be an integer of at least 2, got {arms!r}", json_path="arms")
    m = (arms - 1) if control else arms * (arms - 1) // 2
    if m > 1 and sequential:
        raise InputError("a sequential plan compares two arms: plan more arms with the fixed sign test")
    ss = stats.sign_test_sample_size(win_rate, tie_rate, alpha / m, power)
    seq = None
    test = SIGN_TEST
    if sequential:
        test = SEQUENTIAL_SIGN_TEST
        seq = _sequential_design(win_rate, tie_rate, alpha, power, ss, suite_cases)
    return Plan(
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
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        sequential=seq,
        arms=arms,
        comparisons=m,
        correction="holm" if m > 1 else None,
    )


def _sequential_design(
    win_rate: float, tie_rate: float, alpha: float, power: float, ss: Any, suite_cases: int | None = None
) -> dict[str, Any]:
    """The sequential design: the `stats.SequentialSignTest` arguments (`params`), what
    they give at the planned effect (exact operating characteristics), the most cases it
    may need (`max_trials`) and, for a suite of `suite_cases`, whether it fits and its
    exact power on that many cases."""
    params, fits = _shortest_design(
        max(win_rate, 1 - win_rate), alpha, power, ss.discordant_first, tie_rate=tie_rate, suite_cases=suite_cases
    )
    seq = stats.SequentialSignTest(**params)
    oc = seq.operating_characteristics(params["win_rate"], tie_rate)
    at_suite: dict[str, Any] = {}
    if suite_cases is not None:
        at_suite = {
            "suite_cases": suite_cases,
            "fits_suite": fits,
            "power_at_suite": seq.power_within(suite_cases, params["win_rate"], tie_rate),
        }
    return {
        "params": params,
        "max_discordant": seq.design.max_discordant,
        "max_trials": seq.max_trials(tie_rate),
        **at_suite,
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


# Caps on the discordant pairs a sequential plan tries, as multiples of the fixed design's
# pairs (the default design's is 1.5x): a longer truncation can stop sooner on average.
# Tried while the fixed design needs at most SEQUENTIAL_CAPS_UP_TO pairs (the exact
# recursion's cost grows with the square of the cap).
SEQUENTIAL_CAPS = (2.0, 3.0)
SEQUENTIAL_CAPS_UP_TO = 100


def _shortest_design(
    win_rate: float,
    alpha: float,
    power: float,
    fixed_discordant: int,
    *,
    tie_rate: float = 0.0,
    suite_cases: int | None = None,
) -> tuple[dict[str, Any], bool]:
    """The `stats.SequentialSignTest` arguments with the fewest expected discordant pairs at
    the planned win rate: the default design (1.5x the fixed pairs, power no less than the
    fixed test's) or one truncated at `SEQUENTIAL_CAPS` times the fixed pairs (power no less
    than planned; tried up to `SEQUENTIAL_CAPS_UP_TO` fixed pairs). Each holds alpha
    exactly under a look after every pair (issue 46). With `suite_cases`, only a design
    whose most cases (`max_trials` at `tie_rate`) fit the suite is taken, for a longer
    one's power does not hold on it; when none fits, the shortest cap. Returns the
    arguments and whether they fit the suite (True without one).

    References: Wald 1945 (the SPRT); Armitage, McPherson & Rowe 1969 (exact boundaries)."""
    base: dict[str, Any] = {"win_rate": win_rate, "alpha": alpha, "power": power}
    caps = SEQUENTIAL_CAPS if fixed_discordant <= SEQUENTIAL_CAPS_UP_TO else ()
    candidates = [base] + [{**base, "max_discordant": math.ceil(m * fixed_discordant)} for m in caps]
    tests = [stats.SequentialSignTest(**params) for params in candidates]
    fitting = [i for i, t in enumerate(tests) if suite_cases is None or t.max_trials(tie_rate) <= suite_cases]
    if not fitting:
        return candidates[min(range(len(tests)), key=lambda i: tests[i].design.max_discordant)], False
    best = min(fitting, key=lambda i: tests[i].operating_characteristics(win_rate).expected_discordant)
    return candidates[best], True


def write_plan(plan: Plan, suite_dir: str | Path, *, force: bool = False) -> Path:
    """Write `plan.json` into the suite folder (atomically). The plan's seed defaults to
    the suite's `config.json` seed, so the run that follows is the one planned. An
    existing plan is a pre-registration: it is replaced only with `force`."""
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
    if not force and os.path.lexists(path):
        raise InputError(
            "a plan is already pre-registered here; replacing it silently would undo the pre-registration "
            "(pass --force to write a new plan, and commit the change)",
            path,
        )
    write_atomic(path, json.dumps(plan.to_json(), indent=2) + "\n")
    return path


def suite_shortfall(plan: Plan, n_cases: int) -> str | None:
    """A sentence when a suite of `n_cases` cases has fewer than the plan may need (one
    vote per case: repeating cases cannot make up for missing ones): for a sequential plan
    the most cases its design may need (`Plan.max_trials`), with the power it has at the
    suite's size; None when it has enough."""
    need = plan.max_trials()
    if plan.unit != "case" or n_cases >= need:
        return None
    if plan.test == SEQUENTIAL_SIGN_TEST:
        seq = stats.SequentialSignTest(**plan.sequential_params())
        pw = seq.power_within(n_cases, seq.design.win_rate, plan.tie_rate)
        return (
            f"the suite has {n_cases} cases, the sequential plan may need up to {need} (its cap of "
            f"{seq.design.max_discordant} discordant pairs at tie rate {plan.tie_rate:g}): on {n_cases} cases its "
            f"power at the planned effect is {pw:.3f}, not {seq.design.power_exact:.3f}; add {need - n_cases} "
            "cases, or rewrite the plan for this suite with `evalkit power --sequential --write SUITE --force`"
        )
    return (
        f"the suite has {n_cases} cases, the plan needs {plan.n_trials} (one vote per case): a run of this suite "
        f"cannot follow the plan; add {plan.n_trials - n_cases} cases, or plan for a larger effect"
    )


def load_plan(path: str | Path) -> Plan:
    """Read a `plan.json` (a suite folder is accepted too). A plan in a suite folder must
    resolve inside it (`suite.read_file_bytes`)."""
    p = Path(path)
    if p.is_dir():
        p = p / PLAN_FILE
    if not os.path.lexists(p):
        raise InputError("plan not found (write one with `evalkit power --write`)", p)
    raw = read_json_object(p, "a plan", root=suite_folder_of(p))
    try:
        plan = Plan.from_json(raw)
    except InputError as exc:
        raise InputError(exc.message, p, json_path=exc.json_path) from None
    return replace(plan, path=str(p))


def check_against_plan(verdict: Tested, plan: Plan) -> PlanCheck:
    """Hold a verdict to its plan: flag a changed test, alpha or unit, and a run that
    stopped short of the planned units (for a sequential plan: stopped before the test
    settled). More units than planned follow the plan: at the planned test, alpha and
    unit they only add power (the check records both counts, and the pages say so)."""
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
    return PlanCheck(
        ok=not flags,
        flags=tuple(flags),
        planned_trials=plan.n_trials,
        observed_trials=n,
        plan_test=plan.test,
        verdict_test=verdict.test,
        plan=plan.path,
    )
