"""Replay: two arms' trajectories of one case, turn by turn, side by side.

"Where a verdict stops being a number and becomes an explanation": for a case, the
sample of each arm (the same index in both, the first where their grades differ by
default) is shown turn by turn: what the agent sent, what the model answered, the tool
calls and their results, the cost, and at the end the output and the grade. Built from
the run folder alone (`trajectories/`, `results.jsonl`, `grades.jsonl`, `errors.jsonl`).

Everything shown is untrusted data (model output, tool results, a program's stderr):
`render_text` makes each line `printable` for a terminal (`evalkit replay`);
`render_html` escapes every piece through `nb.text_html` (the replay notebook).
"""

from __future__ import annotations

import html
import json
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.conversations.transcript import turns_of
from evalkit.foundations import fmt
from evalkit.foundations._io import iter_jsonl
from evalkit.foundations._text import printable, visible
from evalkit.foundations.errors import InputError
from evalkit.foundations.layout import ERRORS, GRADES, RESULTS
from evalkit.runfolder.runs import RunFolder, config_arm_names
from evalkit.runfolder.trajectories import Trajectory, Turn, read_trajectory
from evalkit.telling.nb import text_html

SHOWN_CHARS = 600  # of one sent message or answer, per turn
# A model call's `wire` (trajectories: the API the agent spoke when not OpenAI's) as shown.
WIRES = {"anthropic": "the Anthropic Messages API", "gemini": "the Gemini API"}


@dataclass(frozen=True)
class ArmReplay:
    """One arm's sample of the case: its trajectory (None for a sample that has none),
    its results line, its grade line, its error line."""

    arm: str
    index: int
    trajectory: Trajectory | None
    sample: dict[str, Any] | None
    grade: dict[str, Any] | None
    error: str | None

    @property
    def outcome(self) -> str:
        if self.error is not None and self.sample is None:
            return "errored"
        if self.sample is None:
            return "no sample"
        if self.grade is None:
            return "not graded"
        passed = self.grade.get("passed")
        return "passed" if passed else ("ungraded" if passed is None else "failed")


@dataclass(frozen=True)
class CaseReplay:
    case_id: str
    index: int
    arms: tuple[ArmReplay, ...]

    def rows(self) -> list[tuple[int, list[Turn | None]]]:
        """The turns aligned by number: (turn, [each arm's turn or None])."""
        per_arm = [a.trajectory.turns() if a.trajectory is not None else [] for a in self.arms]
        numbers = sorted({t.number for turns in per_arm for t in turns})
        return [(n, [next((t for t in turns if t.number == n), None) for turns in per_arm]) for n in numbers]


def _row_key(r: dict[str, Any]) -> tuple[str, str, int]:
    """A run file line's (case, arm, index)."""
    return str(r["case_id"]), str(r["arm"]), int(r["index"])


def _rows(path: Path) -> list[dict[str, Any]]:
    return list(iter_jsonl(path)) if path.exists() else []


class _RunFiles:
    """A run folder's small files, read once."""

    def __init__(self, run_path: str | Path) -> None:
        self.path = Path(run_path)
        if not (self.path / "config.json").is_file():
            raise InputError("not a run folder (no config.json)", self.path)
        self.meta = RunFolder(self.path).read_meta()
        key = _row_key
        self.samples = {key(r): r for r in _rows(self.path / RESULTS)}
        self.grades = {key(r): r for r in _rows(self.path / GRADES)}
        self.errors = {key(r): str(r.get("error")) for r in _rows(self.path / ERRORS)}

    def arms(self) -> list[str]:
        names = config_arm_names(self.meta)
        return names or sorted({k[1] for k in self.samples})

    def cases(self) -> list[str]:
        listed = [str(c) for c in self.meta.get("cases") or []]
        return listed or sorted({k[0] for k in self.samples})

    def passed(self, case_id: str, arm: str, index: int) -> bool | None:
        g = self.grades.get((case_id, arm, index))
        return None if g is None else g.get("passed")


def default_arms(run_path: str | Path) -> list[str]:
    """The run's arms, baseline first when there is one, at most two."""
    arms = _RunFiles(run_path).arms()
    if len(arms) == 2 and arms[1] in ("baseline", "control"):
        arms = arms[::-1]
    return arms[:2]


def pick_cases(run_path: str | Path, arms: list[str], n: int = 5) -> list[str]:
    """Up to `n` cases worth replaying: those where the arms' pass counts differ most,
    then those any arm failed, in the run's case order."""
    files = _RunFiles(run_path)
    k = int(files.meta.get("k") or 1)

    def score(cid: str) -> tuple[float, int]:
        rates = [sum(bool(files.passed(cid, a, i)) for i in range(k)) / k for a in arms]
        spread = max(rates) - min(rates) if rates else 0.0
        return (-spread, -sum(1 for r in rates if r < 1))

    order = {c: i for i, c in enumerate(files.cases())}
    ranked = sorted(order, key=lambda c: (*score(c), order[c]))
    return ranked[:n]


