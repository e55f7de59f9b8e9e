"""Why each case failed: the failing samples of a run grouped by case, each with its
output, every failed check's name and reason, the judge's score and reason, or the
error that left it without an answer. The run_summary and pass_at_k pages display it
(`nb.show_failures`); the package decides what is shown and what is left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from evalkit.foundations import fmt
from evalkit.runfolder.runload import sample_keys

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


_Failing = tuple[str, str, int, int, int, int]  # case id, arm, samples, passes, failing samples, group code


@dataclass(frozen=True)
class _Groups:
    """The samples of a run (of the arms asked for) grouped by case and arm, counted
    column-wise (`runload.sample_keys`): per group code, its (case id, arm), samples and
    passes; its failing sample rows; and the errored keys (no answer) by (case id, arm)."""

    names: list[tuple[str, str]]
    n: np.ndarray
    passed: np.ndarray
    failing_rows: np.ndarray  # the failing samples' rows, group by group, each group's in row order
    first: np.ndarray  # per group code: where its failing rows start in `failing_rows`
    grade_row: np.ndarray  # per sample row: the grade row of its key, -1 for none
    errored: dict[tuple[str, str], list[FailedSample]]

    @classmethod
    def of(cls, run: Any, arms: list[str] | None) -> _Groups:
        keys = sample_keys(run)
        n_arms = len(keys.arms)
        rows = np.flatnonzero(np.isin(keys.arm, [c for c, arm in enumerate(keys.arms) if arms is None or arm in arms]))
        group, pairs = pd.factorize(keys.case[rows] * n_arms + keys.arm[rows])
        # a pass is a grade whose `passed` is True itself; a sample without a grade (row -1) never is
        ok = np.append(_is_true(run.grades["passed"]), False)[keys.grade_row[rows]]
        by_group = np.argsort(group[~ok], kind="stable")  # each group's failing rows together, in row order
        return cls(
            names=[(keys.case_ids[p // n_arms], keys.arms[p % n_arms]) for p in pairs.tolist()],
            n=np.bincount(group, minlength=len(pairs)),
            passed=np.bincount(group[ok], minlength=len(pairs)),
            failing_rows=rows[~ok][by_group],
            first=np.searchsorted(group[~ok][by_group], np.arange(len(pairs))),
            grade_row=keys.grade_row,
            errored=_errored(run, arms),
        )

    def failing(self) -> list[_Failing]:
        """Each group with a failing sample (`_Failing`; code -1: an errored key's group with
        no sample): errored keys count as samples, and as failing ones."""
        errors = np.zeros(len(self.names), dtype=np.int64)
        code_of = {name: code for code, name in enumerate(self.names)} if self.errored else {}
        out = []
        for (case, arm), errs in self.errored.items():
            code = code_of.get((case, arm))
            if code is None:
                out.append((case, arm, len(errs), 0, len(errs), -1))
            else:
                errors[code] = len(errs)
        n = self.n + errors
        codes = np.flatnonzero(n > self.passed)
        names = [self.names[c] for c in codes.tolist()]
        columns = (n[codes].tolist(), self.passed[codes].tolist(), (n - self.passed)[codes].tolist(), codes.tolist())
        out += [(case, arm, *counts) for (case, arm), *counts in zip(names, *columns, strict=True)]
        return out

    def met(self, run: Any, shown: list[_Failing]) -> list[list[Any]]:
        """The failing samples of each `shown` group as `failures` meets them, ordered by
        index (a sample as (index, output, grade row or None), an errored key as its
        `FailedSample`; equal indices: the samples in row order, then the errored keys).
        The samples' index and output are read for these rows only."""
        spans = [self._span(code) for *_, code in shown]
        rows = np.concatenate([self.failing_rows[a:b] for a, b in spans] or [np.zeros(0, dtype=np.int64)])
        index = run.samples["index"].iloc[rows].tolist()
        output = run.samples["output"].iloc[rows].tolist()
        grade = self.grade_row[rows].tolist()
        out, at = [], 0
        for (case, arm, *_), (a, b) in zip(shown, spans, strict=True):
            met = [(int(index[j]), output[j], None if grade[j] < 0 else grade[j]) for j in range(at, at + b - a)]
            at += b - a
            out.append(sorted([*met, *self.errored.get((case, arm), [])], key=_index))
        return out

    def _span(self, code: int) -> tuple[int, int]:
        """Where group `code`'s failing rows lie in `failing_rows` (none for -1)."""
        if code < 0:
            return 0, 0
        start = int(self.first[code])
        return start, start + int(self.n[code] - self.passed[code])


