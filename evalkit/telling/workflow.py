"""CI workflow recipes: `evalkit init SUITE --ci github` writes
`.github/workflows/evalkit.yml` for a suite.

The workflow runs on pull requests that touch the suite (`evals/`: cases, prompt
template, guidance, model config, baseline), prompt files, skill and agent files, or
the paths given with `--watch`; it restores the response cache (so an unchanged case
replays at $0), runs `evalkit run --ci` (the suite's own `ci.cost_cap_usd`, lower than
the local cap), grades, gates against the committed baseline (`--runner-exit` carries
an INCOMPLETE run into the gate, which fails it), compares the suite's arms (`evalkit
compare`, held to the suite's `plan.json` when it has one; a two-arm or larger suite's
`regression` verdict fails the job, a one-arm suite's conformance verdict is advisory, as
seed 002 keeps an agent suite), renders the report with `--redact` (the artifact is
shared; the gate's and compare's JUnit and Markdown redact what they quote too), posts
the gate's and compare's Markdown as the suite's one pull-request comment (`evalkit ci
comment`, in a job of its own, `comment`), saves the cache and uploads `reports/`.

**Where the token that may write on the pull request goes.** The `evalkit` job, which
runs the program under test (with `isolation: none`, as the job's own user), holds only
`contents: read`, and its checkout keeps no credentials (`persist-credentials: false`:
actions/checkout would otherwise leave the job's token in `.git/config` for every later
step). The job uploads the gate's and compare's Markdown as the `evalkit-comment`
artifact; the `comment` job (`needs: evalkit`, run whatever it concluded) is the only one
with `pull-requests: write`: it installs evalkit, downloads that artifact and runs
`evalkit ci comment` with `GITHUB_TOKEN` in that step's env alone; it never decides the
workflow (`continue-on-error`). Thresholds and caps live in `config.json`, never in the YAML;
the workflow never writes a baseline (accepting one stays a deliberate, reviewed act).

Run steps pass values only through `$GITHUB_ENV` and environment variables, never
through `${{ }}` expressions inside a script, so no pull-request text is ever pasted
into a shell line.

**Which evalkit the workflow installs.** Never the bare name: PyPI's `evalkit` is an
unrelated project, and the job holds the API keys. `install_spec` gives pip the source
the user has: `--evalkit-spec` (a PEP 508 `name @ URL`, a VCS or archive URL, or a path
inside the repository), else the installed distribution's origin as pip recorded it
(PEP 610 `direct_url.json`): a VCS URL pinned at its commit, an archive URL with its
hash, or a folder inside the repository (as `./PATH`, which the checkout holds). A local
clone or folder outside the repository, a `file://` URL, or an install from an index
(no `direct_url.json`) leaves no source CI can reach: `InputError` saying how to give
one.
"""

from __future__ import annotations

import json
import re
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import yaml

from evalkit.foundations._io import write_atomic
from evalkit.foundations.errors import InputError
from evalkit.foundations.layout import CACHE_FILE
from evalkit.foundations.records import Suite

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


SPEC_HELP = (
    "pass --evalkit-spec with where CI can get evalkit: a VCS URL at a commit "
    '("evalkit @ git+https://github.com/ORG/evalkit@COMMIT"), a wheel URL, or a path inside the repository '
    "(vendor/evalkit); PyPI's 'evalkit' is an unrelated project, so the workflow never installs it by name"
)


def installed_origin() -> dict[str, Any] | None:
    """The installed evalkit's PEP 610 `direct_url.json` (where pip got it), or None when
    it came from an index (or is not installed as a distribution)."""
    try:
        text = distribution("evalkit").read_text("direct_url.json")
    except PackageNotFoundError:
        return None
    try:
        data = json.loads(text) if text else None
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def _file_path(url: str) -> Path | None:
    parts = urlsplit(url)
    return Path(unquote(parts.path)) if parts.scheme == "file" else None


def _inside(path: Path, root: Path, what: str) -> str:
    """`path` as `./REL` from the repository root, or an InputError: CI sees only the checkout."""
    try:
        rel = path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        raise InputError(f"{what} {path}, outside the repository {root}: CI cannot see it; {SPEC_HELP}") from None
    return "./" if rel == "." else f"./{rel}"