def replay_case(
    run_path: str | Path, case_id: str, arms: list[str] | None = None, index: int | None = None
) -> CaseReplay:
    """The case's samples in each of `arms` (default: `default_arms`) at `index`
    (default: the first index where the arms' grades differ, else 0)."""
    files = _RunFiles(run_path)
    arms = list(arms or default_arms(run_path))
    known = files.arms()
    for a in arms:
        if a not in known:
            raise InputError(f"arm {a!r} is not in the run (arms: {', '.join(known)})", files.path, json_path="$.arms")
    if case_id not in files.cases():
        raise InputError(f"case {case_id!r} is not in the run", files.path, json_path="$.cases")
    k = int(files.meta.get("k") or 1)
    if index is None:
        index = next(
            (i for i in range(k) if len({files.passed(case_id, a, i) for a in arms}) > 1),
            0,
        )
    elif not 0 <= index < k:
        raise InputError(f"sample index {index} is not in the run (k = {k}: 0 to {k - 1})")
    out = []
    for a in arms:
        key = (case_id, a, index)
        out.append(
            ArmReplay(
                a,
                index,
                read_trajectory(files.path, *key),
                files.samples.get(key),
                files.grades.get(key),
                files.errors.get(key),
            )
        )
    return CaseReplay(case_id, index, tuple(out))


# ------------------------------------------------------------------------- what a turn says


def _clip(text: Any, n: int = SHOWN_CHARS) -> str:
    s = "" if text is None else str(text)
    return s if len(s) <= n else s[:n] + f" [... {len(s) - n} more characters]"


def _args(args: Any) -> str:
    """Tool arguments or a tool result as shown: a string as it is, anything else as JSON
    (never Python's repr, with its None/True/False); no value at all as `-`."""
    if args is None:
        return fmt.NO_DATA
    return args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, sort_keys=True, default=str)


def _sent(call: dict[str, Any], previous: dict[str, Any] | None) -> str:
    """What this call sent that the previous one did not (the whole request for the first)."""
    req = call.get("request") or {}
    before = (previous or {}).get("request") or {}
    if isinstance(req.get("prompt"), str):
        prompt: str = req["prompt"]
        old = before.get("prompt")
        return prompt[len(old) :] if isinstance(old, str) and prompt.startswith(old) else prompt
    messages = list(req.get("messages") or [])
    old_n = len(before.get("messages") or []) if previous is not None else 0
    parts = []
    for m in messages[old_n:]:
        if not isinstance(m, dict):
            continue
        content = m.get("content")
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        if m.get("role") == "assistant" and previous is not None:
            continue  # the previous answer, shown on its own turn
        parts.append(f"[{m.get('role')}] {content if content is not None else ''}")
    return "\n".join(parts)


def turn_lines(turn: Turn, previous: dict[str, Any] | None) -> list[str]:
    """A turn as lines of plain (unescaped, untrusted) text."""
    out: list[str] = []
    c = turn.call
    if c:
        sent = _sent(c, previous)
        if sent.strip():
            out.append(f"sent: {_clip(sent)}")
        status = c.get("status")
        if status != "ok":
            out.append(f"{str(status or 'no status').upper()}: {_clip(c.get('error') or fmt.NO_DATA, 300)}")
        ans = c.get("answer") or {}
        if ans:
            if ans.get("text"):
                out.append(f"answer: {_clip(ans['text'])}")
            for tc in ans.get("tool_calls") or ():
                out.append(f"asks: {tc.get('name') or fmt.NO_DATA}({_clip(_args(tc.get('arguments')), 300)})")
        u = c.get("usage") or {}
        tokens = (
            f"{fmt.number(u.get('prompt_tokens') or 0)}+{fmt.number(u.get('completion_tokens') or 0)} tokens"
            if u
            else "no usage"
        )
        extra = ", cached" if c.get("cached") else ""
        if c.get("wire") in WIRES:  # the agent spoke another provider's API, translated to chat
            extra += f", via {WIRES[c['wire']]}"
        latency = fmt.ms(c.get("latency_ms")) if not fmt.missing(c.get("latency_ms")) else "latency not recorded"
        out.append(f"cost {fmt.usd(c.get('cost_usd') or 0)}, {tokens}, {latency}{extra}")
    for t in turn.tools:
        head = f"tool {t.get('name') or fmt.NO_DATA}({_clip(_args(t.get('arguments')), 300)})"
        if t.get("error"):
            out.append(f"{head} -> ERROR: {_clip(t.get('error'), 300)}")
        else:
            out.append(f"{head} -> {_clip(_args(t.get('result')), 300)}")
    return out


def _arm_head(a: ArmReplay) -> list[str]:
    lines = [f"arm {a.arm}, sample {a.index + 1}: {a.outcome}"]
    s = a.sample or {}
    if s:
        agent = s.get("agent") or {}
        lines.append(
            f"{fmt.count(s.get('turns') if s.get('turns') is not None else 1, 'model call')}, "
            f"{fmt.count(len(s.get('tool_calls') or []), 'tool call')}, {fmt.usd(s.get('cost_usd') or 0)}"
            + (f", stop: {agent.get('stop')}" if agent.get("stop") else "")
        )
    for ch in (a.grade or {}).get("checks") or ():
        if not ch.get("passed"):
            lines.append(f"failed {ch.get('name')}: {_clip(ch.get('reason'), 300)}")
    if a.error:
        lines.append(f"error: {_clip(a.error, 400)}")
    if a.trajectory is None:
        lines.append("(no trajectory: not an agent unit's sample)")
    elif not a.trajectory.finished:
        lines.append(f"(attempt {a.trajectory.attempt} was cut off before its end)")
    return lines


