"""The scope of an evaluation dataset: the scoping interview's areas, its answers, and
the confirmation that must come before any pair is generated.

The evaluation-design seed (`004_9410cc142da68093.txt`) asks for an interview of one
question at a time in which every area is answered or recorded as unknown, then a
summary the caller confirms before generation: an unconfirmed assumption becomes a wrong
expected answer in every pair that inherits it. `AREAS` are the seed's inputs, one
question each. `Scope` is the scope file (`scope.json`, docs/formats.md); `Interview` is
one person answering it, saving the file after every answer through a temporary file and
a rename; `require_confirmed` is what `evalkit dataset new --scope` and `evalkit dataset
guide` call first. The widgets over `Interview` are in `evalkit.telling.interview`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from evalkit.foundations._io import loads_bounded, write_atomic
from evalkit.foundations.errors import InputError

SCOPE_FORMAT = 1
AnswerValue = str | tuple[str, ...]


@dataclass(frozen=True)
class Area:
    """One interview area: the question asked, and whether its answer is one text or a
    list (one item a line)."""

    key: str
    question: str
    hint: str
    kind: Literal["text", "list"] = "text"


# The seed's inputs ("the system under evaluation, its purpose, and its intended users; its
# grounding sources, tools, and response-format expectations; known risks, refusal
# requirements, and prohibited content areas; the team's development approach and
# evaluation cadence; a caller-confirmed destination") and the guide's "who reviewed the
# content and when it should be revisited", one question each, in the order asked.
AREAS: tuple[Area, ...] = (
    Area("system_name", "What is the system under evaluation called?", "The name the dataset's metadata carries."),
    Area("purpose", "What is the system for: the job it does?", "One or two sentences a new team member would follow."),
    Area(
        "user_populations",
        "Who uses it? Name each distinct user population.",
        "One population a line; every pair will say which of them it exercises.",
        "list",
    ),
    Area(
        "grounding_sources",
        "Which sources must its answers rest on (documents, databases, APIs)?",
        "One source a line; grounding pairs cite them.",
        "list",
    ),
    Area(
        "tools",
        "Which tools or functions does it call?",
        "One tool name a line; pairs list the tools they expect to be invoked.",
        "list",
    ),
    Area(
        "response_format",
        "What must a response look like (format, length, tone, language)?",
        "Only what is a requirement, not a preference.",
    ),
    Area("risks", "Which risks are known: what could go wrong for a user?", "One risk a line.", "list"),
    Area(
        "refusal_requirements",
        "What must it refuse, and what should it do instead when it refuses?",
        "The action expected (redirect, escalate, cite policy), not merely 'decline'.",
    ),
    Area(
        "prohibited_content",
        "Which content areas are prohibited?",
        "One area a line; safety pairs test them.",
        "list",
    ),
    Area(
        "approach",
        "Is the system built low-code or pro-code?",
        "The development approach decides which tooling fits.",
    ),
    Area(
        "evaluation_cadence",
        "When will the evaluation run (every change, nightly, before a release)?",
        "How often, and what triggers a run.",
    ),
    Area(
        "destination",
        "Where should the dataset and its documents be written?",
        "A folder the caller confirms; nothing is written anywhere else.",
    ),
    Area(
        "reviewers",
        "Who reviews the dataset's content?",
        "One person or role a line; the guide names them.",
        "list",
    ),
    Area("revisit", "When should the dataset be revisited?", "A date, or the event that makes it stale."),
)
# What an area left unknown costs the dataset (the seed's stop rules and constraints).
UNKNOWN_CONSEQUENCE = {
    "user_populations": "pairs cannot name the populations they exercise; population coverage is unmeasured",
    "grounding_sources": "expected answers that depend on a source are marked for subject-matter review",
    "tools": "no pair can state the tools it expects; tool use is unmeasured",
    "risks": "the safety category cannot be derived from the scope",
    "refusal_requirements": "negative and safety pairs cannot assert the action expected on a refusal",
    "prohibited_content": "safety pairs cannot be aimed at the prohibited areas",
    "response_format": "no format check can be justified; format is left to the judge's rubric",
    "evaluation_cadence": "the gate's place in the workflow is undecided",
    "reviewers": "the guide cannot say who reviewed the content",
    "revisit": "the guide cannot say when the dataset goes stale",
}
# The seed's stop rule: scope, refusal requirements and grounding sources decide the
# negative and safety categories, which cannot be inferred; generating with one unknown
# is allowed (it was recorded) but said on every `dataset new`.
STOP_UNKNOWN = ("refusal_requirements", "grounding_sources", "prohibited_content")
AREA_KEYS: tuple[str, ...] = tuple(a.key for a in AREAS)
_BY_KEY = {a.key: a for a in AREAS}


def area(key: str) -> Area:
    """The area named `key` (`KeyError` for an unknown name)."""
    return _BY_KEY[key]


@dataclass(frozen=True)
class Answer:
    """One area's answer: a value, or `unknown` recorded explicitly (then `value` is
    None). `at` is when it was given (UTC, ISO 8601)."""

    value: AnswerValue | None
    unknown: bool = False
    at: str = ""

    def text(self) -> str:
        """The answer as a person reads it in the summary."""
        if self.unknown:
            return "unknown"
        if isinstance(self.value, tuple):
            return "; ".join(self.value)
        return self.value or ""


@dataclass(frozen=True)
class Scope:
    """The scope file: every area's answer so far, and whether the summary was confirmed.

    A scope is confirmed only once every area is answered or recorded as unknown
    (`confirm`); any later change to an answer withdraws the confirmation.
    """

    answers: tuple[tuple[str, Answer], ...] = ()
    confirmed: bool = False
    confirmed_at: str | None = None

    def get(self, key: str) -> Answer | None:
        for k, a in self.answers:
            if k == key:
                return a
        return None

    def value(self, key: str) -> AnswerValue | None:
        """The area's value, or None when it is unanswered or unknown."""
        a = self.get(key)
        return None if a is None or a.unknown else a.value

    def items(self, key: str) -> tuple[str, ...]:
        """A list area's items (empty when unanswered or unknown)."""
        v = self.value(key)
        return v if isinstance(v, tuple) else ((v,) if v else ())

    def missing(self) -> list[str]:
        """The areas neither answered nor recorded as unknown, in interview order."""
        have = {k for k, _ in self.answers}
        return [k for k in AREA_KEYS if k not in have]

    def unknowns(self) -> list[str]:
        return [k for k in AREA_KEYS if (a := self.get(k)) is not None and a.unknown]

    def with_answer(self, key: str, answer: Answer) -> Scope:
        """This scope with `key` answered (kept in interview order), unconfirmed."""
        area(key)
        kept = {k: a for k, a in self.answers if k != key} | {key: answer}
        return Scope(tuple((k, kept[k]) for k in AREA_KEYS if k in kept), confirmed=False, confirmed_at=None)

    def confirm(self, at: str | None = None) -> Scope:
        """The scope confirmed; `InputError` naming the missing areas when any is left."""
        missing = self.missing()
        if missing:
            raise InputError(f"the scope cannot be confirmed: no answer (or 'unknown') yet for {', '.join(missing)}")
        return replace(self, confirmed=True, confirmed_at=at or _now())

    def summary(self) -> list[tuple[str, str, str]]:
        """(area, question, answer text) for every area, '(not answered)' where none is."""
        return [
            (a.key, a.question, ans.text() if (ans := self.get(a.key)) is not None else "(not answered)") for a in AREAS
        ]

    def to_json(self) -> dict[str, Any]:
        answers: dict[str, Any] = {}
        for k, a in self.answers:
            if a.unknown:
                answers[k] = {"unknown": True, "at": a.at}
            else:
                answers[k] = {"value": list(a.value) if isinstance(a.value, tuple) else a.value, "at": a.at}
        return {
            "evalkit_scope": SCOPE_FORMAT,
            "answers": answers,
            "confirmed": self.confirmed,
            "confirmed_at": self.confirmed_at,
        }

    @classmethod
    def from_json(cls, d: Any, path: str | Path | None = None) -> Scope:
        """A scope from its JSON; `InputError` naming `path` and the JSON path of the
        first thing wrong."""

        def bad(msg: str, where: str) -> InputError:
            return InputError(msg, path, json_path=where)

        if not isinstance(d, dict):
            raise bad("a scope file is a JSON object", "$")
        if d.get("evalkit_scope") != SCOPE_FORMAT:
            raise bad(f"evalkit_scope must be {SCOPE_FORMAT} (the scope file format)", "$.evalkit_scope")
        extra = sorted(set(d) - {"evalkit_scope", "answers", "confirmed", "confirmed_at"})
        if extra:
            raise bad(f"unknown key {extra[0]!r}", f"$.{extra[0]}")
        raw = d.get("answers", {})
        if not isinstance(raw, dict):
            raise bad("answers must be an object keyed by area", "$.answers")
        answers: dict[str, Answer] = {}
        for key, entry in raw.items():
            where = f"$.answers.{key}"
            if key not in _BY_KEY:
                raise bad(f"unknown area {key!r} (areas: {', '.join(AREA_KEYS)})", where)
            if not isinstance(entry, dict):
                raise bad("an answer is an object with value (or unknown: true) and at", where)
            at = entry.get("at", "")
            if not isinstance(at, str):
                raise bad("at must be a string (when the answer was given)", f"{where}.at")
            left = sorted(set(entry) - {"value", "unknown", "at"})
            if left:
                raise bad(f"unknown key {left[0]!r}", f"{where}.{left[0]}")
            unknown = entry.get("unknown", False)
            if not isinstance(unknown, bool):
                raise bad("unknown must be true or false", f"{where}.unknown")
            if unknown:
                if entry.get("value") is not None:
                    raise bad("an unknown answer has no value", f"{where}.value")
                answers[key] = Answer(None, True, at)
                continue
            if "value" not in entry:
                raise bad("an answer needs a value, or unknown: true", where)
            answers[key] = Answer(_checked_value(_BY_KEY[key], entry["value"], path, f"{where}.value"), False, at)
        confirmed = d.get("confirmed", False)
        if not isinstance(confirmed, bool):
            raise bad("confirmed must be true or false", "$.confirmed")
        confirmed_at = d.get("confirmed_at")
        if confirmed_at is not None and not isinstance(confirmed_at, str):
            raise bad("confirmed_at must be a string or null", "$.confirmed_at")
        scope = cls(tuple((k, answers[k]) for k in AREA_KEYS if k in answers), confirmed, confirmed_at)
        if confirmed and scope.missing():
            raise bad(
                f"confirmed is true but {', '.join(scope.missing())} has no answer: a scope is confirmed only "
                "once every area is answered or unknown",
                "$.confirmed",
            )
        return scope