def spec_from_origin(origin: dict[str, Any] | None, repo_root: Path) -> str:
    """What `pip install` needs to get the evalkit whose PEP 610 record is `origin` in a
    checkout of `repo_root` (see the module docstring); InputError when CI cannot reach it."""
    if not origin or not isinstance(origin.get("url"), str):
        raise InputError(
            f"this evalkit was installed from a package index or without a record of its source: {SPEC_HELP}"
        )
    url = origin["url"]
    sub = origin.get("subdirectory")
    local = _file_path(url)
    vcs, archive = origin.get("vcs_info"), origin.get("archive_info")
    if isinstance(vcs, dict):
        commit = vcs.get("commit_id")
        if local is not None:
            raise InputError(
                f"this evalkit was installed from the local clone {local}, which CI cannot see: {SPEC_HELP}"
            )
        if not isinstance(commit, str) or not commit:
            raise InputError(f"this evalkit's VCS origin {url} records no commit: {SPEC_HELP}")
        return f"evalkit @ {vcs.get('vcs', 'git')}+{url}@{commit}" + (f"#subdirectory={sub}" if sub else "")
    if isinstance(archive, dict):
        if local is not None:
            return _inside(local, repo_root, "this evalkit was installed from the archive")
        hashes: dict[str, Any] = archive["hashes"] if isinstance(archive.get("hashes"), dict) else {}
        sha = hashes.get("sha256") or (archive.get("hash", "").partition("sha256=")[2] or None)
        return f"evalkit @ {url}" + (f"#sha256={sha}" if sha and "#" not in url else "")
    if local is not None:  # dir_info: a folder, editable or not
        folder = local / sub if sub else local
        return _inside(folder, repo_root, "this evalkit was installed from the folder")
    raise InputError(f"this evalkit's recorded origin {url} is neither a VCS URL, an archive nor a folder: {SPEC_HELP}")


# A bare PEP 508 requirement: a name, maybe extras, version specifiers or markers, and no
# `@ URL`. packaging's Requirement would parse it, but packaging is no dependency of
# evalkit; all that matters here is the name and that no URL follows it.
_BARE_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(\[[^\]]*\])?\s*([<>=!~;(].*)?$")


def install_spec(spec: str | None, repo_root: str | Path) -> str:
    """What the workflow's `pip install` gets evalkit from: `spec` (`--evalkit-spec`)
    checked, else `spec_from_origin(installed_origin())`. A bare `evalkit` (with or
    without a version) is refused: on PyPI it is another project."""
    root = Path(repo_root)
    if spec is None:
        return spec_from_origin(installed_origin(), root)
    text = spec.strip()
    if not text or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in text):
        raise InputError(f"--evalkit-spec is empty or holds a control character: {SPEC_HELP}")
    bare = _BARE_REQUIREMENT.match(text)
    looks_like_path = text.startswith((".", "/", "~")) or ("/" in text.split("@")[0] and "://" not in text)
    if bare and not looks_like_path:
        if re.sub(r"[-_.]+", "-", bare.group(1)).lower() == "evalkit":
            raise InputError(f"--evalkit-spec {text!r} names the package 'evalkit' on an index: {SPEC_HELP}")
        return text  # another name, on an index the user chose
    if ("@" in text and not looks_like_path) or "://" in text:
        if "file:" in text:
            raise InputError(f"--evalkit-spec {text!r} is a file:// URL, which CI cannot reach: {SPEC_HELP}")
        return text  # `name @ URL`, or a VCS or archive URL
    path = Path(text).expanduser()
    if not path.exists():
        raise InputError(f"--evalkit-spec {text!r}: no such file or folder: {SPEC_HELP}")
    return _inside(path, root, "--evalkit-spec")


# What a suite path or watch pattern may not hold: `${{` (GitHub evaluates it wherever
# it stands, env and paths included), control characters (a tab, CR, LF, NUL, ESC) and
# line separators (NEL, U+2028, U+2029), which end a YAML line or hide from a reviewer.
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def unsafe_text_problem(text: str) -> str | None:
    """Why `text` cannot go into the workflow, or None."""
    if "${{" in text:
        return "it holds '${{', which GitHub Actions would evaluate as an expression"
    m = _UNSAFE.search(text)
    if m:
        return f"it holds the control character or line separator U+{ord(m.group()):04X}"
    return None


def check_workflow_text(text: str, what: str) -> str:
    """`text` when it can go into a workflow; else InputError (exit 2) with the reason."""
    problem = unsafe_text_problem(text)
    if problem:
        raise InputError(f"{what} {text!r} cannot go into a CI workflow: {problem}; rename it")
    return text


class _Dumper(yaml.SafeDumper):  # type: ignore[misc]  # PyYAML ships no types
    """PyYAML's safe dumper, with multi-line strings (the run scripts) as literal blocks."""


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


