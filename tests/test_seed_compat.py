"""Seed compatibility where evalkit chose otherwise (issue 32, item 6): the AGENT EVAL
PLAN block before the first call and `run --plan-only`; `compare --unit trial`, the
SKRAFT count beside the case-level verdict; lint's non-activation warning on a skill
suite. Through the CLI, on real files, against the scripted server."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path

from click.testing import CliRunner
from scipy.stats import binomtest

from evalkit._cli.main import main
from evalkit.calls.serve import ScriptedServer
from evalkit.foundations._io import iter_jsonl
from evalkit.intake.lint import lint_suite

V01 = Path(__file__).parent / "data" / "runs" / "v0.1"
STAMP = "20261201-094733"

CONFIG = {
    "mode": "completion", "template": "prompt.txt",
    "generator": {"model": "scripted", "api_key_env": "EVALKIT_TEST_KEY"},
    "judge": {"model": "judge-model", "api_key_env": "EVALKIT_TEST_KEY"},
    "temperature": 0.0, "seed": 7, "k": 2, "concurrency": 2, "cost_cap_usd": 0.01,
    "ci": {"cost_cap_usd": 0.005},
    "max_tokens_in": 1000, "max_tokens_out": 40,
    "price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0}, "judge_price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0},
    "arms": [{"name": "baseline"}, {"name": "guided", "guidance": "guidance.md"}],
}
CASES = [
    {"id": "a", "input": "say ok", "tags": ["golden"], "set": "capability", "expected": "ok"},
    {"id": "b", "input": "say ok", "tags": ["golden"], "set": "regression", "expected": "ok"},
    {"id": "c", "input": "say ok", "tags": ["adversarial"], "set": "regression", "expected": "ok"},
]


def prompt_suite(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(CONFIG))
    (root / "prompt.txt").write_text("${guidance}${input}\n")
    (root / "guidance.md").write_text("Answer in one word.\n")
    (root / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in CASES))
    return root


def test_run_prints_the_plan_before_its_first_call_and_plan_only_stops_there(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALKIT_TEST_KEY", "sk-test")
    suite = prompt_suite(tmp_path / "suite")
    runs = tmp_path / "runs"
    with ScriptedServer({"default": {"text": "ok"}}) as srv:
        planned = CliRunner().invoke(main, ["run", str(suite), "--plan-only", "--runs-dir", str(runs),
                                            "--base-url", srv.base_url])
        assert planned.exit_code == 0, planned.output
        assert srv.stats["requests"] == 0 and not runs.exists()  # nothing spent, no run folder
        out = planned.output
        assert out.startswith("AGENT EVAL PLAN\n===============\n")
        # 3 cases x 2 arms x k 2 = 12 samples, each one call at its ceiling:
        # 1000 in x $1/Mtok + 40 out x $2/Mtok = $0.00108, so $0.01296 in all, over the $0.01 cap
        assert "Samples:      3 cases x 2 arms x k 2 = 12" in out
        assert "Worst case:   $0.013 (12 samples x up to 1 call(s) at their token ceilings): OVER the cap" in out
        assert "Cost cap:     $0.010 per local run\nCI cost cap:  $0.005 per CI run (evalkit run --ci)\n" in out
        assert "sets capability 1, regression 2" in out and "Tags:         adversarial 1, golden 2" in out
        assert "Arms:         2: baseline, guided" in out and "Generator:    scripted, temperature 0, seed 7" in out
        assert "k 1 = 3" in CliRunner().invoke(main, ["run", str(suite), "--plan-only", "--k", "1",
                                                       "--arms", "guided"]).output
        ran = CliRunner().invoke(main, ["run", str(suite), "--runs-dir", str(runs), "--base-url", srv.base_url,
                                        "--no-progress", "--k", "1"])
        assert srv.stats["requests"] > 0
    assert ran.output.index("AGENT EVAL PLAN") < ran.output.index("run folder: ")


def test_compare_unit_trial_gives_the_skraft_count_beside_the_case_level_verdict(tmp_path):
    suite = tmp_path / "v0.1"
    shutil.copytree(V01, suite)
    run = suite / "runs" / STAMP
    out = CliRunner().invoke(main, ["compare", str(run), "--baseline", "baseline", "--treatment", "skilled",
                                    "--unit", "trial", "--json"])
    doc = json.loads(out.output)
    # the case-level verdict is the one evalkit gives (tests/data/runs/v0.1/expected/compare.stdout)
    expected = json.loads((V01 / "expected" / "compare.stdout").read_text())
    assert {k: doc[k] for k in ("kind", "unit", "wins", "losses", "ties", "p_value")} == {
        k: expected[k] for k in ("kind", "unit", "wins", "losses", "ties", "p_value")}
    # the SKRAFT count, tallied here from grades.jsonl: every (case, index) pair is a unit
    passed: dict[tuple[str, int], dict[str, bool]] = defaultdict(dict)
    for g in iter_jsonl(run / "grades.jsonl"):
        passed[(g["case_id"], g["index"])][g["arm"]] = bool(g["passed"])
    tally = {"win": 0, "loss": 0, "tie": 0}
    for arms in passed.values():
        b, t = arms["baseline"], arms["skilled"]
        tally["win" if t and not b else "loss" if b and not t else "tie"] += 1
    skraft = doc["skraft_trial_count"]
    assert (skraft["wins"], skraft["losses"], skraft["ties"], skraft["n_trials"]) == (
        tally["win"], tally["loss"], tally["tie"], len(passed))
    assert skraft["unit"].startswith("trial (SKRAFT count: trials = stimuli x runs, floor 5")
    assert abs(skraft["p_value"] - binomtest(tally["win"], tally["win"] + tally["loss"]).pvalue) < 1e-12
    # recorded: the case-level verdict only
    recorded = json.loads((run / "verdicts.json").read_text())
    assert "skraft" not in json.dumps(recorded).lower()
    text = CliRunner().invoke(main, ["compare", str(run), "--baseline", "baseline", "--treatment", "skilled",
                                     "--unit", "trial"]).output
    assert text.startswith("verdict: inconclusive") and "SKRAFT count (each trial a unit" in text
    assert "NOT evalkit's verdict" in text


def test_lint_warns_when_a_skill_suite_has_no_non_activation_case(tmp_path):
    suite = tmp_path / "skill"
    (suite / "skills" / "w").mkdir(parents=True)
    (suite / "skills" / "w" / "SKILL.md").write_text("---\nname: w\ndescription: weather\n---\nLook it up.\n")
    (suite / "agent.py").write_text("print('ok')\n")
    cfg = {k: v for k, v in CONFIG.items() if k not in ("template", "arms")} | {
        "mode": "chat", "unit": {"kind": "command", "argv": ["{python}", "agent.py"]},
        "arms": [{"name": "baseline"}, {"name": "skilled", "skill_dir": "skills/w"}]}
    (suite / "config.json").write_text(json.dumps(cfg))
    (suite / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in CASES))
    warning = "a skill suite (an arm with skill_dir) with no non-activation case"
    assert any(warning in w.message for w in lint_suite(suite).warnings)
    lint = CliRunner().invoke(main, ["lint", str(suite)])
    assert warning in lint.output
    cases = [*CASES, {"id": "d", "input": "rename x", "tags": ["golden"], "intent": "non-activation",
                      "expected": "ok"}]
    (suite / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    assert not any(warning in w.message for w in lint_suite(suite).warnings)
