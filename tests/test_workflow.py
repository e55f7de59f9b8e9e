"""`evalkit init --ci github`: the generated workflow is parsed as YAML, checked for what
it must and must not do, and its run steps are executed in order, as a GitHub runner
would (`bash -e`, `$GITHUB_ENV` carried between steps, `if:` conditions honoured),
against the scripted server over HTTP."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import junitparser
import xmlschema
import yaml
from click.testing import CliRunner

from evalkit.cli import main
from evalkit.serve import ScriptedServer

BIN = Path(sys.executable).parent
SCHEMA = xmlschema.XMLSchema(str(Path(__file__).parent / "data" / "junit" / "junit.xsd"))
RIGHT = {"rules": [{"match": "France", "text": "Paris"}, {"match": "Italy", "text": "Rome"}]}
WRONG = {"rules": [{"match": "France", "text": "Lyon"}, {"match": "Italy", "text": "HACKED Rome"}]}


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


def run_workflow(doc: dict, repo: Path, secrets: dict[str, str], variables: dict[str, str]) -> list[tuple[str, int]]:
    """Execute the job's run steps (not `uses:` actions, not the pip install) in order.
    Returns (step name, exit status) for each step that ran."""
    job = doc["jobs"]["evalkit"]
    github_env, summary = repo / ".gh-env", repo / ".gh-summary.md"
    github_env.write_text("")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("EVALKIT_", "GITHUB_"))}
    base["PATH"] = f"{BIN}{os.pathsep}{base.get('PATH', '')}"
    for k, v in job["env"].items():
        v = str(v)
        v = re.sub(r"\$\{\{ secrets\.(\w+) \}\}", lambda m: secrets.get(m.group(1), ""), v)
        v = re.sub(r"\$\{\{ vars\.(\w+) \}\}", lambda m: variables.get(m.group(1), ""), v)
        assert "${{" not in v, v
        base[k] = v
    base.update(GITHUB_ENV=str(github_env), GITHUB_STEP_SUMMARY=str(summary))
    ran: list[tuple[str, int]] = []
    ok = True
    for step in job["steps"]:
        if "run" not in step or "pip install" in step["run"]:
            continue
        env = dict(base)
        for line in github_env.read_text().splitlines():
            k, _, v = line.partition("=")
            env[k] = v
        if not _condition(step.get("if"), ok, env):
            continue
        assert "${{" not in step["run"], f"expression inside a script: {step['name']}"
        rc = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=repo, env=env, timeout=300).returncode
        ran.append((step.get("name", "?"), rc))
        ok = ok and rc == 0
    return ran


def _setup(tmp_path: Path) -> tuple[Path, Path, dict]:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    cwd = os.getcwd()
    os.chdir(repo)
    try:
        res = cli("init", "evals/unit", "--ci", "github", "--watch", "agent/src/**")
    finally:
        os.chdir(cwd)
    assert res.exit_code == 0, res.output
    suite = repo / "evals" / "unit"
    wf = repo / ".github" / "workflows" / "evalkit.yml"
    doc = yaml.safe_load(wf.read_text())
    return repo, suite, doc


def test_generated_workflow_shape(tmp_path):
    repo, suite, doc = _setup(tmp_path)
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
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["with"]["path"] == "reports/" and upload["if"] == "${{ always() }}"
    assert uses.index(restore["uses"]) < uses.index(save["uses"])
    runs = [s["run"] for s in steps if "run" in s]
    order = [next(i for i, r in enumerate(runs) if f"evalkit {c} " in r) for c in ("run", "grade", "gate")]
    assert order == sorted(order)
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


def test_workflow_steps_pass_then_fail_against_the_scripted_server(tmp_path):
    """The workflow's own steps: a run that matches the committed baseline passes the
    gate (under the CI cap, not the local one); wrong answers fail the job at the gate
    step while the report and the artifacts are still produced; the baseline is never
    written."""
    repo, suite, doc = _setup(tmp_path)
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
        ran = run_workflow(doc, repo, secrets, {"EVALKIT_BASE_URL": srv.base_url})
    names = [n for n, _ in ran]
    assert names == ["Lint the suite", "Run under the suite's CI cost cap", "Grade",
                     "Gate against the committed baseline", "Report"], ran
    assert all(rc == 0 for _, rc in ran), ran
    env = dict(line.split("=", 1) for line in (repo / ".gh-env").read_text().splitlines())
    run_dir = repo / env["EVALKIT_RUN"]
    summary = json.loads((run_dir / "summary.json").read_text())
    cfg = json.loads((suite / "config.json").read_text())
    assert summary["complete"] and summary["cap_usd"] == cfg["ci"]["cost_cap_usd"] < cfg["cost_cap_usd"]
    assert summary["avoided_usd"] > 0  # the local run's answers came from the response cache
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
    assert "Report" in status  # `always()`: the report folder is still produced and uploaded
    cases = {c.name: c for s in junitparser.JUnitXml.fromfile(str(gate_xml)) for c in s}
    assert cases["case score overall"].is_failure
    assert (repo / ".gh-summary.md").read_text().startswith("## evalkit gate: FAIL: case score drop")
    assert (suite / "baseline.json").read_bytes() == baseline
