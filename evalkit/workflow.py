"""CI workflow recipes: `evalkit init SUITE --ci github` writes
`.github/workflows/evalkit.yml` for a suite.

The workflow runs on pull requests that touch the suite (`evals/`: cases, prompt
template, guidance, model config, baseline), prompt files, skill and agent files, or
the paths given with `--watch`; it restores the response cache (so an unchanged case
replays at $0), runs `evalkit run --ci` (the suite's own `ci.cost_cap_usd`, lower than
the local cap), grades, gates against the committed baseline (`--runner-exit` carries
an INCOMPLETE run into the gate, which fails it), renders the report, saves the cache
and uploads `reports/`. Thresholds and caps live in `config.json`, never in the YAML;
the workflow never writes a baseline (accepting one stays a deliberate, reviewed act).

Run steps pass values only through `$GITHUB_ENV` and environment variables, never
through `${{ }}` expressions inside a script, so no pull-request text is ever pasted
into a shell line.
"""

from __future__ import annotations

import json
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from ._io import write_atomic
from .errors import InputError
from .layout import CACHE_FILE
from .records import Suite

WORKFLOW_PATH = Path(".github") / "workflows" / "evalkit.yml"
CI_KINDS = ("github",)
# Paths whose change can move a suite's numbers besides the suite folder itself.
DEFAULT_WATCH = (
    "evals/**",
    "prompts/**",
    "**/*.prompt.md",
    "**/*.prompty",
    "**/*.instructions.md",
    "**/*.agent.md",
    "**/SKILL.md",
    "skills/**",
    "agents/**",
    "agent/**",
)
REPORTS_DIR = "reports"
CI_OUT = "reports/evalkit"


def repo_root_of(path: Path) -> Path:
    """The nearest folder above `path` (or `path`) holding `.git`; else the current folder."""
    p = path.resolve()
    for d in (p, *p.parents):
        if (d / ".git").exists():
            return d
    return Path.cwd().resolve()


def _evalkit_requirement() -> str:
    try:
        return f"evalkit=={version('evalkit')}"
    except PackageNotFoundError:  # pragma: no cover - evalkit runs installed
        return "evalkit"


def _q(s: str) -> str:
    """A YAML double-quoted scalar (JSON strings are valid YAML)."""
    return json.dumps(s)


