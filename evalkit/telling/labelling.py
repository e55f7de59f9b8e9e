"""Human labels that people will give: judged items of a run drawn into a label file,
and a person labelling them one at a time.

`draw_items` picks judged items of a graded run (seeded) and `write_label_file` writes
them, one JSON object per line, with everything a labeller needs beside an empty score:
the case input (and context), the rubric file and the case's own criteria, the output,
and the hashes that bind the label to what was read (`judge.HumanLabel`). `LabelSession`
is one person working through such a file: it shows one item at a time, records a score
(1-5) and an optional note, and saves the whole file after every change through a
temporary file and a rename, so a closed notebook or a killed kernel loses nothing and
never leaves half a file. `LabelUI` puts a session in ipywidgets (the `label_judge`
notebook shows it); it holds no logic of its own, so a test drives the session, or
clicks the widgets, without a browser.

Several people may label one file: each `LabelSession(rater=...)` scores its own copy of
every item (a line per item and rater), which is what inter-rater agreement needs.
"""

from __future__ import annotations

import html
import json
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evalkit.checking.judge import SCALE, item_id, item_rubric_sha256, load_judge_files, parse_human_labels, text_sha256
from evalkit.foundations._io import MAX_LABELS_BYTES, iter_jsonl, read_file_bytes, write_atomic
from evalkit.foundations._jsonschema import papermill
from evalkit.foundations._text import storable_json
from evalkit.foundations.errors import InputError
from evalkit.foundations.layout import GRADES
from evalkit.foundations.records import Case, Suite

TOOL_NOTEBOOKS: tuple[str, ...] = (
    "label_judge",
    "scoping_interview",
    "sample_review",
    "play_conversation",
)  # for people to use, not report pages
LABEL_NOTEBOOK = "label_judge"
# The keys of a label line, in the order they are written: what the person fills in
# first, then what they read, then what binds the label to it.
LINE_KEYS = (
    "item",
    "score",
    "rater",
    "note",
    "case_id",
    "arm",
    "index",
    "input",
    "context",
    "criteria",
    "threshold",
    "rubric",
    "output",
    "output_sha256",
    "rubric_sha256",
    "prompt_sha256",
    "judge_version",
    "run",
    "drawn",
    "draw",
)


def _input_text(case: Case) -> str:
    return case.input if isinstance(case.input, str) else json.dumps(case.input, ensure_ascii=False, indent=2)


def draw_items(
    run: str | Path, n: int = 20, seed: int = 0, *, suite: Suite | str | Path | None = None, by_case: bool = False
) -> list[dict[str, Any]]:
    """Draw `n` judged items of a graded run for people to label (seeded: the same
    draw every time), as label lines (`LINE_KEYS`) with `score`, `rater` and `note`
    empty. The judge's own score is left out so it cannot anchor the person. Items are
    drawn among the samples the judge scored (held ones included: they are what needs a
    calibration). `by_case`: draw `n` *cases* uniformly among the cases with a
    judge-scored sample and give every judge-scored sample of each (every arm): the
    labelled cases are then a uniform random subset of the cases, which the corrected
    gated case score needs (a sample draw labels a whole case of m samples with a
    chance that falls with m). Each line records its `draw` ("case" or "sample").
    `InputError` for an ungraded run or one with nothing judged."""
    from evalkit.conclusions.grading import read_samples, resolve_suite  # lazy: grading imports numpy
    from evalkit.runfolder.runs import RunFolder

    rp = Path(run)
    gp = rp / GRADES
    if not gp.exists():
        raise InputError("no grades.jsonl: run `evalkit grade` on the run first", rp)
    if n < 1:
        raise InputError(f"-n must be at least 1, got {n}")
    judged = [g for g in iter_jsonl(gp) if g.get("judge_score") is not None]
    if not judged:
        raise InputError("the run has no judged items (no grade line has a judge score)", gp)
    suite_obj = resolve_suite(rp, RunFolder(rp).read_meta(), suite)
    version = Counter(g.get("judge_version") for g in judged).most_common(1)[0][0]
    files = load_judge_files(suite_obj.path, version)
    cases = {c.id: c for c in suite_obj.cases}
    samples = read_samples(rp)
    keys = sorted(
        {
            (g["case_id"], g["arm"], int(g["index"]))
            for g in judged
            if g["case_id"] in cases and (g["case_id"], g["arm"], int(g["index"])) in samples
        }
    )
    if by_case:
        case_ids = sorted({key[0] for key in keys})
        chosen = set(random.Random(seed).sample(case_ids, min(n, len(case_ids))))
        picked = [key for key in keys if key[0] in chosen]
    else:
        picked = sorted(random.Random(seed).sample(keys, min(n, len(keys))))
    drawn = datetime.now(UTC).isoformat(timespec="seconds")
    items = []
    for case_id, arm, index in picked:
        case = cases[case_id]
        output = samples[(case_id, arm, index)].output
        items.append(
            {
                "item": item_id(case_id, arm, index),
                "score": None,
                "rater": None,
                "note": None,
                "case_id": case_id,
                "arm": arm,
                "index": index,
                "input": _input_text(case),
                "context": case.context,
                "criteria": case.rubric,
                "threshold": case.judge_threshold,
                "rubric": files.rubric,
                "output": output,
                "output_sha256": text_sha256(output),
                "rubric_sha256": item_rubric_sha256(files, case),
                "prompt_sha256": files.prompt_sha256,
                "judge_version": files.version,
                "run": rp.name,
                "drawn": drawn,
                "draw": "case" if by_case else "sample",
            }
        )
    return items