def _checked_value(a: Area, v: Any, path: str | Path | None, where: str) -> AnswerValue:
    if a.kind == "list":
        if not isinstance(v, list) or not all(isinstance(x, str) and x.strip() for x in v):
            raise InputError(f"{a.key} is a list of non-empty strings", path, json_path=where)
        if not v:
            raise InputError(f"{a.key}: an empty list is no answer (record 'unknown' instead)", path, json_path=where)
        if len(set(v)) != len(v):
            raise InputError(f"{a.key} names an item twice", path, json_path=where)
        return tuple(v)
    if not isinstance(v, str) or not v.strip():
        raise InputError(f"{a.key} is a non-empty string", path, json_path=where)
    return v


def parse_answer(key: str, text: str) -> AnswerValue:
    """What a person typed for `key`, as its value: a list area takes one item a line
    (blank lines dropped, repeats kept once). `InputError` for an empty answer."""
    a = area(key)
    if a.kind == "list":
        items = list(dict.fromkeys(ln.strip() for ln in text.splitlines() if ln.strip()))
        if not items:
            raise InputError(f"{key}: nothing typed; answer, or record it as unknown")
        return tuple(items)
    if not text.strip():
        raise InputError(f"{key}: nothing typed; answer, or record it as unknown")
    return text.strip()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def load_scope(path: str | os.PathLike[str]) -> Scope:
    """The scope file at `path`; `InputError` naming the file (and line or JSON path)."""
    p = Path(path)
    if not p.is_file():
        raise InputError("no scope file here: write one with the scoping_interview notebook", p)
    try:
        d = loads_bounded(p.read_text(encoding="utf-8"), p)
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text: {exc.reason}", p) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"not JSON: {exc.msg}", p, line=exc.lineno) from None
    return Scope.from_json(d, p)


