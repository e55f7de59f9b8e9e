"""The play_conversation notebook's widgets: a person plays a case's user in JupyterLab.

`PlayUI` puts a `running.play.PlaySession` in ipywidgets: the user the person plays
(the case's scenario), the conversation so far (every text escaped), a box for the next
turn with send and abandon, and once the conversation ended, the outcome the person saw
(passed / failed) and a note, saved to the suite's `simulator/human-played.jsonl`. It
holds no logic of its own: each handler is one call into the session, then `refresh`,
so a test clicks the widgets without a browser.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

from evalkit.foundations.errors import InputError
from evalkit.suites.suite_conversation import STOP_MARKERS, USER_KEYS

SPEAKER = {"user": "You (the user)", "assistant": "Agent"}


def scenario_html(case_input: Any) -> str:
    """The user the person plays, from a case's `input.user`, escaped."""
    user = case_input.get("user") if isinstance(case_input, dict) else None
    rows = "".join(
        f"<li><b>{html.escape(k)}</b>: {html.escape(str(user[k]))}</li>"
        for k in USER_KEYS
        if isinstance(user, dict) and k in user
    )
    markers = ", ".join(html.escape(m) for m in STOP_MARKERS)
    return f"<ul>{rows}</ul><p>End with {markers} (the text before the marker is your last turn).</p>"


def transcript_html(turns: Any) -> str:
    """The conversation so far, one escaped block a turn."""
    return "".join(
        f"<div style='margin:.3em 0'><b>{SPEAKER.get(str(t.get('role')), 'User')}</b>"
        f"<pre style='white-space:pre-wrap;margin:0'>{html.escape(str(t.get('content') or ''))}</pre></div>"
        for t in turns
    )


class PlayUI:
    """ipywidgets over a `PlaySession` (see the module docstring)."""

    def __init__(self, session: Any) -> None:
        import ipywidgets as w  # lazy: the widgets load only in a notebook

        self.session = session
        self.scenario = w.HTML(scenario_html(session.case.input))
        self.transcript = w.HTML()
        self.turn = w.Textarea(placeholder="what the user says (a stop marker ends it)", description="you")
        self.send_button = w.Button(description="send", icon="paper-plane")
        self.abandon_button = w.Button(description="abandon (save nothing)", icon="times")
        self.outcome = w.ToggleButtons(options=[("passed", True), ("failed", False)], value=None, description="outcome")
        self.note = w.Text(placeholder="a note (optional)", description="note")
        self.save_button = w.Button(description="save", icon="save")
        self.message = w.HTML()
        self.send_button.on_click(self._on(self._send))
        self.abandon_button.on_click(self._on(session.abandon))
        self.save_button.on_click(self._on(self._save))
        self.box = w.VBox(
            [
                self.scenario,
                self.transcript,
                self.turn,
                w.HBox([self.send_button, self.abandon_button]),
                w.HBox([self.outcome, self.note, self.save_button]),
                self.message,
            ]
        )
        self.saved: Any = None
        session.start()
        self.refresh()

    def _on(self, step: Callable[[], Any]) -> Callable[[Any], None]:
        def handler(_button: Any) -> None:
            try:
                step()
                self.message.value = ""
            except (InputError, ValueError, RuntimeError) as exc:
                self.message.value = f"<b style='color:#b71c1c'>{html.escape(str(exc))}</b>"
            self.refresh()

        return handler

    def _send(self) -> None:
        self.session.say(self.turn.value)
        self.turn.value = ""

    def _save(self) -> None:
        self.saved = self.session.save(self.outcome.value, self.note.value or None)

    def refresh(self) -> None:
        """Show the conversation, and what the person can do now."""
        state = self.session.state
        self.transcript.value = transcript_html(state.conversation)
        self.turn.disabled = self.send_button.disabled = self.abandon_button.disabled = state.ended
        done = self.saved is not None
        self.outcome.disabled = self.note.disabled = self.save_button.disabled = not state.saveable or done
        if state.ended and not self.message.value:
            what = f"saved as play {self.saved.play}" if done else "record the outcome you saw, then save"
            if not state.saveable:
                what = f"the conversation {state.error}: nothing to save"
            self.message.value = html.escape(f"ended: {state.termination}; spent ${state.cost_usd:.6f}; {what}")

    def show(self) -> None:
        from IPython.display import display  # lazy: only in a notebook

        display(self.box)