def label_lines_text(lines: Sequence[dict[str, Any]]) -> str:
    """Label lines as the file's text: one JSON object per line, keys in `LINE_KEYS`
    order (then any others), any output text stored losslessly."""
    out = []
    for d in lines:
        ordered = {k: d[k] for k in LINE_KEYS if k in d} | {k: v for k, v in d.items() if k not in LINE_KEYS}
        out.append(storable_json(ordered) + "\n")
    return "".join(out)


def write_label_file(items: Sequence[dict[str, Any]], to: str | Path, *, force: bool = False) -> Path:
    """Write drawn items to the label file `to` (atomically). An existing file is
    refused unless `force`: it may hold labels someone spent an afternoon on."""
    p = Path(to)
    if p.exists() and not force:
        raise InputError("the label file exists (its labels would be lost): choose another file or pass --force", p)
    if p.is_dir():
        raise InputError("is a folder, not a label file", p)
    p.parent.mkdir(parents=True, exist_ok=True)
    text = label_lines_text(items)
    parse_human_labels(text, p)  # what is written reads back
    write_atomic(p, text)
    return p


# ------------------------------------------------------------------------------ a person labelling


class LabelSession:
    """One person labelling a label file, one item at a time (see the module docstring).

    `rater` names the person (None: the lines with no rater). The session's positions
    are the file's distinct items, in file order; each maps to this rater's line for
    the item (a free unfilled line is taken, else a copy of the item is added for this
    rater). `set_score` and `set_note` save at once. The file is refused (`InputError`
    naming the line) when a line is malformed, and a save is refused when someone else
    changed the file since this session read or wrote it.
    """

    def __init__(self, path: str | Path, rater: str | None = None) -> None:
        self.path = Path(path)
        self.rater = rater or None
        self.saved_at: str | None = None
        self._load()
        self.position = self.first_unlabelled()

    def _read(self) -> str:
        """The label file's text: a regular file under `MAX_LABELS_BYTES` (an `InputError`
        otherwise, never a file read whole), lone surrogates as written."""
        return read_file_bytes(self.path, limit=MAX_LABELS_BYTES).decode("utf-8", "surrogatepass")

    def _load(self) -> None:
        if not self.path.is_file():
            raise InputError("no label file here: write one with `evalkit judge sample RUN -n 20 --to FILE`", self.path)
        text = self._read()
        parse_human_labels(text, self.path)  # every line valid, or an InputError naming it
        self._disk_sha = text_sha256(text)
        self._lines: list[dict[str, Any]] = [json.loads(raw) for raw in text.splitlines() if raw.strip()]
        if not self._lines:
            raise InputError("the label file has no items", self.path)
        self._positions: list[int] = []
        keys = dict.fromkeys((d["item"], d.get("output_sha256")) for d in self._lines)
        for key in keys:
            same = [i for i, d in enumerate(self._lines) if (d["item"], d.get("output_sha256")) == key]
            mine = [i for i in same if self._lines[i].get("rater") == self.rater]
            free = [i for i in same if self._lines[i].get("rater") is None and self._lines[i].get("score") is None]
            if mine or free:
                self._positions.append((mine or free)[0])
                continue
            copy = {**self._lines[same[0]], "score": None, "rater": self.rater, "note": None}
            self._lines.append(copy)
            self._positions.append(len(self._lines) - 1)

    # -- where we are
    def __len__(self) -> int:
        return len(self._positions)

    @property
    def current(self) -> dict[str, Any]:
        """The current item's line (a copy: change it with `set_score`/`set_note`)."""
        return dict(self._lines[self._positions[self.position]])

    def item(self, position: int) -> dict[str, Any]:
        return dict(self._lines[self._positions[position]])

    def labelled(self, position: int) -> bool:
        return self._lines[self._positions[position]].get("score") is not None

    @property
    def done(self) -> int:
        return sum(self.labelled(i) for i in range(len(self)))

    def progress(self) -> tuple[int, int]:
        """(items labelled, items) for this rater."""
        return self.done, len(self)

    def first_unlabelled(self, start: int = 0) -> int:
        """The first unlabelled position from `start` on (wrapping round), or `start`
        when every item is labelled."""
        n = len(self)
        for step in range(n):
            i = (start + step) % n
            if not self.labelled(i):
                return i
        return start % n

    # -- moving
    def go(self, position: int) -> None:
        if not 0 <= position < len(self):
            raise IndexError(f"position {position} is outside 0..{len(self) - 1}")
        self.position = position

    def next(self) -> None:
        self.position = min(self.position + 1, len(self) - 1)

    def previous(self) -> None:
        self.position = max(self.position - 1, 0)

    def next_unlabelled(self) -> bool:
        """Move to the next unlabelled item after this one; False when none is left."""
        if self.done == len(self):
            return False
        self.position = self.first_unlabelled(self.position + 1)
        return True

    # -- labelling
    def set_score(self, score: int | None) -> None:
        """Score the current item 1-5 (None clears it), and save."""
        if score is not None and (isinstance(score, bool) or score not in SCALE):
            raise ValueError(f"score must be one of {list(SCALE)} or None, got {score!r}")
        line = self._lines[self._positions[self.position]]
        line["score"] = score
        line["rater"] = self.rater if score is not None or self.rater else None
        self.save()

    def set_note(self, note: str) -> None:
        """Keep a note on the current item (why this score), and save."""
        self._lines[self._positions[self.position]]["note"] = note or None
        self.save()

    def save(self) -> None:
        """Write the whole file through a temporary file and a rename."""
        now = self._read() if self.path.exists() else ""
        if text_sha256(now) != self._disk_sha:
            raise InputError(
                "the label file changed since this session opened it (another person or editor?): "
                "reopen it; nothing was saved",
                self.path,
            )
        text = label_lines_text(self._lines)
        parse_human_labels(text, self.path)
        write_atomic(self.path, text)
        self._disk_sha = text_sha256(text)
        self.saved_at = datetime.now(UTC).strftime("%H:%M:%S")


