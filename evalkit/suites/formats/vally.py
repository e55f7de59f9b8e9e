"""Vally/SKRAFT `eval.yaml` -> suite parts."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import regex
import yaml

from evalkit.foundations._io import DEEP_YAML, MAX_JSON_DEPTH, line_of, read_text_file, yaml_node_lines
from evalkit.foundations.errors import InputError
from evalkit.foundations.findings import Findings
from evalkit.foundations.layout import PROMPT_FILE
from evalkit.suites.formats.base import (
    ImportedSuite,
    default_config,
    import_files,
    raise_with_warnings,
    slugify,
)
from evalkit.suites.suite import SKILL_FILE, _Reader

MAX_YAML_BYTES = 5 * 1024 * 1024


VALLY_KEYS = {"name", "description", "type", "defaults", "config", "stimuli", "skill"}


VALLY_RUN_KEYS = {"runs", "timeout"}


VALLY_STIMULUS_KEYS = {"name", "prompt", "graders", "rubric", "tags"}


# Vally grader type -> the evalkit check kind it becomes (None: the stimulus's rubric, judged).
VALLY_GRADER_KINDS: dict[str, str | None] = {
    "prompt": None,
    "exact": "exact",
    "contains": "contains",
    "text": "contains",
    "regex": "regex",
}


VALLY_GRADERS = set(VALLY_GRADER_KINDS)


SKRAFT_SKILLS = "plugins/*/skills"  # where a SKRAFT repository keeps its skills (seed 002)


SKRAFT_PROMPT = "${skill}${input}\n"  # the skilled arm's SKILL.md before the stimulus; none for baseline


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")


_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: Any) -> float | None:
    """`3m` -> 180.0 seconds (units ms, s, m, h; a bare number is seconds); None if invalid."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if value > 0 else None
    if not isinstance(value, str):
        return None
    m = _DURATION.match(value)
    if not m:
        return None
    seconds = float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
    return seconds if seconds > 0 else None


def load_yaml(p: Path, root: Path | None = None) -> tuple[Any, dict[str, int]]:
    """A YAML suite file, parsed safely (no aliases, size-limited, inside `root` when
    given) with its JSON-path -> line map."""
    text = read_text_file(p, limit=MAX_YAML_BYTES, root=root)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        # Aliases could expand a small file into a huge tree (a "billion laughs"); a
        # suite has no use for them, so they are refused before building anything.
        depth = 0  # the depth guard (`_io.MAX_JSON_DEPTH`), counted on the events before any tree is built
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.AliasEvent):
                raise InputError(f"YAML aliases (*name) are not supported in {p.name}", p, event.start_mark.line + 1)
            depth += isinstance(event, yaml.CollectionStartEvent) - isinstance(event, yaml.CollectionEndEvent)
            if depth > MAX_JSON_DEPTH:
                raise InputError(DEEP_YAML, p, event.start_mark.line + 1)
        constructor = loader(text)  # one composition serves the line map and the document
        try:
            node = constructor.get_single_node()
            doc = constructor.construct_document(node) if node is not None else None
        finally:
            constructor.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise InputError(
            f"malformed YAML: {getattr(exc, 'problem', None) or exc}", p, mark.line + 1 if mark else None
        ) from None
    return doc, yaml_node_lines(node)


