"""Sampling that stops once the pre-registered test has decided, and the money that saved.

Two ways a run may stop before the fixed design's last call (config.json ``"stopping"``,
or ``evalkit run --until-decided`` for the first):

* ``sequential``: the suite's pre-registered plan (``plan.json``, a ``sequential-sign``
  test written by ``evalkit power --sequential --write``) names the test. Cases are drawn
  in an order seeded by the plan's seed (`seeded_order`), each case's k samples in both
  arms drawn together: the case is the verdict's unit. Each sample is graded by its
  case's deterministic checks as it lands; once every sample of a case is in, the case
  casts its vote (the sign of treatment passes minus baseline passes, as
  `verdicts.two_arm_verdict` counts it) and the votes are fed to the plan's
  `stats.SequentialSignTest` in the seeded order. That test is a truncated two-sided SPRT
  on the sign test's discordant pairs whose boundaries were calibrated by exact
  recursion for a look after every pair, so alpha and power hold however many cases the
  run looks at. The run stops drawing cases at ``pass``, ``regression`` or
  ``no-improvement`` (futility, or the design's cap on discordant pairs), or when the
  cases run out; calls already in flight finish, are paid and count.
* ``per_case``: a regression case (gated on pass^k) is decided by its first failing
  sample and a capability case (pass@k) by its first passing one; later samples of that
  case and arm are not drawn (docs/stopping.md says what that changes in the estimates).

`StopRecord.to_json` is the ``stopping`` block of ``summary.json``.

References: Wald 1945, "Sequential Tests of Statistical Hypotheses", Ann. Math. Statist.
16(2); Armitage, McPherson & Rowe 1969, JRSS A 132(2) (exact crossing probabilities).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.checking.graders import grade_sample, require_scored
from evalkit.foundations.errors import InputError
from evalkit.foundations.records import SEQUENTIAL_SIGN_TEST, Plan, Sample, Suite, set_gate
from evalkit.numbers import stats
from evalkit.numbers.plans import find_plan, load_plan

Key = tuple[str, str, int]
WRITE_PLAN = "evalkit power --win-rate 0.75 --alpha 0.05 --power 0.8 --sequential --write {suite}"


def seeded_order(case_ids: Iterable[str], seed: int | None) -> list[str]:
    """The order a sequential run draws its cases in: the suite's order shuffled by a
    generator seeded from `seed` alone, so a resume (and anyone with the plan) draws the
    same sequence."""
    order = list(case_ids)
    random.Random(f"evalkit-case-order/{seed if seed is not None else 0}").shuffle(order)
    return order


def sequential_plan(suite: Suite) -> Plan:
    """The suite's pre-registered sequential plan; `InputError` (exit 2) naming the command
    that writes one when there is none, or when the plan names the fixed sign test."""
    path = find_plan(suite.path)
    if path is None:
        raise InputError(
            "--until-decided stops on the pre-registered sequential test, and the suite has no plan.json: "
            f"write one first with `{WRITE_PLAN.format(suite=suite.path)}` (your planned effect and power)",
            Path(suite.path),
        )
    plan = load_plan(path)
    if plan.test != SEQUENTIAL_SIGN_TEST:
        raise InputError(
            f"--until-decided needs a sequential plan; plan.json names the {plan.test!r} test, whose error rate "
            "does not hold under repeated looks: write a sequential one with "
            f"`{WRITE_PLAN.format(suite=suite.path)} --force`",
            path,
            json_path="$.test",
        )
    return plan


def check_suite_size(suite: Suite, plan: Plan) -> None:
    """Refuse a sequential run of a suite with fewer cases than its plan's design may need
    (`Plan.max_trials`): the design is truncated at its cap on discordant pairs, and a
    suite that runs out before it does not hold the planned power (issue 46 review)."""
    need, have = plan.max_trials(), len(suite.cases)
    if have >= need:
        return
    raise InputError(
        f"the suite has {have} cases and its sequential plan may need up to {need} (its cap of "
        f"{(plan.sequential or {}).get('max_discordant')} discordant pairs at tie rate {plan.tie_rate:g}): "
        f"on {have} cases the planned power does not hold. Add {need - have} cases, or write a plan that fits "
        f"this suite with `{WRITE_PLAN.format(suite=suite.path)} --force` (it picks a design whose most cases "
        "fit, or says the power at the suite's size)",
        Path(plan.path) if plan.path else Path(suite.path),
    )


def check_gradable(suite: Suite, arms: list[str], mode: str) -> None:
    """Refuse a stopping run whose samples cannot be graded as they land: a judged case
    (its grade needs the judge, after the run), a unit other than the prompt (an agent's
    trajectory checks need its trace), or a sequential run of other than two arms."""
    if mode == "sequential" and len(arms) != 2:
        raise InputError(
            f"a sequential run compares two arms (baseline, treatment), got {len(arms)}: pass --arms A,B",
            json_path="$.arms",
        )
    if suite.config.unit.kind != "prompt":
        raise InputError(
            f"stopping {mode!r} grades each sample as it lands, which a {suite.config.unit.kind} unit's "
            "trajectory checks cannot be: run it with the fixed design",
            Path(suite.path) / "config.json",
            json_path="$.stopping",
        )
    for case in suite.cases:
        if case.judged:
            raise InputError(
                f"case {case.id!r} is judged: stopping {mode!r} needs every case's pass/fail during the run "
                "(deterministic checks); run it with the fixed design",
                line=case.line or None,
            )
        require_scored(case)


@dataclass(frozen=True)
class StopRecord:
    """What a stopping run did, as `summary.json` keeps it (``stopping``): the mode, whether
    it stopped before the fixed design's end and why, at which case of how many, the calls
    and dollars spent (paid, and at list price: paid plus what the cache avoided) against
    the fixed design's at list price (`_fixed_cost`, per arm), and the keys not run (which grading does not expect)."""

    mode: str
    stopped_early: bool
    reason: str
    at_case: int
    of_cases: int
    calls: int
    fixed_calls: int
    spend_usd: float
    fixed_usd: float
    list_usd: float = 0.0
    not_run: tuple[Key, ...] = ()
    decision: str | None = None
    seed: int | None = None
    tally: dict[str, int] = field(default_factory=dict)

    @property
    def calls_saved(self) -> int:
        return self.fixed_calls - self.calls

    @property
    def saved_usd(self) -> float:
        """The fixed design's dollars less this run's, both at list price (cache hits included)."""
        return max(0.0, self.fixed_usd - self.list_usd)

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "stopped_early": self.stopped_early,
            "reason": self.reason,
            "decision": self.decision,
            "at_case": self.at_case,
            "of_cases": self.of_cases,
            "calls": self.calls,
            "fixed_calls": self.fixed_calls,
            "calls_saved": self.calls_saved,
            "spend_usd": self.spend_usd,
            "list_usd": self.list_usd,
            "fixed_usd": self.fixed_usd,
            "saved_usd": self.saved_usd,
            "order_seed": self.seed,
            "tally": dict(self.tally),
            "not_run": [list(k) for k in self.not_run],
        }


