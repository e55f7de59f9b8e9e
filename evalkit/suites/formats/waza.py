"""Waza `eval.yaml` -> suite parts (microsoft/waza): `name`, `description`, `skill`,
`config` (`trials_per_task` -> k, `timeout_seconds` -> timeout_s), `graders` applied to
every task, and `tasks` (globs of task files beside the spec, `- include: <glob>`, or
inline tasks). A task file is `id`, `name`, `inputs.prompt` (-> the case's input),
`graders`.

Graders as Waza's GRADERS.md documents them: `text` (`contains` -> contains,
`regex_match` -> regex, `regex_not_match` -> a regex that must find no match), `regex`
(`pattern`, `must_match`, `must_not_match`), `file` (`must_exist`, `must_not_exist` ->
file_exists), `json_schema` (`schema`), `code` (`assertions` -> an assertions check,
evaluated by `evalkit grade` in its sandbox over `output`, `tool_calls` and `errors`),
`tool_calls` (`required` / `forbidden` patterns over the calls, `max_calls`, as
assertions) and `llm` (`rubric` -> a judged case by the suite's judge, `threshold`
0-1 -> the 1-5 judge threshold). Every other grader type (script, prompt, program,
behavior, action_sequence, skill_invocation, trigger, diff, human, llm_comparison, ...)
and every option evalkit does not map is refused by its name: evalkit would otherwise
grade a task on less than its author wrote. Told from a Vally spec by its fields
(`tasks`, no `stimuli`)."""

from __future__ import annotations

import fnmatch
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import regex

from evalkit.foundations._io import line_of
from evalkit.foundations.errors import InputError
from evalkit.foundations.findings import Findings
from evalkit.suites.formats.base import (
    ImportedSuite,
    default_config,
    import_files,
    raise_with_warnings,
    slugify,
)
from evalkit.suites.formats.vally import load_yaml
from evalkit.suites.suite import _Reader

WAZA_KEYS = {"name", "description", "skill", "schemaVersion", "version", "config", "metrics", "graders", "tasks"}
WAZA_CONFIG_KEYS = {"trials_per_task", "timeout_seconds", "parallel", "executor", "model"}
# grader type -> the config keys evalkit maps
WAZA_GRADERS: dict[str, set[str]] = {
    "text": {"contains", "regex_match", "regex_not_match"},
    "regex": {"pattern", "must_match", "must_not_match"},
    "file": {"must_exist", "must_not_exist"},
    "json_schema": {"schema"},
    "code": {"assertions"},
    "tool_calls": {"required", "forbidden", "max_calls"},
    "llm": {"rubric", "threshold", "model"},
}
# An `llm` grader's keys that Waza's docs put beside `type` rather than under `config`.
LLM_TOP_KEYS = ("rubric", "threshold", "model")
MAX_TASK_FILES = 1000
MAX_GLOB_ENTRIES = 100_000  # the files and folders a task glob may look at before it is refused
_GLOB_MAGIC = frozenset("*?[")


def task_files(root: Path, pattern: str, cap: int = MAX_TASK_FILES) -> list[Path]:
    """The files under `root` that `pattern` matches (pathlib's glob syntax, `**` for
    any folders), sorted; at most `cap` + 1 (the caller refuses more). Walked from the
    pattern's fixed folder without entering a symlinked folder (a loop is never
    followed; `Path.glob` follows one at every `*` and grows exponentially before any
    cap), no deeper than the pattern reaches, and stopped once `cap` + 1 files match or
    `MAX_GLOB_ENTRIES` entries were looked at (an `InputError`)."""
    parts = PurePosixPath(pattern).parts
    fixed = next((i for i, part in enumerate(parts) if _GLOB_MAGIC & set(part)), len(parts) - 1)
    start, rest = root.joinpath(*parts[:fixed]), parts[fixed:]
    found: list[Path] = []
    looked = 0
    for dirpath, dirnames, filenames in os.walk(start):  # followlinks=False: symlinked folders listed, not entered
        rel = PurePosixPath(os.path.relpath(dirpath, start)).parts if dirpath != str(start) else ()
        if "**" not in rest and len(rel) + 1 >= len(rest):
            dirnames[:] = []  # the pattern reaches no deeper
        dirnames.sort()
        looked += len(dirnames) + len(filenames)
        if looked > MAX_GLOB_ENTRIES:
            raise InputError(f"the task glob {pattern!r} looked at over {MAX_GLOB_ENTRIES} entries: narrow it", root)
        found += [Path(dirpath) / name for name in sorted(filenames) if _glob_match((*rel, name), rest)]
        if len(found) > cap:
            break
    return sorted(found)[: cap + 1]