def read_vally(path: str | Path, skills_root: Path | None = None) -> ImportedSuite:
    """Vally/SKRAFT `eval.yaml`: `name`, `description`, `type`, run settings under
    `defaults:` or `config:` (`runs` -> k, `timeout` such as `3m` -> timeout_s), and
    `stimuli[]` (`name` -> id, `prompt` -> input, `rubric` criteria -> a judged case,
    `graders`, `tags: {intent: non-activation}` -> intent). Under `tests/skills/<skill>/`
    (or with `skills_root`) a baseline and a skilled arm, the skill as its `skill_dir`
    (`skraft_skill`)."""
    p = Path(path)
    doc, lines = load_yaml(p)
    fx = Findings(strict=False)

    # (the importer's findings are not strict; lint replays its warnings as strict ones)
    reader = _Reader(fx, str(p), lambda jp: line_of(lines, jp))

    if not isinstance(doc, dict):
        raise InputError("an eval.yaml must be a mapping with name and stimuli", p, 1, "$")
    name, description, case_set = _vally_header(reader, doc, p)
    k, timeout_s = _vally_run_settings(reader, doc)
    stimuli = doc.get("stimuli")
    if not isinstance(stimuli, list) or not stimuli:
        reader.err("$.stimuli", "missing or empty 'stimuli' list")
        stimuli = []
    cases: list[tuple[int | None, str, dict[str, Any]]] = []
    natural_ids, used_ids = _natural_ids(stimuli), set[str]()
    for jp, s in reader.objects(
        stimuli, "$.stimuli", VALLY_STIMULUS_KEYS, "stimulus", "a mapping with name and prompt"
    ):
        case = _vally_case(reader, jp, s, case_set, lambda slug: _unique_id(slug, used_ids, natural_ids))
        if case is not None:
            cases.append((line_of(lines, jp), jp, case))
    skill = skraft_skill(p, skills_root)
    if skill is not None:
        _prompts_name_no_skill(reader, cases, skill)
    raise_with_warnings(fx)
    config = default_config(name, description, k=k, timeout_s=timeout_s, source=f"Vally {p.name}")
    files = import_files(any(isinstance(c.get("expected"), dict) for _, _, c in cases))
    if skill is not None:
        rel = os.path.relpath(skill, p.parent.resolve())
        config["arms"] = [{"name": "baseline"}, {"name": "skilled", "skill_dir": rel}]
        files[PROMPT_FILE] = SKRAFT_PROMPT
        files[f"{rel}/{SKILL_FILE}"] = read_text_file(skill / SKILL_FILE, root=skill)
    folders = (skill,) if skill is not None else ()
    return ImportedSuite("vally", str(p), name, config, tuple(cases), files, tuple(fx.warnings), folders)


COPIED_WORDS = 8  # a run of this many of SKILL.md's words in a prompt is its wording copied


def _prompts_name_no_skill(reader: _Reader, cases: list[tuple[int | None, str, dict[str, Any]]], skill: Path) -> None:
    """Seed 002's rule 1, a warning per stimulus that breaks it: a prompt names the skill
    (its folder name, hyphens as spaces too) or copies COPIED_WORDS words in a row of its
    SKILL.md, which tells the agent the technique the evaluation is trying to observe."""
    name = " ".join(re.findall(r"\w+", skill.name.lower()))
    words = re.findall(r"\w+", read_text_file(skill / SKILL_FILE, root=skill).lower())
    runs = {tuple(words[i : i + COPIED_WORDS]) for i in range(len(words) - COPIED_WORDS + 1)}
    for _, jp, case in cases:
        said = re.findall(r"\w+", str(case.get("input", "")).lower())
        if f" {name} " in f" {' '.join(said)} ":
            reader.warn(f"{jp}.prompt", f"the prompt names the skill {skill.name!r}: never name the skill in a prompt")
        elif any(tuple(said[i : i + COPIED_WORDS]) in runs for i in range(len(said) - COPIED_WORDS + 1)):
            reader.warn(
                f"{jp}.prompt",
                f"the prompt copies {COPIED_WORDS} words in a row of the skill's {SKILL_FILE}: never copy its wording",
            )


def skraft_skill(spec: Path, skills_root: Path | None = None) -> Path | None:
    """The skill folder a spec at `tests/skills/<skill>/eval.yaml` evaluates (seed 002,
    "the skill loaded is the one named by the directory"): `<skill>` under `skills_root`
    when given, else under the repository's `plugins/*/skills/`. None for a spec outside
    that layout (a repository with no plugins/ included): it stays a one-arm suite. A
    name that matches no skill is skipped, never run as two identical arms: `InputError`
    saying so and where it looked."""
    folder = spec.resolve().parent
    if skills_root is not None:
        roots = [Path(skills_root)]
    elif folder.parent.name == "skills" and folder.parent.parent.name == "tests":
        roots = sorted(r for r in folder.parent.parent.parent.glob(SKRAFT_SKILLS) if r.is_dir())
        if not roots:
            return None
    else:
        return None
    hits = [r / folder.name for r in roots if (r / folder.name / SKILL_FILE).is_file()]
    if len(hits) == 1:
        return hits[0].resolve()
    where = ", ".join(str(r) for r in roots)
    if hits:
        raise InputError(f"skill {folder.name!r} is in {len(hits)} folders ({where}): give --skills-root", spec)
    raise InputError(
        f"skipped: no skill named {folder.name!r} in {where} (the folder tests/skills/<skill>/ must be named "
        f"exactly as the skill's folder, or give --skills-root): the two arms would be identical",
        spec,
    )


