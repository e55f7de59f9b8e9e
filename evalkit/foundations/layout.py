"""Every file name of a suite folder, a runs folder, a run folder and a report folder,
in one place (docs/formats.md describes what each holds).

A leaf: it imports nothing of evalkit, so every module can name a file without pulling
in the module that writes it.
"""

from __future__ import annotations

import re
from pathlib import Path

# --- a suite folder `evals/<unit>/` ------------------------------------------------------
CASES_FILE = "cases.jsonl"
CONFIG_FILE = "config.json"
PROMPT_FILE = "prompt.txt"  # the default template
SYSTEM_FILE = "system.txt"  # the default system template (chat mode)
GITIGNORE = ".gitignore"
JUDGE_DIR = "judge"
SIMULATOR_DIR = "simulator"  # a conversation suite's simulated user: `simulator/prompt-vN.md`
HUMAN_LABELS_FILE = "judge/human-sample.jsonl"
# conversations a person played as the user (`evalkit converse`), and each play's ledger and trajectory
HUMAN_PLAYED_FILE = "simulator/human-played.jsonl"
HUMAN_PLAYED_DIR = "simulator/human-played"
CALIBRATION_FILE = "judge/calibration.json"  # the judge calibrations `evalkit judge calibrate` accepted
SCORERS_DIR = "scorers"
GUIDANCE_DIR = "guidance"
PLAN_FILE = "plan.json"
BASELINE_FILE = "baseline.json"
BASELINE_SUMMARY_FILE = "baseline-summary.md"
PRIVACY_FILE = "privacy.json"  # the suite's allow-list and scan settings
REDACTION_LOG = "redaction-log.json"  # what `import --redact` / `report --redact` replaced
RUNS_DIR = "runs"  # where `evalkit run` writes run folders by default

# Judge files: `judge/rubric-vN.md` and `judge/prompt-vN.md`; N is the judge version.
JUDGE_FILE = re.compile(r"^(rubric|prompt)-v(\d+)\.md$")
SIMULATOR_FILE = re.compile(r"^prompt-v(\d+)\.md$")

# Suites of other tools that `load_suite` reads directly (evalkit.suites.formats).
AGENT_EVALS_NAMES = ("evals.json",)
VALLY_NAMES = ("eval.yaml", "eval.yml")
FOREIGN_SUITE_NAMES = AGENT_EVALS_NAMES + VALLY_NAMES

# --- a runs folder `<suite>/runs/` -------------------------------------------------------
RUNS_LOCK = "runs.lock"  # held by the one run (or resume) using the folder and its cache
CACHE_FILE = "cache.sqlite"  # the response cache every run in the folder shares

# --- a run folder `runs/<stamp>/` ----------------------------------------------------------
RUN_CONFIG = "config.json"  # what the run was: the config snapshot, arms, k, cases, hashes
CASE_TABLE = "case-table.json"  # the cases as the run saw them (id, set, tags, judged)
RESULTS = "results.jsonl"
ERRORS = "errors.jsonl"
LEDGER = "ledger.jsonl"
SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
SAMPLES_DIR = "samples"
LOCK = "run.lock"
SPACE_RESERVE = ".space-reserve"  # freed when the disk fills, so the summary still fits
GRADES = "grades.jsonl"
GRADES_SUMMARY = "grades-summary.json"
PAIRWISE = "pairwise.jsonl"
JUDGE_CACHE = "judge-cache.sqlite"
VERDICTS = "verdicts.json"  # what compare, gate and report concluded
MICROTEST_MARKER = "microtest.json"  # written by `evalkit microtest`
TRAJECTORIES = "trajectories"  # an agent unit's trajectories/<case>/<arm>/sample-<n>.jsonl, n from 1
WORKDIRS = "workdirs"  # a sandboxed unit's kept working directories, workdirs/<case>/<arm>/sample-<n>/
BATCHES = "batches.json"  # the provider batches of `run --batch` / `grade --batch` (evalkit.running.batch)