def save_scope(path: str | os.PathLike[str], scope: Scope) -> None:
    """Write the scope file through a temporary file and a rename."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(p, json.dumps(scope.to_json(), indent=2, ensure_ascii=False) + "\n")


def require_confirmed(path: str | os.PathLike[str]) -> Scope:
    """The scope at `path` when confirmed; otherwise `InputError` (exit 2) naming the
    file and what is missing: nothing is generated from an unconfirmed scope."""
    scope = load_scope(path)
    if not scope.confirmed:
        missing = scope.missing()
        what = (
            f"no answer (or 'unknown') yet for {', '.join(missing)}"
            if missing
            else "every area is answered but the summary was not confirmed"
        )
        raise InputError(
            f"the scope is not confirmed ({what}): finish the scoping_interview notebook and confirm its summary "
            "before generating anything",
            os.fspath(path),
            json_path="$.confirmed",
        )
    return scope


class Interview:
    """One person answering the scoping interview, one question at a time.

    Opens the scope file at `path` (a new one when absent) on the first area with no
    answer. `answer` and `unknown` record the current area, save the file at once, and
    move on; `confirm` confirms the summary once every area has an answer.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.scope = load_scope(self.path) if self.path.exists() else Scope()
        self._disk = self._read()
        missing = self.scope.missing()
        self.position = AREA_KEYS.index(missing[0]) if missing else len(AREAS)

    def _read(self) -> str | None:
        return self.path.read_text(encoding="utf-8") if self.path.is_file() else None

    def _save(self) -> None:
        """Save the scope, refused when someone else changed the file since this
        interview read or wrote it (their answers are not overwritten)."""
        if self._read() != self._disk:
            raise InputError(
                "the scope file changed since this interview opened it (another notebook or editor?): "
                "re-run the notebook to reopen it; nothing was saved",
                self.path,
            )
        save_scope(self.path, self.scope)
        self._disk = self._read()

    @property
    def finished(self) -> bool:
        """Past the last question: the summary is what is shown."""
        return self.position >= len(AREAS)

    @property
    def current(self) -> Area | None:
        return None if self.finished else AREAS[self.position]

    def _record(self, answer: Answer) -> None:
        a = self.current
        if a is None:
            raise InputError("every question is asked: confirm the summary, or go back to change an answer")
        before = self.scope
        self.scope = self.scope.with_answer(a.key, answer)
        try:
            self._save()
        except InputError:
            self.scope = before
            raise
        self._advance()

    def _advance(self) -> None:
        missing = [AREA_KEYS.index(k) for k in self.scope.missing()]
        later = [i for i in missing if i > self.position]
        self.position = later[0] if later else (missing[0] if missing else len(AREAS))

    def answer(self, text: str) -> None:
        """Record what was typed for the current area (a list area: one item a line)."""
        a = self.current
        if a is None:
            raise InputError("every question is asked: confirm the summary, or go back to change an answer")
        self._record(Answer(parse_answer(a.key, text), False, _now()))

    def unknown(self) -> None:
        """Record the current area as unknown, explicitly."""
        self._record(Answer(None, True, _now()))

    def back(self) -> None:
        self.position = max(0, self.position - 1)

    def go(self, key: str) -> None:
        self.position = AREA_KEYS.index(key)

    def confirm(self) -> Scope:
        """Confirm the summary (refused while an area has no answer) and save."""
        before = self.scope
        self.scope = self.scope.confirm()
        try:
            self._save()
        except InputError:
            self.scope = before
            raise
        return self.scope


