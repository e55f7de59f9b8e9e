"""Why each case failed: the failing samples of a run grouped by case, each with its
output, every failed check's name and reason, the judge's score and reason, or the
error that left it without an answer. The run_summary and pass_at_k pages display it
(`nb.show_failures`); the package decides what is shown and what is left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evalkit.foundations import fmt
from evalkit.runfolder.runload import key_tuples

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
    judge_unstable: bool = False  # asked again (`grade --judge-repeats`), the judge's verdict flipped

    def why(self) -> str:
        """The reasons in one line: the failed checks, the judge's verdict, or the error."""
        parts = [f"{c.name}: {c.reason}" if c.reason else f"{c.name}: failed" for c in self.checks if c.name != "judge"]
        if self.judge_score is not None or any(c.name == "judge" for c in self.checks):
            score = fmt.number(self.judge_score)
            parts.append(f"judge: score {score}" + (f", {self.judge_reason}" if self.judge_reason else ""))
        if self.judge_unstable:
            parts.append("judge UNSTABLE: asked again, its verdict flipped (grade --judge-repeats)")
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


def _index(item: Any) -> int:
    return item.index if isinstance(item, FailedSample) else int(item[0])


def _failed(item: Any) -> FailedSample:
    """A failing sample as `failures` met it, (index, output, grade values or None), as
    the record a page shows (an errored key is one already)."""
    if isinstance(item, FailedSample):
        return item
    index, output, g = item
    if g is None:  # no grade: never a pass
        return FailedSample(index, _opt(output), (), None, None, "not graded")
    _, checks, judge_score, judge_reason, error, *rest = g
    return FailedSample(
        index,
        _opt(output),
        _checks(checks),
        _opt(judge_score),
        _opt(judge_reason),
        _opt(error) or None,
        bool(rest and _opt(rest[0])),
    )


def failures(
    run: Any, *, arms: list[str] | None = None, max_cases: int = MAX_CASES, max_samples: int = MAX_SAMPLES
) -> Failures:
    """The failing samples of `run` (a `runload.Run`), grouped by case and arm: cases that
    never passed first (fewest passes first), then flaky ones; errored keys (no answer)
    count as failing samples, ungraded ones too (a missing grade is never a pass).

    Read column by column (`runload.key_tuples`): each sample's grade is found by its
    row (the last of its key), and its values are read, and a `FailedSample` made, only
    for the samples shown: a 100,000-sample run has that many rows, on two pages."""
    samples = run.samples
    grades = run.grades
    columns: tuple[str, ...] = ("passed", "checks", "judge_score", "judge_reason", "error")
    columns += ("judge_unstable",) if "judge_unstable" in grades.columns else ()  # graded with --judge-repeats
    row_of = dict(zip(key_tuples(grades), range(len(grades)), strict=True)) if len(grades) else {}
    passed_at = grades["passed"].tolist() if len(grades) else []
    # per case-arm: [samples, passed, the failing samples as met: (index, output, grade row or None)];
    # a `FailedSample` is made only for the few a page shows
    groups: dict[tuple[str, str], list[Any]] = {}
    if len(samples):
        for key, output in zip(key_tuples(samples), samples["output"].tolist(), strict=True):
            if arms is not None and key[1] not in arms:
                continue
            group = groups.get(key[:2])
            if group is None:
                group = groups[key[:2]] = [0, 0, []]
            group[0] += 1
            row = row_of.get(key)
            if row is not None and passed_at[row] is True:
                group[1] += 1
            else:
                group[2].append((key[2], output, row))
    if len(run.errors):
        for e in run.errors.to_dict("records"):
            if arms is not None and str(e["arm"]) not in arms:
                continue
            group = groups.setdefault((str(e["case_id"]), str(e["arm"])), [0, 0, []])
            group[0] += 1
            group[2].append(FailedSample(int(e["index"]), None, (), None, None, str(e.get("error") or "errored")))
    failing = []
    for (case, arm), (n, passed, bad) in groups.items():
        if bad:
            failing.append((case, arm, n, passed, sorted(bad, key=_index)))
    failing.sort(key=lambda t: (t[3] > 0, t[3] / t[2], t[0], t[1]))
    shown = failing[:max_cases]
    values = [grades[c].tolist() for c in columns] if len(grades) else []

    def shown_sample(item: Any) -> FailedSample:  # a failing sample as met, with its grade's values now read
        if isinstance(item, FailedSample):
            return item
        index, output, row = item
        return _failed((index, output, None if row is None else tuple(col[row] for col in values)))

    cases = tuple(
        CaseFailures(
            case, arm, n, ok, tuple(shown_sample(b) for b in bad[:max_samples]), max(len(bad) - max_samples, 0)
        )
        for case, arm, n, ok, bad in shown
    )
    return Failures(
        cases=cases,
        cases_left_out=len(failing) - len(shown),
        samples_left_out=sum(c.samples_left_out for c in cases) + sum(len(t[4]) for t in failing[max_cases:]),
        n_failed_samples=sum(len(t[4]) for t in failing),
    )
