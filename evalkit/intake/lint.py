"""A suite checked before it runs, and written only after it lints. `lint_suite` adds to
`evalkit.suites.reader.load_suite`'s validation what only lint checks (the privacy scan, the files
`grade` and `report` read from the suite); `import_suite` and `dataset_to_suite` write
another tool's suite as a native folder, linted before it is moved into place.

Every problem is reported with the place it came from (file, line, JSON path);
`lint_suite` returns them with the warnings, and a suite that does not lint is never
written. `load_suite` is re-exported here, as `evalkit.loader` (0.1) and `evalkit.suites.loader` had
both. Nothing here calls a model or executes suite code.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from evalkit.checking.judge import parse_human_labels
from evalkit.foundations._io import (
    MAX_CONFIG_BYTES,
    MAX_LABELS_BYTES,
    MAX_TEXT_BYTES,
    RUN_JSON_BYTES,
    parse_json_object,
    read_text_file,
)
from evalkit.foundations.errors import InputError, InputErrors
from evalkit.foundations.findings import Finding, Findings, LintReport
from evalkit.foundations.layout import (
    BASELINE_FILE,
    CASES_FILE,
    CONFIG_FILE,
    GITIGNORE,
    HUMAN_LABELS_FILE,
    PLAN_FILE,
    RUNS_DIR,
)
from evalkit.foundations.records import SEQUENTIAL_SIGN_TEST, Plan, PromptFinding, Suite
from evalkit.pii import privacy
from evalkit.prompts import analyze
from evalkit.suites.formats import read_foreign, source_for
from evalkit.suites.formats.base import ImportedSuite
from evalkit.suites.reader import load_suite as load_suite  # the old loader module had both
from evalkit.suites.suite import SuiteSource, default_runs_dir, validate, validate_cases, write_suite_atomically


def write_native_suite(
    dest: str | Path, config: dict[str, Any], cases: Iterable[dict[str, Any]], files: dict[str, str] | None = None
) -> Path:
    """Write a native suite folder atomically (temp folder, lint, rename): `config.json`,
    `cases.jsonl`, `.gitignore` and any other `files` (relative path -> text). Refuses an
    existing non-empty `dest`; on any error nothing is left behind."""
    out = dict(files or {})
    out[CONFIG_FILE] = json.dumps(config, indent=2, ensure_ascii=False) + "\n"
    out[CASES_FILE] = "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases)
    out.setdefault(GITIGNORE, f"{RUNS_DIR}/\n")

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
    with a typed placeholder (`evalkit.pii.privacy.redact_imported`) and writes what it did to
    `redaction-log.json`."""
    imported = read_foreign(src)
    if on_warning is not None:
        for w in imported.warnings:
            on_warning(w)
    config, files = _skill_inside(imported)
    if guidance is not None:
        files["guidance/skilled.md"] = read_text_file(guidance, limit=MAX_TEXT_BYTES)
        config["arms"] = [{"name": "baseline"}, {"name": "skilled", "guidance": "guidance/skilled.md"}]
    fx = Findings(strict=False)
    source = imported.source()
    validate_cases(source, fx)
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


def _skill_inside(imported: ImportedSuite) -> tuple[dict[str, Any], dict[str, str]]:
    """The config and files of an imported suite, a skill it resolved outside its folder
    (a SKRAFT spec's plugins/<plugin>/skills/<skill>/) copied in as `skills/<skill>/`,
    since a native suite's skill_dir stays inside the suite."""
    config, files = dict(imported.config), dict(imported.files)
    for arm in config.get("arms", []):
        rel = arm.get("skill_dir") if isinstance(arm, dict) else None
        if isinstance(rel, str) and ".." in Path(rel).parts:
            inside = f"skills/{Path(rel).name}"
            files[f"{inside}/SKILL.md"] = files.pop(f"{rel}/SKILL.md")
            arm["skill_dir"] = inside
    return config, files


def _suite_side_files(src: SuiteSource, fx: Findings) -> None:
    """Lint only: the files `grade` and `report` read from the suite besides those the
    config names (human labels, plan, baseline) must pass the suite reader, and the
    labels must parse; the `runs` folder `run` writes into must be a folder inside the
    suite. (`load_suite` leaves them to the commands that read them, which refuse the
    same problems before they pay or write anything: a half-labelled human sample does
    not stop a run.)"""
    if src.exists(HUMAN_LABELS_FILE):
        try:
            parse_human_labels(src.read(HUMAN_LABELS_FILE, limit=MAX_LABELS_BYTES), src.display(HUMAN_LABELS_FILE))
        except InputError as exc:
            fx.add(exc)
    # read under the limits `plans.load_plan` and `gates.load_baseline` read them under
    for rel, limit in ((PLAN_FILE, MAX_CONFIG_BYTES), (BASELINE_FILE, RUN_JSON_BYTES)):
        if src.exists(rel):
            try:
                parse_json_object(src.read(rel, limit=limit), src.display(rel), rel)
            except InputError as exc:
                fx.add(exc)
    try:
        default_runs_dir(src.root)
    except InputError as exc:
        fx.warn(exc.message, exc.path or src.display(RUNS_DIR))