def apply_scope(metadata: dict[str, Any], scope: Scope, shown: str) -> list[str]:
    """Fill a dataset source's metadata from a confirmed scope, in place: `system_name`,
    `user_populations`, `approach` (when it is low-code or pro-code) where the source has
    none. A source that says otherwise than the scope is refused (`InputError` naming its
    JSON path): the dataset must be generated from the scope that was confirmed."""
    notes = []
    wanted: dict[str, Any] = {}
    if (name := scope.value("system_name")) is not None:
        wanted["system_name"] = name
    if scope.items("user_populations"):
        wanted["user_populations"] = list(scope.items("user_populations"))
    approach = scope.value("approach")
    if isinstance(approach, str) and approach.strip().lower() in ("low-code", "pro-code"):
        wanted["approach"] = approach.strip().lower()
    for key in scope.unknowns():
        if key in STOP_UNKNOWN:
            notes.append(f"scope: {key} is unknown: {UNKNOWN_CONSEQUENCE[key]} (ask before relying on those pairs)")
    for key, value in wanted.items():
        if key not in metadata:
            metadata[key] = value
            notes.append(f"metadata.{key}: taken from the confirmed scope")
        elif metadata[key] != value:
            raise InputError(
                f"metadata.{key} is {json.dumps(metadata[key], ensure_ascii=False)} but the confirmed scope says "
                f"{json.dumps(value, ensure_ascii=False)}: change the source or re-run the interview",
                shown,
                json_path=f"$.metadata.{key}",
            )
    return notes
