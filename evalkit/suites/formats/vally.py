"""Vally/SKRAFT `eval.yaml` -> suite parts."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import regex
import yaml

from evalkit.foundations._io import line_of, read_text_file, yaml_node_lines
from evalkit.foundations.errors import InputError
from evalkit.foundations.findings import Findings
from evalkit.foundations.layout import JUDGE_DIR, PROMPT_FILE
from evalkit.suites.formats.base import (
    IMPORT_PROMPT,
    IMPORT_RUBRIC,
    ImportedSuite,
    default_config,
    raise_with_warnings,
    slugify,
)
from evalkit.suites.suite import JUDGE_PROMPT_TEMPLATE, _Reader

MAX_YAML_BYTES = 5 * 1024 * 1024


VALLY_KEYS = {"name", "description", "type", "defaults", "config", "stimuli", "skill"}


VALLY_RUN_KEYS = {"runs", "timeout"}


VALLY_STIMULUS_KEYS = {"name", "prompt", "graders", "rubric", "tags"}


VALLY_GRADERS = {"prompt", "exact", "contains", "text", "regex"}


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
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.AliasEvent):
                raise InputError(f"YAML aliases (*name) are not supported in {p.name}", p, event.start_mark.line + 1)
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


def read_vally(path: str | Path) -> ImportedSuite:
    """Vally/SKRAFT `eval.yaml`: `name`, `description`, `type`, run settings under
    `defaults:` or `config:` (`runs` -> k, `timeout` such as `3m` -> timeout_s), and
    `stimuli[]` (`name` -> id, `prompt` -> input, `rubric` criteria -> a judged case,
    `graders`, `tags: {intent: non-activation}` -> intent)."""
    p = Path(path)
    doc, lines = load_yaml(p)
    fx = Findings(strict=False)

    # (the importer's findings are not strict; lint replays its warnings as strict ones)
    reader = _Reader(fx, str(p), lambda jp: line_of(lines, jp))
    err, warn = reader.err, reader.warn

    if not isinstance(doc, dict):
        raise InputError("an eval.yaml must be a mapping with name and stimuli", p, 1, "$")
    for key in doc:
        if key not in VALLY_KEYS:
            warn(f"$.{key}", f"unknown key {key!r} (ignored)")
    name = doc.get("name")
    if not isinstance(name, str) or not name.strip():
        err("$.name", "missing or empty 'name'")
        name = p.parent.name
    description = doc.get("description", "")
    if not isinstance(description, str):
        err("$.description", "description must be a string")
        description = ""
    eval_type = doc.get("type", "capability")
    case_set = eval_type if eval_type in ("capability", "regression") else "capability"
    if eval_type not in ("capability", "regression"):
        warn("$.type", f"type {json.dumps(eval_type)} is neither capability nor regression; cases are capability")

    k, timeout_s = 5, None
    for section in ("defaults", "config"):
        if section not in doc:
            continue
        run = doc[section]
        if not isinstance(run, dict):
            err(f"$.{section}", f"{section} must be a mapping (runs, timeout)")
            continue
        for key in run:
            if key not in VALLY_RUN_KEYS:
                warn(f"$.{section}.{key}", f"unknown run setting {key!r} (ignored)")
        if "runs" in run:
            runs = run["runs"]
            if isinstance(runs, bool) or not isinstance(runs, int) or runs <= 0:
                err(f"$.{section}.runs", f"runs must be a positive integer, got {runs!r}")
            else:
                k = runs
        if "timeout" in run:
            t = parse_duration(run["timeout"])
            if t is None:
                err(f"$.{section}.timeout", f"timeout {run['timeout']!r} is not a positive duration like 90s, 3m, 1h")
            else:
                timeout_s = t

    stimuli = doc.get("stimuli")
    if not isinstance(stimuli, list) or not stimuli:
        err("$.stimuli", "missing or empty 'stimuli' list")
        stimuli = []
    cases: list[tuple[int | None, str, dict[str, Any]]] = []
    # Ids from names: the first stimulus with a name keeps its slug; a later duplicate
    # becomes `<slug>-<n>` with the smallest n >= 2 that is neither taken so far nor the
    # slug of any stimulus in the file (so `a`, `a`, `a-2` gives a, a-3, a-2). It
    # depends only on the file, so re-importing gives the same ids.
    natural_ids = {
        slugify(s["name"])
        for s in stimuli
        if isinstance(s, dict) and isinstance(s.get("name"), str) and s["name"].strip()
    }
    used_ids: set[str] = set()
    for jp, s in reader.objects(
        stimuli, "$.stimuli", VALLY_STIMULUS_KEYS, "stimulus", "a mapping with name and prompt"
    ):
        sname, prompt = s.get("name"), s.get("prompt")
        if not isinstance(sname, str) or not sname.strip():
            err(f"{jp}.name", "stimulus needs a non-empty 'name'")
            continue
        if not isinstance(prompt, str):
            err(f"{jp}.prompt", f"stimulus {sname!r} needs a 'prompt' string")
            continue
        cid = slugify(sname)
        if cid in used_ids:
            n = 2
            while f"{cid}-{n}" in used_ids or f"{cid}-{n}" in natural_ids:
                n += 1
            cid = f"{cid}-{n}"
        used_ids.add(cid)
        case: dict[str, Any] = {"id": cid, "input": prompt, "tags": [case_set], "set": case_set}

        tags = s.get("tags")
        if isinstance(tags, dict):
            for tk, tv in tags.items():
                if tk == "intent":
                    if tv not in ("activation", "non-activation"):
                        err(f"{jp}.tags.intent", f"intent must be activation or non-activation, got {tv!r}")
                    else:
                        case["intent"] = tv
                        case["tags"].append(tv)
                else:
                    case["tags"].append(f"{tk}:{tv}")
        elif isinstance(tags, list) and all(isinstance(t, str) for t in tags):
            case["tags"].extend(t for t in tags if t not in case["tags"])
        elif tags is not None:
            err(f"{jp}.tags", "tags must be a mapping (e.g. {intent: non-activation}) or a list of strings")

        rubric = s.get("rubric")
        if rubric is not None:
            if isinstance(rubric, str) and rubric.strip():
                rubric = [rubric.strip()]
            if not isinstance(rubric, list) or not rubric or not all(isinstance(x, str) and x.strip() for x in rubric):
                err(f"{jp}.rubric", "rubric must be a non-empty list of criteria")
                continue
            case["expected"] = {"rubric": [x.strip() for x in rubric]}

        checks: list[dict[str, Any]] = []
        graders = s.get("graders", [])
        if not isinstance(graders, list):
            err(f"{jp}.graders", "graders must be a list")
            graders = []
        for g_i, g in enumerate(graders):
            gp = f"{jp}.graders[{g_i}]"
            gtype = g.get("type") if isinstance(g, dict) else None
            if gtype not in VALLY_GRADERS:
                warn(
                    gp,
                    f"grader type {json.dumps(gtype)} has no evalkit equivalent (skipped); "
                    f"supported: {', '.join(sorted(VALLY_GRADERS))}",
                )
                continue
            if gtype == "prompt":
                if rubric is None:
                    err(gp, f"stimulus {sname!r} has a prompt grader but no rubric to judge against")
                continue
            value = g.get("pattern" if gtype == "regex" else "value", g.get("value"))
            if not isinstance(value, str) or not value:
                err(gp, f"a {gtype} grader needs a non-empty {'pattern' if gtype == 'regex' else 'value'}")
                continue
            if gtype == "regex":
                try:
                    regex.compile(value)
                except regex.error as exc:
                    err(gp, f"regex does not compile: {exc}")
                    continue
                checks.append({"kind": "regex", "pattern": value})
            else:
                checks.append({"kind": "exact" if gtype == "exact" else "contains", "value": value})
        if checks:
            case["checks"] = checks
        cases.append((line_of(lines, jp), jp, case))
    raise_with_warnings(fx)
    config = default_config(name, description, k=k, timeout_s=timeout_s, source=f"Vally {p.name}")
    files = {PROMPT_FILE: IMPORT_PROMPT}
    if any(isinstance(c.get("expected"), dict) for _, _, c in cases):
        files[f"{JUDGE_DIR}/rubric-v1.md"] = IMPORT_RUBRIC
        files[f"{JUDGE_DIR}/prompt-v1.md"] = JUDGE_PROMPT_TEMPLATE
    return ImportedSuite("vally", str(p), name, config, tuple(cases), files, tuple(fx.warnings))
