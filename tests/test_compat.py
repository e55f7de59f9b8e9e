"""Run folders written by evalkit 0.1 (tests/data/runs/v0.1/) still load, grade, compare,
gate, accept and report (tests/data/runs/README.md says how the fixture was made)."""
from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit._cli.main import main
from evalkit.foundations.records import GateResult, GradesSummary
from evalkit.runfolder.runload import case_table, grades_summary, load_run, run_verdicts
from evalkit.calls.serve import ScriptedServer

FIXTURE = Path(__file__).parent / "data" / "runs" / "v0.1"
STAMP = "20261201-094733"

def _maker():
    spec = importlib.util.spec_from_file_location("make_v01", FIXTURE.parent / "make_v01.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


JUDGE_SCRIPT = _maker().JUDGE_SCRIPT  # the judge the fixture was graded with


def expected(name: str) -> str:
    return (FIXTURE / "expected" / f"{name}.stdout").read_text(encoding="utf-8")


@pytest.fixture()
def suite(tmp_path: Path) -> Path:
    """A copy of the fixture (grading and accepting write into it)."""
    dest = tmp_path / "v0.1"
    shutil.copytree(FIXTURE, dest)
    return dest


def invoke(*args: str) -> tuple[int, str]:
    out = CliRunner().invoke(main, [str(a) for a in args])
    return out.exit_code, out.output


def test_the_fixture_is_what_0_1_wrote():
    run = FIXTURE / "runs" / STAMP
    assert sorted(p.name for p in run.iterdir()) == [
        "config.json", "grades-summary.json", "grades.jsonl", "judge-cache.sqlite", "ledger.jsonl",
        "results.jsonl", "samples", "summary.json", "summary.md"]
    assert not Path(json.loads((run / "config.json").read_text())["suite"]).exists()  # made elsewhere


def test_loads(suite):
    run = load_run(suite / "runs" / STAMP)
    assert len(run.samples) == 24 and len(run.grades) == 24 and run.arm_names() == ["baseline", "skilled"]
    assert run.summary["complete"] is True


def test_regrades_as_it_did_then_from_the_judge_cache_at_no_cost(suite):
    run = suite / "runs" / STAMP
    before = GradesSummary.from_json(json.loads((run / "grades-summary.json").read_text()))  # 0.1's keys
    assert before.per_arm["skilled"].overall.sample_pass_rate == pytest.approx(11 / 12)  # its `success_rate`
    assert before.overall.cost_per_sample_usd is None  # 0.1 kept no list-price cost: unknown, never a guess
    with ScriptedServer(JUDGE_SCRIPT) as judge:
        # 0.1's judge-cache.sqlite names no judge (endpoint, files): its answers cannot be
        # shown to be this judge's, so they are asked again once; 0.1 had no calibration,
        # so the judge's pass/fail counts here by opt-out, as it did then
        code, out = invoke("grade", run, "--judge-base-url", judge.base_url, "--allow-uncalibrated-judge")
        assert code == 0, out
        asked = judge.stats["requests"]
        assert asked > 0, out
        code, out = invoke("grade", run, "--judge-base-url", judge.base_url, "--allow-uncalibrated-judge")
        assert judge.stats["requests"] == asked, out  # every judge answer now replays from judge-cache.sqlite
    assert code == 0, out
    after = grades_summary(run)
    for arm in ("baseline", "skilled"):
        assert after.per_arm[arm].overall.sample_pass_rate == before.per_arm[arm].overall.sample_pass_rate
    # the re-grade writes today's keys; the sets come from the suite (0.1 recorded no case table)
    assert after.per_arm["skilled"].per_set_scores["regression"].gated_case_score == 1.0
    assert case_table(run).source.startswith("rebuilt from the suite")


def test_compares_as_it_did(suite):
    code, out = invoke("compare", suite / "runs" / STAMP, "--baseline", "baseline", "--treatment", "skilled", "--json")
    assert code == 0, out
    was, now = json.loads(expected("compare")), json.loads(out)
    for key in ("kind", "wins", "losses", "ties", "errored", "n_trials", "p_value", "case_votes"):
        assert now[key] == was[key], key
    assert now["plan_check"]["flags"] == was["plan_check"]["flags"]


def test_gates_against_its_baseline_as_it_did(suite):
    code, out = invoke("gate", suite / "runs" / STAMP, "--baseline", suite / "baseline.json", "--json")
    was, now = GateResult.from_json(json.loads(expected("gate"))), GateResult.from_json(json.loads(out))
    # 0.1 passed it, and so does the gate its keys describe (5 points, 20%, tags of 2+ cases;
    # no alpha, so the seed's gate, no noise guard; issue 41). Since issue 26 it says what it
    # can see: 5 gated cases at 100% (planned at (5 + 1)/7 = 0.857) detect only a drop of
    # 2.4865 * sqrt(2 * .857 * .143 / 5) = 55.0 points, above the 5-point threshold: a
    # warning (on_underpowered "warn", the default), exit 0, same checks
    assert was.passed is True and code == 0 and now.status == "PASS", out
    assert now.power.detectable_drop_points == pytest.approx(55.0, abs=0.05) and now.power.underpowered
    assert any(n.startswith("warning: UNDERPOWERED") for n in now.notes)
    assert (now.thresholds.max_success_drop_points, now.thresholds.min_tag_cases) == (5, 2)
    assert not now.thresholds.require_significance
    assert all(not c.failed for c in now.checks)
    # 0.1 named the checks success/per task; the numbers are the same
    assert [(c.kind, c.group.replace("per task", "per case"), c.n_cases) for c in was.checks] == [
        (c.kind, c.group, c.n_cases) for c in now.checks]
    for c_now, c_was in zip(now.checks, was.checks):
        assert c_now.baseline == pytest.approx(c_was.baseline) and c_now.current == pytest.approx(c_was.current)
    # the gate is recorded where the report and the index read it
    assert run_verdicts(suite / "runs" / STAMP).gate == now


def test_accepts_a_new_baseline(suite):
    (suite / "baseline.json").unlink()
    code, out = invoke("baseline", "accept", suite / "runs" / STAMP, "--arm", "skilled")
    assert code == 0, out
    code, out = invoke("gate", suite / "runs" / STAMP, "--baseline", suite / "baseline.json")
    assert code == 0 and out.startswith("Gate: PASS") and "warning: UNDERPOWERED" in out, out  # 5 gated cases


def test_reports(suite, tmp_path):
    # --serial: one lane, one kernel for the pages (the parallel lanes are test_reports' `made`)
    code, out = invoke("report", suite / "runs" / STAMP, "--reports-dir", tmp_path / "reports", "--serial")
    assert code == 0, out
    pages = {p.name for p in (tmp_path / "reports" / STAMP).glob("*.html")}
    assert {"run_summary.html", "pass_at_k.html", "skill_comparison.html"} <= pages
    assert (tmp_path / "reports" / "index.html").is_file()