def _block(title: str, text: Any, *, pre: bool = True) -> str:
    body = html.escape("" if text is None else str(text))
    inner = f"<pre style='white-space:pre-wrap;margin:0;max-height:24em;overflow:auto'>{body}</pre>" if pre else body
    return (
        f"<div style='margin:0 0 0.8em 0'><div style='font-weight:bold;color:#555'>{html.escape(title)}</div>"
        f"<div style='border:1px solid #ddd;background:#fafafa;padding:0.4em 0.6em'>{inner}</div></div>"
    )


def item_panels(line: dict[str, Any]) -> tuple[str, str]:
    """The two panels of one item, as HTML with every text escaped: (the task and the
    output, the rubric and the case's criteria)."""
    left = _block("Task given to the model", line.get("input"))
    if line.get("context"):
        left += _block("Context given to the model", line.get("context"))
    left += _block("Output to score", line.get("output"))
    threshold = line.get("threshold")
    right = _block("What a good answer contains (this case)", line.get("criteria"))
    right += _block("Rubric", line.get("rubric"))
    if threshold is not None:
        right += _block("Pass mark", f"{threshold} or more passes", pre=False)
    return left, right


class LabelUI:
    """ipywidgets over a `LabelSession`: the output beside the rubric, a 1-5 choice,
    a note, progress, and previous / next / next unlabelled. Every handler is one call
    into the session, then `refresh`."""

    def __init__(self, session: LabelSession, *, advance: bool = True) -> None:
        import ipywidgets as w  # lazy: the widgets load only in a notebook

        self.session = session
        self.progress = w.IntProgress(min=0, max=len(session), description="labelled")
        self.status = w.HTML()
        self.left = w.HTML(layout=w.Layout(width="60%"))
        self.right = w.HTML(layout=w.Layout(width="40%"))
        self.score = w.ToggleButtons(
            options=[(str(s), s) for s in SCALE],
            value=None,
            description="score",
            tooltips=[f"score {s}" for s in SCALE],
        )
        self.note = w.Textarea(placeholder="why this score (optional)", continuous_update=False, description="note")
        self.advance = w.Checkbox(value=advance, description="next unlabelled after scoring")
        self.previous_button = w.Button(description="previous", icon="arrow-left")
        self.next_button = w.Button(description="next", icon="arrow-right")
        self.unlabelled_button = w.Button(description="next unlabelled", icon="forward")
        self.clear_button = w.Button(description="clear score", icon="eraser")
        self.message = w.HTML()
        self._refreshing = False
        self.score.observe(self._on_score, names="value")
        self.note.observe(self._on_note, names="value")
        self.previous_button.on_click(self._on(session.previous))
        self.next_button.on_click(self._on(session.next))
        self.unlabelled_button.on_click(self._on(session.next_unlabelled))
        self.clear_button.on_click(lambda _b: self._act(lambda: session.set_score(None)))
        self.box = w.VBox(
            [
                w.HBox([self.progress, self.status]),
                w.HBox([self.left, self.right]),
                self.score,
                self.note,
                w.HBox(
                    [self.previous_button, self.next_button, self.unlabelled_button, self.clear_button, self.advance]
                ),
                self.message,
            ]
        )
        self.refresh()

    def _on(self, step: Callable[[], Any]) -> Callable[[Any], None]:
        return lambda _button: self._act(step)

    def _act(self, step: Callable[[], Any]) -> None:
        try:
            step()
            self.message.value = ""
        except (InputError, ValueError) as exc:
            self.message.value = f"<b style='color:#b71c1c'>{html.escape(str(exc))}</b>"
        self.refresh()

    def _on_score(self, change: dict[str, Any]) -> None:
        if self._refreshing or change["new"] is None:
            return

        def step() -> None:
            self.session.set_score(change["new"])
            if self.advance.value:
                self.session.next_unlabelled()

        self._act(step)

    def _on_note(self, change: dict[str, Any]) -> None:
        if not self._refreshing:
            self._act(lambda: self.session.set_note(change["new"]))

    def refresh(self) -> None:
        """Show the session's current item and progress."""
        s = self.session
        line = s.current
        self._refreshing = True
        try:
            self.left.value, self.right.value = item_panels(line)
            self.score.value = line.get("score")
            self.note.value = line.get("note") or ""
            done, total = s.progress()
            self.progress.value = done
            saved = f"; saved {s.saved_at}" if s.saved_at else ""
            who = f" as {s.rater}" if s.rater else ""
            left = "all labelled" if done == total else f"{total - done} to go"
            self.status.value = html.escape(
                f"item {s.position + 1} of {total} ({line.get('item')}): {done} labelled{who}, {left}{saved}"
            )
        finally:
            self._refreshing = False

    def show(self) -> None:
        from IPython.display import display  # lazy: only in a notebook

        display(self.box)