def _none(dumper: yaml.SafeDumper, data: None) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:null", "")  # `workflow_dispatch:` as GitHub's docs write it


_Dumper.add_representer(str, _str)
_Dumper.add_representer(type(None), _none)

_HEADER = """# Written by `evalkit init SUITE --ci github`. Edit freely; re-run init only on a new suite.
# Caps and gate thresholds live in the suite's config.json (`ci.cost_cap_usd`, `gate`), not here.
# This workflow never writes a baseline: accept one with `evalkit baseline accept RUN` in a
# change of its own, reviewed by someone else. Every value below is written by a YAML library.
# evalkit is installed from where it was installed when this file was written (`--evalkit-spec`,
# or its recorded origin): never by the bare name, which on PyPI is an unrelated project.
# The report folder is uploaded rendered with --redact: personal data and secrets in model
# outputs show as placeholders. The run folder is not uploaded.
# After the gate, compare holds the suite's arms to its plan.json; a regression verdict fails
# the job. The job that runs the suite may only read (its checkout keeps no token); the
# `comment` job, the only one with `pull-requests: write`, posts both summaries (redacted,
# handed over as the evalkit-comment artifact) as the suite's one pull-request comment,
# with its GITHUB_TOKEN in that one step alone.
"""

# A verdict step: the command writes its Markdown to its own file (the comment step posts
# it), which is then added to the job's summary; the step exits as the command did.
_VERDICT_SCRIPT = """rm -f {md}
set +e
{command} --junit {xml} --markdown {md}
rc=$?
set -e
if [ -f {md} ]; then cat {md} >> "$GITHUB_STEP_SUMMARY"; fi
exit "$rc"
"""


COMMENT_ARTIFACT = "evalkit-comment"  # the verdicts' Markdown, from the evalkit job to the comment job

_COMMENT_SCRIPT = """if [ ! -f {gate} ] && [ ! -f {compare} ]; then
  echo "no verdict was written (the run made no run folder): nothing to post"
  exit 0
fi
evalkit ci comment --suite "$EVALKIT_SUITE" {gate} {compare}
"""


_RUN_SCRIPT = """mkdir -p {out}
set +e
evalkit run "$EVALKIT_SUITE" --ci --no-progress --junit {out}/run.xml > {out}/run.log 2>&1
rc=$?
set -e
cat {out}/run.log
run_dir=$(sed -n 's/^run folder: //p' {out}/run.log | tail -n 1)
echo "EVALKIT_RUN_EXIT=$rc" >> "$GITHUB_ENV"
echo "EVALKIT_RUN=$run_dir" >> "$GITHUB_ENV"
if [ -z "$run_dir" ]; then echo "evalkit run wrote no run folder (exit $rc)"; exit "$rc"; fi
"""


_GATE_MD, _COMPARE_MD = f"{CI_OUT}/gate.md", f"{CI_OUT}/compare.md"  # the verdicts' Markdown


def _install_steps(req: str) -> list[dict[str, Any]]:
    """Checkout, Python and evalkit from `req`: each job's first steps (new dicts each
    time, so the YAML holds no anchors)."""
    return [
        # no credentials left in .git/config: later steps (the program under test) cannot read a token
        {"uses": "actions/checkout@v4", "with": {"persist-credentials": False}},
        {"uses": "actions/setup-python@v5", "with": {"python-version": "3.11"}},
        {
            "name": "Install evalkit",
            "env": {"EVALKIT_SPEC": req},
            "run": 'python -m pip install "$EVALKIT_SPEC"',
        },
    ]


def _checked_inputs(suite: Suite, suite_rel: str, watch: tuple[str, ...]) -> tuple[str, list[str]]:
    """(the suite path, the API key variables) for the workflow, checked: the config has a
    ci block, no path or pattern holds what GitHub would evaluate, each key is a variable
    name."""
    cfg = suite.config
    if cfg.ci_cost_cap_usd is None:
        raise InputError(
            'the config has no ci block: add "ci": {"cost_cap_usd": N} (lower than cost_cap_usd) '
            "before generating a CI workflow",
            Path(suite.path) / "config.json",
            json_path="$.ci",
        )
    suite_rel = check_workflow_text(suite_rel.strip("/") or ".", "the suite path")
    for w in watch:
        check_workflow_text(w, "the --watch pattern")
    keys = [e.api_key_env for e in (cfg.generator, cfg.judge) if e is not None and e.api_key_env]
    for k in keys:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise InputError(f"api_key_env {k!r} is not an environment variable name", Path(suite.path) / "config.json")
    return suite_rel, keys


