"""Static analysis of prompt and skill files before any behaviour is measured (seed 000:
"a contradiction found statically is cheaper than a failed eval run"): `evalkit analyze
FILE...` on SKILL.md, `*.agent.md`, `*.instructions.md`, `*.prompt.md` and a suite's
prompt and guidance files, and `evalkit lint` on a suite's own.

Deterministic rules, each finding with file:line:col, a severity and a suggested rewrite:

* ``link-missing`` (error): a relative Markdown link whose file does not exist;
* ``nested-conditions`` (warning): one sentence holding more conditions (if, unless,
  when, except, otherwise, only if) than `MAX_CONDITIONS`, or a conditional list item
  nested under conditional items past that depth;
* ``must-conflict`` (error): MUST (ALWAYS) and MUST NOT (NEVER, DO NOT) on the same
  subject, the subject being the first words of what is required or forbidden;
* ``tool-no-error-path`` (warning): a tool the file declares (front matter `tools`,
  `allowed-tools`) that no sentence pairs with a failure (error, fails, timeout,
  unavailable, not found, retry ...);
* ``persona-conflict`` (warning): two persona lines whose traits conflict by
  `PERSONA_CONFLICTS` (concise against detailed, formal against casual, ...).

The rules are written here: no library analyses natural-language instructions, and each
rule is a small table or pattern that a reader can check against its test. A finding
never executes or fetches anything (a link is checked on disk, an http link not at all).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from evalkit.foundations._io import MAX_TEXT_BYTES, load_yaml_bounded, outside_root, read_text_file
from evalkit.foundations.errors import InputError
from evalkit.foundations.records import PromptFinding, Suite

#: File names `analyze` picks up in a folder (and what it reads when given one).
PATTERNS = ("SKILL.md", "*.agent.md", "*.instructions.md", "*.prompt.md")
#: Conditions one sentence (or one nest of list items) may hold before it is too many.
MAX_CONDITIONS = 2

RULES: dict[str, str] = {
    "link-missing": "a relative link names a file that does not exist",
    "nested-conditions": f"conditions nested more than {MAX_CONDITIONS} deep",
    "must-conflict": "MUST and MUST NOT on the same subject",
    "tool-no-error-path": "a declared tool with no instruction for when it fails",
    "persona-conflict": "persona lines with conflicting traits",
}

#: The categories `evalkit analyze --judge` asks the suite's judge for (seed 000's list, as
#: rule ids). A judge finding's rule is `JUDGE_RULE_PREFIX` + its category, so it never
#: shares an id with a deterministic rule (`evalkit.conclusions.analyze_judge`).
JUDGE_CATEGORIES: dict[str, str] = {
    "contradiction": "logical and format contradictions",
    "ambiguous-wording": "ambiguous wording (with a suggested rewrite)",
    "persona-conflict": "conflicting persona traits",
    "cognitive-load": "excessive cognitive load from nested conditions",
    "missing-error-path": "missing error paths",
    "linked-file-conflict": "conflicts with linked files",
}
JUDGE_RULE_PREFIX = "judge/"

_LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_CONDITION = re.compile(r"\b(?:only if|if|unless|when(?:ever)?|except(?: when| if)?|otherwise|in case)\b", re.I)
_MODAL = re.compile(
    r"\b(MUST NOT|MUST|SHALL NOT|SHALL|NEVER|ALWAYS|DO NOT|DON'T|[Nn]ever|[Aa]lways|[Dd]o not|[Dd]on't|"
    r"[Mm]ust not|[Mm]ust)\b"
)
_NEGATIVE = {"must not", "shall not", "never", "do not", "don't"}
_STOP = {"the", "a", "an", "to", "be", "any", "your", "their", "its", "of", "for", "in", "on", "with", "use", "ever"}
_FAILURE = re.compile(
    r"\b(?:errors?|fails?|failed|failing|failure|time[sd]? out|timeouts?|unavailable|not found|no results?|"
    r"returns? nothing|empty|retry|retries|cannot|can't|unreachable|denied|refused)\b",
    re.I,
)
_PERSONA_LINE = re.compile(
    r"\b(?:you are|you're|be|act as|your (?:tone|style|voice)|respond|answer|write|speak|give|keep|stay)\b", re.I
)
#: Trait pairs that cannot both hold: (name, one side, the other side), as word patterns.
PERSONA_CONFLICTS: tuple[tuple[str, str, str], ...] = (
    ("length", r"concise|brief|terse|short|succinct", r"detailed|thorough|exhaustive|verbose|in[- ]depth|elaborate"),
    ("register", r"formal", r"casual|informal|chatty|playful|relaxed"),
    ("humour", r"humou?rous|funny|witty|jok(?:e|ing)", r"serious|solemn|humou?rless"),
    ("warmth", r"warm|friendly|empathetic", r"cold|blunt|curt|detached"),
    ("initiative", r"proactive|take initiative", r"only (?:do|answer) what (?:is|you are) asked|never volunteer"),
)


@dataclass(frozen=True)
class _Line:
    number: int  # 1-based in the file
    text: str


def front_matter_block(text: str) -> tuple[dict[str, Any], int]:
    """A Markdown file's front matter: the mapping of its leading `---` YAML block ({}
    when there is none, it is not YAML or not a mapping) and how many lines the block
    takes, its closing `---` or `...` included (0 when there is no closed block). One
    reader for `analyze`, `evalkit tokens` (`prompts.skills`) and the dashboard."""
    raw = text.splitlines()
    if not raw or raw[0].strip() != "---":
        return {}, 0
    end = next((i for i in range(1, len(raw)) if raw[i].strip() in ("---", "...")), None)
    if end is None:
        return {}, 0
    try:
        loaded = load_yaml_bounded("\n".join(raw[1:end]), "front matter")
    except (yaml.YAMLError, InputError):
        loaded = None
    return (loaded if isinstance(loaded, dict) else {}), end + 1


def _lines(text: str) -> tuple[dict[str, Any], list[_Line]]:
    """The front matter (a leading `---` YAML block; {} when absent or not a mapping)
    and the body's lines with their numbers in the file; fenced code is blanked, so an
    example in a code block is not read as an instruction."""
    raw = text.splitlines()
    front, start = front_matter_block(text)
    if start:
        front["__lines__"] = (1, start)
    out: list[_Line] = []
    fenced = False
    for i in range(start, len(raw)):
        line = raw[i]
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        out.append(_Line(i + 1, "" if fenced else line))
    return front, out


def _sentences(lines: Sequence[_Line]) -> Iterable[tuple[int, int, str]]:
    """(line, column, sentence) for each sentence of each line (a sentence does not run
    over a line break: instructions are written a line or a bullet at a time)."""
    for ln in lines:
        for m in re.finditer(r"[^.!?;]+[.!?;]?", ln.text):
            if m.group(0).strip():
                yield ln.number, m.start() + 1 + (len(m.group(0)) - len(m.group(0).lstrip())), m.group(0).strip()


def _finding(path: str, line: int, col: int, rule: str, severity: str, message: str, rewrite: str) -> PromptFinding:
    return PromptFinding(path, line, col, severity, rule, message, rewrite)


# --------------------------------------------------------------------------- the rules


def _links(path: Path, shown: str, lines: Sequence[_Line]) -> list[PromptFinding]:
    out = []
    for ln in lines:
        for m in _LINK.finditer(ln.text):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
                continue  # a URL, mailto:, or an anchor in this file: not checked on disk
            rel = target.split("#", 1)[0]
            if rel and not (path.parent / rel).exists():
                out.append(
                    _finding(
                        shown,
                        ln.number,
                        m.start(1) + 1,
                        "link-missing",
                        "error",
                        f"linked file {rel!r} does not exist (relative to {path.parent.name or '.'}/)",
                        f"fix the path, add the file, or remove the link to {rel!r}",
                    )
                )
    return out


def _nested(shown: str, lines: Sequence[_Line]) -> list[PromptFinding]:
    out = []
    for number, col, sentence in _sentences(lines):
        hits = list(_CONDITION.finditer(sentence))
        if len(hits) > MAX_CONDITIONS:
            words = ", ".join(h.group(0).lower() for h in hits)
            out.append(
                _finding(
                    shown,
                    number,
                    col,
                    "nested-conditions",
                    "warning",
                    f"{len(hits)} conditions in one sentence ({words}), more than {MAX_CONDITIONS}",
                    "split it into a decision list, one condition per line "
                    '("If A: do X." / "If B: do Y." / "Otherwise: do Z."), or a table',
                )
            )
    # list items that open with a condition, nested under items that do
    stack: list[int] = []  # indents of the conditional items above
    for ln in lines:
        m = re.match(r"^(\s*)(?:[-*+]|\d+[.)])\s+(.*)", ln.text)
        if not m:
            if ln.text.strip():
                stack = []
            continue
        indent, body = len(m.group(1).expandtabs(4)), m.group(2)
        while stack and stack[-1] >= indent:
            stack.pop()
        if _CONDITION.match(body.lstrip()):
            stack.append(indent)
            if len(stack) > MAX_CONDITIONS:
                out.append(
                    _finding(
                        shown,
                        ln.number,
                        len(m.group(1)) + 1,
                        "nested-conditions",
                        "warning",
                        f"a condition nested {len(stack)} deep in a list, more than {MAX_CONDITIONS}",
                        "flatten it: one rule per combination of conditions, or a table of cases",
                    )
                )
    return out


def _subject(after: str) -> str:
    words = [w.lower() for w in re.findall(r"[A-Za-z][A-Za-z'-]*", after)]
    content = [w for w in words if w not in _STOP][:2]
    return " ".join(content)


def _musts(shown: str, lines: Sequence[_Line]) -> list[PromptFinding]:
    seen: dict[tuple[str, bool], tuple[int, int, str]] = {}
    out = []
    for ln in lines:
        for m in _MODAL.finditer(ln.text):
            modal = m.group(1).lower()
            rest = re.split(r"[.;:!?,]", ln.text[m.end() :], maxsplit=1)[0]
            subject = _subject(rest)
            if not subject:
                continue
            negative = modal in _NEGATIVE
            other = seen.get((subject, not negative))
            if other is not None:
                o_line, o_col, o_modal = other
                out.append(
                    _finding(
                        shown,
                        ln.number,
                        m.start() + 1,
                        "must-conflict",
                        "error",
                        f"{m.group(1)} {subject!r} here, {o_modal} {subject!r} at line {o_line}:{o_col}",
                        f"keep one rule for {subject!r}, or state when each holds "
                        f'("MUST {subject} unless <condition>")',
                    )
                )
            seen.setdefault((subject, negative), (ln.number, m.start() + 1, m.group(1)))
    return out


def _declared_tools(front: dict[str, Any]) -> list[str]:
    names: list[str] = []
    for key in ("tools", "allowed-tools", "allowed_tools"):
        value = front.get(key)
        if isinstance(value, str):
            names += [t for t in re.split(r"[,\s]+", value) if t]
        elif isinstance(value, list):
            names += [str(t) for t in value if isinstance(t, (str, int))]
    return list(dict.fromkeys(names))


def _tools(shown: str, front: dict[str, Any], lines: Sequence[_Line], raw: str) -> list[PromptFinding]:
    out = []
    sentences = [s for _, _, s in _sentences(lines)]
    raw_lines = raw.splitlines()
    first, last = front.get("__lines__", (1, 1))
    for tool in _declared_tools(front):
        base = re.escape(tool.split("(")[0])
        mention = re.compile(rf"(?<![\w-]){base}(?![\w-])", re.I)
        if any(mention.search(s) and _FAILURE.search(s) for s in sentences):
            continue
        line, col = first, 1
        for i in range(first - 1, min(last, len(raw_lines))):
            hit = mention.search(raw_lines[i])
            if hit:
                line, col = i + 1, hit.start() + 1
                break
        out.append(
            _finding(
                shown,
                line,
                col,
                "tool-no-error-path",
                "warning",
                f"tool {tool!r} is declared but no instruction says what to do when it fails",
                f'add a line such as "If {tool} fails or returns nothing, say so and <what to do instead>."',
            )
        )
    return out


def _personas(shown: str, lines: Sequence[_Line]) -> list[PromptFinding]:
    out = []
    first: dict[tuple[str, int], tuple[int, int, str]] = {}
    for ln in lines:
        if not _PERSONA_LINE.search(ln.text):
            continue
        for name, one, two in PERSONA_CONFLICTS:
            for side, pattern in ((0, one), (1, two)):
                m = re.search(rf"\b(?:{pattern})\b", ln.text, re.I)
                if m is None:
                    continue
                first.setdefault((name, side), (ln.number, m.start() + 1, m.group(0)))
                other = first.get((name, 1 - side))
                if other is not None and (other[0], other[1]) != (ln.number, m.start() + 1):
                    o_line, o_col, o_word = other
                    mine = first[(name, side)]
                    if (mine[0], mine[1]) != (ln.number, m.start() + 1):
                        continue  # reported once, where the conflict first shows
                    out.append(
                        _finding(
                            shown,
                            ln.number,
                            m.start() + 1,
                            "persona-conflict",
                            "warning",
                            f"{m.group(0)!r} conflicts with {o_word!r} at line {o_line}:{o_col} ({name})",
                            f'keep one, or say when each applies ("Be {o_word.lower()} by default; be '
                            f'{m.group(0).lower()} when the user asks for it.")',
                        )
                    )
    return out


# --------------------------------------------------------------------------- entry points


def analyze_text(text: str, path: str | Path, shown: str | None = None) -> list[PromptFinding]:
    """Every deterministic finding of one file's `text` (`path` locates its links),
    sorted by line and column."""
    p = Path(path)
    name = shown if shown is not None else str(path)
    front, lines = _lines(text)
    found = [
        *_links(p, name, lines),
        *_nested(name, lines),
        *_musts(name, lines),
        *_tools(name, front, lines, text),
        *_personas(name, lines),
    ]
    return sorted(found, key=lambda f: (f.file, f.line, f.col, f.rule))


def prompt_files(target: str | Path, load_suite: Callable[[Path], Suite] | None = None) -> list[Path]:
    """The files `analyze` reads for one argument: a file as given; a suite folder (one
    with `config.json`, when `load_suite` is given): its prompt and guidance files
    (`suite_prompt_files`); any other folder: the files under it matching `PATTERNS`.
    A path that does not exist is an `InputError`."""
    p = Path(target)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise InputError("no such file or folder", p)
    if load_suite is not None and (p / "config.json").is_file():
        return suite_prompt_files(load_suite(p))
    found = {f for pattern in PATTERNS for f in p.rglob(pattern) if f.is_file()}
    return sorted(found)


def suite_prompt_files(suite: Suite) -> list[Path]:
    """A suite's prompt and guidance files: its templates (`prompt`/`template`,
    `system`), each arm's guidance file and its skill's SKILL.md."""
    root = Path(suite.path)
    raw = suite.config.raw
    names: list[str] = [str(raw[k]) for k in ("template", "prompt", "system") if isinstance(raw.get(k), str)]
    for arm in suite.config.arms:
        for rel in (arm.guidance_file, arm.template_file, arm.system_file):
            if rel:
                names.append(rel)
        if arm.skill_dir:
            names.append(f"{arm.skill_dir.rstrip('/')}/SKILL.md")
    files = [root / n for n in dict.fromkeys(names)]
    return [f for f in files if f.is_file()]


def analyze_files(
    targets: Iterable[str | Path], load_suite: Callable[[Path], Suite] | None = None
) -> tuple[list[Path], list[PromptFinding]]:
    """The files read for `targets` (see `prompt_files`; `loader.analyze_paths` passes
    its `load_suite`) and their findings. Each file is read through the safe reader (a
    regular file under the text limit)."""
    files: list[Path] = []
    for t in targets:
        files += [f for f in prompt_files(t, load_suite) if f not in files]
    findings: list[PromptFinding] = []
    for f in files:
        findings += analyze_text(read_text_file(f, limit=MAX_TEXT_BYTES, allow_empty=True), f)
    return files, findings


# --------------------------------------------------------------------------- output


SYSTEM_TREES = ("/proc", "/dev", "/sys")  # never read for the judge, wherever a link leads


def in_tree(f: Path, tree: Path) -> bool:
    """Whether `f`, symlinks followed, is inside `tree` (the analysed file's folder) and
    not under `/proc`, `/dev` or `/sys`: the only files `--judge` may send."""
    real = os.path.realpath(f)
    system = any(real == t or real.startswith(t + "/") for t in SYSTEM_TREES)
    return not system and outside_root(real, tree) is None


def linked_files(path: str | Path, text: str) -> list[Path]:
    """The files `text` (the file at `path`) links to by a relative Markdown link that
    exist on disk inside the file's folder (`in_tree`: no absolute or `../` link out of
    it, no symlink out, nothing of `/proc`), in order of first mention (what `--judge`
    shows the judge beside the file, for conflicts with linked files). Nothing is
    fetched: URLs are skipped."""
    p = Path(path)
    tree = p.parent
    _, lines = _lines(text)
    found: list[Path] = []
    for ln in lines:
        for m in _LINK.finditer(ln.text):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
                continue
            rel = target.split("#", 1)[0]
            f = p.parent / rel
            if rel and f.is_file() and in_tree(f, tree) and f not in found:
                found.append(f)
    return found


def render_text(findings: Sequence[PromptFinding]) -> str:
    """One `file:line:col: severity: message [rule]` line per finding (the shape a
    GitHub problem matcher or an editor reads), each followed by its indented rewrite.
    A judge's finding has its rule as `judge/<category>` and `(judge)` before its
    message, so it is told apart from a rule's."""
    out = []
    for f in findings:
        by = "(judge) " if f.source == "judge" else ""
        out.append(f"{f.file}:{f.line}:{f.col}: {f.severity}: {by}{f.message} [{f.rule}]")
        out.append(f"    suggested rewrite: {f.suggestion}")
    return "\n".join(out) + ("\n" if out else "")


