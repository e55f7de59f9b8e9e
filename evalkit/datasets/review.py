"""The sample review of an evaluation dataset: a person walks the pairs `evalkit dataset
sample` drew, records a verdict and feedback on each, and the protocol's acceptance rule
says whether the set may be confirmed.

The evaluation-design seed (`004_9410cc142da68093.txt`) asks to walk a representative
sample through the user, gather consolidated feedback and revise before finalizing the
full set, and that the feedback be reflected in the final set. Here that is:

- each drawn pair gets a verdict: `keep` (right as written), `revise` (the feedback says
  what to change) or `drop` (it does not belong in the set);
- a `revise` or `drop` verdict needs feedback, and so does `keep` on a pair marked
  `needs_sme_review` (who checked its grounding): a verdict with no reason cannot be
  reflected in the set;
- the outcome (`review_outcome`) is `incomplete` while a pair has no verdict or a verdict
  lacks its feedback; `revise` when any pair is to be revised or dropped (the feedback
  applies to the full set, which is then sampled again); `accepted` when every drawn pair
  is kept. Only an accepted review lets `evalkit dataset sample --confirm --review SHEET`
  mark the dataset confirmed.

`ReviewSheet` is the sheet (the dataset's CSV columns, `review_verdict`, then
`review_feedback`), saved whole through a temporary file and a rename after every
change; the widgets over it are in `evalkit.telling.interview`.
"""

from __future__ import annotations

import csv
import io
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from evalkit.datasets.dataset import (
    CSV_HEADER,
    confirm_dataset,
    escape_cell,
    load_dataset,
    resolve_input,
    unescape_cell,
)
from evalkit.foundations._io import write_atomic
from evalkit.foundations.errors import InputError

VERDICTS: tuple[str, ...] = ("keep", "revise", "drop")
VERDICT_COLUMN = "review_verdict"
FEEDBACK_COLUMN = "review_feedback"
Outcome = Literal["incomplete", "revise", "accepted"]


@dataclass(frozen=True)
class ReviewOutcome:
    """What the acceptance rule says of a review sheet (see the module docstring)."""

    outcome: Outcome
    pairs: int
    verdicts: dict[str, int]  # keep / revise / drop counts
    unreviewed: tuple[str, ...]  # pair ids with no verdict
    needs_feedback: tuple[str, ...]  # pair ids whose verdict lacks the feedback it needs
    to_change: tuple[str, ...]  # pair ids to revise or drop

    def explain(self) -> str:
        """One paragraph a reviewer reads under the sheet."""
        counts = ", ".join(f"{v} {self.verdicts.get(v, 0)}" for v in VERDICTS)
        head = f"{self.pairs} pair(s): {counts}"
        if self.outcome == "incomplete":
            parts = []
            if self.unreviewed:
                parts.append(f"{len(self.unreviewed)} with no verdict ({', '.join(self.unreviewed)})")
            if self.needs_feedback:
                parts.append(
                    f"{len(self.needs_feedback)} whose verdict needs feedback ({', '.join(self.needs_feedback)})"
                )
            return f"{head}. Review incomplete: {'; '.join(parts)}."
        if self.outcome == "revise":
            return (
                f"{head}. Revise the set: {', '.join(self.to_change)} to revise or drop; apply the feedback to the "
                "full set (pairs like these, not only the sampled ones), then draw a new sample."
            )
        return (
            f"{head}. Accepted: every drawn pair is kept; "
            "`evalkit dataset sample --confirm --review SHEET` may confirm the set."
        )


