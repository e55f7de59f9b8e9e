"""What compare, gate and report concluded: micro-test results, `ArmComparisons`,
`RunVerdicts`, `PromptFinding`. Split out of `evalkit.foundations.records`, which re-exports
every public name.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from evalkit.foundations.records_base import _check_schema, _num_or_none
from evalkit.foundations.records_baseline import _items
from evalkit.foundations.records_gate import ConformanceVerdict, GateResult, Verdict
from evalkit.foundations.records_grades import JudgeTrust

# --- micro-tests --------------------------------------------------------------------------


@dataclass(frozen=True)
class MicrotestArm:
    """One arm of a micro-test: samples, how many were flagged, the flag rate with its
    95% Wilson interval, and how many distinct answer shapes the repetitions gave. A
    variant also carries its test against the control (`microtest.variant_p`): the
    one-sided exact p that it flags less, its Holm-adjusted p across the variants, and
    the cases where it flagged fewer, more or as many outputs as the control (None on
    the control, and on a result written before the test existed)."""

    samples: int
    flagged: int
    rate: float | None
    ci_low: float | None
    ci_high: float | None
    shapes: int
    p_value: float | None = None
    p_adjusted: float | None = None
    cases_fewer: int | None = None
    cases_more: int | None = None
    cases_same: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {f.name: v for f, v in _items(self)}


@dataclass(frozen=True)
class MicrotestResult:
    """A micro-test's conclusion (`microtest.analyse`): the control's failures, the best
    variant, and the verdict kind (`pass`: a variant flags significantly less than the
    control, by `test` at `alpha` after Holm across the variants, and the best of those
    is named; `no-improvement`: none does, or the control shows nothing to fix)."""

    SCHEMA = "evalkit.conclusions.microtest/1"

    control: str
    flag_pattern: str
    arms: dict[str, MicrotestArm]
    kind: str
    conclusion: str
    nothing_to_fix: bool
    best: str | None = None
    test: str = ""  # the test of each variant against the control ("" on a result written before it)
    alpha: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.SCHEMA,
            "control": self.control,
            "flag_pattern": self.flag_pattern,
            "arms": {a: v.to_json() for a, v in self.arms.items()},
            "kind": self.kind,
            "conclusion": self.conclusion,
            "nothing_to_fix": self.nothing_to_fix,
            "best": self.best,
            "test": self.test,
            "alpha": self.alpha,
        }

    @classmethod
    def from_json(cls, d: Any) -> MicrotestResult:
        d = _check_schema(d, cls.SCHEMA, "a micro-test result")
        return cls(
            str(d["control"]),
            str(d.get("flag_pattern") or ""),
            {a: MicrotestArm(**v) for a, v in (d.get("arms") or {}).items()},
            str(d["kind"]),
            str(d["conclusion"]),
            bool(d.get("nothing_to_fix")),
            d.get("best"),
            str(d.get("test") or ""),
            _num_or_none(d.get("alpha")),
        )


# --- what compare, gate and report concluded ------------------------------------------------


@dataclass(frozen=True)
class ArmComparisons:
    """`evalkit compare` on a run of more than two arms: every pair's sign-test verdict
    (or, with a `control` arm, the control against each other arm), with Holm's
    correction across the pairs. `pairs` are the corrected verdicts (each keeps its own
    uncorrected `p_value`; its kind and reason follow `p_adjusted`, the Holm-adjusted
    p-value at the family's `alpha`); a pair that was inconclusive stays so.

    References: Holm 1979, Scand. J. Statist. 6(2); Dixon & Mood 1946 (the sign test)."""

    SCHEMA = "evalkit.arm-comparisons/1"

    arms: tuple[str, ...]
    control: str | None
    alpha: float
    pairs: tuple[Verdict, ...]
    p_adjusted: tuple[float | None, ...]
    correction: str = "holm"

    def pair(self, baseline: str, treatment: str) -> tuple[Verdict, float | None] | None:
        """The corrected verdict of one pair and its adjusted p-value, or None."""
        for v, p in zip(self.pairs, self.p_adjusted, strict=True):
            if (v.baseline_arm, v.treatment_arm) == (baseline, treatment):
                return v, p
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.SCHEMA,
            "arms": list(self.arms),
            "control": self.control,
            "alpha": self.alpha,
            "correction": self.correction,
            "pairs": [
                {
                    "baseline": v.baseline_arm,
                    "treatment": v.treatment_arm,
                    "kind": v.kind,
                    "wins": v.wins,
                    "ties": v.ties,
                    "losses": v.losses,
                    "errored": v.errored,
                    "p_value": _num_or_none(v.p_value),
                    "p_adjusted": _num_or_none(p),
                    "verdict": v.to_json(),
                }
                for v, p in zip(self.pairs, self.p_adjusted, strict=True)
            ],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ArmComparisons:
        rows = d.get("pairs") or []
        return cls(
            arms=tuple(d.get("arms") or ()),
            control=d.get("control"),
            alpha=float(d.get("alpha", 0.05)),
            pairs=tuple(Verdict.from_json(r["verdict"]) for r in rows),
            p_adjusted=tuple(r.get("p_adjusted") for r in rows),
            correction=str(d.get("correction", "holm")),
        )

    def render(self) -> str:
        """The one table: each pair's tally, p-value, Holm-adjusted p-value and verdict."""
        how = f"{self.control} against each other arm" if self.control else "every pair"
        lines = [
            f"{len(self.arms)} arms ({', '.join(self.arms)}), {len(self.pairs)} comparison(s): {how}; exact "
            f"two-sided sign test per pair, one vote per case, Holm-corrected across the pairs at alpha "
            f"{self.alpha:g}",
            "",
            f"{'baseline':<16} {'treatment':<16} {'W/T/L (err)':>14} {'p':>9} {'p (Holm)':>9}  verdict",
        ]
        for v, p in zip(self.pairs, self.p_adjusted, strict=True):
            tally = f"{v.wins}/{v.ties}/{v.losses} ({v.errored})"
            raw = "n/a" if v.p_value is None else f"{v.p_value:.4g}"
            adj = "n/a" if p is None else f"{p:.4g}"
            lines.append(
                f"{str(v.baseline_arm):<16} {str(v.treatment_arm):<16} {tally:>14} {raw:>9} {adj:>9}  {v.kind.upper()}"
            )
        return "\n".join(lines)


@dataclass(frozen=True)
class RunVerdicts:
    """`verdicts.json` in a run folder: what `compare`, `gate` and `report` concluded
    about the run, written before any notebook runs, read by the notebooks and the
    index. Each command replaces its own part: `comparisons` (one per pair of arms, the
    plan check inside), `gate` (against `baseline`), `judge_trust`, `conformance` (a
    single-arm run), `microtest`."""

    SCHEMA = "evalkit.conclusions.verdicts/1"

    run: str
    comparisons: tuple[Verdict, ...] = ()
    gate: GateResult | None = None
    judge_trust: JudgeTrust | None = None
    conformance: ConformanceVerdict | None = None
    microtest: MicrotestResult | None = None
    plan: str | None = None  # the plan file the comparisons were held to
    updated: str = ""
    arm_comparisons: ArmComparisons | None = None  # a run of more than two arms: every pair, Holm-corrected

    def comparison(self, baseline: str, treatment: str) -> Verdict | None:
        return next((v for v in self.comparisons if (v.baseline_arm, v.treatment_arm) == (baseline, treatment)), None)

    def with_comparison(self, v: Verdict) -> RunVerdicts:
        """These verdicts with `v` in place of the comparison of the same two arms."""
        kept = tuple(
            c for c in self.comparisons if (c.baseline_arm, c.treatment_arm) != (v.baseline_arm, v.treatment_arm)
        )
        plan = v.plan_check.plan if v.plan_check is not None else self.plan
        return replace(self, comparisons=kept + (v,), plan=plan)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.SCHEMA,
            "run": self.run,
            "updated": self.updated,
            "plan": self.plan,
            "comparisons": [v.to_json() for v in self.comparisons],
            "gate": self.gate.to_json() if self.gate else None,
            "judge_trust": self.judge_trust.to_json() if self.judge_trust else None,
            "conformance": self.conformance.to_json() if self.conformance else None,
            "microtest": self.microtest.to_json() if self.microtest else None,
            "arm_comparisons": self.arm_comparisons.to_json() if self.arm_comparisons else None,
        }

    @classmethod
    def from_json(cls, d: Any) -> RunVerdicts:
        d = _check_schema(d, cls.SCHEMA, "verdicts.json")
        return cls(
            run=str(d.get("run") or ""),
            comparisons=tuple(Verdict.from_json(v) for v in d.get("comparisons") or ()),
            gate=GateResult.from_json(d["gate"]) if d.get("gate") else None,
            judge_trust=JudgeTrust.from_json(d["judge_trust"]) if d.get("judge_trust") else None,
            conformance=ConformanceVerdict.from_json(d["conformance"]) if d.get("conformance") else None,
            microtest=MicrotestResult.from_json(d["microtest"]) if d.get("microtest") else None,
            plan=d.get("plan"),
            updated=str(d.get("updated") or ""),
            arm_comparisons=ArmComparisons.from_json(d["arm_comparisons"]) if d.get("arm_comparisons") else None,
        )


@dataclass(frozen=True)
class PromptFinding:
    """One finding of the static analysis of a prompt or skill file
    (`evalkit.prompts.analyze`): where (`file`, 1-based `line` and `col`), how bad
    (`severity`: error, warning, note), which `rule`, what it says and the `suggestion`
    (a rewrite to consider). `source` says who found it: ``"rule"`` (the deterministic
    rules) or ``"judge"`` (`evalkit analyze --judge`: a model's answer, validated)."""

    file: str
    line: int
    col: int
    severity: str
    rule: str
    message: str
    suggestion: str
    source: str = "rule"

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "col": self.col,
            "severity": self.severity,
            "rule": self.rule,
            "message": self.message,
            "suggestion": self.suggestion,
            "source": self.source,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PromptFinding:
        return cls(
            str(d["file"]),
            int(d["line"]),
            int(d["col"]),
            str(d["severity"]),
            str(d["rule"]),
            str(d["message"]),
            str(d["suggestion"]),
            str(d.get("source", "rule")),
        )
