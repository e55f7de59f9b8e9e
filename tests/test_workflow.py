"""`evalkit init --ci github`: the generated workflow is parsed as YAML, checked for what
it must and must not do, and its run steps are executed in order, as a GitHub runner
would (`bash -e`, `$GITHUB_ENV` carried between steps, `if:` conditions honoured),
against the scripted server over HTTP."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import junitparser
import pytest
import xmlschema
import yaml
from click.testing import CliRunner

from github_stub import BOT, GitHubStub

from evalkit._cli.main import main
from evalkit.foundations.errors import InputError
from evalkit.calls.serve import ScriptedServer
from evalkit.telling.workflow import install_spec, installed_origin, spec_from_origin

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent
SCHEMA = xmlschema.XMLSchema(str(Path(__file__).parent / "data" / "junit" / "junit.xsd"))
RIGHT = {"rules": [{"match": "France", "text": "Paris"}, {"match": "Italy", "text": "Rome"}]}
WRONG = {"rules": [{"match": "France", "text": "Lyon"}, {"match": "Italy", "text": "HACKED Rome"}]}
COMPARE = "Compare the arms (a regression fails the job; one arm: conformance, advisory)"
COMMENT = "Comment on the pull request"
KEEP, FETCH = "Keep the verdicts for the comment job", "Fetch the verdicts"


def cli(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _condition(expr: str | None, ok: bool, env: dict[str, str]) -> bool:
    """The `if:` forms the recipe uses (anything else is a test failure, not a guess)."""
    if expr is None:
        return ok
    body = expr.strip()
    body = body[3:-2].strip() if body.startswith("${{") else body
    value = True
    for term in (t.strip() for t in body.split("&&")):
        if term in ("always()", "!cancelled()"):
            continue
        m = re.fullmatch(r"env\.(\w+) != ''", term)
        assert m, f"unexpected condition {term!r}"
        value = value and bool(env.get(m.group(1)))
    return value


# The install step, run offline: no index, no dependencies (this environment has them),
# no build isolation (setuptools is here), into a scratch folder that nothing imports from.
# No byte-compiling of the installed files either: nothing imports from that folder (a
# store_false option as PIP_NO_X="0" means "no X", as for build isolation).
OFFLINE_PIP = {"PIP_NO_INDEX": "1", "PIP_NO_DEPS": "1", "PIP_NO_BUILD_ISOLATION": "0", "PIP_NO_CACHE_DIR": "1",
               "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_COMPILE": "0"}


def run_workflow(doc: dict, repo: Path, secrets: dict[str, str], variables: dict[str, str],
                 pip_target: Path | None = None, runner: dict[str, str] | None = None,
                 skip: tuple[str, ...] = ()) -> list[tuple[str, int]]:
    """Execute the jobs in order (each after the one it `needs`, its `if:` honoured): their
    run steps, and the artifact actions as GitHub's store would (upload-artifact keeps the
    files listed, relative to their common folder; download-artifact puts them under its
    path, and fails when none was kept); other `uses:` actions are not run. The `evalkit`
    job works in `repo`, every other job in a fresh empty folder beside it (a new runner:
    what it needs must come as an artifact). The pip install only with `pip_target`
    (offline, into that folder) and only in the first job: the others use that install.
    `runner`: the GITHUB_* variables a runner sets (the event file, the repository, the
    API's URL); `skip`: names of steps a test leaves out (the slow report, where another
    test covers it). A failed step with `continue-on-error` does not fail its job.
    Returns (step name, exit status) for each step that ran."""
    store = repo.parent / "artifacts"
    shutil.rmtree(store, ignore_errors=True)
    store.mkdir()
    ran: list[tuple[str, int]] = []
    done: dict[str, bool] = {}
    for i, (name, job) in enumerate(doc["jobs"].items()):
        needs = job.get("needs", [])
        needs = [needs] if isinstance(needs, str) else list(needs)
        assert all(n in done for n in needs), f"{name} needs a job that has not run"
        needed_ok = all(done[n] for n in needs)
        if not _condition(job.get("if"), needed_ok, {}):
            continue
        if name == "evalkit":
            ws = repo
        else:
            ws = repo.parent / f"job-{name}"
            shutil.rmtree(ws, ignore_errors=True)
            ws.mkdir()
        done[name] = _run_job(job, ws, store, secrets, variables, pip_target if i == 0 else None, runner, skip, ran)
    return ran


def _run_job(job: dict, ws: Path, store: Path, secrets: dict[str, str], variables: dict[str, str],
             pip_target: Path | None, runner: dict[str, str] | None, skip: tuple[str, ...],
             ran: list[tuple[str, int]]) -> bool:
    github_env, summary = ws / ".gh-env", ws / ".gh-summary.md"
    github_env.write_text("")

    def expand(v: object) -> str:
        """A job or step env value: only `secrets.` and `vars.` expressions, as GitHub fills them."""
        v = re.sub(r"\$\{\{ secrets\.(\w+) \}\}", lambda m: secrets.get(m.group(1), ""), str(v))
        v = re.sub(r"\$\{\{ vars\.(\w+) \}\}", lambda m: variables.get(m.group(1), ""), v)
        assert "${{" not in v, v
        return v

    base = {k: v for k, v in os.environ.items() if not k.startswith(("EVALKIT_", "GITHUB_"))}
    base["PATH"] = f"{BIN}{os.pathsep}{base.get('PATH', '')}"
    for k, v in job.get("env", {}).items():
        base[k] = expand(v)
    base.update(runner or {})
    base.update(GITHUB_ENV=str(github_env), GITHUB_STEP_SUMMARY=str(summary))
    ok = True
    for step in job["steps"]:
        uses = step.get("uses", "")
        artifact = uses.startswith(("actions/upload-artifact@", "actions/download-artifact@"))
        if "run" not in step and not artifact:
            continue
        if "run" in step and (("pip install" in step["run"] and pip_target is None) or step.get("name") in skip):
            continue
        env = dict(base)
        if "pip install" in step.get("run", ""):
            env.update(OFFLINE_PIP, PIP_TARGET=str(pip_target))
        for k, v in step.get("env", {}).items():
            env[k] = expand(v)
        for line in github_env.read_text().splitlines():
            k, _, v = line.partition("=")
            env[k] = v
        if not _condition(step.get("if"), ok, env):
            continue
        if artifact:
            rc = _artifact(uses, step["with"], ws, store)
        else:
            assert "${{" not in step["run"], f"expression inside a script: {step['name']}"
            rc = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=ws, env=env, timeout=300).returncode
        ran.append((step.get("name", uses), rc))
        ok = ok and (rc == 0 or step.get("continue-on-error") is True)
    return ok


def _artifact(uses: str, with_: dict, ws: Path, store: Path) -> int:
    """upload-artifact@v4 / download-artifact@v4 on a local store: the exit status."""
    kept = store / with_["name"]
    if uses.startswith("actions/upload-artifact@"):
        listed = [ws / p for p in str(with_["path"]).splitlines() if p.strip()]
        assert not any(ch in str(p) for p in listed for ch in "*?["), "no glob in the recipe's paths"
        there = [p for p in listed if p.exists()]
        if not there:
            return 1 if with_.get("if-no-files-found") == "error" else 0  # no artifact is made
        top = Path(os.path.commonpath([p if p.is_dir() else p.parent for p in there]))
        for p in there:
            for f in ([p] if p.is_file() else [f for f in p.rglob("*") if f.is_file()]):
                (kept / f.relative_to(top)).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, kept / f.relative_to(top))
        return 0
    if not kept.is_dir():
        return 1  # "Unable to download artifact(s): Artifact not found"
    shutil.copytree(kept, ws / with_.get("path", "."), dirs_exist_ok=True)
    return 0


def _vendor_evalkit(repo: Path) -> Path:
    """A copy of this checkout's files (git's list) at repo/vendor/evalkit: a source of
    evalkit inside the repository, as a user who vendors it has."""
    dest = repo / "vendor" / "evalkit"
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                         capture_output=True, check=True)
    for f in (f for f in out.stdout.decode().split("\0") if f and (ROOT / f).is_file()):
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, dest / f)
    return dest


@pytest.fixture(scope="module")
def vendored(tmp_path_factory) -> Path:
    """`_vendor_evalkit` once for the module; each test's repository gets it as hard links
    (`_link_tree`): the build in the install step only adds files beside them."""
    return _vendor_evalkit(tmp_path_factory.mktemp("vendored"))


def _link_tree(src: Path, dest: Path) -> None:
    def link(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:  # another file system
            shutil.copy2(a, b)

    shutil.copytree(src, dest, copy_function=link)


def _setup(tmp_path: Path, vendored: Path) -> tuple[Path, Path, dict]:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    _link_tree(vendored, repo / "vendor" / "evalkit")
    cwd = os.getcwd()
    os.chdir(repo)
    try:
        res = cli("init", "evals/unit", "--ci", "github", "--watch", "agent/src/**", "--evalkit-spec", "vendor/evalkit")
    finally:
        os.chdir(cwd)
    assert res.exit_code == 0, res.output
    suite = repo / "evals" / "unit"
    wf = repo / ".github" / "workflows" / "evalkit.yml"
    doc = yaml.safe_load(wf.read_text())
    return repo, suite, doc


def test_generated_workflow_shape(tmp_path, vendored):
    repo, suite, doc = _setup(tmp_path, vendored)
    text = (repo / ".github" / "workflows" / "evalkit.yml").read_text()
    on = doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on` key as true
    paths = on["pull_request"]["paths"]
    assert {"evals/**", "prompts/**", "**/*.prompt.md", "**/SKILL.md", "agent/**", "agent/src/**",
            ".github/workflows/evalkit.yml"} <= set(paths)
    steps = doc["jobs"]["evalkit"]["steps"]
    uses = [s.get("uses", "") for s in steps]
    restore = next(s for s in steps if s.get("uses", "").startswith("actions/cache/restore@"))
    save = next(s for s in steps if s.get("uses", "").startswith("actions/cache/save@"))
    assert restore["with"]["path"] == save["with"]["path"] == "evals/unit/runs/cache.sqlite"
    assert save["if"] == "${{ always() }}" and "steps.responses.outputs.cache-primary-key" in save["with"]["key"]
    upload = next(s for s in steps if s.get("name") == "Upload the report folder")
    assert upload["uses"].startswith("actions/upload-artifact@") and upload["with"]["path"] == "reports/" and upload["if"] == "${{ always() }}"
    assert uses.index(restore["uses"]) < uses.index(save["uses"])
    runs = [s["run"] for s in steps if "run" in s]
    order = [next(i for i, r in enumerate(runs) if f"evalkit {c} " in r)
             for c in ("run", "grade", "gate", "ci compare", "report")]
    assert order == sorted(order)
    # no checkout leaves the job's token in .git/config, where the program under test could read it
    checkouts = [s for job in doc["jobs"].values() for s in job["steps"]
                 if s.get("uses", "").startswith("actions/checkout@")]
    assert len(checkouts) == 2 and all(s["with"]["persist-credentials"] is False for s in checkouts)
    assert "persist-credentials: false" in text
    # compare holds the suite's two arms (the plan.json beside them is compare's default) and
    # fails the job on a regression; it runs after the gate whatever the gate said
    # (the arms are the run's, read when the step runs: `evalkit ci compare`, no name fixed here)
    cmp_step = next(s for s in steps if "evalkit ci compare " in s.get("run", ""))
    assert "env" not in cmp_step and "baseline" not in cmp_step["run"] and "skilled" not in cmp_step["run"]
    assert 'evalkit ci compare "$EVALKIT_RUN"' in cmp_step["run"] and cmp_step["if"].startswith("${{ !cancelled()")
    assert "--markdown reports/evalkit/compare.md" in cmp_step["run"]
    # the comment: a job of its own, after the suite's job whatever it concluded, the only one that
    # may write on the pull request; the token in its comment step alone, never deciding the workflow
    assert doc["permissions"] == {"contents": "read"} and "permissions" not in doc["jobs"]["evalkit"]
    assert not any("ci comment" in s.get("run", "") for s in steps)
    keep = next(s for s in steps if s.get("name") == "Keep the verdicts for the comment job")
    assert keep["uses"].startswith("actions/upload-artifact@") and keep["if"] == "${{ always() && env.EVALKIT_RUN != '' }}"
    assert keep["with"]["name"] == "evalkit-comment"
    assert keep["with"]["path"].split() == ["reports/evalkit/gate.md", "reports/evalkit/compare.md"]
    cjob = doc["jobs"]["comment"]
    assert cjob["needs"] == "evalkit" and cjob["if"] == "${{ !cancelled() }}"
    assert cjob["permissions"] == {"contents": "read", "pull-requests": "write"}
    fetch = next(s for s in cjob["steps"] if s.get("uses", "").startswith("actions/download-artifact@"))
    assert fetch["with"] == {"name": "evalkit-comment", "path": "reports/evalkit"} and fetch["continue-on-error"]
    comment = next(s for s in cjob["steps"] if "evalkit ci comment " in s.get("run", ""))
    assert cjob["steps"].index(fetch) < cjob["steps"].index(comment)
    assert comment["env"] == {"GITHUB_TOKEN": "${{ secrets.GITHUB_TOKEN }}"} and comment["continue-on-error"] is True
    assert 'evalkit ci comment --suite "$EVALKIT_SUITE" reports/evalkit/gate.md reports/evalkit/compare.md' \
        in comment["run"]
    assert [s for j in doc["jobs"].values() for s in j["steps"] if "GITHUB_TOKEN" in json.dumps(s)] == [comment]
    assert all("GITHUB_TOKEN" not in json.dumps(j.get("env", {})) for j in doc["jobs"].values())
    assert not any(word in json.dumps(cjob) for word in ("secrets.EVALKIT", "evalkit run ", "evalkit report "))
    assert "--ci" in next(r for r in runs if "evalkit run " in r)
    # thresholds and caps live in config.json, not in the YAML; no baseline is ever written
    cfg = json.loads((suite / "config.json").read_text())
    assert cfg["ci"]["cost_cap_usd"] < cfg["cost_cap_usd"]
    for word in ("cost_cap", "max_success_drop", "max_cost_increase", str(cfg["ci"]["cost_cap_usd"]),
                 "baseline accept"):
        assert word not in "\n".join(runs), word
    assert "accept" not in "\n".join(runs)
    env = doc["jobs"]["evalkit"]["env"]
    assert env["EVALKIT_API_KEY"] == "${{ secrets.EVALKIT_API_KEY }}"
    # evalkit comes from the source given, never the bare name (PyPI's `evalkit` is another project)
    install = next(s for s in steps if "pip install" in s.get("run", ""))
    assert install["env"]["EVALKIT_SPEC"] == "./vendor/evalkit" and "$EVALKIT_SPEC" in install["run"]
    assert not re.search(r"pip install\s+\"?evalkit\b", text)
    # the uploaded report is rendered redacted: outputs may hold what a model leaked
    report = next(s for s in steps if s.get("name") == "Report")
    assert "evalkit report " in report["run"] and report["run"].rstrip().endswith("--redact")
    # an existing workflow is not overwritten; a suite without a ci block is refused
    cwd = os.getcwd()
    os.chdir(repo)
    try:
        again = cli("init", "evals/unit", "--ci", "github")
        assert again.exit_code == 2 and "already exists" in again.output
        (repo / ".github" / "workflows" / "evalkit.yml").unlink()
        del cfg["ci"]
        (suite / "config.json").write_text(json.dumps(cfg))
        res = cli("init", "evals/unit", "--ci", "github")
        assert res.exit_code == 2 and "$.ci" in res.output and "no ci block" in res.output
    finally:
        os.chdir(cwd)
    assert "python-version" in text


def test_workflow_steps_pass_then_fail_against_the_scripted_server(tmp_path, vendored):
    """The workflow's own steps: a run that matches the committed baseline passes the
    gate (under the CI cap, not the local one); wrong answers fail the job at the gate
    step while the report and the artifacts are still produced; the baseline is never
    written."""
    repo, suite, doc = _setup(tmp_path, vendored)
    # the starter's few cases cannot see 3 points: the default gate says so and decides on the observed drop
    secrets = {"EVALKIT_API_KEY": "test-key", "EVALKIT_JUDGE_KEY": "judge-key"}
    os.environ.pop("EVALKIT_BASE_URL", None)
    with ScriptedServer(RIGHT) as srv:
        # the baseline, accepted locally and committed (never by the workflow)
        os.environ["EVALKIT_API_KEY"] = "test-key"
        try:
            r = cli("run", suite, "--base-url", srv.base_url, "--no-progress")
            assert r.exit_code == 0, r.output
            local = Path(r.stdout.split("run folder: ")[1].splitlines()[0].strip())
            assert cli("grade", local).exit_code == 0
            assert cli("baseline", "accept", local, "--arm", "skilled").exit_code == 0
        finally:
            del os.environ["EVALKIT_API_KEY"]
        baseline = (suite / "baseline.json").read_bytes()
        target = tmp_path / "pip-target"
        ran = run_workflow(doc, repo, secrets, {"EVALKIT_BASE_URL": srv.base_url}, pip_target=target)
    # the install step built and installed evalkit from the repository's own copy
    assert (target / "evalkit" / "__init__.py").is_file()
    [record] = target.glob("evalkit-*.dist-info/direct_url.json")
    assert json.loads(record.read_text())["url"] == (repo / "vendor" / "evalkit").resolve().as_uri()
    names = [n for n, _ in ran]
    assert names == ["Install evalkit", "Lint the suite", "Run under the suite's CI cost cap", "Grade",
                     "Gate against the committed baseline", COMPARE, "Report", KEEP, "Upload the report folder",
                     FETCH, COMMENT], ran
    assert all(rc == 0 for _, rc in ran), ran
    env = dict(line.split("=", 1) for line in (repo / ".gh-env").read_text().splitlines())
    run_dir = repo / env["EVALKIT_RUN"]
    summary = json.loads((run_dir / "summary.json").read_text())
    cfg = json.loads((suite / "config.json").read_text())
    assert summary["complete"] and summary["cap_usd"] == cfg["ci"]["cost_cap_usd"] < cfg["cost_cap_usd"]
    assert summary["avoided_usd"] > 0  # the local run's answers came from the response cache
    # grading spends under the run's recorded CI cap too: one cap for the whole CI run
    assert json.loads((run_dir / "grades-summary.json").read_text())["cap_usd"] == cfg["ci"]["cost_cap_usd"]
    gate_xml = repo / "reports" / "evalkit" / "gate.xml"
    SCHEMA.validate(str(gate_xml))
    assert all(c.is_passed for s in junitparser.JUnitXml.fromfile(str(gate_xml)) for c in s)
    SCHEMA.validate(str(repo / "reports" / "evalkit" / "run.xml"))
    assert "## evalkit gate: PASS" in (repo / ".gh-summary.md").read_text()
    assert (repo / "reports" / "index.html").exists()
    assert (suite / "runs" / "cache.sqlite").exists()  # what the save step keeps

    # a change that breaks both cases: the job fails at the gate, the report still renders
    (repo / ".gh-summary.md").unlink()
    for p in (repo / "reports").rglob("*"):
        if p.is_file():
            p.unlink()
    with ScriptedServer(WRONG) as srv:
        (suite / "prompt.txt").write_text("${guidance}Question: ${input}\nAnswer:")  # a new prompt: no cache hit
        ran = run_workflow(doc, repo, secrets, {"EVALKIT_BASE_URL": srv.base_url})
    status = dict(ran)
    assert status["Run under the suite's CI cost cap"] == 0 and status["Gate against the committed baseline"] == 1
    assert status[COMPARE] == 0  # both arms fail every case: ties, inconclusive, no regression of one arm
    assert "Report" in status  # `always()`: the report folder is still produced and uploaded
    cases = {c.name: c for s in junitparser.JUnitXml.fromfile(str(gate_xml)) for c in s}
    assert cases["case score overall"].is_failure
    assert (repo / ".gh-summary.md").read_text().startswith("## evalkit gate: FAIL: case score drop")
    assert (suite / "baseline.json").read_bytes() == baseline


# Eight capitals: the baseline (no guidance) answers each right; the skilled arm's
# guidance ("Answer with the name only.") gets an answer that leaks a key, on every case.
CAPITALS = {"France": "Paris", "Italy": "Rome", "Peru": "Lima", "Japan": "Tokyo", "Kenya": "Nairobi",
            "Canada": "Ottawa", "Egypt": "Cairo", "Norway": "Oslo"}
LEAKED = "sk-proj-Qw3rTy7UiOp9AsDfGh2JkLzXcVbNm4Qw8ErTy6Ui"
REGRESSING = {"rules": [{"match": "name only", "text": f"I cannot say; try key {LEAKED}"},
                        *({"match": c, "text": city} for c, city in CAPITALS.items())]}
PR_TOKEN = "ghs_jobtoken"


def test_a_regression_fails_the_job_at_compare_and_the_verdict_is_posted_once_on_the_pull_request(tmp_path, vendored):
    """The skill makes every case worse, in the baseline it was accepted at too: the gate
    (against that baseline) passes, compare's sign test says regression and fails the job;
    the comment step posts the gate's and compare's Markdown, redacted, on the pull
    request through the GitHub API stub, and the next run of the job edits that comment."""
    repo, suite, doc = _setup(tmp_path, vendored)
    cfg = json.loads((suite / "config.json").read_text())
    cfg["gate"]["on_underpowered"] = "warn"
    cfg["k"] = 2
    (suite / "config.json").write_text(json.dumps(cfg))
    cases = [{"id": f"capital-{c.lower()}", "input": f"What is the capital of {c}?", "expected": city,
              "tags": ["golden"], "checks": [{"kind": "exact", "value": city}]}  # its failure quotes the output
             for c, city in CAPITALS.items()]
    (suite / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    secrets = {"EVALKIT_API_KEY": "test-key", "EVALKIT_JUDGE_KEY": "judge-key", "GITHUB_TOKEN": PR_TOKEN}
    os.environ.pop("EVALKIT_BASE_URL", None)
    with ScriptedServer(REGRESSING) as srv, GitHubStub(PR_TOKEN) as gh:
        os.environ["EVALKIT_API_KEY"] = "test-key"
        try:  # the committed baseline: the skilled arm as it is (it already fails)
            r = cli("run", suite, "--base-url", srv.base_url, "--no-progress")
            assert r.exit_code == 0, r.output
            local = Path(r.stdout.split("run folder: ")[1].splitlines()[0].strip())
            assert cli("grade", local).exit_code == 0
            assert cli("baseline", "accept", local, "--arm", "skilled").exit_code == 0
        finally:
            del os.environ["EVALKIT_API_KEY"]
        baseline = (suite / "baseline.json").read_bytes()
        runner = {k: v for k, v in gh.env(tmp_path).items() if k != "GITHUB_TOKEN"}  # the token is a secret
        # the report step renders the notebooks (slow); the pass/fail test runs it after a failure
        ran = run_workflow(doc, repo, secrets, {"EVALKIT_BASE_URL": srv.base_url}, runner=runner, skip=("Report",))
        status = dict(ran)
        assert status["Gate against the committed baseline"] == 0, ran
        assert status[COMPARE] == 1  # the regression fails the job
        assert status[COMMENT] == 0  # and is still posted
        env = dict(line.split("=", 1) for line in (repo / ".gh-env").read_text().splitlines())
        [v] = json.loads((repo / env["EVALKIT_RUN"] / "verdicts.json").read_text())["comparisons"]
        assert (v["kind"], v["wins"], v["losses"]) == ("regression", 0, 8)
        assert [(r.method, r.path) for r in gh.requests] == [("GET", "/repos/acme/widgets/issues/7/comments"),
                                                              ("POST", "/repos/acme/widgets/issues/7/comments")]
        assert all(r.headers["authorization"] == f"Bearer {PR_TOKEN}" for r in gh.requests)
        body = gh.requests[-1].body["body"]
        assert body.startswith("<!-- evalkit:evals/unit -->\n")
        assert "## evalkit gate: PASS" in body
        assert "## evalkit compare: verdict regression (a failure: --fail-on)" in body
        assert "0W / 0T / 8L" in body
        assert "[run 4242](https://github.com/acme/widgets/actions/runs/4242)" in body
        # the model's leak, quoted by the failed check's reason, is posted as its placeholder
        assert "exact: output 'I cannot say; try key &lt;API\\_KEY&gt;' != expected 'Paris'" in body
        assert not any(LEAKED in json.dumps(r.body) for r in gh.requests)
        summary = (repo / ".gh-summary.md").read_text()  # the job summary holds both verdicts too
        assert summary.index("## evalkit gate: PASS") < summary.index("## evalkit compare: verdict regression")
        [ours] = gh.comments[7]
        assert ours["user"] == BOT

        # the next push runs the job again: the same comment is edited, no second one
        ran = run_workflow(doc, repo, secrets, {"EVALKIT_BASE_URL": srv.base_url}, runner=runner, skip=("Report",))
        assert dict(ran)[COMPARE] == 1 and dict(ran)[COMMENT] == 0
    assert [r.method for r in gh.requests] == ["GET", "POST", "GET", "PATCH"]
    assert gh.requests[-1].path == f"/repos/acme/widgets/issues/comments/{ours['id']}"
    assert len(gh.comments[7]) == 1 and "verdict regression" in ours["body"]
    assert (suite / "baseline.json").read_bytes() == baseline


def test_the_comment_job_posts_nothing_when_the_suite_job_wrote_no_verdict(tmp_path, vendored):
    """A suite that fails lint: no run, no verdict, no artifact; the comment job still runs
    (after a failed job), finds nothing to fetch, says so and sends nothing to GitHub."""
    repo, suite, doc = _setup(tmp_path, vendored)
    (suite / "cases.jsonl").write_text("not json\n")
    secrets = {"EVALKIT_API_KEY": "test-key", "GITHUB_TOKEN": PR_TOKEN}
    with GitHubStub(PR_TOKEN) as gh:
        runner = {k: v for k, v in gh.env(tmp_path).items() if k != "GITHUB_TOKEN"}
        ran = run_workflow(doc, repo, secrets, {}, runner=runner)
        assert ran == [("Lint the suite", 2), ("Upload the report folder", 0), (FETCH, 1), (COMMENT, 0)], ran
        assert gh.requests == []
    assert not (tmp_path / "artifacts" / "evalkit-comment").exists()


COMMIT = "4f1c0c3d0b6d8a3e5f4e1a2b3c4d5e6f70819a2b"


def test_the_install_source_follows_the_installed_origin(tmp_path):
    """PEP 610 records (the shapes pip writes) map to what CI can install; an origin CI
    cannot reach is refused with a message that says how to give one."""
    repo = tmp_path / "repo"
    (repo / "vendor" / "evalkit").mkdir(parents=True)
    vcs = {"url": "https://github.com/acme/evalkit.git", "vcs_info": {"vcs": "git", "commit_id": COMMIT,
                                                                       "requested_revision": "main"}}
    assert spec_from_origin(vcs, repo) == f"evalkit @ git+https://github.com/acme/evalkit.git@{COMMIT}"
    assert spec_from_origin({**vcs, "subdirectory": "py"}, repo).endswith(f"@{COMMIT}#subdirectory=py")
    archive = {"url": "https://example.org/evalkit-0.1.0-py3-none-any.whl",
               "archive_info": {"hashes": {"sha256": "ab" * 32}}}
    assert spec_from_origin(archive, repo) == f"evalkit @ {archive['url']}#sha256={'ab' * 32}"
    folder = {"url": (repo / "vendor" / "evalkit").as_uri(), "dir_info": {"editable": True}}
    assert spec_from_origin(folder, repo) == "./vendor/evalkit"
    refused = [None,  # from an index: the name would resolve to PyPI's unrelated `evalkit`
               {"url": (tmp_path / "elsewhere").as_uri(), "dir_info": {}},
               {"url": (tmp_path / "clone").as_uri(), "vcs_info": {"vcs": "git", "commit_id": COMMIT}},
               {"url": "https://github.com/acme/evalkit.git", "vcs_info": {"vcs": "git"}}]
    for origin in refused:
        with pytest.raises(InputError, match="--evalkit-spec") as e:
            spec_from_origin(origin, repo)
        assert "unrelated project" in str(e.value)
    # the evalkit these tests run: an editable install of this checkout
    assert spec_from_origin(installed_origin(), ROOT) == "./"
    with pytest.raises(InputError, match="outside the repository"):
        spec_from_origin(installed_origin(), repo)


def test_an_evalkit_spec_that_would_install_someone_elses_package_is_refused(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "vendor" / "evalkit").mkdir(parents=True)
    monkeypatch.chdir(repo)
    for bare in ("evalkit", "evalkit==0.1.0", "EvalKit[local]>=0.1", "evalkit ; python_version>'3'"):
        with pytest.raises(InputError, match="unrelated project"):
            install_spec(bare, repo)
    for unreachable in ("evalkit @ file:///home/me/evalkit", str(tmp_path), "vendor/nothing"):
        with pytest.raises(InputError, match="--evalkit-spec"):
            install_spec(unreachable, repo)
    url = f"evalkit @ git+https://github.com/acme/evalkit@{COMMIT}"
    assert install_spec(url, repo) == url
    assert install_spec(f"git+https://github.com/acme/evalkit@{COMMIT}", repo).endswith(COMMIT)
    assert install_spec("vendor/evalkit", repo) == install_spec(str(repo / "vendor" / "evalkit"), repo) \
        == "./vendor/evalkit"


def test_init_ci_without_a_source_ci_can_reach_exits_2_and_says_how_to_give_one(tmp_path, monkeypatch):
    """This evalkit is an editable install of a checkout outside the new repository: the
    workflow used to say `pip install "evalkit==0.1.0"`, PyPI's unrelated project, in a
    job that holds the API keys."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    monkeypatch.chdir(repo)
    res = cli("init", "evals/unit", "--ci", "github")
    assert res.exit_code == 2 and "--evalkit-spec" in res.output and "unrelated project" in res.output
    assert not (repo / ".github").exists()


