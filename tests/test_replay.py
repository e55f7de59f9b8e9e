"""Replay of agent trajectories: two arms side by side in a terminal (`evalkit replay`)
and on a report page, hostile text escaped; the single-arm conformance verdict in
`compare`, the run summary and the index."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import browser_run
from evalkit._cli.main import main
from evalkit.conclusions.grading import grade_run
from evalkit.telling.replay import default_arms, pick_cases, replay_case
from evalkit.telling.reports import report_run
from evalkit.running.runner import run_suite
from evalkit.calls.serve import ScriptedServer

# the agent suite is shared with the browser test of the reports (tests/browser_run.py)
SCRIPT = browser_run.AGENT_SCRIPT


@pytest.fixture(scope="module")
def agent_run(tmp_path_factory):
    return browser_run.make_agent_run(tmp_path_factory.mktemp("replay"))


def test_the_replay_pairs_the_arms_turn_by_turn(agent_run):
    assert default_arms(agent_run) == ["baseline", "skilled"]
    assert pick_cases(agent_run, ["baseline", "skilled"], 1) == ["q0"]
    rep = replay_case(agent_run, "q1")
    assert rep.index == 0 and [a.outcome for a in rep.arms] == ["failed", "passed"]
    rows = rep.rows()
    assert [n for n, _ in rows] == [1, 2]
    assert rows[1][1][0] is None and rows[1][1][1].call["answer"]["text"].startswith("The answer is 42")
    base = rep.arms[0]
    assert any(c["name"] == "activation" and c["passed"] for c in base.grade["checks"])  # no skill, none claimed


def test_evalkit_replay_prints_both_arms_side_by_side_sanitized(agent_run):
    r = CliRunner().invoke(main, ["replay", str(agent_run), "--case", "q0", "--arms", "baseline,skilled",
                                  "--width", "140"])
    assert r.exit_code == 0, r.output
    out = r.output
    assert out.startswith("case q0, sample 1: baseline | skilled")
    head = next(line for line in out.splitlines() if line.startswith("arm baseline"))
    assert re.search(r"arm baseline, sample 1: failed +\| arm skilled, sample 1: passed", head)
    assert "tool lookup" in out and "I guess 7." in out and "--- turn 2 " in out
    assert "\x1b" not in out and "\u202e" not in out
    assert "\\x1b[31mRED\\u202e" in out  # shown as escapes, never as what they would do
    bad = CliRunner().invoke(main, ["replay", str(agent_run), "--case", "nope"])
    assert bad.exit_code == 2 and "case 'nope' is not in the run" in bad.output


def test_the_replay_page_shows_two_arms_side_by_side_with_everything_escaped(agent_run, tmp_path):
    res = report_run(agent_run, tmp_path / "reports", notebooks=["replay"])
    [nb] = res.notebooks
    assert nb.ok, nb.error
    page = nb.html.read_text()
    assert page.count("ek-replay") >= 2  # both picked cases
    assert '<th style="text-align:left">baseline — failed</th><th style="text-align:left">skilled — passed</th>' in page
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "tool lookup({\"q\": \"answer\"}) -&gt; FOUND: 42" in page
    side = json.loads((tmp_path / "reports" / agent_run.name / "replay.json").read_text())
    assert side["arms"] == ["baseline", "skilled"] and {c["case"] for c in side["cases"]} == {"q0", "q1"}


def test_a_single_arm_run_gets_the_conformance_verdict_in_compare_the_report_and_the_index(agent_run, tmp_path):
    suite = Path(agent_run).parent.parent / "suite"
    cfg = json.loads((suite / "config.json").read_text())
    single = tmp_path / "single"
    single.mkdir()
    for name in ("prompt.txt", "cases.jsonl"):
        (single / name).write_text((suite / name).read_text())
    (single / "config.json").write_text(json.dumps({**cfg, "arms": [{"name": "solo"}]}))
    with ScriptedServer(SCRIPT) as srv:
        res = run_suite(single, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
    grade_run(res.path)
    r = CliRunner().invoke(main, ["compare", str(res.path), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["kind"] == "regression" and d["arm"] == "solo" and d["below"] == 4 and d["n_trials"] == 4
    r = CliRunner().invoke(main, ["compare", str(res.path), "--fail-on", "regression"])
    assert r.exit_code == 1 and r.output.startswith("verdict: regression (single-arm conformance of arm 'solo')")
    two = CliRunner().invoke(main, ["compare", str(agent_run)])
    assert two.exit_code == 2 and "name --baseline and --treatment" in two.output
    rep = report_run(res.path, tmp_path / "reports", notebooks=["run_summary"])
    assert rep.ok, [n.error for n in rep.notebooks]
    manifest = json.loads((tmp_path / "reports" / res.path.name / "report.json").read_text())
    assert manifest["verdicts"][0]["kind"] == "regression"
    assert manifest["verdicts"][0]["label"] == "conformance regression"
    index = (tmp_path / "reports" / "index.html").read_text()
    assert "<span class='regression'>conformance regression</span>" in index


def test_the_replay_html_shows_control_and_bidi_characters_as_visible_escapes(agent_run):
    from evalkit.telling.replay import render_html
    from evalkit.telling.nb import text_html

    page = render_html(replay_case(agent_run, "q0", ["baseline", "skilled"], 0))
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", page)
    assert "42 &lt;script&gt;alert(1)&lt;/script&gt;\\x1b[31mRED\\u202e" in page  # shown, not obeyed
    assert text_html("a\tb\nc\x9b\u2067") == text_html("a\tb\nc\\x9b\\u2067")  # a block keeps its lines and tabs
    assert "a\tb\nc" in text_html("a\tb\nc")