def _list_spend(per_arm: dict[str, dict[str, Any]]) -> float:
    """The run's calls at list price: what was paid plus what the cache avoided, every arm."""
    return sum(float(a.get("paid_usd", 0.0)) + float(a.get("avoided_usd", 0.0)) for a in per_arm.values())


def _fixed_cost(per_arm: dict[str, dict[str, Any]], calls_per_arm: int) -> float:
    """The fixed design's dollars at list price: each arm's own list price per call (paid
    plus avoided by the cache, over its samples) times the calls the fixed design makes
    in that arm, so a cache hit never makes the fixed design free and arms at different
    prices are not pooled."""
    total = 0.0
    for a in per_arm.values():
        samples = int(a.get("samples", 0))
        if samples:
            total += (float(a.get("paid_usd", 0.0)) + float(a.get("avoided_usd", 0.0))) / samples * calls_per_arm
    return total


class _Grader:
    """A sample's pass/fail by its case's deterministic checks (`graders.grade_sample`)."""

    def __init__(self, suite: Suite) -> None:
        self.cases = {c.id: c for c in suite.cases}
        self.path = suite.path

    def passed(self, key: Key, sample: Sample | dict[str, Any]) -> bool | None:
        """Whether every check passed; None when a check could not be run on it (the
        sample then decides nothing: never a pass, never a vote)."""
        try:
            return all(r.passed for r in grade_sample(self.cases[key[0]], sample, self.path))
        except Exception:  # noqa: BLE001 - a check that fails to run on one answer must not end the run
            return None