def render_json(files: Sequence[Path], findings: Sequence[PromptFinding], judge: dict[str, Any] | None = None) -> str:
    """`{files, findings, counts}`; with `--judge`, also `judge`: what the judge pass
    did (its model, prompt version, calls, cache hits, spend, cap, notes, error)."""
    doc: dict[str, Any] = {
        "files": [str(f) for f in files],
        "findings": [f.to_json() for f in findings],
        "counts": {s: sum(f.severity == s for f in findings) for s in ("error", "warning", "note")},
    }
    if judge is not None:
        doc["judge"] = judge
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _rule_text(rule: str) -> str:
    if rule.startswith(JUDGE_RULE_PREFIX):
        category = rule[len(JUDGE_RULE_PREFIX) :]
        return f"judge: {JUDGE_CATEGORIES.get(category, category)}"
    return RULES.get(rule, rule)


def render_sarif(findings: Sequence[PromptFinding], judge: dict[str, Any] | None = None) -> str:
    """SARIF 2.1.0 (OASIS): one run of the `evalkit analyze` driver with its rules, a
    result per finding with its physical location (1-based line and column) and the
    suggested rewrite as the result's `properties.suggestion` (a textual suggestion, not
    a `fix`: SARIF fixes are byte replacements, which a rewrite of prose is not). Every
    result's `properties.source` says who found it (`rule` or `judge`); a judge's rules
    are `judge/<category>`, each with `properties.source: "judge"`. With `judge` (the
    judge pass's summary), its notes and error are the invocation's
    `toolExecutionNotifications`, and `executionSuccessful` is false when it failed."""
    judged = judge is not None
    rules = sorted(
        {f.rule for f in findings}
        | set(RULES)
        | ({JUDGE_RULE_PREFIX + c for c in JUDGE_CATEGORIES} if judged else set())
    )
    try:
        version = importlib.metadata.version("evalkit")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that is not installed
        version = "unknown"
    doc = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "evalkit analyze",
                        "version": version,
                        "rules": [
                            {
                                "id": r,
                                "shortDescription": {"text": _rule_text(r)},
                                "properties": {"source": "judge" if r.startswith(JUDGE_RULE_PREFIX) else "rule"},
                            }
                            for r in rules
                        ],
                    }
                },
                "results": [
                    {
                        "ruleId": f.rule,
                        "ruleIndex": rules.index(f.rule),
                        "level": f.severity,
                        "message": {"text": f"{f.message}. Suggested rewrite: {f.suggestion}"},
                        "locations": [
                            {
                                "physicalLocation": {
                                    "artifactLocation": {"uri": Path(f.file).as_posix()},
                                    "region": {"startLine": f.line, "startColumn": f.col},
                                }
                            }
                        ],
                        "properties": {"suggestion": f.suggestion, "source": f.source},
                    }
                    for f in findings
                ],
                **({"invocations": [_invocation(judge)]} if judge is not None else {}),
            }
        ],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def _invocation(judge: dict[str, Any]) -> dict[str, Any]:
    """A SARIF invocation for a run with `--judge`: the judge pass's notes (as `note`
    notifications) and its error (an `error` one), `executionSuccessful` false on an error."""
    notes = [{"level": "note", "message": {"text": str(n)}} for n in judge.get("notes", [])]
    if judge.get("error"):
        notes.append({"level": "error", "message": {"text": str(judge["error"])}})
    return {
        "executionSuccessful": not judge.get("error"),
        "toolExecutionNotifications": notes,
        "properties": {k: v for k, v in judge.items() if k not in ("notes", "error")},
    }
