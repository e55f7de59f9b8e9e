"""Why each case failed: the failing samples of a run grouped by case, each with its
output, every failed check's name and reason, the judge's score and reason, or the
error that left it without an answer. The run_summary and pass_at_k pages display it
(`nb.show_failures`); the package decides what is shown and what is left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import fmt

MAX_CASES = 15  # case-arms shown in full on a page
MAX_SAMPLES = 3  # failing samples shown per case-arm


@dataclass(frozen=True)
class FailedCheck:
    """One check a sample failed: its name and the grader's reason."""

    name: str
    reason: str


@dataclass(frozen=True)
class FailedSample:
    """One sample that did not pass: its output (None: no answer), the checks it failed,
    the judge's score and reason when a judge graded it, and the error that left it
    without an answer or a grade."""

    index: int
    output: str | None
    checks: tuple[FailedCheck, ...]
    judge_score: float | None
    judge_reason: str | None
    error: str | None

    def why(self) -> str:
        """The reasons in one line: the failed checks, the judge's verdict, or the error."""
        parts = [f"{c.name}: {c.reason}" if c.reason else f"{c.name}: failed" for c in self.checks if c.name != "judge"]
        if self.judge_score is not None or any(c.name == "judge" for c in self.checks):
            score = fmt.number(self.judge_score)
            parts.append(f"judge: score {score}" + (f", {self.judge_reason}" if self.judge_reason else ""))
        if self.error:
            parts.append(f"error: {self.error}")
        return "; ".join(parts) or "not graded"


@dataclass(frozen=True)
class CaseFailures:
    """One case on one arm that did not always pass: `passed` of `n` samples, the
    failing samples shown and how many more were left out."""

    case_id: str
    arm: str
    n: int
    passed: int
    samples: tuple[FailedSample, ...]
    samples_left_out: int

    @property
    def flaky(self) -> bool:
        """Passed sometimes, not every time."""
        return 0 < self.passed < self.n


@dataclass(frozen=True)
class Failures:
    """The failing cases of a run (never-passing first, then the flaky ones), capped:
    `cases_left_out` case-arms and `samples_left_out` failing samples were not shown."""

    cases: tuple[CaseFailures, ...]
    cases_left_out: int
    samples_left_out: int
    n_failed_samples: int

    def summary(self) -> str:
        """One sentence: how many failing samples on how many case-arms, what was left out."""
        shown = len(self.cases) + self.cases_left_out
        if not shown:
            return "No failing sample."
        text = (
            f"{fmt.count(self.n_failed_samples, 'failing sample')} on {fmt.count(shown, 'case-arm')}"
            f" ({sum(1 for c in self.cases if c.flaky)} of those shown flaky)."
        )
        if self.cases_left_out or self.samples_left_out:
            text += (
                f" Left out: {fmt.count(self.cases_left_out, 'case-arm')} and "
                f"{fmt.count(self.samples_left_out, 'more failing sample')}."
            )
        return text


def _checks(raw: Any) -> tuple[FailedCheck, ...]:
    if not isinstance(raw, (list, tuple)):
        return ()
    return tuple(
        FailedCheck(str(c.get("name") or "check"), str(c.get("reason") or ""))
        for c in raw
        if isinstance(c, dict) and not c.get("passed")
    )


def _opt(v: Any) -> Any:
    return None if fmt.missing(v) else v


def failures(
    run: Any, *, arms: list[str] | None = None, max_cases: int = MAX_CASES, max_samples: int = MAX_SAMPLES
) -> Failures:
    """The failing samples of `run` (a `runload.Run`), grouped by case and arm: cases that
    never passed first (fewest passes first), then flaky ones; errored keys (no answer)
    count as failing samples, ungraded ones too (a missing grade is never a pass)."""
    samples = run.samples
    grades = run.grades
    by_key: dict[tuple[str, str, int], dict[str, Any]] = {}
    if len(grades):
        for g in grades.to_dict("records"):
            by_key[(str(g["case_id"]), str(g["arm"]), int(g["index"]))] = g
    groups: dict[tuple[str, str], list[tuple[bool, FailedSample]]] = {}
    if len(samples):
        for s in samples.to_dict("records"):
            key = (str(s["case_id"]), str(s["arm"]), int(s["index"]))
            if arms is not None and key[1] not in arms:
                continue
            g = by_key.get(key, {})
            ok = g.get("passed") is True
            fs = FailedSample(
                index=key[2],
                output=_opt(s.get("output")),
                checks=_checks(g.get("checks")),
                judge_score=_opt(g.get("judge_score")),
                judge_reason=_opt(g.get("judge_reason")),
                error=_opt(g.get("error")) or (None if g else "not graded"),
            )
            groups.setdefault(key[:2], []).append((ok, fs))
    if len(run.errors):
        for e in run.errors.to_dict("records"):
            if arms is not None and str(e["arm"]) not in arms:
                continue
            fs = FailedSample(int(e["index"]), None, (), None, None, str(e.get("error") or "errored"))
            groups.setdefault((str(e["case_id"]), str(e["arm"])), []).append((False, fs))
    failing = []
    for (case, arm), items in groups.items():
        bad = sorted((fs for ok, fs in items if not ok), key=lambda fs: fs.index)
        if bad:
            failing.append((case, arm, len(items), len(items) - len(bad), bad))
    failing.sort(key=lambda t: (t[3] > 0, t[3] / t[2], t[0], t[1]))
    shown = failing[:max_cases]
    cases = tuple(
        CaseFailures(case, arm, n, passed, tuple(bad[:max_samples]), max(len(bad) - max_samples, 0))
        for case, arm, n, passed, bad in shown
    )
    return Failures(
        cases=cases,
        cases_left_out=len(failing) - len(shown),
        samples_left_out=sum(c.samples_left_out for c in cases) + sum(len(t[4]) for t in failing[max_cases:]),
        n_failed_samples=sum(len(t[4]) for t in failing),
    )
