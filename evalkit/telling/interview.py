"""The widgets of the two dataset notebooks people use: the scoping interview
(`InterviewUI` over `evalkit.datasets.scope.Interview`) and the sample review (`ReviewUI`
over `evalkit.datasets.review.ReviewSheet`). They hold no logic of their own: every
handler is one call into the package object, then `refresh`, so a test sets the widgets'
values and clicks their buttons without a browser. Every text a person typed or a
dataset holds is escaped before it is shown."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

from evalkit.datasets.review import FEEDBACK_COLUMN, VERDICT_COLUMN, VERDICTS, ReviewSheet
from evalkit.datasets.scope import AREAS, Interview
from evalkit.foundations.errors import InputError

INTERVIEW_NOTEBOOK = "scoping_interview"
REVIEW_NOTEBOOK = "sample_review"


def _error(exc: Exception) -> str:
    return f"<b style='color:#b71c1c'>{html.escape(str(exc))}</b>"


def summary_html(interview: Interview) -> str:
    """The scope's summary as an escaped HTML table: every area, its answer or
    'unknown' or '(not answered)', and whether it is confirmed."""
    rows = "".join(
        f"<tr><td style='padding:2px 8px'><b>{html.escape(key)}</b><br><small>{html.escape(q)}</small></td>"
        f"<td style='padding:2px 8px'>{html.escape(ans)}</td></tr>"
        for key, q, ans in interview.scope.summary()
    )
    state = "confirmed" if interview.scope.confirmed else "not confirmed"
    return f"<p>Scope: <b>{state}</b></p><table style='border-collapse:collapse'>{rows}</table>"


class InterviewUI:
    """One question at a time: the question and its hint, an answer box (a list area:
    one item a line), *save answer*, *unknown*, *back*; after the last question the
    summary with *confirm*. Each answer is saved to the scope file at once."""

    def __init__(self, interview: Interview) -> None:
        import ipywidgets as w  # lazy: the widgets load only in a notebook

        self.interview = interview
        self.progress = w.IntProgress(min=0, max=len(AREAS), description="answered")
        self.question = w.HTML()
        self.answer = w.Textarea(placeholder="your answer", layout=w.Layout(width="80%", height="6em"))
        self.save_button = w.Button(description="save answer", icon="check")
        self.unknown_button = w.Button(description="unknown", icon="question", tooltip="record this area as unknown")
        self.back_button = w.Button(description="back", icon="arrow-left")
        self.confirm_button = w.Button(description="confirm summary", icon="lock", button_style="success")
        self.summary = w.HTML()
        self.message = w.HTML()
        self.save_button.on_click(lambda _b: self._act(lambda: self.interview.answer(self.answer.value)))
        self.unknown_button.on_click(lambda _b: self._act(self.interview.unknown))
        self.back_button.on_click(lambda _b: self._act(self.interview.back))
        self.confirm_button.on_click(lambda _b: self._act(self.interview.confirm))
        self.box = w.VBox(
            [
                self.progress,
                self.question,
                self.answer,
                w.HBox([self.save_button, self.unknown_button, self.back_button]),
                self.message,
                self.summary,
                self.confirm_button,
            ]
        )
        self.refresh()

    def _act(self, step: Callable[[], Any]) -> None:
        try:
            step()
            self.message.value = ""
        except (InputError, ValueError) as exc:
            self.message.value = _error(exc)
        self.refresh()

    def refresh(self) -> None:
        """Show the current question (or the summary when every question is asked)."""
        iv = self.interview
        self.progress.value = len(AREAS) - len(iv.scope.missing())
        a = iv.current
        if a is None:
            self.question.value = "<b>Every question is asked.</b> Read the summary, then confirm it (or go back)."
            self.answer.value = ""
            self.answer.disabled = self.save_button.disabled = self.unknown_button.disabled = True
        else:
            kind = " (one a line)" if a.kind == "list" else ""
            self.question.value = (
                f"<p><small>question {iv.position + 1} of {len(AREAS)} ({html.escape(a.key)})</small></p>"
                f"<p><b>{html.escape(a.question)}</b></p><p><small>{html.escape(a.hint + kind)}</small></p>"
            )
            given = iv.scope.get(a.key)
            value = given.value if given is not None and not given.unknown else None
            self.answer.value = "\n".join(value) if isinstance(value, tuple) else (value or "")
            self.answer.disabled = self.save_button.disabled = self.unknown_button.disabled = False
        self.summary.value = summary_html(iv) if a is None or iv.scope.confirmed else ""
        self.confirm_button.disabled = a is not None or iv.scope.confirmed

    def show(self) -> None:
        from IPython.display import display  # lazy: only in a notebook

        display(self.box)


def pair_html(row: dict[str, str]) -> str:
    """One drawn pair as escaped HTML: what a reviewer reads before the verdict."""
    fields = [
        ("query", "Query"),
        ("expected_response", "Expected behaviour"),
        ("category", "Category"),
        ("difficulty", "Difficulty"),
        ("populations", "Populations"),
        ("tools_expected", "Tools expected"),
        ("source_reference", "Source"),
        ("needs_sme_review", "Needs subject-matter review"),
        ("notes", "Notes"),
    ]
    return "".join(
        f"<div style='margin:0 0 0.5em 0'><div style='font-weight:bold;color:#555'>{title}</div>"
        f"<div style='border:1px solid #ddd;background:#fafafa;padding:0.3em 0.6em;white-space:pre-wrap'>"
        f"{html.escape(row.get(key, '') or '-')}</div></div>"
        for key, title in fields
    )


class ReviewUI:
    """Each drawn pair in turn: the pair, a verdict (keep / revise / drop), feedback,
    previous / next, and the acceptance rule's outcome under it. Each change is saved to
    the sheet at once."""

    def __init__(self, sheet: ReviewSheet) -> None:
        import ipywidgets as w  # lazy: the widgets load only in a notebook

        self.sheet = sheet
        self.position = sheet.first_unreviewed()
        self.status = w.HTML()
        self.pair = w.HTML()
        self.verdict = w.ToggleButtons(options=list(VERDICTS), value=None, description="verdict")
        self.feedback = w.Textarea(
            placeholder="what to change, or why (needed for revise and drop)",
            continuous_update=False,
            description="feedback",
            layout=w.Layout(width="80%"),
        )
        self.previous_button = w.Button(description="previous", icon="arrow-left")
        self.next_button = w.Button(description="next", icon="arrow-right")
        self.outcome = w.HTML()
        self.message = w.HTML()
        self._refreshing = False
        self.verdict.observe(self._on_verdict, names="value")
        self.feedback.observe(self._on_feedback, names="value")
        self.previous_button.on_click(lambda _b: self._act(lambda: self._move(-1)))
        self.next_button.on_click(lambda _b: self._act(lambda: self._move(1)))
        self.box = w.VBox(
            [
                self.status,
                self.pair,
                self.verdict,
                self.feedback,
                w.HBox([self.previous_button, self.next_button]),
                self.message,
                self.outcome,
            ]
        )
        self.refresh()

    def _move(self, step: int) -> None:
        self.position = min(max(self.position + step, 0), len(self.sheet) - 1)

    def _act(self, step: Callable[[], Any]) -> None:
        try:
            step()
            self.message.value = ""
        except (InputError, ValueError) as exc:
            self.message.value = _error(exc)
        self.refresh()

    def _on_verdict(self, change: dict[str, Any]) -> None:
        if not self._refreshing:
            self._act(lambda: self.sheet.set_verdict(self.position, change["new"]))

    def _on_feedback(self, change: dict[str, Any]) -> None:
        if not self._refreshing:
            self._act(lambda: self.sheet.set_feedback(self.position, change["new"]))

    def refresh(self) -> None:
        row = self.sheet.rows[self.position]
        self._refreshing = True
        try:
            self.status.value = html.escape(f"pair {self.position + 1} of {len(self.sheet)} (id {row['id']})")
            self.pair.value = pair_html(row)
            self.verdict.value = row[VERDICT_COLUMN] or None
            self.feedback.value = row[FEEDBACK_COLUMN]
            result = self.sheet.outcome()
            self.outcome.value = f"<p><b>{html.escape(result.outcome)}</b>: {html.escape(result.explain())}</p>"
        finally:
            self._refreshing = False

    def show(self) -> None:
        from IPython.display import display  # lazy: only in a notebook

        display(self.box)