def _glob_match(parts: Sequence[str], pattern: Sequence[str]) -> bool:
    """Whether path `parts` match glob `pattern` parts (`**`: zero or more folders).
    Walked as an automaton over the pattern's positions, one part at a time: at most
    parts x pattern steps, whatever the number of `**` (a recursion over each `**`'s
    choices grows exponentially with them)."""

    def closure(states: set[int]) -> set[int]:  # a `**` may match no folder: the next position too
        for j in sorted(states):
            while j < len(pattern) and pattern[j] == "**":
                j += 1
                states.add(j)
        return states

    states = closure({0})
    for part in parts:
        moved = set()
        for j in states:
            if j < len(pattern) and pattern[j] == "**":
                moved.add(j)  # the part is one more folder of the `**`
            elif j < len(pattern) and fnmatch.fnmatchcase(part, pattern[j]):
                moved.add(j + 1)
        states = closure(moved)
        if not states:
            return False
    return len(pattern) in states


def is_waza(doc: Any) -> bool:
    """A Waza spec has `tasks` and no Vally `stimuli`."""
    return isinstance(doc, dict) and "tasks" in doc and "stimuli" not in doc


@dataclass
class _Graded:
    """What a list of Waza graders becomes: checks, and the `llm` graders' rubrics with
    the judge threshold (1-5) their pass threshold stands for."""

    checks: list[dict[str, Any]] = field(default_factory=list)
    rubrics: list[str] = field(default_factory=list)
    threshold: int = 4


def _checks(graders: Any, jp: str, reader: _Reader) -> _Graded | None:
    """What `graders` map to; None when one is refused or malformed (reported)."""
    graded = _Graded()
    if graders is None:
        return graded
    if not isinstance(graders, list):
        reader.err(jp, "graders must be a list")
        return None
    ok = True
    for i, g in enumerate(graders):
        cfg = _grader_config(g, f"{jp}[{i}]", reader)
        ok = cfg is not None and _map_grader(g, cfg, f"{jp}[{i}]", reader, graded) and ok
    return graded if ok else None


def _grader_config(g: Any, gp: str, reader: _Reader) -> dict[str, Any] | None:
    """A grader's config (an `llm` grader's rubric, threshold and model may sit beside
    its type), its keys checked against what evalkit maps; None after reporting."""
    gtype = g.get("type") if isinstance(g, dict) else None
    gname = g.get("name", gtype) if isinstance(g, dict) else None
    if gtype not in WAZA_GRADERS:
        reader.err(
            f"{gp}.type",
            f"grader {json.dumps(gname)} of type {json.dumps(gtype)} has no evalkit check kind "
            f"(mapped: {', '.join(sorted(WAZA_GRADERS))}); remove it or grade it another way",
        )
        return None
    assert isinstance(g, dict)
    cfg = g.get("config") or {}
    if not isinstance(cfg, dict):
        reader.err(f"{gp}.config", "config must be a mapping")
        return None
    if gtype == "llm":
        cfg = {**cfg, **{k: g[k] for k in LLM_TOP_KEYS if k in g}}
    bad = [key for key in cfg if key not in WAZA_GRADERS[gtype]]
    for key in bad:
        reader.err(
            f"{gp}.config.{key}",
            f"grader {json.dumps(gname)}: {gtype} option {key!r} has no evalkit equivalent "
            f"(mapped: {', '.join(sorted(WAZA_GRADERS[gtype]))})",
        )
    return None if bad else cfg


def _map_grader(g: dict[str, Any], cfg: dict[str, Any], gp: str, reader: _Reader, graded: _Graded) -> bool:
    """Add one grader's checks (or rubric) to `graded`; False after reporting a bad value."""
    gtype = g["type"]
    if gtype == "llm":
        return _llm_grader(cfg, gp, reader, graded)
    if gtype == "code":
        exprs = _strings(cfg.get("assertions"), f"{gp}.config.assertions", reader)
        graded.checks += [{"kind": "assertions", "assertions": exprs}] if exprs else []
        return bool(exprs)
    if gtype == "tool_calls":
        exprs = _tool_call_assertions(cfg, gp, reader)
        graded.checks += [{"kind": "assertions", "assertions": exprs}] if exprs else []
        return exprs is not None
    if gtype == "json_schema":
        graded.checks.append({"kind": "json_schema", "schema": cfg.get("schema")})
        return True
    ok = True
    for key in cfg:
        values = _strings(cfg[key] if isinstance(cfg[key], list) else [cfg[key]], f"{gp}.config.{key}", reader)
        jp = f"{gp}.config.{key}"
        if values is None or (key in REGEX_KEYS and not all(_compiles(v, jp, reader) for v in values)):
            ok = False
            continue
        graded.checks += [_text_check(key, v) for v in values]
    return ok


