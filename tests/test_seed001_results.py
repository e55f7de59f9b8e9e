"""Seed 001's results as written (issue 42, item 1): the RESULTS block states what a run
without a judged case spent (`Spend: $x of $cap`, never `-`), baseline.json carries the
seed's `success_rate` and `cost_per_task_usd` beside evalkit's names, and the gate
notes a baseline judged with another judge version."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from test_grading import CASES, JUDGE_SCRIPT, _cost_suite, write_suite

from evalkit._cli.main import main
from evalkit.calls.ledger import role_spend
from evalkit.calls.serve import ScriptedServer
from evalkit.conclusions import gates
from evalkit.running.runner import run_suite

GEN_SCRIPT = {"model": "gen-model", "rules": [{"match": "France", "text": "Paris"}], "default": {"text": "?"}}


def test_a_run_with_no_judged_case_states_its_spend(tmp_path):
    cases = [c for c in CASES if c["id"] == "cap-fr"]
    suite = write_suite(tmp_path, cases=cases, extra={"gate": {"on_underpowered": "warn"}})
    with ScriptedServer(GEN_SCRIPT) as gen:
        run = run_suite(str(suite), base_url=gen.base_url, progress=False).path
    out = CliRunner().invoke(main, ["grade", str(run)])
    assert out.exit_code == 0, out.output
    spent = role_spend(run / "ledger.jsonl", "generator")
    summary = json.loads((run / "grades-summary.json").read_text())
    assert spent > 0 and summary["run_spend_usd"] == pytest.approx(spent)
    spend_line = next(line for line in out.output.splitlines() if line.startswith("Spend:"))
    assert spend_line.startswith("Spend:   $0.0") and "of $1.00 cap (generator + judge)" in spend_line


def test_baseline_json_has_the_seeds_names_and_the_gate_notes_a_judge_change(tmp_path):
    suite, gen_script = _cost_suite(tmp_path)
    with ScriptedServer(gen_script) as gen, ScriptedServer(JUDGE_SCRIPT) as judge:
        run = run_suite(str(suite), base_url=gen.base_url, progress=False).path
        assert CliRunner().invoke(main, ["grade", str(run), "--judge-base-url", judge.base_url]).exit_code == 0
    gates.accept_baseline(run, suite)
    doc = json.loads((suite / "baseline.json").read_text())
    summary = json.loads((run / "grades-summary.json").read_text())
    arm = summary["per_arm"]["baseline"]["overall"]
    assert doc["success_rate"] == pytest.approx(arm["sample_pass_rate"])
    assert doc["cost_per_task_usd"] == doc["cost_per_case_usd"] and doc["cost_per_task_usd"] > 0
    assert doc["judge_version"] == "v1"
    same = gates.gate(run, suite / "baseline.json")
    assert not any("judge version" in n for n in same.notes)
    doc["judge_version"] = "v9"  # the baseline was judged with another judge version
    (suite / "baseline.json").write_text(json.dumps(doc))
    other = gates.gate(run, suite / "baseline.json")
    note = next(n for n in other.notes if "judge version" in n)
    assert "judged with v9, this run with v1" in note and "accept a new baseline" in note
    out = CliRunner().invoke(main, ["gate", str(run), "--baseline", str(suite / "baseline.json")])
    assert "judge version changed" in out.output


SEED_FIELDS = ["id", "tags", "output", "passed", "checks", "judge_score", "judge_version", "latency_ms",
               "tokens_in", "tokens_out", "judge_tokens_in", "judge_tokens_out", "cost_usd"]


def test_grading_writes_the_seeds_per_case_result_file(tmp_path):
    suite, gen_script = _cost_suite(tmp_path)
    with ScriptedServer(gen_script) as gen, ScriptedServer(JUDGE_SCRIPT) as judge:
        run = run_suite(str(suite), base_url=gen.base_url, progress=False).path
        assert CliRunner().invoke(main, ["grade", str(run), "--judge-base-url", judge.base_url]).exit_code == 0
    path = run.parent / f"results-{run.name}.jsonl"  # runs/results-<stamp>.jsonl, as the seed's runner
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["id"] for x in lines] == ["cap-fr", "open-1", "weather"]  # one line per case that ran
    assert all(list(x)[:13] == SEED_FIELDS and x["samples"] == 3 for x in lines)
    by_id = {x["id"]: x for x in lines}
    assert by_id["cap-fr"]["output"] == "Paris" and by_id["cap-fr"]["passed"] is True
    assert by_id["weather"]["checks"] == {"tool_calls": True}
    judged = by_id["open-1"]
    assert judged["judge_score"] == 5 and judged["judge_version"] == "v1" and judged["judge_tokens_in"] > 0
    grades = [json.loads(x) for x in (run / "grades.jsonl").read_text().splitlines()]
    samples = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    combined = sum(s["cost_usd"] for s in samples if s["case_id"] == "open-1") + sum(
        g["judge_cost_usd"] for g in grades if g["case_id"] == "open-1")
    assert judged["cost_usd"] == pytest.approx(combined, abs=1e-6) and judged["cost_usd"] > 0
