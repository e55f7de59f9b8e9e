"""CI outputs: `--junit` and `--markdown` on gate, compare, grade --eval-file and run.

Every JUnit document is validated against the JUnit schema CI systems read
(tests/data/junit/junit.xsd, the Jenkins xunit-plugin dialect) with `xmlschema`, then
read back with `junitparser`, a JUnit parser that is not evalkit's. Runs come from the
real pipeline: `evalkit run` over HTTP to the scripted server, then `evalkit grade`.
"""
from __future__ import annotations

import json
from pathlib import Path

import junitparser
import pytest
import xmlschema
from click.testing import CliRunner

from evalkit.telling.ciout import md_escape
from evalkit._cli.main import main
from evalkit.calls.serve import ScriptedServer

from test_agentevals import write_fixture
from test_cli_stats import _pipeline_suite

SCHEMA = xmlschema.XMLSchema(str(Path(__file__).parent / "data" / "junit" / "junit.xsd"))


def cli(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def read_junit(path: Path, key: str = "name") -> dict[str, junitparser.TestCase]:
    """Validate against the schema, then read with junitparser: name (or
    `classname/name` with key="full") -> testcase; the suite's counts must add up."""
    SCHEMA.validate(str(path))
    xml = junitparser.JUnitXml.fromfile(str(path))
    suites = list(xml)
    assert len(suites) == 1
    cases = {(c.name if key == "name" else f"{c.classname}/{c.name}"): c for c in suites[0]}
    assert len(cases) == suites[0].tests
    assert suites[0].failures == sum(c.is_failure for c in cases.values())
    assert suites[0].errors == sum(c.is_error for c in cases.values())
    assert suites[0].skipped == sum(c.is_skipped for c in cases.values())
    return cases


def run_folder(out: str) -> Path:
    return Path(out.split("run folder: ")[1].splitlines()[0].strip())


# guided answers Paris; the bare arm is right about one time in three
GOOD = {"rules": [{"match": "Answer in one word", "text": "Paris"},
                  {"match": "France", "texts": ["Paris", "Lyon", "Nice"], "weights": [0.3, 0.35, 0.35]}]}
# the guided arm now fails on cases 00-04 (their prompt has "France 0?".. "France 4?")
BAD = {"rules": [{"match": ["Answer in one word", f"France {i}?"], "text": "Lyon <script>@all</script>"}
                 for i in range(5)] + GOOD["rules"]}


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    root = tmp_path_factory.mktemp("ci")
    import os

    os.environ["EVALKIT_TEST_KEY"] = "test"
    suite = _pipeline_suite(root / "evals" / "capitals", 10)
    runs = {}
    for name, script in (("good", GOOD), ("bad", BAD)):
        with ScriptedServer(script) as srv:
            r = cli("run", suite, "--base-url", srv.base_url, "--no-progress", "--no-cache")
            assert r.exit_code == 0, r.output
        runs[name] = run_folder(r.stdout)
        g = cli("grade", runs[name])
        assert g.exit_code in (0, 1), g.output
    acc = cli("baseline", "accept", runs["good"], "--arm", "guided")
    assert acc.exit_code == 0, acc.output
    return suite, runs


def test_gate_junit_and_markdown_on_a_failed_gate(pipeline, tmp_path):
    suite, runs = pipeline
    junit, md = tmp_path / "out" / "gate.xml", tmp_path / "out" / "gate.md"
    res = cli("gate", runs["bad"], "--baseline", suite / "baseline.json", "--arm", "guided",
              "--junit", junit, "--markdown", md)
    assert res.exit_code == 1 and res.stdout.startswith("Gate: FAIL: case score drop")
    cases = read_junit(junit)
    assert set(cases) == {"comparable with the baseline", "case score overall", "case score tag:capital",
                          "cost per case", "power"}
    # 10 cases cannot see 5 points; the suite accepts that (on_underpowered warn)
    assert cases["power"].is_passed and "(warned)" in cases["power"].system_out
    overall = cases["case score overall"]
    assert overall.is_failure
    # 5 of 10 cases lost all three repeats: pass@3 overall 1.0 -> 0.5, a 50-point drop
    assert overall.result[0].message.startswith("case-score drop overall: -50.0 points (beyond 5 points)")
    assert cases["comparable with the baseline"].is_passed and cases["cost per case"].is_passed
    text = md.read_text()
    lines = text.splitlines()
    assert lines[0] == "## evalkit gate: FAIL: case score drop"
    assert "| check | cases | baseline | current | change | p(noise) | result |" in text
    assert "| case score overall | 10 | 1.000 | 0.500 | -50.0 pts |" in text
    assert "**Spend:** $" in text and "of cap $1.000000" in text
    assert "**Plan check:** n/a" in text
    top = text.split("**Top failures**")[1]
    assert "case-00" in top and "0/3" in top
    assert "<script>" not in text and "@all" not in text  # the model's answer never becomes markup


def test_gate_junit_incomplete_run_is_an_error(pipeline, tmp_path):
    suite, runs = pipeline
    small = _pipeline_suite(tmp_path / "evals" / "small", 6, cap=0.0004)
    with ScriptedServer(GOOD) as srv:
        r = cli("run", small, "--base-url", srv.base_url, "--no-progress", "--no-cache",
                "--junit", tmp_path / "run.xml", "--markdown", tmp_path / "run.md")
    assert r.exit_code == 1
    run = run_folder(r.stdout)
    # run: one testcase per case x arm, never-run keys and the run itself are errors
    cases = read_junit(tmp_path / "run.xml", key="full")
    done = cases["evalkit.run/run complete"]
    assert done.is_error and done.result[0].message.startswith("INCOMPLETE: ")
    assert {n.rsplit("/", 1)[0] for n in cases} == {"evalkit.run", "evalkit.run.base", "evalkit.run.guided"}
    per_key = [c for n, c in cases.items() if n != "evalkit.run/run complete"]
    assert len(per_key) == 12 and any(c.is_error for c in per_key)
    assert all(c.is_passed or "never ran" in c.result[0].message or "errored" in c.result[0].message
               for c in per_key)
    assert (tmp_path / "run.md").read_text().startswith("## evalkit run: INCOMPLETE: ")
    gate_xml = tmp_path / "gate.xml"
    res = cli("gate", run, "--baseline", suite / "baseline.json", "--arm", "guided", "--junit", gate_xml)
    assert res.exit_code == 1
    cases = read_junit(gate_xml)
    assert list(cases) == ["run finished cleanly"]
    tc = cases["run finished cleanly"]
    assert tc.is_error and not tc.is_failure and tc.result[0].message.startswith("INCOMPLETE: ")


def test_gate_pass_and_compare(pipeline, tmp_path, monkeypatch):
    suite, runs = pipeline
    summary = tmp_path / "step-summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    res = cli("gate", runs["good"], "--baseline", suite / "baseline.json", "--arm", "guided",
              "--junit", tmp_path / "g.xml", "--markdown", summary)
    assert res.exit_code == 0
    cases = read_junit(tmp_path / "g.xml")
    assert all(c.is_passed for c in cases.values())
    text = summary.read_text()
    assert text.startswith("earlier step\n## evalkit gate: PASS\n")  # appended, not replaced
    assert "**Top failures:** none" in text
    # compare: one testcase per case, then the verdict
    res = cli("compare", runs["bad"], "--baseline", "base", "--treatment", "guided", "--junit", tmp_path / "c.xml",
              "--markdown", tmp_path / "c.md", "--json")
    assert res.exit_code == 0
    v = json.loads(res.stdout)
    cases = read_junit(tmp_path / "c.xml")
    assert list(cases)[-1] == "verdict" and len(cases) == 11
    votes = dict(v["case_votes"])
    # no --fail-on: the verdict is the output, not a failure, and the document is green as
    # the exit status is; each case's vote is its output
    assert all(c.is_passed for c in cases.values())
    lost = [cid for cid, vote in votes.items() if vote == "loss"]
    assert lost and cases[lost[0]].system_out.startswith("the treatment lost this case (baseline ")
    md = (tmp_path / "c.md").read_text()
    assert md.startswith(f"## evalkit compare: verdict {v['kind']}\n")
    assert f"| guided | base | {v['wins']}W / {v['ties']}T / {v['losses']}L |" in md
    assert "**Plan check:** no pre-registered plan" in md and lost[0] in md.split("**Top failures**")[1]
    res = cli("compare", runs["bad"], "--baseline", "base", "--treatment", "guided", "--fail-on", v["kind"],
              "--junit", tmp_path / "c2.xml")
    failed = read_junit(tmp_path / "c2.xml")
    assert res.exit_code == 1 and failed["verdict"].is_failure
    for cid, vote in votes.items():  # red: the lost cases say why
        assert failed[cid].is_failure == (vote == "loss") and failed[cid].is_error == (vote == "errored")
    assert failed[lost[0]].result[0].message.startswith("the treatment lost this case (baseline ")


