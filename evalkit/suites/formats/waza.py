"""Waza `eval.yaml` -> suite parts (microsoft/waza): `name`, `description`, `skill`,
`config` (`trials_per_task` -> k, `timeout_seconds` -> timeout_s), `graders` applied to
every task, and `tasks` (globs of task files beside the spec, or inline tasks). A task
file is `id`, `name`, `inputs.prompt` (-> the case's input), `graders`.

Graders that map to check kinds: `text` (`contains` -> contains, `regex_match` -> regex,
`regex_not_match` -> a regex that must find no match), `regex` (`pattern`), `file`
(`must_exist`, `must_not_exist` -> file_exists) and `json_schema` (`schema`). Every
other grader type (code, prompt, program, behavior, action_sequence, skill_invocation,
trigger, diff, tool_constraint, tool_calls) is refused by its name and type: evalkit
would otherwise grade a task on less than its author wrote. Told from a Vally spec by
its fields (`tasks`, no `stimuli`)."""

from __future__ import annotations

import fnmatch
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import regex

from evalkit.foundations._io import line_of
from evalkit.foundations.errors import InputError
from evalkit.foundations.findings import Findings
from evalkit.foundations.layout import PROMPT_FILE
from evalkit.suites.formats.base import IMPORT_PROMPT, ImportedSuite, default_config, raise_with_warnings, slugify
from evalkit.suites.formats.vally import load_yaml
from evalkit.suites.suite import _Reader

WAZA_KEYS = {"name", "description", "skill", "schemaVersion", "version", "config", "metrics", "graders", "tasks"}
WAZA_CONFIG_KEYS = {"trials_per_task", "timeout_seconds", "parallel", "executor", "model"}
# grader type -> the config keys evalkit maps
WAZA_GRADERS: dict[str, set[str]] = {
    "text": {"contains", "regex_match", "regex_not_match"},
    "regex": {"pattern"},
    "file": {"must_exist", "must_not_exist"},
    "json_schema": {"schema"},
}
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
    """Whether path `parts` match glob `pattern` parts (`**`: zero or more folders)."""
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_glob_match(parts[i:], pattern[1:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], pattern[0]) and _glob_match(parts[1:], pattern[1:])


def is_waza(doc: Any) -> bool:
    """A Waza spec has `tasks` and no Vally `stimuli`."""
    return isinstance(doc, dict) and "tasks" in doc and "stimuli" not in doc


def _checks(graders: Any, jp: str, reader: _Reader) -> list[dict[str, Any]] | None:
    """The checks `graders` map to; None when one is refused or malformed (reported)."""
    if graders is None:
        return []
    if not isinstance(graders, list):
        reader.err(jp, "graders must be a list")
        return None
    out: list[dict[str, Any]] = []
    ok = True
    for i, g in enumerate(graders):
        gp = f"{jp}[{i}]"
        gtype = g.get("type") if isinstance(g, dict) else None
        gname = g.get("name", gtype) if isinstance(g, dict) else None
        if gtype not in WAZA_GRADERS:
            reader.err(
                f"{gp}.type",
                f"grader {json.dumps(gname)} of type {json.dumps(gtype)} has no evalkit check kind "
                f"(mapped: {', '.join(sorted(WAZA_GRADERS))}); remove it or grade it another way",
            )
            ok = False
            continue
        cfg = g.get("config") or {}
        if not isinstance(cfg, dict):
            reader.err(f"{gp}.config", "config must be a mapping")
            ok = False
            continue
        for key in cfg:
            if key not in WAZA_GRADERS[gtype]:
                reader.err(
                    f"{gp}.config.{key}",
                    f"grader {json.dumps(gname)}: {gtype} option {key!r} has no evalkit equivalent "
                    f"(mapped: {', '.join(sorted(WAZA_GRADERS[gtype]))})",
                )
                ok = False
        items = {k: cfg[k] if isinstance(cfg[k], list) else [cfg[k]] for k in cfg if k != "schema"}
        for key, values in items.items():
            for v in values:
                if not isinstance(v, str) or not v:
                    reader.err(f"{gp}.config.{key}", f"{key} entries must be non-empty strings")
                    ok = False
                    continue
                if key in ("regex_match", "regex_not_match", "pattern"):
                    try:
                        regex.compile(v)
                    except regex.error as exc:
                        reader.err(f"{gp}.config.{key}", f"regex does not compile: {exc}")
                        ok = False
                        continue
                if key == "contains":
                    out.append({"kind": "contains", "value": v})
                elif key in ("regex_match", "pattern"):
                    out.append({"kind": "regex", "pattern": v})
                elif key == "regex_not_match":  # matches at the start only when the pattern occurs nowhere
                    out.append({"kind": "regex", "pattern": f"\\A(?!.*(?:{v}))", "flags": "s"})
                else:
                    out.append({"kind": "file_exists", "path": v, "expect": key == "must_exist"})
        if "schema" in cfg:
            out.append({"kind": "json_schema", "schema": cfg["schema"]})
    return out if ok else None


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
    global_checks = _checks(doc.get("graders"), "$.graders", reader) or []
    tasks_spec = doc.get("tasks")
    if not isinstance(tasks_spec, list) or not tasks_spec:
        raise InputError("tasks must be a non-empty list of task files (globs) or tasks", p, line_of(lines, "$.tasks"))
    root = p.parent.resolve()
    tasks: list[tuple[Path, str, Any, dict[str, int]]] = []  # (file, JSON path, task, its line map)
    for i, entry in enumerate(tasks_spec):
        if isinstance(entry, dict):
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
        checks = _checks(task.get("graders"), f"{jp}.graders", treader)
        if checks is None:
            continue
        every = [*global_checks, *checks]
        if not every:
            treader.err(f"{jp}.graders", "the task has no grader evalkit can run (and the spec none for all tasks)")
            continue
        case = {"id": cid, "input": prompt, "tags": ["waza"], "set": "capability", "checks": every}
        cases.append((line_of(tlines, jp) if f == p else None, jp if f == p else f"{f.name} {jp}", case))
    raise_with_warnings(fx)
    description = doc.get("description") if isinstance(doc.get("description"), str) else ""
    config = default_config(name, description.strip(), k=k, timeout_s=timeout_s, source=f"Waza {p.name}")
    return ImportedSuite("waza", str(p), name, config, tuple(cases), {PROMPT_FILE: IMPORT_PROMPT}, tuple(fx.warnings))
