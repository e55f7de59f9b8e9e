"""Bring suites from other tools unchanged: agent-evals `evals.json` and Vally/SKRAFT
`eval.yaml`.

Each reader turns the foreign file into native suite parts in memory (config object,
case objects, text files), each case remembering the line and JSON path it came from,
so that `evalkit.suite` validates them with messages that point into the foreign file.
`evalkit import FILE --to DIR` writes those parts as a native suite folder; the runner
reads the foreign file directly through `load_suite`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import regex
import yaml

from .agentevals import MATCH_MODES
from .errors import InputError, InputErrors
from .suite import (
    CASES_FILE,
    CONFIG_FILE,
    JUDGE_PROMPT_TEMPLATE,
    MAX_CASES_BYTES,
    MAX_TEXT_BYTES,
    SET_NAME,
    Finding,
    SuiteSource,
    _Findings,
    _Reader,
    _validate_cases,
    json_line_index,
    line_of,
    lint_suite,
    read_text_file,
    yaml_node_lines,
    write_suite_atomically,
)

AGENT_EVALS_NAMES = ("evals.json",)
VALLY_NAMES = ("eval.yaml", "eval.yml")
FOREIGN_NAMES = AGENT_EVALS_NAMES + VALLY_NAMES
MAX_YAML_BYTES = 5 * 1024 * 1024

AGENT_EVALS_CASE_KEYS = {"id", "set", "prompt", "expect", "match"}
VALLY_KEYS = {"name", "description", "type", "defaults", "config", "stimuli", "skill"}
VALLY_RUN_KEYS = {"runs", "timeout"}
VALLY_STIMULUS_KEYS = {"name", "prompt", "graders", "rubric", "tags"}
VALLY_GRADERS = {"prompt", "exact", "contains", "text", "regex"}

# Local defaults for an imported suite, which carries no model settings of its own: the
# embedded model (`evalkit serve`), its address given by `evalkit run --base-url`.
IMPORT_PROMPT = "${guidance}${input}\n"
IMPORT_RUBRIC = """# Rubric v1 (imported suite)