def _arm_tail(a: ArmReplay) -> list[str]:
    s = a.sample or {}
    out = s.get("output") if s else (a.trajectory.end or {}).get("output") if a.trajectory else None
    return [f"output: {_clip(out)}"] if out is not None else []


def _conversation_cells(rep: CaseReplay) -> list[tuple[str, list[list[str]]]] | None:
    """A conversation's rows: its turns aligned by number ("user 1", "agent 1", ...; the
    two arms met the same simulated user, so a row shows where their agents parted),
    then the ending; None when no arm's sample is a conversation."""
    convs = [turns_of(a.sample) if a.sample is not None else None for a in rep.arms]
    if all(c is None for c in convs):
        return None
    rows: list[tuple[str, list[list[str]]]] = [("", [_arm_head(a) for a in rep.arms])]
    counts = {"user": 0, "agent": 0}  # turns alternate, the user's first, in every arm
    for n in range(max(len(c or ()) for c in convs)):
        turns = [c[n] if c is not None and n < len(c) else None for c in convs]
        who = "user" if next(t for t in turns if t is not None).get("role") == "user" else "agent"
        counts[who] += 1
        rows.append((f"{who} {counts[who]}", [[_clip(t.get("content"))] if t is not None else [] for t in turns]))
    ending = [[f"ending: {(a.sample or {}).get('termination') or fmt.NO_DATA}", *_arm_tail(a)] for a in rep.arms]
    rows.append(("end", ending))
    return rows


def _cells(rep: CaseReplay) -> list[tuple[str, list[list[str]]]]:
    """Rows of (label, one list of lines per arm): a conversation's turns
    (`_conversation_cells`), else each model call with its tools."""
    conversation = _conversation_cells(rep)
    if conversation is not None:
        return conversation
    rows: list[tuple[str, list[list[str]]]] = [("", [_arm_head(a) for a in rep.arms])]
    previous: list[dict[str, Any] | None] = [None] * len(rep.arms)
    for n, turns in rep.rows():
        cells: list[list[str]] = []
        for i, t in enumerate(turns):
            if t is None:
                cells.append([])
                continue
            cells.append(turn_lines(t, previous[i]))
            if t.call:
                previous[i] = t.call
        rows.append((f"turn {n}" if n else "before the first call", cells))
    rows.append(("end", [_arm_tail(a) for a in rep.arms]))
    return rows


def render_text(rep: CaseReplay, width: int = 120) -> str:
    """The replay for a terminal: one column per arm, every line `printable`."""
    n = max(1, len(rep.arms))
    col = max(24, (width - 3 * (n - 1)) // n)
    out = [printable(f"case {rep.case_id}, sample {rep.index + 1}: " + " | ".join(a.arm for a in rep.arms))]
    for label, cells in _cells(rep):
        if label:
            out.append(printable(f"--- {label} ").ljust(col * n + 3 * (n - 1), "-"))
        wrapped = [
            [w for line in cell for part in line.rstrip("\n").split("\n") for w in (_wrap(printable(part), col))]
            for cell in cells
        ]
        for i in range(max((len(w) for w in wrapped), default=0)):
            out.append(" | ".join((w[i] if i < len(w) else "").ljust(col) for w in wrapped).rstrip())
    return "\n".join(out) + "\n"


def _wrap(line: str, width: int) -> list[str]:
    return textwrap.wrap(line, width, replace_whitespace=False, drop_whitespace=False) or [""]


def render_html(rep: CaseReplay) -> str:
    """The replay as an HTML table, one column per arm, every text escaped
    (`nb.text_html`, which also redacts in a redacted report)."""

    def e(text: str) -> str:  # control and bidi characters as escapes, then HTML-escaped
        return html.escape(visible(text))

    head = "".join(f"<th style='text-align:left'>{e(a.arm)} &mdash; {e(a.outcome)}</th>" for a in rep.arms)
    body = []
    for label, cells in _cells(rep):
        style = f"vertical-align:top;text-align:left;width:{100 // max(1, len(cells))}%"
        tds = "".join(f"<td style='{style}'>{text_html(chr(10).join(c), max_chars=20_000)}</td>" for c in cells)
        body.append(f"<tr><th>{e(label)}</th>{tds}</tr>")
    caption = f"case {rep.case_id}, sample {rep.index + 1}"
    return (
        f"<table class='ek-table ek-replay'><caption><b>{e(caption)}</b></caption>"
        f"<thead><tr><th></th>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


def show(rep: CaseReplay) -> None:
    """Display the replay in a notebook (`render_html`)."""
    from IPython.display import HTML, display  # lazy: only in a notebook

    display(HTML(render_html(rep)))
