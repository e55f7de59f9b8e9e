"""Validate a suite: the config object, the case objects and the suite's text files of a
`SuiteSource`, wherever they came from (a native folder `evals/<unit>/`, or a file of
another tool that `evalkit.suites.formats` turned into the same parts), and render its prompts.

A source is validated completely and returned as immutable records (`evalkit.foundations.records`).
Every problem is reported with the place it came from (file, line, JSON path).
`evalkit.suites.reader` finds the source (`load_suite`), `evalkit.intake.lint` adds what only
lint checks (`lint_suite`); nothing here calls a model or executes suite code.

The parts live beside this module, each one concern: `suite_source` (limits, keys, case
ids, `SuiteSource`, the typed reader), `suite_settings` (what a suite and its arms share:
endpoint, price, the calls a cap covers), `suite_config`, `suite_arms`, `suite_cases` and
`suite_scaffold` (the default config and the files `evalkit init` writes). This module
holds the suite-level checks, `validate`, prompt rendering and the loaders, and
re-exports the parts' names.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import string
from collections.abc import Callable
from pathlib import Path

from evalkit.checking.judge import deterministic_alternative, rubric_examples
from evalkit.foundations._io import (
    MAX_CASES_BYTES,
    MAX_CONFIG_BYTES,
    MAX_LABELS_BYTES,
    MAX_TEXT_BYTES,
    file_kind,
    line_of,
    loads_bounded,
    new_temp_dir,
    outside_root,
    read_text_file,
)
from evalkit.foundations._text import printable
from evalkit.foundations.checks import (
    PROGRAM_CHECKS,
)
from evalkit.foundations.errors import InputError
from evalkit.foundations.findings import Findings
from evalkit.foundations.layout import (
    BASELINE_FILE,
    CASES_FILE,
    CONFIG_FILE,
    HUMAN_LABELS_FILE,
    JUDGE_DIR,
    RUNS_DIR,
    judge_file,
)
from evalkit.foundations.records import (
    CASE_SETS,
    NO_GATE,
    Arm,
    Case,
    Config,
    Suite,
    set_gate,
)
from evalkit.numbers.detectable import cases_for_drop, detectable_drop, planning_rate
from evalkit.suites.suite_arms import _program_unit
from evalkit.suites.suite_cases import validate_cases
from evalkit.suites.suite_config import _validate_config
from evalkit.suites.suite_scaffold import (
    DEFAULT_CONFIG,
    JUDGE_PROMPT_TEMPLATE,
    SCAFFOLD_CASES,
    SCAFFOLD_CONFIG,
    conversation_files,
    default_config,
    local_model_note,
    scaffold_files,
)
from evalkit.suites.suite_source import (
    ADVERSARIAL_TAG,
    ARM_KEYS,
    ARM_OVERRIDE_KEYS,
    CASE_KEYS,
    CI_KEYS,
    CONFIG_KEYS,
    ENDPOINT_KEYS,
    GATE_KEYS,
    GOLDEN_TAG,
    INTENTS,
    JUDGE_PLACEHOLDERS,
    MAX_ATTEMPTS,
    MAX_CASES,
    MAX_CONCURRENCY,
    MAX_CONNECTION_FAILURES,
    MAX_COST_CAP_USD,
    MAX_ID_LENGTH,
    MAX_K,
    MAX_PRICE_PER_MTOK,
    MAX_RATE_LIMIT_BUDGET_S,
    MAX_SAMPLES_PER_RUN,
    MAX_SEED,
    MAX_TIMEOUT_S,
    MAX_TOKENS,
    MIN_GOLDEN,
    PRICE_KEYS,
    REQUIRED_CONFIG_KEYS,
    SKILL_FILE,
    SuiteSource,
    _template_identifiers,
    case_id_problem,
    is_comment_key,
    native_source,
    parse_cases_jsonl,
    parse_config_json,
    safe_case_id,
)
from evalkit.suites.suite_source import _Reader as _Reader

__all__ = [  # re-exported: the names this module held before it was split
    "ADVERSARIAL_TAG",
    "ARM_KEYS",
    "ARM_OVERRIDE_KEYS",
    "CASE_KEYS",
    "CASE_SETS",
    "CI_KEYS",
    "CONFIG_KEYS",
    "DEFAULT_CONFIG",
    "ENDPOINT_KEYS",
    "GATE_KEYS",
    "GOLDEN_TAG",
    "INTENTS",
    "JUDGE_PLACEHOLDERS",
    "JUDGE_PROMPT_TEMPLATE",
    "MAX_ATTEMPTS",
    "MAX_CASES",
    "MAX_CASES_BYTES",
    "MAX_CONCURRENCY",
    "MAX_CONFIG_BYTES",
    "MAX_CONNECTION_FAILURES",
    "MAX_COST_CAP_USD",
    "MAX_ID_LENGTH",
    "MAX_K",
    "MAX_LABELS_BYTES",
    "MAX_PRICE_PER_MTOK",
    "MAX_RATE_LIMIT_BUDGET_S",
    "MAX_SAMPLES_PER_RUN",
    "MAX_SEED",
    "MAX_TEXT_BYTES",
    "MAX_TIMEOUT_S",
    "MAX_TOKENS",
    "MIN_GOLDEN",
    "NO_GATE",
    "PRICE_KEYS",
    "REQUIRED_CONFIG_KEYS",
    "SCAFFOLD_CASES",
    "SCAFFOLD_CONFIG",
    "SKILL_FILE",
    "SuiteSource",
    "case_id_problem",
    "default_config",
    "is_comment_key",
    "local_model_note",
    "native_source",
    "parse_cases_jsonl",
    "parse_config_json",
    "safe_case_id",
    "scaffold_files",
    "set_gate",
    "validate_cases",
]


# --- suite-level checks -----------------------------------------------------------------
def _judge_files(src: SuiteSource, fx: Findings) -> tuple[list[str], list[str]]:
    rubrics: list[tuple[int, str]] = []
    prompts: list[tuple[int, str]] = []
    for name in src.listdir(JUDGE_DIR):
        versioned = judge_file(name)
        rel = f"{JUDGE_DIR}/{name}"
        if versioned:
            (rubrics if versioned[0] == "rubric" else prompts).append((versioned[1], rel))
        elif rel != HUMAN_LABELS_FILE and not name.startswith("."):
            fx.warn(
                f"unexpected file {rel!r} in judge/ (expected rubric-vN.md, prompt-vN.md, human-sample.jsonl)",
                src.display(rel),
                strict_error=True,
            )
    for _, rel in rubrics:
        try:
            if not src.read(rel).strip():
                fx.warn("rubric file is empty", src.display(rel))
        except InputError as exc:
            fx.add(exc)
    for _, rel in prompts:
        try:
            text = src.read(rel)
        except InputError as exc:
            fx.add(exc)
            continue
        r = _Reader(fx, src.display(rel), lambda jp: None)
        ids = _template_identifiers(text, r, "", f"judge prompt {rel!r}")
        if ids is None:
            continue
        for unknown in sorted(ids - JUDGE_PLACEHOLDERS):
            fx.warn(
                f"judge prompt uses unknown placeholder ${{{unknown}}}; known: {', '.join(sorted(JUDGE_PLACEHOLDERS))}",
                src.display(rel),
                strict_error=True,
            )
        if "output" not in ids:
            fx.error("judge prompt has no ${output}: the judge would never see the output it scores", src.display(rel))
    return [rel for _, rel in sorted(rubrics)], [rel for _, rel in sorted(prompts)]


def _gate_power_warning(src: SuiteSource, cases: list[Case], config: Config | None, where: str, fx: Findings) -> None:
    """A warning when the gated set is too small for the gate to detect a drop of its
    threshold (`detectable.detectable_drop`, planned at the baseline's score when
    `baseline.json` exists, else at 50%, the rate that needs the most cases): the gate
    warns and decides on the observed drop (`gate.on_underpowered` "warn", the default),
    or says UNDERPOWERED and exits 1 (`"fail"`)."""
    if config is None:
        return
    t = config.gate
    n = sum(set_gate(c.set) != NO_GATE for c in cases)
    if not n or t.alpha >= 1 or t.max_success_drop_points <= 0:
        return
    score, at = 0.5, "a 50% score (no baseline yet)"
    try:
        b = loads_bounded((src.root / BASELINE_FILE).read_text(encoding="utf-8"), src.root / BASELINE_FILE)
        if isinstance(b, dict) and isinstance(b.get("gated_case_score"), (int, float)):
            score, at = min(1.0, max(0.0, float(b["gated_case_score"]))), "the baseline's score"
    except (OSError, ValueError, InputError):
        pass
    p = planning_rate(score, n)
    drop = 100 * detectable_drop(n, p, t.alpha)
    if drop > t.max_success_drop_points + 1e-9:
        need = cases_for_drop(t.max_success_drop_points / 100, p, t.alpha)
        what = (
            'warns and decides on the observed drop (gate.on_underpowered "fail" makes it exit 1)'
            if t.on_underpowered == "warn"
            else "says UNDERPOWERED and exits 1"
        )
        # past 100 points no drop of a rate is detectable at all: say so, not "124.3 points"
        seen = f"a drop of {drop:.1f} points or more" if drop <= 100 else "no drop (not even 100 points)"
        fx.warn(
            f"{n} gated case(s) can detect {seen} at alpha {t.alpha:g} "
            f"(80% power, planned at {at}), above the gate's {t.max_success_drop_points:g}-point threshold: "
            f"the gate {what}; a drop of {t.max_success_drop_points:g} points needs {need:,} gated cases",
            where,
        )


def _program_check_warnings(cases: list[Case], config: Config | None, cases_path: str, fx: Findings) -> None:
    """A `file_exists` or `exit_code` check on a unit with no program (prompt, agent)
    always fails: there is no working directory or exit status to read."""
    if config is None or config.unit.kind in ("command", "python"):
        return
    kind = config.unit.kind
    for c in cases:
        for check in c.checks:
            if check.kind in PROGRAM_CHECKS:
                fx.warn(
                    f"case {c.id!r}: a {check.kind} check on a {kind} unit always fails "
                    "(only a command or python unit's program has a working directory and an exit status)",
                    cases_path,
                    c.line or None,
                )


def _non_activation_warning(cases: list[Case], config: Config | None, cases_path: str, fx: Findings) -> None:
    """A skill suite (an arm with `skill_dir`) needs a case where the skill must stay
    silent (`intent: non-activation`): without one, a skill that fires on everything
    passes (seed 002: every skill suite has a non-activation case)."""
    if config is None or not any(a.skill_dir for a in config.arms):
        return
    if not any(c.intent == "non-activation" for c in cases):
        fx.warn(
            "a skill suite (an arm with skill_dir) with no non-activation case (intent: non-activation): "
            "nothing shows the skill stays out of tasks that are not its own",
            cases_path,
        )


def _suite_warnings(
    src: SuiteSource,
    cases: list[Case],
    config: Config | None,
    rubric_files: list[str],
    prompt_files: list[str],
    fx: Findings,
) -> None:
    cases_path = src.cases[0][0] if src.cases else src.display(CASES_FILE)
    golden = sum(GOLDEN_TAG in c.tags for c in cases)
    if golden < MIN_GOLDEN:
        fx.warn(
            f"only {golden} golden case(s) (tag {GOLDEN_TAG!r}); at least {MIN_GOLDEN} give a stable rate", cases_path
        )
    if not any(ADVERSARIAL_TAG in c.tags for c in cases):
        fx.warn(f"no adversarial case (tag {ADVERSARIAL_TAG!r}): nothing tests the unit under pressure", cases_path)
    by_tag: dict[str, list[Case]] = {}
    for c in cases:
        for t in c.tags:
            by_tag.setdefault(t, []).append(c)
    for tag, tagged in sorted(by_tag.items()):
        if len(tagged) == 1:
            c = tagged[0]
            fx.warn(
                f"tag {tag!r} is used by only case {c.id!r}: a per-tag rate of one case says little",
                cases_path,
                c.line or None,
                weight="LOW",  # seed 001: "LOW: a tag used by only one case"
            )
    _gate_power_warning(src, cases, config, cases_path, fx)
    _program_check_warnings(cases, config, cases_path, fx)
    _non_activation_warning(cases, config, cases_path, fx)
    judged = [c for c in cases if c.judged]
    if judged and rubric_files:
        _rubric_findings(src, rubric_files[-1], judged, cases_path, fx)
    for c in cases:
        if c.judged and not rubric_files:
            fx.warn(f"case {c.id!r} is judged but there is no judge/rubric-vN.md file", cases_path, c.line or None)
        if c.judged and not prompt_files:
            fx.warn(f"case {c.id!r} is judged but there is no judge/prompt-vN.md file", cases_path, c.line or None)
    if src.is_native:
        ignored: set[str] = set()
        if src.exists(".gitignore"):
            try:
                ignored = {ln.strip() for ln in src.read(".gitignore").splitlines()}
            except InputError as exc:  # only lint reads it: a warning
                fx.warn(exc.message, exc.path or src.display(".gitignore"))
        if not ignored & {"runs/", "runs", "/runs/", "/runs"}:
            fx.warn(
                ".gitignore should contain 'runs/' so run folders stay out of version control",
                src.display(".gitignore"),
            )
    if config is not None:
        _check_run_size(config, len(cases), src, fx)
        for c in cases:
            if not _program_unit(config.unit):
                _check_render(config, c, src, fx)


def _rubric_findings(src: SuiteSource, rubric_file: str, judged: list[Case], cases_path: str, fx: Findings) -> None:
    """The seeds' rubric findings: the rubric the judge will use (the highest version)
    with no scored few-shot example (MEDIUM: the judge calibrates on general taste, not
    on the task), and each judged case a deterministic check could decide (LOW, naming
    the check: `judge.deterministic_alternative`)."""
    try:
        text = src.read(rubric_file)
    except InputError:  # unreadable: _judge_files reported it
        return
    if text.strip() and not rubric_examples(text):
        fx.warn(
            "the rubric has no scored few-shot example: add two or three, e.g. a line 'Example (score 5): ...' "
            "and 'Example (score 2): ...', so the judge calibrates on the task rather than on general taste",
            src.display(rubric_file),
            weight="MEDIUM",
        )
    for c in judged:
        alt = deterministic_alternative(c.rubric or "")
        if alt is not None:
            fx.warn(
                f"judged case {c.id!r}: {alt[1]}: a deterministic {alt[0]!r} check could decide it instead of "
                "the judge (deterministic before judged)",
                cases_path,
                c.line or None,
                "$.expected.rubric",
                weight="LOW",
            )


def run_size_problem(n_cases: int, n_arms: int, k: int) -> str | None:
    """Why a run of `n_cases` x `n_arms` x `k` samples is over evalkit's limits, or None.
    `run` checks it again with its `--k` and `--arms`."""
    if k < 1:
        return f"k must be at least 1, got {k}"
    if k > MAX_K:
        return f"k must be at most {MAX_K} (evalkit's limit of samples per case and arm), got {k}"
    n = n_cases * n_arms * k
    if n > MAX_SAMPLES_PER_RUN:
        return (
            f"the run would take {n} samples ({n_cases} cases x {n_arms} arms x k {k}), over the limit of "
            f"{MAX_SAMPLES_PER_RUN} per run: split the suite or lower k"
        )
    return None


def _check_run_size(config: Config, n_cases: int, src: SuiteSource, fx: Findings) -> None:
    """Over the samples-per-run limit: an error. More samples than the cap covers at
    their worst case: a warning (calls usually cost less than their ceilings)."""
    line = line_of(src.config_lines, "$.k")
    problem = run_size_problem(n_cases, len(config.arms), config.k)
    if problem:
        fx.error(problem, src.config_path, line, "$.k")
        return
    # each arm at its own worst case (its price and max_tokens_out, `Config.for_arm`)
    arm_worst = [
        config.for_arm(a).price.cost(config.max_tokens_in, config.for_arm(a).max_tokens_out) for a in config.arms
    ]
    worst = max(arm_worst)
    planned = n_cases * len(config.arms) * config.k
    total_worst = n_cases * config.k * sum(arm_worst)
    if worst > 0 and total_worst > config.cost_cap_usd + 1e-12:
        fit = int(config.cost_cap_usd / (sum(arm_worst) / len(arm_worst)) + 1e-9)
        fx.warn(
            f"cost_cap_usd ${config.cost_cap_usd:g} covers {fit} generator call(s) at their worst case "
            f"(${worst:.6g} each); the run plans {planned} ({n_cases} cases x {len(config.arms)} arms x k "
            f"{config.k}): unless calls cost well under their token ceilings it stops INCOMPLETE (budget "
            "exhausted)",
            src.config_path,
            line_of(src.config_lines, "$.cost_cap_usd"),
            "$.cost_cap_usd",
        )


def default_runs_dir(suite_path: str | Path) -> Path:
    """`<suite>/runs`, where `run` writes run folders when no `--runs-dir` is given. A
    `runs` that is a symlink leading outside the suite, or is not a folder, is refused
    (`InputError`): evalkit writes inside the suite, or only where `--runs-dir` says."""
    p = Path(suite_path) / RUNS_DIR
    if not os.path.lexists(p):
        return p
    real = outside_root(p, suite_path)
    if real is not None:
        raise InputError(
            f"is a symlink to {real}, outside the suite folder: `evalkit run` writes run folders "
            f"only inside the suite, or where --runs-dir says (pass --runs-dir {real} to write "
            "there)",
            p,
        )
    if not p.is_dir():
        try:
            kind = file_kind(os.stat(p).st_mode)
        except OSError:
            kind = "a broken symlink"
        raise InputError(
            f"is {kind}, not a folder: `evalkit run` cannot write run folders into it (remove it, or pass --runs-dir)",
            p,
        )
    return p


_ARM_TEXTS = (("template", "prompt template"), ("system", "system template"))


def _check_render(config: Config, case: Case, src: SuiteSource, fx: Findings) -> None:
    """Every placeholder of the templates must have a value for this case."""
    variables = template_variables(case, None)
    texts = [(config.template, "template"), (config.system, "system template")]
    for a in config.arms:  # an arm's own prompt or system file renders the same cases
        texts += [(getattr(a, key), f"arm {a.name!r}'s {what}") for key, what in _ARM_TEXTS if key in a.overrides]
    for text, what in texts:
        if text is None:
            continue
        missing = set(string.Template(text).get_identifiers()) - set(variables)
        for name in sorted(missing):
            fx.error(
                f"case {case.id!r}: the {what} uses ${{{name}}} but the case input has no {name!r}",
                src.cases[0][0] if src.cases else src.display(CASES_FILE),
                case.line or None,
                "$.input",
            )


# --- a whole source -----------------------------------------------------------------
def validate(src: SuiteSource, fx: Findings) -> Suite | None:
    """Validate everything `src` holds (its cases, its config and the files it names, the
    judge files, coverage and cost warnings), each problem into `fx`; the `Suite` when
    there is no error, else None."""
    cases = validate_cases(src, fx)
    config = _validate_config(src, fx, uses_judge=any(c.judged for c in cases))
    rubric_files, prompt_files = _judge_files(src, fx)
    _suite_warnings(src, cases, config, rubric_files, prompt_files, fx)
    if fx.errors or config is None:
        return None
    return Suite(
        path=str(src.root),
        name=src.name,
        config=config,
        cases=tuple(cases),
        rubric_files=tuple(rubric_files),
        prompt_files=tuple(prompt_files),
        warnings=tuple(str(w) for w in fx.warnings),
    )


def template_variables(case: Case, arm: Arm | None) -> dict[str, str]:
    """The variables a case offers its templates: `input` (a string input, or an object
    input as JSON), each key of an object input, `context`, and `guidance`."""
    variables: dict[str, str] = {}
    if isinstance(case.input, dict):
        variables["input"] = json.dumps(case.input, ensure_ascii=False)
        for k, v in case.input.items():
            variables[k] = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
    else:
        variables["input"] = case.input
    variables.setdefault("context", case.context or "")
    variables.setdefault("guidance", (arm.guidance or "") if arm is not None else "")
    variables.setdefault("skill", (arm.skill or "") if arm is not None else "")
    if arm is not None:
        variables["guidance"] = arm.guidance or ""
        variables["skill"] = arm.skill or ""
    return variables


def render_prompt(config: Config, case: Case, arm: Arm) -> str | list[dict[str, str]]:
    """The unit's input for one case and arm: a prompt string (completion mode) or chat
    messages (system template, then the user template). `string.Template` substitution:
    values are inserted as text and never re-read as placeholders or instructions."""
    variables = template_variables(case, arm)
    try:
        user = string.Template(config.template).substitute(variables)
        system = string.Template(config.system).substitute(variables) if config.system is not None else None
    except (KeyError, ValueError) as exc:
        raise InputError(f"case {case.id!r}: template placeholder {exc} has no value", line=case.line or None) from None
    if config.mode == "completion":
        return user
    messages: list[dict[str, str]] = []
    if system is not None and system.strip():
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": user})
    return messages


# --- writing suites (init, import) -----------------------------------------------------
def write_suite_atomically(
    dest: str | Path, files: dict[str, str], *, validate: Callable[[Path], None] | None = None
) -> Path:
    """Write a suite folder as a whole or not at all: files go to a temporary folder beside
    `dest`, `validate` (when given) checks that folder, and only then is it renamed into
    place. An existing non-empty `dest` is refused."""
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise InputError("refusing to overwrite: the destination exists and is not empty", dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = new_temp_dir(dest.parent, f".{dest.name}.")  # an ordinary folder (mkdtemp's is 0700)
    try:
        for rel, text in files.items():
            target = tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        if validate is not None:
            validate(tmp)
        if dest.exists():
            dest.rmdir()  # empty: checked above
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def ci_suite(suite: Suite) -> Suite:
    """The suite as CI runs it: under the config's `ci.cost_cap_usd` (lower than the
    local cap) instead of `cost_cap_usd`. The config hash is the file's, unchanged, so a
    CI run still gates against a baseline accepted locally."""
    cap = suite.config.ci_cost_cap_usd
    if cap is None:
        raise InputError(
            'the config has no ci block: add "ci": {"cost_cap_usd": N} (lower than cost_cap_usd) for runs in CI',
            Path(suite.path) / CONFIG_FILE,
            json_path="$.ci",
        )
    return dataclasses.replace(suite, config=dataclasses.replace(suite.config, cost_cap_usd=cap))


def scaffold_suite(path: str | Path, *, conversation: bool = False) -> Path:
    """Create a new suite folder for `evalkit init` (refuses a non-empty folder); with
    `conversation`, the two-arm conversation suite of `init --conversation`."""
    dest = Path(path)
    # The name is shown in the files' text: an undecodable byte of it as an escape (`_text.printable`).
    files = conversation_files if conversation else scaffold_files
    return write_suite_atomically(dest, files(printable(dest.name)))


def load_cases(path: str | Path) -> tuple[Case, ...]:
    """Load and validate `cases.jsonl` alone (or the cases of a suite folder)."""
    p = Path(path)
    if p.is_dir():
        p = p / CASES_FILE
    fx = Findings(strict=False)
    raw = parse_cases_jsonl(read_text_file(p, limit=MAX_CASES_BYTES, root=p.parent), str(p), fx)
    src = SuiteSource(p.parent, p.parent.name, {}, "", {}, raw)
    cases = validate_cases(src, fx)
    fx.raise_errors()
    return tuple(cases)


def load_config(path: str | Path, suite_dir: str | Path | None = None) -> Config:
    """Load and validate a `config.json`; files it names resolve against `suite_dir`
    (default: the config's folder)."""
    p = Path(path)
    root = Path(suite_dir) if suite_dir is not None else p.parent
    cfg, lines = parse_config_json(read_text_file(p, limit=MAX_CONFIG_BYTES, root=p.parent), str(p))
    fx = Findings(strict=False)
    src = SuiteSource(root, root.name, cfg, str(p), lines, [])
    config = _validate_config(src, fx, uses_judge=False)
    fx.raise_errors()
    assert config is not None
    return config