Each judged case lists its own criteria (the rubric of the case). Score on this scale:
5: meets every criterion of the case.
4: meets the criteria with a minor gap.
3: meets about half of the criteria.
2: meets one criterion at most.
1: meets none, is off-task, or is empty.
"""


def default_config(
    name: str, description: str, *, k: int = 5, timeout_s: float | None = None, source: str = ""
) -> dict[str, Any]:
    """The config written for an imported suite: clearly named local defaults that lint clean."""
    cfg: dict[str, Any] = {
        "// imported": f"imported from {source}; edit the model settings below before a paid run",
        "name": name,
        "description": description,
        "mode": "completion",
        "template": "prompt.txt",
        "// generator": "the embedded local model; base_url null: `evalkit run --base-url URL` or EVALKIT_BASE_URL gives it (`evalkit serve -- evalkit run ...` sets EVALKIT_BASE_URL); with none the run is refused, never sent to api.openai.com",
        "generator": {"model": "gemma-3-270m", "base_url": None, "api_key_env": "EVALKIT_API_KEY"},
        "// judge": "scores judged cases; a different model from the generator unless allow_same_judge_model; base_url null: `evalkit grade --judge-base-url URL` or EVALKIT_JUDGE_BASE_URL gives it, or under `evalkit serve` the served model when it is this model; with none, judging is refused",
        "judge": {"model": "judge-model", "base_url": None, "api_key_env": "EVALKIT_JUDGE_KEY"},
        "temperature": 0.8,
        "seed": 1234,
        "k": k,
        "concurrency": 4,
        "// caps": "local defaults: a small cap and token ceilings sized for the embedded model's 2048-token context",
        "cost_cap_usd": 0.5,
        "max_tokens_in": 1536,
        "max_tokens_out": 256,
        "price": {"in_per_mtok": 0.10, "out_per_mtok": 0.40},
        "judge_price": {"in_per_mtok": 0.15, "out_per_mtok": 0.60},
        "gate": {"max_success_drop_points": 5, "max_cost_increase_pct": 20},
        "arms": [{"name": "baseline"}],
    }
    if timeout_s is not None:
        cfg["timeout_s"] = timeout_s
    return cfg


@dataclass(frozen=True)
class ImportedSuite:
    """A foreign suite turned into native parts, still in memory."""

    format: str  # "agent-evals" | "vally"
    path: str  # the foreign file
    name: str
    config: dict[str, Any]
    cases: tuple[tuple[int | None, str, dict[str, Any]], ...]  # (line, JSON path in the file, case)
    files: dict[str, str] = field(default_factory=dict)  # prompt.txt, judge files
    warnings: tuple[Finding, ...] = ()

    def source(self) -> SuiteSource:
        """A `SuiteSource` whose every place points into the foreign file."""
        p = Path(self.path)
        return SuiteSource(
            root=p.parent,
            name=self.name,
            config=self.config,
            config_path=str(p),
            config_lines={},
            cases=[(str(p), line, jp, dict(c)) for line, jp, c in self.cases],
            files=dict(self.files),
            is_native=False,
        )


def read_foreign(path: str | Path) -> ImportedSuite:
    """Read an agent-evals `evals.json` or a Vally `eval.yaml` (chosen by name, then by
    extension)."""
    p = Path(path)
    name = p.name.lower()
    if name in AGENT_EVALS_NAMES or (name.endswith(".json") and name not in (CONFIG_FILE,)):
        return read_agent_evals(p)
    if name.endswith((".yaml", ".yml")):
        return read_vally(p)
    raise InputError("unknown suite file: expected a suite folder, an agent-evals evals.json or a Vally eval.yaml", p)


def _raise_with_warnings(fx: _Findings) -> None:
    """Raise the errors found, carrying the warnings along so lint can print both."""
    try:
        fx.raise_errors()
    except InputError as exc:
        exc.warnings = tuple(fx.warnings)  # type: ignore[attr-defined]
        raise


# --- agent-evals ----------------------------------------------------------------------
def read_agent_evals(path: str | Path) -> ImportedSuite:
    """agent-evals `{"cases": [{"id", "set", "prompt", "expect", "match"}]}`.

    That harness trims outputs and expectations and matches case-insensitively in all
    three modes (`contains` by default); the checks written here keep those semantics
    (`trim`/`case_fold`, regex flag `i`). Its `contains` treats `*` and `?` as wildcards;
    ours matches literally, so such expectations get a warning.
    """
    p = Path(path)
    text = read_text_file(p, limit=MAX_CASES_BYTES)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON: {exc.msg} (column {exc.colno})", p, exc.lineno) from None
    lines = json_line_index(text)
    fx = _Findings(strict=False)

    # (the importer's findings are not strict; lint replays its warnings as strict ones)
    reader = _Reader(fx, str(p), lambda jp: line_of(lines, jp))
    err, warn = reader.err, reader.warn

    if not isinstance(doc, dict) or not isinstance(doc.get("cases"), list):
        raise InputError('an agent-evals file must be an object with a "cases" list', p, 1, "$")
    for key in doc:
        if key != "cases":
            warn(f"$.{key}", f"unknown key {key!r} (ignored)")
    if not doc["cases"]:
        raise InputError('the "cases" list is empty', p, line_of(lines, "$.cases"), "$.cases")
    cases: list[tuple[int | None, str, dict[str, Any]]] = []
    for i, c in enumerate(doc["cases"]):
        jp = f"$.cases[{i}]"
        if not isinstance(c, dict):
            err(jp, 'a case must be an object {"id", "set", "prompt", "expect", "match"}')
            continue
        for key in c:
            if key not in AGENT_EVALS_CASE_KEYS:
                warn(f"{jp}.{key}", f"unknown key {key!r} in case (ignored)")
        # The same rules as `evalkit grade --eval-file` (agentevals.load_eval_file), so a
        # file one accepts the other reads alike: set and match case-insensitive, an
        # empty match is contains, the prompt optional.
        ok = True
        for key in ("id", "expect"):
            if not isinstance(c.get(key), str):
                err(f"{jp}.{key}", f"missing or non-string {key!r}")
                ok = False
        if not isinstance(c.get("prompt", ""), str):
            err(f"{jp}.prompt", "prompt must be a string")
            ok = False
        match = c.get("match") or "contains"
        if not isinstance(match, str) or match.lower() not in MATCH_MODES:
            err(f"{jp}.match", f"unknown match type {json.dumps(match)}; expected exact, contains or regex")
            ok = False
        case_set = c.get("set")
        if case_set is None:
            case_set = "capability"
            warn(
                f"{jp}.set",
                "no set: imported as capability (agent-evals' run-evals.ps1 skips the gate of "
                "such a case, and `evalkit grade --eval-file` refuses it)",
            )
        elif not isinstance(case_set, str) or not case_set.strip():
            err(f"{jp}.set", f"set must be a nonempty string, got {json.dumps(case_set)}")
            ok = False
        elif not SET_NAME.fullmatch(case_set.strip().lower()):
            # any set is accepted (gate "none" unless capability or regression), as a native set name
            warn(
                f"{jp}.set",
                f"set {json.dumps(case_set)} imported as {slugify(case_set)!r} (a set name is "
                "lowercase letters, digits, '.', '_' and '-')",
            )
            case_set = slugify(case_set)
        if not ok:
            continue
        match, case_set = match.lower(), case_set.strip().lower()
        expect = c["expect"].strip()
        if not expect:
            err(f"{jp}.expect", "expect is empty: it would match any output")
            continue
        if match == "exact":
            check = {"kind": "exact", "value": expect, "trim": True, "case_fold": True}
        elif match == "contains":
            check = {"kind": "contains", "value": expect, "case_fold": True}
            if "*" in expect or "?" in expect:
                warn(
                    f"{jp}.expect",
                    "agent-evals treats * and ? in a contains expectation as wildcards; "
                    "evalkit matches them literally (use match: regex for a pattern)",
                )
        else:
            try:
                regex.compile(expect, regex.IGNORECASE)
            except regex.error as exc:
                err(f"{jp}.expect", f"regex does not compile: {exc}")
                continue
            check = {"kind": "regex", "pattern": expect, "flags": "i"}
        cases.append(
            (
                line_of(lines, jp),
                jp,
                {
                    "id": c["id"],
                    "input": c.get("prompt", ""),
                    "expected": c["expect"],
                    "tags": [case_set],
                    "set": case_set,
                    "checks": [check],
                },
            )
        )
    _raise_with_warnings(fx)
    name = p.parent.name or p.stem
    config = default_config(name, f"imported from agent-evals {p.name}", source=f"agent-evals {p.name}")
    return ImportedSuite(
        "agent-evals", str(p), name, config, tuple(cases), {"prompt.txt": IMPORT_PROMPT}, tuple(fx.warnings)
    )


# --- Vally / SKRAFT -------------------------------------------------------------------
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


def slugify(name: str) -> str:
    """A stable, file-name-safe case id from a stimulus name."""
    s = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return s[:100].rstrip("-") or "stimulus"


def read_vally(path: str | Path) -> ImportedSuite:
    """Vally/SKRAFT `eval.yaml`: `name`, `description`, `type`, run settings under
    `defaults:` or `config:` (`runs` -> k, `timeout` such as `3m` -> timeout_s), and
    `stimuli[]` (`name` -> id, `prompt` -> input, `rubric` criteria -> a judged case,
    `graders`, `tags: {intent: non-activation}` -> intent)."""
    p = Path(path)
    text = read_text_file(p, limit=MAX_YAML_BYTES)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        # Aliases could expand a small file into a huge tree (a "billion laughs"); a
        # suite has no use for them, so they are refused before building anything.
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.AliasEvent):
                raise InputError("YAML aliases (*name) are not supported in eval.yaml", p, event.start_mark.line + 1)
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
    lines = yaml_node_lines(node)
    fx = _Findings(strict=False)

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
    for i, s in enumerate(stimuli):
        jp = f"$.stimuli[{i}]"
        if not isinstance(s, dict):
            err(jp, "a stimulus must be a mapping with name and prompt")
            continue
        for key in s:
            if key not in VALLY_STIMULUS_KEYS:
                warn(f"{jp}.{key}", f"unknown key {key!r} in stimulus (ignored)")
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
    _raise_with_warnings(fx)
    config = default_config(name, description, k=k, timeout_s=timeout_s, source=f"Vally {p.name}")
    files = {"prompt.txt": IMPORT_PROMPT}
    if any(isinstance(c.get("expected"), dict) for _, _, c in cases):
        files["judge/rubric-v1.md"] = IMPORT_RUBRIC
        files["judge/prompt-v1.md"] = JUDGE_PROMPT_TEMPLATE
    return ImportedSuite("vally", str(p), name, config, tuple(cases), files, tuple(fx.warnings))


# --- writing a native suite -------------------------------------------------------------
def write_native_suite(
    dest: str | Path, config: dict[str, Any], cases: Iterable[dict[str, Any]], files: dict[str, str] | None = None
) -> Path:
    """Write a native suite folder atomically (temp folder, lint, rename): `config.json`,
    `cases.jsonl`, `.gitignore` and any other `files` (relative path -> text). Refuses an
    existing non-empty `dest`; on any error nothing is left behind."""
    out = dict(files or {})
    out[CONFIG_FILE] = json.dumps(config, indent=2, ensure_ascii=False) + "\n"
    out[CASES_FILE] = "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases)
    out.setdefault(".gitignore", "runs/\n")

    def validate(tmp: Path) -> None:
        report = lint_suite(tmp)
        if report.errors:
            raise InputErrors(
                [
                    InputError(
                        f.message,
                        Path(dest) / Path(f.path).relative_to(tmp) if Path(f.path).is_relative_to(tmp) else f.path,
                        f.line,
                        f.json_path,
                    )
                    for f in report.errors
                ]
            )

    return write_suite_atomically(dest, out, validate=validate)


def import_suite(
    src: str | Path,
    dest: str | Path,
    *,
    guidance: str | Path | None = None,
    on_warning: Callable[[Finding], None] | None = None,
    redact: bool = False,
) -> Path:
    """`evalkit import`: read a foreign suite, validate it in memory (messages point into
    the foreign file), and write it as a native suite. `guidance` adds a `skilled` arm
    with that file as `guidance/skilled.md` (the skill under test). `on_warning` hears
    each warning about the foreign file (a wildcard matched literally, a case without
    set, personal data or a secret found in it). `redact` replaces every detected value
    with a typed placeholder (`evalkit.privacy.redact_imported`) and writes what it did to
    `redaction-log.json`."""
    from . import privacy

    imported = read_foreign(src)
    for w in imported.warnings if on_warning is not None else ():
        on_warning(w)
    config = dict(imported.config)
    files = dict(imported.files)
    if guidance is not None:
        files["guidance/skilled.md"] = read_text_file(guidance, limit=MAX_TEXT_BYTES)
        config["arms"] = [{"name": "baseline"}, {"name": "skilled", "guidance": "guidance/skilled.md"}]
    fx = _Findings(strict=False)
    source = imported.source()
    _validate_cases(source, fx)
    fx.raise_errors()
    cases = [c for _, _, c in imported.cases]
    if redact:
        config, cases, files = privacy.redact_imported(config, cases, files)
    elif on_warning is not None:
        for f in privacy.scan_suite_source(
            SuiteSource(source.root, source.name, config, source.config_path, {}, source.cases, files, False)
        ).findings:
            on_warning(
                Finding("warning", f.message + "; `evalkit import --redact` replaces it", f.path, f.line, f.json_path)
            )
    return write_native_suite(dest, config, cases, files)