def github_workflow(
    suite: Suite, suite_rel: str, *, watch: tuple[str, ...] = (), requirement: str | None = None
) -> str:
    """The text of `.github/workflows/evalkit.yml` for `suite`, whose folder is
    `suite_rel` relative to the repository root."""
    cfg = suite.config
    if cfg.ci_cost_cap_usd is None:
        raise InputError(
            'the config has no ci block: add "ci": {"cost_cap_usd": N} (lower than cost_cap_usd) '
            "before generating a CI workflow",
            Path(suite.path) / "config.json",
            json_path="$.ci",
        )
    suite_rel = suite_rel.strip("/") or "."
    keys = [e.api_key_env for e in (cfg.generator, cfg.judge) if e is not None and e.api_key_env]
    paths = list(dict.fromkeys([*DEFAULT_WATCH, f"{suite_rel}/**", *watch, str(WORKFLOW_PATH)]))
    cache = f"{suite_rel}/runs/{CACHE_FILE}"
    req = requirement or _evalkit_requirement()
    env_lines = [
        f"      EVALKIT_SUITE: {_q(suite_rel)}",
        "      # optional overrides of the config's endpoints (repository variables)",
        "      EVALKIT_BASE_URL: ${{ vars.EVALKIT_BASE_URL }}",
        "      EVALKIT_JUDGE_BASE_URL: ${{ vars.EVALKIT_JUDGE_BASE_URL }}",
    ]
    env_lines += [f"      {k}: ${{{{ secrets.{k} }}}}" for k in dict.fromkeys(keys)]
    path_lines = "\n".join(f"      - {_q(p)}" for p in paths)
    return f"""# Written by `evalkit init {suite_rel} --ci github`. Edit freely; re-run init only on a new suite.
# Caps and gate thresholds live in {suite_rel}/config.json (`ci.cost_cap_usd`, `gate`), not here.
# This workflow never writes a baseline: accept one with `evalkit baseline accept RUN` in a
# change of its own, reviewed by someone else.
name: evalkit

on:
  pull_request:
    paths:
{path_lines}
  workflow_dispatch:

permissions:
  contents: read

concurrency:
  group: evalkit-${{{{ github.ref }}}}
  cancel-in-progress: true

jobs:
  evalkit:
    runs-on: ubuntu-latest
    timeout-minutes: 60
    env:
{chr(10).join(env_lines)}
    steps:
      - uses: actions/checkout@v4

      - uses: actions/setup-python@v5
        with:
          python-version: "3.11"

      - name: Install evalkit
        run: python -m pip install {_q(req)}

      # Cached answers are keyed by their exact request, so the newest cache serves any run.
      - name: Restore the response cache
        id: responses
        uses: actions/cache/restore@v4
        with:
          path: {cache}
          key: evalkit-responses-${{{{ github.run_id }}}}
          restore-keys: evalkit-responses-

      - name: Lint the suite
        run: evalkit lint "$EVALKIT_SUITE"

      - name: Run under the suite's CI cost cap
        run: |
          mkdir -p {CI_OUT}
          set +e
          evalkit run "$EVALKIT_SUITE" --ci --no-progress --junit {CI_OUT}/run.xml > {CI_OUT}/run.log 2>&1
          rc=$?
          set -e
          cat {CI_OUT}/run.log
          run_dir=$(sed -n 's/^run folder: //p' {CI_OUT}/run.log | tail -n 1)
          echo "EVALKIT_RUN_EXIT=$rc" >> "$GITHUB_ENV"
          echo "EVALKIT_RUN=$run_dir" >> "$GITHUB_ENV"
          if [ -z "$run_dir" ]; then echo "evalkit run wrote no run folder (exit $rc)"; exit "$rc"; fi

      - name: Grade
        if: ${{{{ !cancelled() && env.EVALKIT_RUN != '' }}}}
        run: evalkit grade "$EVALKIT_RUN" || echo "evalkit grade exited $? (the gate reads the run's state)"

      - name: Gate against the committed baseline
        if: ${{{{ !cancelled() && env.EVALKIT_RUN != '' }}}}
        run: >-
          evalkit gate "$EVALKIT_RUN" --baseline "$EVALKIT_SUITE/baseline.json"
          --runner-exit "$EVALKIT_RUN_EXIT"
          --junit {CI_OUT}/gate.xml --markdown "$GITHUB_STEP_SUMMARY"

      - name: Report
        if: ${{{{ always() && env.EVALKIT_RUN != '' }}}}
        run: evalkit report "$EVALKIT_RUN" --reports-dir {REPORTS_DIR}

      - name: Save the response cache
        if: ${{{{ always() }}}}
        uses: actions/cache/save@v4
        with:
          path: {cache}
          key: ${{{{ steps.responses.outputs.cache-primary-key }}}}

      - name: Upload the report folder
        if: ${{{{ always() }}}}
        uses: actions/upload-artifact@v4
        with:
          name: evalkit-report
          path: {REPORTS_DIR}/
          if-no-files-found: warn
"""


def write_github_workflow(
    suite: Suite, *, repo_root: str | Path | None = None, watch: tuple[str, ...] = (), requirement: str | None = None
) -> Path:
    """Write `.github/workflows/evalkit.yml` under the repository root (found from the
    suite folder unless given); refuses to overwrite an existing one."""
    suite_dir = Path(suite.path).resolve()
    root = Path(repo_root).resolve() if repo_root is not None else repo_root_of(suite_dir)
    try:
        rel = suite_dir.relative_to(root).as_posix()
    except ValueError:
        raise InputError(f"the suite folder is not inside the repository root {root}", suite_dir) from None
    dest = root / WORKFLOW_PATH
    if dest.exists():
        raise InputError("a workflow already exists (edit it, or remove it to write a new one)", dest)
    text = github_workflow(suite, rel, watch=watch, requirement=requirement)
    dest.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(dest, text)
    return dest