def _job_env(suite_rel: str, keys: list[str]) -> dict[str, str]:
    """The evalkit job's environment: the suite, the optional endpoint overrides, and
    each API key from the repository's secrets."""
    env: dict[str, str] = {
        "EVALKIT_SUITE": suite_rel,
        "EVALKIT_BASE_URL": "${{ vars.EVALKIT_BASE_URL }}",  # optional overrides of the config's endpoints
        "EVALKIT_JUDGE_BASE_URL": "${{ vars.EVALKIT_JUDGE_BASE_URL }}",
    }
    env.update({k: f"${{{{ secrets.{k} }}}}" for k in dict.fromkeys(keys)})
    return env


def _evalkit_steps(req: str, cache: str) -> list[dict[str, Any]]:
    """The evalkit job's steps: install, restore the cache, lint, run, grade, gate,
    compare, then `_publish_steps`."""
    ran = "${{ !cancelled() && env.EVALKIT_RUN != '' }}"
    # the arms are read from the run when the step runs (`evalkit ci compare`), never fixed
    # here: an arm added to config.json later is compared without touching this file
    compare_cmd = 'evalkit ci compare "$EVALKIT_RUN"'
    compare_name = "Compare the arms (a regression fails the job; one arm: conformance, advisory)"
    return [
        *_install_steps(req),
        {
            # Cached answers are keyed by their exact request, so the newest cache serves any run.
            "name": "Restore the response cache",
            "id": "responses",
            "uses": "actions/cache/restore@v4",
            "with": {
                "path": cache,
                "key": "evalkit-responses-${{ github.run_id }}",
                "restore-keys": "evalkit-responses-",
            },
        },
        {"name": "Lint the suite", "run": 'evalkit lint "$EVALKIT_SUITE"'},
        {"name": "Run under the suite's CI cost cap", "run": _RUN_SCRIPT.format(out=CI_OUT)},
        {
            "name": "Grade",
            "if": ran,
            "run": 'evalkit grade "$EVALKIT_RUN" || echo "evalkit grade exited $? (the gate reads the run\'s state)"',
        },
        {
            "name": "Gate against the committed baseline",
            "if": ran,
            "run": _VERDICT_SCRIPT.format(
                command='evalkit gate "$EVALKIT_RUN" --baseline "$EVALKIT_SUITE/baseline.json" '
                '--runner-exit "$EVALKIT_RUN_EXIT"',
                xml=f"{CI_OUT}/gate.xml",
                md=_GATE_MD,
            ),
        },
        {
            # after the gate, whatever it said: both verdicts reach the summary and the comment
            "name": compare_name,
            "if": ran,
            "run": _VERDICT_SCRIPT.format(command=compare_cmd, xml=f"{CI_OUT}/compare.xml", md=_COMPARE_MD),
        },
        *_publish_steps(cache),
    ]


def _publish_steps(cache: str) -> list[dict[str, Any]]:
    """The evalkit job's last steps, whatever the verdicts said: report, keep the
    verdicts for the comment job, save the cache, upload the report."""
    return [
        {
            "name": "Report",
            "if": "${{ always() && env.EVALKIT_RUN != '' }}",
            "run": f'evalkit report "$EVALKIT_RUN" --reports-dir {REPORTS_DIR} --redact',
        },
        {
            # what the comment job posts: the verdicts' Markdown alone (already redacted)
            "name": "Keep the verdicts for the comment job",
            "if": "${{ always() && env.EVALKIT_RUN != '' }}",
            "uses": "actions/upload-artifact@v4",
            "with": {"name": COMMENT_ARTIFACT, "path": f"{_GATE_MD}\n{_COMPARE_MD}\n", "if-no-files-found": "ignore"},
        },
        {
            "name": "Save the response cache",
            "if": "${{ always() }}",
            "uses": "actions/cache/save@v4",
            "with": {"path": cache, "key": "${{ steps.responses.outputs.cache-primary-key }}"},
        },
        {
            "name": "Upload the report folder",
            "if": "${{ always() }}",
            "uses": "actions/upload-artifact@v4",
            "with": {"name": "evalkit-report", "path": f"{REPORTS_DIR}/", "if-no-files-found": "warn"},
        },
    ]