def _plan_fits(src: SuiteSource, suite: Suite, fx: Findings) -> None:
    """A warning when the suite has fewer cases than its sequential plan may need
    (`Plan.max_trials`: its cap on discordant pairs at the planned tie rate): a run of it
    does not hold the planned power, and `run --until-decided` refuses it. (A fixed plan's
    shortfall is said by `power --write`.)"""
    if not src.exists(PLAN_FILE):
        return
    try:
        plan = Plan.from_json(
            parse_json_object(src.read(PLAN_FILE, limit=MAX_CONFIG_BYTES), src.display(PLAN_FILE), PLAN_FILE)
        )
    except InputError:
        return  # said by `_suite_side_files`, or by the command that reads the plan
    need, have = plan.max_trials(), len(suite.cases)
    if plan.test == SEQUENTIAL_SIGN_TEST and plan.unit == "case" and have < need:
        fx.warn(
            f"the suite has {have} cases and its sequential plan may need up to {need}: a run of it does not hold "
            "the planned power (`run --until-decided` refuses it); add cases, or rewrite the plan for this suite "
            "with `evalkit power ... --write SUITE --force`",
            src.display(PLAN_FILE),
        )


def _privacy(src: SuiteSource, fx: Findings) -> None:
    """The privacy scan (`evalkit.pii.privacy`): each finding a warning that --strict makes an
    error; an allow-list that cannot be read is an error."""
    scan = privacy.scan_suite_source(src)
    for path, line, json_path, message in scan.problems:
        fx.error(message, path, line, json_path)
    for f in scan.findings:
        fx.warn(f.message, f.path, f.line, f.json_path, strict_error=True)


def lint_suite(
    path: str | Path, strict: bool = False, *, lenient_keys: bool = False, skills_root: Path | None = None
) -> LintReport:
    """Validate a suite without calling any model: every error and warning with its place,
    the privacy scan's findings and the side files of a native suite included (warnings;
    errors under `strict`); an unknown key is an error unless `lenient_keys`; `skills_root`
    as `load_suite`'s."""
    fx = Findings(strict, lenient_keys=lenient_keys)
    src = source_for(path, fx, skills_root)
    if src is None:
        return fx.report(str(path))
    suite = validate(src, fx)
    if src.is_native:
        _suite_side_files(src, fx)
        if suite is not None:
            _plan_fits(src, suite, fx)
    _privacy(src, fx)
    if suite is not None:
        _analyze_prompts(suite, fx)
    return fx.report(str(src.root))


def _analyze_prompts(suite: Suite, fx: Findings) -> None:
    """`evalkit analyze`'s deterministic findings on the suite's prompt and guidance
    files, as lint warnings naming file, line and column; an error-level one (a missing
    linked file, MUST against MUST NOT) is an error under `strict`."""
    _, found = analyze.analyze_files(analyze.suite_prompt_files(suite))
    for f in found:
        message = f"col {f.col}: analyze {f.severity}: {f.message} [{f.rule}]; suggested rewrite: {f.suggestion}"
        fx.warn(message, f.file, f.line, strict_error=f.severity == "error")


def analyze_paths(targets: Iterable[str | Path]) -> tuple[list[Path], list[PromptFinding]]:
    """`evalkit analyze FILE...`: the files read (a suite folder stands for its prompt and
    guidance files) and their deterministic findings (`evalkit.prompts.analyze`)."""
    return analyze.analyze_files(targets, load_suite)


def write_imported(dest: str | Path, imported: ImportedSuite) -> Path:
    """Write suite parts an importer made (`evalkit.suites.formats`) as a native suite folder."""
    return write_native_suite(dest, imported.config, [c for _, _, c in imported.cases], imported.files)


def dataset_to_suite(
    json_path: str | os.PathLike[str],
    csv_path: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    context_dir: str | os.PathLike[str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> Path:
    """`evalkit dataset to-suite`: turn a valid evaluation dataset into a native suite
    folder `dest` (cases.jsonl, config.json with the local defaults, prompt.txt,
    system.txt, judge files, .gitignore), written atomically and linted before it is
    moved into place (`evalkit.datasets.to_suite.read_dataset`)."""
    from evalkit.datasets.dataset import resolve_input  # lazy: the dataset contract loads numpy and jsonschema
    from evalkit.datasets.to_suite import read_dataset

    out = resolve_input(dest, cwd=cwd)
    return write_imported(out, read_dataset(json_path, csv_path, out.name, context_dir=context_dir, cwd=cwd))