class ReviewSheet:
    """A review sheet written by `evalkit dataset sample --out SHEET`, being reviewed.

    `InputError` names the file (and line) when it is not such a sheet. `set_verdict` and
    `set_feedback` save the whole sheet at once; a sheet changed on disk since it was read
    is refused, never overwritten.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._load()

    def _load(self) -> None:
        if not self.path.is_file():
            raise InputError("no review sheet here: draw one with `evalkit dataset sample --out SHEET`", self.path)
        try:
            text = self.path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"not UTF-8 text: {exc.reason}", self.path) from None
        self._disk = text
        reader = csv.reader(io.StringIO(text, newline=""))
        try:
            rows = list(reader)
        except csv.Error as exc:
            raise InputError(f"not a CSV file: {exc}", self.path, line=reader.line_num) from None
        if not rows:
            raise InputError("the review sheet is empty", self.path)
        header = rows[0]
        if tuple(header[: len(CSV_HEADER)]) != CSV_HEADER or FEEDBACK_COLUMN not in header:
            raise InputError(
                f"not a review sheet: the header must be the dataset's columns then {FEEDBACK_COLUMN} "
                "(`evalkit dataset sample --out SHEET` writes one)",
                self.path,
                line=1,
            )
        if VERDICT_COLUMN not in header:
            header = [
                *header[: header.index(FEEDBACK_COLUMN)],
                VERDICT_COLUMN,
                *header[header.index(FEEDBACK_COLUMN) :],
            ]
            at = rows[0].index(FEEDBACK_COLUMN)
            rows = [rows[0]] + [r[:at] + [""] + r[at:] if r else r for r in rows[1:]]
        self.columns = header
        self.rows: list[dict[str, str]] = []
        for n, r in enumerate(rows[1:], start=2):
            if not r:
                continue  # a blank line (a spreadsheet's trailing one) holds no pair
            if len(r) != len(header):
                raise InputError(f"{len(r)} cells where the header has {len(header)}", self.path, line=n)
            row = {c: unescape_cell(v) for c, v in zip(header, r, strict=True)}
            verdict = row[VERDICT_COLUMN].strip()
            if verdict and verdict not in VERDICTS:
                raise InputError(
                    f"{VERDICT_COLUMN} {verdict!r} is not one of {', '.join(VERDICTS)} (or empty)", self.path, line=n
                )
            row[VERDICT_COLUMN] = verdict
            self.rows.append(row)
        if not self.rows:
            raise InputError("the review sheet has no pairs", self.path)
        ids = Counter(r["id"] for r in self.rows)
        if twice := [i for i, c in ids.items() if c > 1]:
            raise InputError(f"pair id {twice[0]!r} is on the sheet twice", self.path)

    def __len__(self) -> int:
        return len(self.rows)

    def first_unreviewed(self) -> int:
        return next((i for i, r in enumerate(self.rows) if not r[VERDICT_COLUMN]), 0)

    def set_verdict(self, position: int, verdict: str | None) -> None:
        """Record the verdict on the pair at `position` (None clears it), and save."""
        if verdict is not None and verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS} or None, got {verdict!r}")
        self.rows[position][VERDICT_COLUMN] = verdict or ""
        self.save()

    def set_feedback(self, position: int, feedback: str) -> None:
        """Record the feedback on the pair at `position`, and save."""
        self.rows[position][FEEDBACK_COLUMN] = feedback.strip()
        self.save()

    def text(self) -> str:
        buf = io.StringIO(newline="")
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(self.columns)
        for r in self.rows:
            w.writerow([escape_cell(r[c]) for c in self.columns])
        return buf.getvalue()

    def save(self) -> None:
        """Write the whole sheet through a temporary file and a rename."""
        now = self.path.read_text(encoding="utf-8") if self.path.exists() else ""
        if now != self._disk:
            raise InputError(
                "the review sheet changed since it was opened (another person or a spreadsheet?): reopen it; "
                "nothing was saved",
                self.path,
            )
        text = self.text()
        write_atomic(self.path, text)
        self._disk = text

    def outcome(self) -> ReviewOutcome:
        """The acceptance rule over the sheet as it is now."""
        return review_outcome(self.rows)


def _needs_feedback(row: dict[str, str]) -> bool:
    v = row[VERDICT_COLUMN]
    if not v or row[FEEDBACK_COLUMN].strip():
        return False
    return v in ("revise", "drop") or (v == "keep" and row.get("needs_sme_review") == "true")


def review_outcome(rows: list[dict[str, str]]) -> ReviewOutcome:
    """The protocol's acceptance rule over reviewed rows (see the module docstring)."""
    verdicts = Counter(r[VERDICT_COLUMN] for r in rows if r[VERDICT_COLUMN])
    unreviewed = tuple(r["id"] for r in rows if not r[VERDICT_COLUMN])
    needs = tuple(r["id"] for r in rows if _needs_feedback(r))
    change = tuple(r["id"] for r in rows if r[VERDICT_COLUMN] in ("revise", "drop"))
    outcome: Outcome = "incomplete" if unreviewed or needs else ("revise" if change else "accepted")
    return ReviewOutcome(outcome, len(rows), {v: verdicts.get(v, 0) for v in VERDICTS}, unreviewed, needs, change)


def require_accepted(path: str | os.PathLike[str]) -> ReviewOutcome:
    """The outcome of the sheet at `path` when accepted; `InputError` (exit 2) naming the
    sheet and why otherwise."""
    result = ReviewSheet(path).outcome()
    if result.outcome != "accepted":
        raise InputError(f"the sample review is not accepted: {result.explain()}", os.fspath(path))
    return result


def confirm_reviewed(
    json_path: str | os.PathLike[str],
    csv_path: str | os.PathLike[str],
    sheet: str | os.PathLike[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
) -> str:
    """`confirm_dataset`, only when the review of `sheet` is accepted and every pair it
    reviewed is still in the dataset: the review's feedback is reflected in the set."""
    shown = resolve_input(sheet, cwd=cwd)
    require_accepted(shown)
    have = {p["id"] for p in load_dataset(json_path, csv_path, cwd=cwd)["evaluation_pairs"]}
    gone = [r["id"] for r in ReviewSheet(shown).rows if r["id"] not in have]
    if gone:
        raise InputError(f"the review sheet names pairs the dataset does not have: {', '.join(gone)}", shown)
    return confirm_dataset(json_path, csv_path, cwd=cwd)