# --- a reports folder `reports/` -----------------------------------------------------------
INDEX_HTML = "index.html"
MANIFEST = "report.json"  # reports/<run>/report.json: what the index shows for the run
REDACTED_RUN = "redacted-run"  # reports/<run>/redacted-run/<run>/: the copy a redacted report reads


def sample_relpath(case_id: str, arm: str, index: int) -> str:
    """`samples/<case>/<arm>/sample-<n>.txt`, n from 1 (the agent-evals layout), relative
    to the run folder."""
    return f"{SAMPLES_DIR}/{case_id}/{arm}/sample-{index + 1}.txt"


def trajectory_relpath(case_id: str, arm: str, index: int) -> str:
    """``trajectories/<case>/<arm>/sample-<n>.jsonl`` (n from 1), relative to the run folder."""
    return f"{TRAJECTORIES}/{case_id}/{arm}/sample-{index + 1}.jsonl"


def workdir_relpath(case_id: str, arm: str, index: int) -> str:
    """``workdirs/<case>/<arm>/sample-<n>`` (n from 1): a sample's kept working directory."""
    return f"{WORKDIRS}/{case_id}/{arm}/sample-{index + 1}"


def simulator_prompt_file(name: str) -> int | None:
    """N for a simulator prompt file name `prompt-vN.md`, else None."""
    m = SIMULATOR_FILE.match(name)
    return int(m.group(1)) if m else None


def judge_file(name: str) -> tuple[str, int] | None:
    """(`rubric` or `prompt`, N) for a judge file name `rubric-vN.md` / `prompt-vN.md`,
    else None."""
    m = JUDGE_FILE.match(name)
    return (m.group(1), int(m.group(2))) if m else None


def repository_root(path: str | Path) -> Path | None:
    """The nearest folder at or above `path` that holds `.git`, else None."""
    p = Path(path).expanduser().absolute()
    return next((d for d in (p, *p.parents) if (d / ".git").exists()), None)


def shown_path(path: str | Path, cwd: str | Path | None = None) -> str:
    """A path as a shared page shows it: relative to its project (`project_root`), else to the
    current folder when inside it, else `.../` and its last two parts; never the machine's
    absolute path (a page travels; `/home/alice/...` says nothing to its reader and
    something about its writer)."""
    p = Path(path).expanduser().absolute()
    for base in (project_root(p), Path(cwd) if cwd is not None else Path.cwd()):
        if base is not None and p.is_relative_to(base.absolute()):
            return p.relative_to(base.absolute()).as_posix() or "."
    return ".../" + "/".join(p.parts[-2:])


def project_root(path: str | Path) -> Path:
    """The project a suite or run folder belongs to: its repository's root, else the folder
    holding its `evals/`, else the folder above its suite (a run is `<suite>/runs/<stamp>`)."""
    p = Path(path).expanduser().absolute()
    repo = repository_root(p)
    if repo is not None:
        return repo
    above_evals = next((d.parent for d in (p, *p.parents) if d.name == "evals"), None)
    if above_evals is not None:
        return above_evals
    return p.parents[2] if p.parent.name == RUNS_DIR and len(p.parents) > 2 else p.parent


def without_machine_paths(text: str, near: str | Path | None = None) -> str:
    """`text` with absolute paths written relative to the project of `near` (a run folder:
    `project_root`) and to the current folder, and the home folder as `~`: what a page that
    travels says of where its files were (`shown_path` for one path)."""
    roots = [project_root(near)] if near else []
    roots.append(Path.cwd().absolute())
    for root in sorted({r.absolute() for r in roots}, key=lambda r: -len(str(r))):
        if str(root) != "/":
            text = text.replace(str(root) + "/", "")
    home = str(Path.home())
    if home not in ("", "/"):
        text = text.replace(home + "/", "~/")
    return text