def _vally_header(reader: _Reader, doc: dict[str, Any], p: Path) -> tuple[str, str, str]:
    """The suite's name (the folder's when missing), description and the set its cases
    join (`type`: capability or regression; capability for any other, with a warning);
    an unknown top-level key is a warning."""
    for key in doc:
        if key not in VALLY_KEYS:
            reader.warn(f"$.{key}", f"unknown key {key!r} (ignored)")
    name = doc.get("name")
    if not isinstance(name, str) or not name.strip():
        reader.err("$.name", "missing or empty 'name'")
        name = p.parent.name
    description = doc.get("description", "")
    if not isinstance(description, str):
        reader.err("$.description", "description must be a string")
        description = ""
    eval_type = doc.get("type", "capability")
    case_set = eval_type if eval_type in ("capability", "regression") else "capability"
    if eval_type not in ("capability", "regression"):
        reader.warn(
            "$.type", f"type {json.dumps(eval_type)} is neither capability nor regression; cases are capability"
        )
    return name, description, case_set


def _vally_run_settings(reader: _Reader, doc: dict[str, Any]) -> tuple[int, float | None]:
    """k and timeout_s from `runs` and `timeout` under `defaults:` and `config:` (a later
    section's valid value wins); (5, None) when not given."""
    k, timeout_s = 5, None
    for section in ("defaults", "config"):
        if section not in doc:
            continue
        run = doc[section]
        if not isinstance(run, dict):
            reader.err(f"$.{section}", f"{section} must be a mapping (runs, timeout)")
            continue
        for key in run:
            if key not in VALLY_RUN_KEYS:
                reader.warn(f"$.{section}.{key}", f"unknown run setting {key!r} (ignored)")
        if "runs" in run:
            runs = run["runs"]
            if isinstance(runs, bool) or not isinstance(runs, int) or runs <= 0:
                reader.err(f"$.{section}.runs", f"runs must be a positive integer, got {runs!r}")
            else:
                k = runs
        if "timeout" in run:
            t = parse_duration(run["timeout"])
            if t is None:
                reader.err(
                    f"$.{section}.timeout", f"timeout {run['timeout']!r} is not a positive duration like 90s, 3m, 1h"
                )
            else:
                timeout_s = t
    return k, timeout_s


def _natural_ids(stimuli: list[Any]) -> set[str]:
    """The slug of every named stimulus in the file: ids a renamed duplicate must not take."""
    return {
        slugify(s["name"])
        for s in stimuli
        if isinstance(s, dict) and isinstance(s.get("name"), str) and s["name"].strip()
    }


def _unique_id(slug: str, used: set[str], natural: set[str]) -> str:
    """A stimulus's case id, recorded in `used`. The first stimulus with a name keeps its
    slug; a later duplicate becomes `<slug>-<n>` with the smallest n >= 2 that is neither
    taken so far nor the slug of any stimulus in the file (so `a`, `a`, `a-2` gives a,
    a-3, a-2). It depends only on the file, so re-importing gives the same ids."""
    cid = slug
    if cid in used:
        n = 2
        while f"{cid}-{n}" in used or f"{cid}-{n}" in natural:
            n += 1
        cid = f"{cid}-{n}"
    used.add(cid)
    return cid