def test_eval_file_junit_failures_and_gate_none(tmp_path):
    cases = [{"id": "cap", "set": "capability", "prompt": "p", "expect": "ok"},
             {"id": "reg", "set": "regression", "prompt": "p", "expect": "ok"},
             {"id": "explore", "set": "exploratory", "prompt": "p", "expect": "never"}]
    ev, out = write_fixture(tmp_path, cases=cases,
                            samples={"cap": ["ok", "no"], "reg": ["ok", "no"], "explore": ["a", "b"]})
    res = cli("grade", "--eval-file", ev, "--outputs", out, "-k", "2", "--junit", tmp_path / "e.xml",
              "--markdown", tmp_path / "e.md")
    assert res.exit_code == 1
    tcs = read_junit(tmp_path / "e.xml")
    assert tcs["cap"].is_passed and tcs["cap"].classname == "evalkit.agent-evals.capability"
    assert tcs["reg"].is_failure and tcs["reg"].result[0].message == "pass^2 not met: 1/2 samples passed"
    assert tcs["explore"].is_skipped and "gate none" in tcs["explore"].result[0].message
    md = (tmp_path / "e.md").read_text()
    assert md.startswith("## evalkit grade --eval-file: FAIL: 1 eval case(s) failed the gate: reg\n")
    assert "| exploratory | 1 | 0 | 0 | none |" in md
    res = cli("grade", tmp_path, "--junit", tmp_path / "x.xml")
    assert res.exit_code == 2