def _comment_steps(req: str) -> list[dict[str, Any]]:
    """The comment job's steps: install, fetch the verdicts, comment on the pull request."""
    return [
        *_install_steps(req),
        {
            # none when the run wrote no folder or the verdict steps did not run: nothing to post
            "name": "Fetch the verdicts",
            "continue-on-error": True,
            "uses": "actions/download-artifact@v4",
            "with": {"name": COMMENT_ARTIFACT, "path": CI_OUT},
        },
        {
            # One comment per suite, updated on each push; without a pull request (a manual
            # run) or a token it posts nothing. A fork's read-only token cannot comment:
            # the comment never decides the workflow, the verdict steps do.
            "name": "Comment on the pull request",
            "continue-on-error": True,
            "env": {"GITHUB_TOKEN": "${{ secrets.GITHUB_TOKEN }}"},
            "run": _COMMENT_SCRIPT.format(gate=_GATE_MD, compare=_COMPARE_MD),
        },
    ]


def _workflow_doc(paths: list[str], env: dict[str, str], req: str, cache: str, suite_rel: str) -> dict[str, Any]:
    """The workflow as data: its triggers, permissions, concurrency and two jobs (the
    evalkit run, then the pull-request comment)."""
    steps = _evalkit_steps(req, cache)
    comment_steps = _comment_steps(req)
    doc: dict[str, Any] = {
        "name": "evalkit",
        "on": {"pull_request": {"paths": paths}, "workflow_dispatch": None},
        "permissions": {"contents": "read"},  # the comment job alone may write, on pull requests
        "concurrency": {"group": "evalkit-${{ github.ref }}", "cancel-in-progress": True},
        "jobs": {
            "evalkit": {
                "runs-on": "ubuntu-latest",
                "timeout-minutes": 60,
                "env": env,
                "steps": steps,
            },
            "comment": {
                "needs": "evalkit",
                "if": "${{ !cancelled() }}",  # a failed gate or regression is posted too
                "runs-on": "ubuntu-latest",
                "timeout-minutes": 10,
                "permissions": {"contents": "read", "pull-requests": "write"},
                "env": {"EVALKIT_SUITE": suite_rel},
                "steps": comment_steps,
            },
        },
    }
    return doc


def github_workflow(
    suite: Suite,
    suite_rel: str,
    *,
    watch: tuple[str, ...] = (),
    requirement: str | None = None,
    repo_root: str | Path | None = None,
) -> str:
    """The text of `.github/workflows/evalkit.yml` for `suite`, whose folder is
    `suite_rel` relative to the repository root (`repo_root`, found from the suite
    unless given). `requirement`: `--evalkit-spec` (see `install_spec`).

    The document is built as data and written by PyYAML, so a suite path with `: `,
    ` #` or quotes stays one string everywhere it appears; a path (or `--watch`
    pattern) holding `${{`, a control character or a line separator is refused
    (`InputError`), since no quoting keeps GitHub from evaluating an expression."""
    suite_rel, keys = _checked_inputs(suite, suite_rel, watch)
    paths = list(dict.fromkeys([*DEFAULT_WATCH, f"{suite_rel}/**", *watch, str(WORKFLOW_PATH)]))
    cache = f"{suite_rel}/runs/{CACHE_FILE}"
    req = check_workflow_text(
        install_spec(requirement, repo_root if repo_root is not None else repo_root_of(Path(suite.path))),
        "the evalkit install source",
    )
    doc = _workflow_doc(paths, _job_env(suite_rel, keys), req, cache, suite_rel)
    body = str(
        yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=4096, default_flow_style=False)
    )
    return _HEADER + body


def write_github_workflow(
    suite: Suite, *, repo_root: str | Path | None = None, watch: tuple[str, ...] = (), requirement: str | None = None
) -> Path:
    """Write `.github/workflows/evalkit.yml` under the repository root (found from the
    suite folder unless given); refuses to overwrite an existing one. `requirement`:
    `--evalkit-spec` (`install_spec` checks it, or finds the installed origin)."""
    suite_dir = Path(suite.path).resolve()
    root = Path(repo_root).resolve() if repo_root is not None else repo_root_of(suite_dir)
    try:
        rel = suite_dir.relative_to(root).as_posix()
    except ValueError:
        raise InputError(f"the suite folder is not inside the repository root {root}", suite_dir) from None
    dest = root / WORKFLOW_PATH
    if dest.exists():
        raise InputError("a workflow already exists (edit it, or remove it to write a new one)", dest)
    text = github_workflow(suite, rel, watch=watch, requirement=requirement, repo_root=root)
    dest.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(dest, text)
    return dest