REGEX_KEYS = {"regex_match", "regex_not_match", "pattern", "must_match", "must_not_match"}


def _text_check(key: str, v: str) -> dict[str, Any]:
    """The check of one text, regex or file grader entry."""
    if key == "contains":
        return {"kind": "contains", "value": v}
    if key in ("regex_match", "pattern", "must_match"):
        return {"kind": "regex", "pattern": v}
    if key in ("regex_not_match", "must_not_match"):  # matches at the start only when the pattern occurs nowhere
        return {"kind": "regex", "pattern": f"\\A(?!.*(?:{v}))", "flags": "s"}
    return {"kind": "file_exists", "path": v, "expect": key == "must_exist"}


def _strings(values: Any, jp: str, reader: _Reader) -> list[str] | None:
    if not isinstance(values, list) or not values or not all(isinstance(v, str) and v for v in values):
        reader.err(jp, "entries must be a non-empty list of non-empty strings")
        return None
    return list(values)


def _compiles(v: str, jp: str, reader: _Reader) -> bool:
    try:
        regex.compile(v)
    except regex.error as exc:
        reader.err(jp, f"regex does not compile: {exc}")
        return False
    return True


def _tool_call_assertions(cfg: dict[str, Any], gp: str, reader: _Reader) -> list[str] | None:
    """Waza's `tool_calls` grader as assertions over the trace: each `required` pattern
    found in the calls (their JSON), no `forbidden` one, at most `max_calls` calls."""
    exprs: list[str] = []
    for key, found in (("required", "is not None"), ("forbidden", "is None")):
        for j, item in enumerate(cfg.get(key) or []):
            pattern = item.get("pattern") if isinstance(item, dict) else item
            if not isinstance(pattern, str) or not pattern or not _compiles(pattern, f"{gp}.config.{key}[{j}]", reader):
                reader.err(f"{gp}.config.{key}[{j}]", "a tool-call pattern is a string or {pattern: str}")
                return None
            exprs.append(f"re.search({pattern!r}, json.dumps(tool_calls)) {found}")
    if "max_calls" in cfg:
        n = cfg["max_calls"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            reader.err(f"{gp}.config.max_calls", "max_calls must be a non-negative integer")
            return None
        exprs.append(f"len(tool_calls) <= {n}")
    return exprs


def _llm_grader(cfg: dict[str, Any], gp: str, reader: _Reader, graded: _Graded) -> bool:
    """An `llm` grader: its rubric judged (the suite's judge; a `model` here is noted and
    not used), its pass threshold (0-1, default 0.75) as the 1-5 judge threshold."""
    rubric = cfg.get("rubric")
    if not isinstance(rubric, str) or not rubric.strip():
        reader.err(f"{gp}.rubric", "an llm grader needs a rubric (text)")
        return False
    t = cfg.get("threshold", 0.75)
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t <= 1:
        reader.err(f"{gp}.threshold", "threshold must be a number from 0 to 1")
        return False
    if "model" in cfg:
        reader.warn(f"{gp}.model", "the judge is the suite's config judge; the grader's model is not used")
    graded.rubrics.append(rubric.strip())
    graded.threshold = max(graded.threshold if len(graded.rubrics) > 1 else 1, min(5, math.ceil(1 + 4 * t)))
    return True


def _lines_of(lines: dict[str, int]) -> Callable[[str], int | None]:
    return lambda jp: line_of(lines, jp)


def read_waza(path: str | Path, doc: Any | None = None, lines: dict[str, int] | None = None) -> ImportedSuite:
    """A Waza `eval.yaml` and its task files as suite parts (see the module notes)."""
    p = Path(path)
    if doc is None or lines is None:
        doc, lines = load_yaml(p)
    fx = Findings(strict=False)
    reader = _Reader(fx, str(p), lambda jp: line_of(lines or {}, jp))
    if not is_waza(doc):
        raise InputError("a Waza eval.yaml must be a mapping with tasks", p, 1, "$")
    for key in doc:
        if key not in WAZA_KEYS:
            reader.warn(f"$.{key}", f"unknown key {key!r} (ignored)")
    name = doc.get("name") if isinstance(doc.get("name"), str) and doc["name"].strip() else p.parent.name
    cfg = doc.get("config") or {}
    if not isinstance(cfg, dict):
        reader.err("$.config", "config must be a mapping")
        cfg = {}
    k = cfg.get("trials_per_task", 5)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        reader.err("$.config.trials_per_task", f"trials_per_task must be a positive integer, got {json.dumps(k)}")
        k = 5
    timeout = cfg.get("timeout_seconds")
    timeout_s = float(timeout) if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) else None
    spec_graded = _checks(doc.get("graders"), "$.graders", reader) or _Graded()
    tasks_spec = doc.get("tasks")
    if not isinstance(tasks_spec, list) or not tasks_spec:
        raise InputError("tasks must be a non-empty list of task files (globs) or tasks", p, line_of(lines, "$.tasks"))
    root = p.parent.resolve()
    tasks: list[tuple[Path, str, Any, dict[str, int]]] = []  # (file, JSON path, task, its line map)
    for i, entry in enumerate(tasks_spec):
        if isinstance(entry, dict) and set(entry) == {"include"}:  # `- include: tasks/*.yaml`
            entry = entry["include"]
        elif isinstance(entry, dict):
            tasks.append((p, f"$.tasks[{i}]", entry, lines))
            continue
        if not isinstance(entry, str) or not entry or Path(entry).is_absolute() or ".." in Path(entry).parts:
            reader.err(f"$.tasks[{i}]", "a task entry is a glob relative to the spec's folder, without '..'")
            continue
        matched = task_files(root, entry)
        if not matched:
            reader.err(f"$.tasks[{i}]", f"no task file matches {entry!r}")
        if len(matched) > MAX_TASK_FILES:
            where = line_of(lines, f"$.tasks[{i}]")
            raise InputError(f"more than {MAX_TASK_FILES} task files match {entry!r}", p, where)
        for f in matched:
            tdoc, tlines = load_yaml(f, root=root)
            tasks.append((f, "$", tdoc, tlines))
    cases = []
    seen: set[str] = set()
    for f, jp, task, tlines in tasks:
        treader = reader if f == p else _Reader(fx, str(f), _lines_of(tlines))
        if not isinstance(task, dict):
            treader.err(jp, "a task must be a mapping with id, inputs.prompt and graders")
            continue
        inputs = task.get("inputs") or {}
        prompt = inputs.get("prompt") if isinstance(inputs, dict) else None
        if not isinstance(prompt, str) or not prompt.strip():
            treader.err(f"{jp}.inputs.prompt", "a task needs a non-empty inputs.prompt")
            continue
        if isinstance(inputs, dict) and inputs.get("files"):
            treader.warn(
                f"{jp}.inputs.files",
                "the task's input files are not copied into the unit's working directory: "
                "give them to a command unit yourself",
            )
        cid = slugify(str(task.get("id") or task.get("name") or f.stem))
        if cid in seen:
            treader.err(f"{jp}.id", f"duplicate task id {cid!r}")
            continue
        seen.add(cid)
        graded = _checks(task.get("graders"), f"{jp}.graders", treader)
        if graded is None:
            continue
        case = _task_case(cid, prompt, spec_graded, graded)
        if case is None:
            treader.err(f"{jp}.graders", "the task has no grader evalkit can run (and the spec none for all tasks)")
            continue
        cases.append((line_of(tlines, jp) if f == p else None, jp if f == p else f"{f.name} {jp}", case))
    raise_with_warnings(fx)
    description = doc.get("description") if isinstance(doc.get("description"), str) else ""
    config = default_config(name, description.strip(), k=k, timeout_s=timeout_s, source=f"Waza {p.name}")
    files = import_files(any("expected" in c for _, _, c in cases))
    return ImportedSuite("waza", str(p), name, config, tuple(cases), files, tuple(fx.warnings))


def _task_case(cid: str, prompt: str, spec: _Graded, task: _Graded) -> dict[str, Any] | None:
    """A task's case: the spec's graders and its own, the `llm` rubrics as a judged
    case (`expected.rubric`, the stricter threshold); None when nothing grades it."""
    checks, rubrics = [*spec.checks, *task.checks], [*spec.rubrics, *task.rubrics]
    if not checks and not rubrics:
        return None
    case: dict[str, Any] = {"id": cid, "input": prompt, "tags": ["waza"], "set": "capability", "checks": checks}
    if rubrics:
        case["expected"] = {"rubric": rubrics}
        case["judge_threshold"] = max(g.threshold for g in (spec, task) if g.rubrics)
    return case