def test_md_escape_makes_model_text_inert():
    s = md_escape("| <img src=x onerror=alert(1)> [click](http://x) @octocat **bold**\nnext `code`")
    assert "<" not in s and "|" not in s.replace("\\|", "") and "@octocat" not in s
    assert "\n" not in s and "\\[click\\](http://x)" in s and "\\*\\*bold\\*\\*" in s
    assert len(md_escape("x" * 500, 50)) == 50


def test_junit_carries_hostile_text_as_valid_xml(tmp_path):
    """Reasons quoted from model output (control characters, markup, a CDATA end) still
    make a document that validates and reads back with the text intact but inert."""
    from evalkit.telling.ciout import CiReport, TestCase, write_junit

    nasty = "bad \x01\x1b[31m <failure/> ]]> & \"quotes\" \ufffe end"
    rep = CiReport("evalkit gate", False, "FAIL", (TestCase("c1", "evalkit.x", "failure", nasty, nasty),
                                                  TestCase("c2", "evalkit.x", "error", "e"),
                                                  TestCase("c3", "evalkit.x", "skipped", "s"),
                                                  TestCase("c4", "evalkit.x", "passed", "", nasty)),
                   properties={"run": nasty})
    cases = read_junit(write_junit(rep, tmp_path / "deep" / "j.xml"))
    msg = cases["c1"].result[0].message
    assert msg == "bad [31m <failure/> ]]> & \"quotes\"  end"
    assert cases["c2"].is_error and cases["c3"].is_skipped and cases["c4"].is_passed


TOKEN = "ghp_" + "Zq8rT2mVx9LkPw4Hn7Jc3Ba6Ys5Ud1Ef0GiK"  # GitHub's classic token format: 36 characters


def test_ci_outputs_never_publish_a_secret_a_model_leaked(pipeline, tmp_path):
    """A check's reason quotes the output (`exact: output 'the admin token is ghp_...'
    != expected 'Paris'`): it went into the top-failures table of $GITHUB_STEP_SUMMARY
    and the JUnit message as is. Now both show the placeholder."""
    suite = _pipeline_suite(tmp_path / "evals" / "exact", 6)
    cases = [json.loads(x) for x in (suite / "cases.jsonl").read_text().splitlines()]
    (suite / "cases.jsonl").write_text("".join(json.dumps({**c, "checks": [{"kind": "exact"}]}) + "\n"
                                               for c in cases))
    with ScriptedServer(GOOD) as srv:
        r = cli("run", suite, "--base-url", srv.base_url, "--no-progress", "--no-cache")
    assert cli("grade", run_folder(r.stdout)).exit_code in (0, 1)
    assert cli("baseline", "accept", run_folder(r.stdout), "--arm", "guided").exit_code == 0
    leaky = {"rules": [{"match": ["Answer in one word", "France 0?"], "text": f"the admin token is {TOKEN}"}]
             + GOOD["rules"]}
    with ScriptedServer(leaky) as srv:
        r = cli("run", suite, "--base-url", srv.base_url, "--no-progress", "--no-cache")
        assert r.exit_code == 0, r.output
    run = run_folder(r.stdout)
    g = cli("grade", run)
    assert "[HIGH] privacy" in g.output and TOKEN not in g.output
    assert TOKEN in (run / "grades.jsonl").read_text()  # the reason quotes it in the private run folder
    junit, md = tmp_path / "gate.xml", tmp_path / "gate.md"
    res = cli("gate", run, "--baseline", suite / "baseline.json", "--arm", "guided", "--junit", junit,
              "--markdown", md)
    # one case of six: -16.7 points, beyond 5 (the seed's gate fails on the observed drop); the failure is listed
    assert res.exit_code == 1, res.output
    text = md.read_text()
    top = text.split("**Top failures**")[1]
    assert "case-00" in top and "the admin token is &lt;API\\_KEY&gt;" in top, top
    for path in (junit, md):
        assert TOKEN not in path.read_text() and "ghp_" not in path.read_text()
    read_junit(junit)  # still a valid document
    # the run's own JUnit and Markdown, and compare's, go through the same writers
    from evalkit.telling import ciout
    assert TOKEN not in ciout.junit_xml(ciout.CiReport("t", False, TOKEN, (ciout.TestCase(
        TOKEN, "c", "failure", f"output {TOKEN}", f"detail {TOKEN}"),), (md_escape(TOKEN),))).decode()