def _is_true(passed: Any) -> np.ndarray:
    """Whether each grade's `passed` is True itself (`is True`: not 1, not "true"): a
    bool column as it is, any other value by value."""
    if passed.dtype == np.bool_:
        return np.asarray(passed.to_numpy(), dtype=bool)
    return np.array([v is True for v in passed.tolist()], dtype=bool)


def _errored(run: Any, arms: list[str] | None) -> dict[tuple[str, str], list[FailedSample]]:
    """The errored keys (no answer) of the arms asked for, by (case id, arm), in file order."""
    out: dict[tuple[str, str], list[FailedSample]] = {}
    for e in run.errors.to_dict("records") if len(run.errors) else ():
        if arms is not None and str(e["arm"]) not in arms:
            continue
        out.setdefault((str(e["case_id"]), str(e["arm"])), []).append(
            FailedSample(int(e["index"]), None, (), None, None, str(e.get("error") or "errored"))
        )
    return out


def failures(
    run: Any, *, arms: list[str] | None = None, max_cases: int = MAX_CASES, max_samples: int = MAX_SAMPLES
) -> Failures:
    """The failing samples of `run` (a `runload.Run`), grouped by case and arm: cases that
    never passed first (fewest passes first), then flaky ones; errored keys (no answer)
    count as failing samples, ungraded ones too (a missing grade is never a pass).

    Counted column by column (`_Groups`: a 100,000-sample run's per-sample loop took
    0.6 s); a grade's values are read, and a `FailedSample` made, only for the samples
    a page shows."""
    groups = _Groups.of(run, arms)
    failing = groups.failing()
    failing.sort(key=lambda t: (t[3] > 0, t[3] / t[2], t[0], t[1]))
    shown = failing[:max_cases]
    met = [bad[:max_samples] for bad in groups.met(run, shown)]
    records = iter(_records(run, [item for bad in met for item in bad]))
    cases = tuple(
        CaseFailures(case, arm, n, ok, tuple(next(records) for _ in bad), max(fails - max_samples, 0))
        for (case, arm, n, ok, fails, _), bad in zip(shown, met, strict=True)
    )
    return Failures(
        cases=cases,
        cases_left_out=len(failing) - len(shown),
        samples_left_out=sum(c.samples_left_out for c in cases) + sum(t[4] for t in failing[max_cases:]),
        n_failed_samples=sum(t[4] for t in failing),
    )


def _records(run: Any, items: list[Any]) -> list[FailedSample]:
    """The failing samples a page shows, as met (`_Groups.met`), as records: their grades'
    values read now, for these rows only."""
    grades = run.grades
    columns: tuple[str, ...] = ("passed", "checks", "judge_score", "judge_reason", "error")
    columns += ("judge_unstable",) if "judge_unstable" in grades.columns else ()  # graded with --judge-repeats
    rows = [item[2] for item in items if not isinstance(item, FailedSample) and item[2] is not None]
    values = dict(zip(rows, zip(*(grades[c].iloc[rows].tolist() for c in columns), strict=True), strict=True))
    return [
        item if isinstance(item, FailedSample) else _failed((item[0], item[1], values.get(item[2]))) for item in items
    ]