def _vally_case(
    reader: _Reader, jp: str, s: dict[str, Any], case_set: str, take_id: Callable[[str], str]
) -> dict[str, Any] | None:
    """The native case a stimulus becomes (its id from `take_id`), or None after
    reporting why it cannot be imported."""
    sname, prompt = s.get("name"), s.get("prompt")
    if not isinstance(sname, str) or not sname.strip():
        reader.err(f"{jp}.name", "stimulus needs a non-empty 'name'")
        return None
    if not isinstance(prompt, str):
        reader.err(f"{jp}.prompt", f"stimulus {sname!r} needs a 'prompt' string")
        return None
    case: dict[str, Any] = {"id": take_id(slugify(sname)), "input": prompt, "tags": [case_set], "set": case_set}
    _add_vally_tags(reader, jp, s.get("tags"), case)
    rubric = s.get("rubric")
    if rubric is not None:
        if isinstance(rubric, str) and rubric.strip():
            rubric = [rubric.strip()]
        if not isinstance(rubric, list) or not rubric or not all(isinstance(x, str) and x.strip() for x in rubric):
            reader.err(f"{jp}.rubric", "rubric must be a non-empty list of criteria")
            return None
        case["expected"] = {"rubric": [x.strip() for x in rubric]}
    checks = _vally_checks(reader, jp, s.get("graders", []), sname, rubric is not None)
    if checks:
        case["checks"] = checks
    return case


def _add_vally_tags(reader: _Reader, jp: str, tags: Any, case: dict[str, Any]) -> None:
    """A stimulus's `tags` onto its case: a mapping's `intent` (activation or
    non-activation) becomes the case's intent and a tag, any other entry a `key:value`
    tag; a list's strings are tags."""
    if isinstance(tags, dict):
        for tk, tv in tags.items():
            if tk != "intent":
                case["tags"].append(f"{tk}:{tv}")
            elif tv not in ("activation", "non-activation"):
                reader.err(f"{jp}.tags.intent", f"intent must be activation or non-activation, got {tv!r}")
            else:
                case["intent"] = tv
                case["tags"].append(tv)
    elif isinstance(tags, list) and all(isinstance(t, str) for t in tags):
        case["tags"].extend(t for t in tags if t not in case["tags"])
    elif tags is not None:
        reader.err(f"{jp}.tags", "tags must be a mapping (e.g. {intent: non-activation}) or a list of strings")


def _vally_checks(reader: _Reader, jp: str, graders: Any, sname: str, has_rubric: bool) -> list[dict[str, Any]]:
    """The checks a stimulus's `graders` become (`VALLY_GRADER_KINDS`); a grader with no
    evalkit equivalent is skipped with a warning, a malformed one reported."""
    if not isinstance(graders, list):
        reader.err(f"{jp}.graders", "graders must be a list")
        graders = []
    checks: list[dict[str, Any]] = []
    for g_i, g in enumerate(graders):
        check = _vally_grader_check(reader, f"{jp}.graders[{g_i}]", g, sname, has_rubric)
        if check is not None:
            checks.append(check)
    return checks


def _vally_grader_check(reader: _Reader, gp: str, g: Any, sname: str, has_rubric: bool) -> dict[str, Any] | None:
    """The check one grader becomes, or None: a prompt grader is the stimulus's rubric
    (judged, an error without one), a regex's pattern must compile, an exact, contains or
    text grader needs a value."""
    gtype = g.get("type") if isinstance(g, dict) else None
    if gtype not in VALLY_GRADER_KINDS:
        reader.warn(
            gp,
            f"grader type {json.dumps(gtype)} has no evalkit equivalent (skipped); "
            f"supported: {', '.join(sorted(VALLY_GRADERS))}",
        )
        return None
    kind = VALLY_GRADER_KINDS[gtype]
    if kind is None:
        if not has_rubric:
            reader.err(gp, f"stimulus {sname!r} has a prompt grader but no rubric to judge against")
        return None
    field = "pattern" if kind == "regex" else "value"
    value = g.get(field, g.get("value"))
    if not isinstance(value, str) or not value:
        reader.err(gp, f"a {gtype} grader needs a non-empty {field}")
        return None
    if kind == "regex":
        try:
            regex.compile(value)
        except regex.error as exc:
            reader.err(gp, f"regex does not compile: {exc}")
            return None
    return {"kind": kind, field: value}