def test_a_one_arm_suite_gets_an_advisory_conformance_step_and_a_hostile_arm_name_is_refused(tmp_path):
    """The compare step names no arm: `evalkit ci compare` reads them from the run when the
    job runs (a one-arm suite's conformance verdict published but advisory, seed 002)."""
    from evalkit.suites.reader import load_suite
    from evalkit.telling.workflow import github_workflow

    repo = tmp_path / "repo"
    repo.mkdir()
    cwd = os.getcwd()
    os.chdir(repo)
    try:
        assert cli("init", "evals/one").exit_code == 0
    finally:
        os.chdir(cwd)
    suite = repo / "evals" / "one"
    cfg = json.loads((suite / "config.json").read_text())
    spec = f"evalkit @ git+https://github.com/acme/evalkit@{COMMIT}"
    (suite / "config.json").write_text(json.dumps({**cfg, "arms": [{"name": "agent"}]}))
    one_arm = github_workflow(load_suite(suite), "evals/one", requirement=spec, repo_root=repo)
    # more arms, or a name that is a GitHub expression: the workflow is the same text, since no arm
    # name is written into it (issue 42: the arms are read from config.json when the job runs)
    arms = [{"name": "model-b"}, {"name": "baseline"}, {"name": "a${{ secrets.X }}"}]
    (suite / "config.json").write_text(json.dumps({**cfg, "arms": arms}))
    assert github_workflow(load_suite(suite), "evals/one", requirement=spec, repo_root=repo) == one_arm
    assert "model-b" not in one_arm and "secrets.X" not in one_arm