class SequentialStop:
    """The sequential mode's watch over a run: draws keys case by case in the seeded order
    until the plan's test decides (`gate`), and feeds it each finished case's vote in that
    order (`add`). A sample that errored stops the drawing: its case has no vote, so the
    test cannot go past it (a resume runs it again)."""

    def __init__(self, suite: Suite, plan: Plan, arms: list[str], k: int, order: list[str]) -> None:
        self.grader = _Grader(suite)
        self.test = stats.SequentialSignTest(**plan.sequential_params())
        self.baseline, self.treatment = arms
        self.k, self.order, self.seed = k, order, plan.seed
        self.net: dict[str, int] = {}
        self.landed: dict[str, int] = {}
        self.votes: dict[str, int] = {}
        self.fed = 0
        self.drawn: set[str] = set()
        self.done: set[Key] = set()
        self.errored: str | None = None

    @property
    def settled(self) -> bool:
        return self.test.decision != "continue"

    @property
    def stopped(self) -> bool:
        return self.settled or self.errored is not None

    def gate(self, keys: Iterator[Key]) -> Iterator[Key]:
        """The keys to run, stopping as soon as the test has decided or a sample errored."""
        for key in keys:
            if self.stopped:
                return
            self.drawn.add(key[0])
            yield key

    def add(self, key: Key, sample: Sample | dict[str, Any]) -> None:
        """Count a finished sample; once its case is complete, feed the votes now in order."""
        case_id, arm, _ = key
        self.drawn.add(case_id)
        self.done.add(key)
        passed = self.grader.passed(key, sample)
        if passed is None:  # ungradable: its case has no vote, as for an errored sample
            self.error(key)
            return
        sign = 1 if arm == self.treatment else -1
        self.net[case_id] = self.net.get(case_id, 0) + sign * passed
        self.landed[case_id] = self.landed.get(case_id, 0) + 1
        if self.landed[case_id] == 2 * self.k:
            net = self.net[case_id]
            self.votes[case_id] = (net > 0) - (net < 0)
            self._feed()

    def error(self, key: Key) -> None:
        """A sample without a result: the test cannot go past its case. Once the test has
        decided, a case drawn after the ones it used is not the design's: its error is
        recorded in errors.jsonl, and the run stays decided."""
        if not self.settled:
            self.errored = self.errored or f"{key[0]}/{key[1]}/{key[2]}"

    def _feed(self) -> None:
        while not self.settled and self.fed < len(self.order) and self.order[self.fed] in self.votes:
            self.test.update(self.votes[self.order[self.fed]])
            self.fed += 1

    def needed(self, key: Key) -> bool:
        """Whether the design expects `key`: once the test decided, the keys of the cases it
        used (a case drawn after them whose calls were in flight is not missing its
        others), else those of every case drawn, and any key that has a sample."""
        used = set(self.order[: self.fed]) if self.settled else self.drawn
        return key[0] in used or key in self.done

    def record(self, calls: int, spend_usd: float, per_arm: dict[str, dict[str, Any]]) -> StopRecord:
        """The run's `StopRecord`, from its calls, paid dollars and each arm's counts and
        money (`runner._arm_money`: samples, paid and avoided dollars)."""
        st = self.test.state
        n = len(self.order)
        if self.errored:
            reason = f"sample {self.errored} errored: its case has no vote, the test cannot go past it"
        elif self.settled:
            reason = f"the sequential sign test decided {st.decision} after {self.fed} of {n} cases"
        else:
            reason = f"the cases ran out after {self.fed} of {n} without a decision"
        fixed_calls = n * len(per_arm) * self.k
        arms_run = (self.baseline, self.treatment)
        keys = ((c, a, i) for c in self.order for a in arms_run for i in range(self.k))
        not_run = tuple(key for key in keys if not self.needed(key))
        return StopRecord(
            mode="sequential",
            stopped_early=self.settled and self.fed < n,
            reason=reason,
            at_case=self.fed,
            of_cases=n,
            calls=calls,
            fixed_calls=fixed_calls,
            spend_usd=spend_usd,
            list_usd=_list_spend(per_arm),
            fixed_usd=_fixed_cost(per_arm, n * self.k),
            not_run=not_run,
            decision=st.decision,
            seed=self.seed,
            tally={"wins": st.wins, "losses": st.losses, "ties": st.ties},
        )


class PerCaseStop:
    """The per-case mode's watch: a (case, arm) of a regression case (pass^k) is decided by
    its first failing sample, of a capability case (pass@k) by its first passing one;
    its later keys are skipped when drawn (`gate`). Keys are drawn index-major
    (`order_keys`), so a case's next sample is drawn after its earlier ones had time to
    land."""

    def __init__(self, suite: Suite, k: int) -> None:
        self.grader = _Grader(suite)
        self.k = k
        self.gates = {c.id: set_gate(c.set) for c in suite.cases}
        self.decided: set[tuple[str, str]] = set()
        self.skipped: set[Key] = set()

    stopped = False  # a per-case run never stops as a whole
    errored: str | None = None

    @staticmethod
    def order_keys(keys: Iterable[Key]) -> list[Key]:
        """`keys` index-major: every case's first sample, then every case's second, ..."""
        return sorted(keys, key=lambda key: key[2])

    def gate(self, keys: Iterator[Key]) -> Iterator[Key]:
        for key in keys:
            if (key[0], key[1]) in self.decided:
                self.skipped.add(key)
                continue
            yield key

    def add(self, key: Key, sample: Sample | dict[str, Any]) -> None:
        gate = self.gates.get(key[0])
        passed = self.grader.passed(key, sample)
        if (gate == "pass^k" and passed is False) or (gate == "pass@k" and passed):
            self.decided.add((key[0], key[1]))

    def error(self, key: Key) -> None:
        """An errored sample decides nothing (its case is sampled on)."""

    def needed(self, key: Key) -> bool:
        return key not in self.skipped

    def record(self, calls: int, spend_usd: float, per_arm: dict[str, dict[str, Any]]) -> StopRecord:
        """The run's `StopRecord` (as `SequentialStop.record`)."""
        n = len(self.gates)
        fixed_calls = n * len(per_arm) * self.k
        return StopRecord(
            mode="per_case",
            stopped_early=bool(self.skipped),
            reason=f"{len(self.decided)} case-arm(s) decided before their k-th sample",
            at_case=n,
            of_cases=n,
            calls=calls,
            fixed_calls=fixed_calls,
            spend_usd=spend_usd,
            list_usd=_list_spend(per_arm),
            fixed_usd=_fixed_cost(per_arm, n * self.k),
            not_run=tuple(sorted(self.skipped)),
        )