RATER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def label_notebook(labels_file: str | Path, out: str | Path | None = None, *, rater: str = "") -> Path:
    """Write the `label_judge` notebook with its parameters set for `labels_file` (and
    `rater`) beside it, ready to open in JupyterLab (papermill's prepare-only mode: no
    cell is run). Returns the notebook's path."""
    pm = papermill()  # lazy: papermill loads only when a labelling notebook is written

    from evalkit.telling.reports import notebooks_dir  # lazy: reports loads the Jupyter stack

    src = Path(notebooks_dir()) / f"{LABEL_NOTEBOOK}.ipynb"
    lp = Path(labels_file)
    if not lp.is_file():
        raise InputError("no label file here: write one with `evalkit judge sample RUN -n 20 --to FILE`", lp)
    if rater and not RATER_NAME.fullmatch(rater):
        raise InputError(
            f"--rater {rater!r}: a rater name may hold letters, digits, '.', '_' and '-' (up to 64, starting "
            "with a letter or digit); it names the notebook file and is recorded on each label"
        )
    dst = Path(out) if out is not None else lp.with_name(f"{lp.stem}-label{'-' + rater if rater else ''}.ipynb")
    pm.execute_notebook(
        str(src),
        str(dst),
        parameters={"labels_file": str(lp.resolve()), "rater": rater},
        prepare_only=True,
        progress_bar=False,
        log_output=False,
    )
    return dst
