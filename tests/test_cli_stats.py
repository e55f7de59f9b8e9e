"""The stats subcommands: `verdict`, `power`, `compare`, `gate`, `baseline accept`,
`noise`, their text and `--json` output and exit statuses; and one end-to-end pass
through the real pipeline (`evalkit run` over HTTP to the scripted server, `evalkit
grade`, then compare / baseline accept / gate)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.numbers import stats
from evalkit._cli.main import main
from evalkit.calls.serve import ScriptedServer

import browser_run
from conftest import make_run, make_suite, two_arm


def cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_verdict_text_and_json():
    r = cli("verdict", "--wins", "9", "--ties", "4", "--losses", "2")
    assert r.exit_code == 0
    assert "verdict: no-improvement" in r.output and "9W/4T/2L" in r.output and "p = 0.06543" in r.output
    r = cli("verdict", "--wins", "9", "--ties", "4", "--losses", "2", "--json")
    d = json.loads(r.output)
    assert d["kind"] == "no-improvement" and d["discordant"] == 11 and d["n_trials"] == 15
    assert d["p_value"] == pytest.approx(134 / 2048)


def test_verdict_exit_codes_and_fail_on():
    assert cli("verdict", "--wins", "0", "--ties", "0", "--losses", "8").exit_code == 0  # a verdict is output
    r = cli("verdict", "--wins", "0", "--ties", "0", "--losses", "8", "--fail-on", "regression")
    assert r.exit_code == 1 and "verdict: regression" in r.output
    r = cli("verdict", "--wins", "8", "--ties", "0", "--losses", "0", "--errored", "1",
            "--fail-on", "regression", "--fail-on", "inconclusive", "--json")
    assert r.exit_code == 1 and json.loads(r.output)["kind"] == "inconclusive"
    r = cli("verdict", "--wins", "8", "--ties", "0", "--losses", "0", "--trials", "9", "--json")
    assert json.loads(r.output)["kind"] == "inconclusive"


def test_verdict_bad_input_exits_2():
    r = CliRunner().invoke(main, ["verdict", "--wins", "5", "--ties", "5", "--losses", "5", "--trials", "3"])
    assert r.exit_code == 2 and r.stderr.startswith("error: ") and "trials" in r.stderr and not r.stdout


def test_power_text_json_and_write(tmp_path):
    r = cli("power", "--win-rate", "0.75", "--tie-rate", "0.3", "--alpha", "0.05", "--power", "0.8")
    ss = stats.sign_test_sample_size(0.75, 0.3, 0.05, 0.8)
    assert r.exit_code == 0
    assert f"discordant pairs needed (exact): {ss.discordant_stable}" in r.output
    assert f"first reached at {ss.discordant_first}" in r.output
    assert f"normal approximation {ss.trials_approx}" in r.output
    d = json.loads(cli("power", "--win-rate", "0.75", "--alpha", "0.05", "--power", "0.9", "--json").output)
    ss = stats.sign_test_sample_size(0.75, 0.0, 0.05, 0.9)
    assert d["n_trials"] == ss.trials_stable and d["n_discordant_approx"] == ss.discordant_approx
    assert d["test"] == "sign" and d["unit"] == "case"
    suite = make_suite(tmp_path, {"a": {}}, seed=99)
    r = cli("power", "--win-rate", "0.8", "--alpha", "0.05", "--power", "0.8", "--write", str(suite))
    assert r.exit_code == 0 and "plan written" in r.output
    plan = json.loads((suite / "plan.json").read_text())
    assert plan["seed"] == 99 and plan["alpha"] == 0.05 and plan["power"] == 0.8 and plan["win_rate"] == 0.8
    assert plan["n_trials"] == stats.sign_test_sample_size(0.8, 0.0, 0.05, 0.8).trials_stable and plan["created"]
    r = CliRunner().invoke(main, ["power", "--win-rate", "1.5", "--alpha", "0.05", "--power", "0.8"])
    assert r.exit_code == 2 and "win rate" in r.stderr


def test_power_sequential_shows_both_fixed_designs_and_ratios():
    # Review finding: "fixed design 35" (the stable n) while the benchmark compares
    # with the first n reaching power (30). Both are shown, each with its ratio.
    args = ("power", "--win-rate", "0.75", "--alpha", "0.05", "--power", "0.8", "--sequential")
    r = cli(*args)
    ss = stats.sign_test_sample_size(0.75, 0.0, 0.05, 0.8)
    assert ss.trials_first < ss.trials_stable  # the sawtooth: the two differ here
    # the plan's design: truncated where it stops soonest on average (3x the fixed pairs: issue 46)
    oc = stats.SequentialSignTest(0.75, 0.05, 0.8, max_discordant=90).operating_characteristics(0.75, 0.0)
    e = oc.expected_trials
    assert r.exit_code == 0
    assert (f"fixed design for comparison: {ss.trials_first} cases (first n reaching power 0.8; expected "
            f"sequential / fixed = {e / ss.trials_first:.2f}x), {ss.trials_stable} cases (n from which power "
            f"stays >= 0.8; {e / ss.trials_stable:.2f}x)") in r.output, r.output
    q = json.loads(cli(*args, "--json").output)["sequential"]
    assert (q["fixed_trials_first"], q["fixed_trials_stable"]) == (ss.trials_first, ss.trials_stable)
    assert q["ratio_to_fixed_first"] == pytest.approx(e / ss.trials_first)
    assert q["ratio_to_fixed_stable"] == pytest.approx(e / ss.trials_stable)
    print(f"sequential at w=0.75: expected {e:.1f} cases; fixed first {ss.trials_first} "
          f"({e / ss.trials_first:.2f}x), stable {ss.trials_stable} ({e / ss.trials_stable:.2f}x)")


def test_compare_cli_with_plan(tmp_path):
    suite = make_suite(tmp_path, {f"c{i}": {} for i in range(8)})
    cli("power", "--win-rate", "0.8", "--alpha", "0.05", "--power", "0.8", "--write", str(suite))
    run = make_run(tmp_path, "r", two_arm({f"c{i}": ([False, False], [True, False]) for i in range(8)}), k=2,
                   suite=suite)
    r = cli("compare", str(run), "--baseline", "baseline", "--treatment", "skilled")
    assert r.exit_code == 0
    assert "verdict: pass" in r.output and "unit of the test: case" in r.output
    assert "clustered on case (8 clusters)" in r.output and "plan: NOT followed: stopped short: 8 of" in r.output
    d = json.loads(cli("compare", str(run), "--baseline", "baseline", "--treatment", "skilled", "--json").output)
    assert d["wins"] == 8 and d["n_pairs"] == 16 and d["paired"]["mean"] == pytest.approx(0.5)
    assert d["plan_check"]["ok"] is False
    r = cli("compare", str(run), "--baseline", "skilled", "--treatment", "baseline", "--fail-on", "regression")
    assert r.exit_code == 1
    r = CliRunner().invoke(main, ["compare", str(run), "--baseline", "baseline", "--treatment", "nope"])
    assert r.exit_code == 2 and "not in the run" in r.output


def test_compare_says_the_plan_first_and_require_plan_fails_a_run_that_did_not_follow_it(tmp_path):
    suite = make_suite(tmp_path, {f"c{i}": {} for i in range(8)})
    run = make_run(tmp_path, "r", two_arm({f"c{i}": ([False, False], [True, False]) for i in range(8)}), k=2,
                   suite=suite)
    r = cli("compare", str(run), "--baseline", "baseline", "--treatment", "skilled")
    assert r.output.splitlines()[:2] == ["verdict: pass", "plan: none (exploratory: no pre-registered plan.json; "
                                         "write one with `evalkit power --write`)"]
    r = CliRunner().invoke(main, ["compare", str(run), "--baseline", "baseline", "--treatment", "skilled",
                                  "--require-plan"])
    assert r.exit_code == 1 and "--require-plan: no pre-registered plan" in r.output
    w = CliRunner().invoke(main, ["power", "--win-rate", "0.8", "--alpha", "0.05", "--power", "0.8", "--write",
                                  str(suite)])
    assert w.exit_code == 0 and "warning" not in w.output  # a suite that cannot load is lint's to report
    real = browser_run.make_suite(tmp_path / "real", "http://127.0.0.1:9/v1")  # 15 valid cases
    w = CliRunner().invoke(main, ["power", "--win-rate", "0.8", "--alpha", "0.05", "--power", "0.8", "--write",
                                  str(real)])
    need = json.loads((real / "plan.json").read_text())["n_trials"]
    assert w.exit_code == 0 and (f"warning: the suite has 15 cases, the plan needs {need} (one vote per case)"
                                 in w.output), w.output
    r = CliRunner().invoke(main, ["compare", str(run), "--baseline", "baseline", "--treatment", "skilled",
                                  "--require-plan"])
    assert r.exit_code == 1 and r.output.splitlines()[1].startswith("plan: NOT followed: stopped short: 8 of")
    assert "--require-plan: the run did not follow its plan" in r.output


def test_a_run_with_more_units_than_planned_follows_its_plan_and_fewer_does_not(tmp_path):
    # issue 41: a plan for 48 units and a suite of 51 cases "did not follow" it, exit 1;
    # more units than planned only add power, fewer do not follow it, and the page says which
    suite = make_suite(tmp_path, {f"c{i}": {} for i in range(51)})
    w = cli("power", "--win-rate", "0.75", "--tie-rate", "0.3", "--alpha", "0.05", "--power", "0.8", "--write", str(suite))
    assert w.exit_code == 0 and json.loads((suite / "plan.json").read_text())["n_trials"] == 48, w.output
    outcomes = {f"c{i}": ([False], [i % 4 != 0]) for i in range(51)}
    run = make_run(tmp_path, "r", two_arm(outcomes), k=1, suite=suite)
    r = cli("compare", str(run), "--baseline", "baseline", "--treatment", "skilled", "--require-plan")
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[1] == "plan: followed (51 units, 48 planned (more than planned only adds power))"
    fewer = make_run(tmp_path, "r47", two_arm({c: o for c, o in list(outcomes.items())[:47]}), k=1, suite=suite)
    r = cli("compare", str(fewer), "--baseline", "baseline", "--treatment", "skilled", "--require-plan")
    assert r.exit_code == 1 and r.output.splitlines()[1].startswith("plan: NOT followed: stopped short: 47 of 48")


def test_power_write_never_replaces_a_plan_silently(tmp_path):
    suite = make_suite(tmp_path, {f"c{i}": {} for i in range(40)})
    args = ["power", "--win-rate", "0.8", "--alpha", "0.05", "--power", "0.8", "--write", str(suite)]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0
    before = (suite / "plan.json").read_bytes()
    again = CliRunner().invoke(main, args[:2] + ["0.7"] + args[3:])
    assert again.exit_code == 2 and "already pre-registered" in again.output and "--force" in again.output
    assert (suite / "plan.json").read_bytes() == before
    forced = CliRunner().invoke(main, args[:2] + ["0.7"] + args[3:] + ["--force"])
    assert forced.exit_code == 0 and json.loads((suite / "plan.json").read_text())["win_rate"] == 0.7


def test_gate_baseline_and_noise_cli(tmp_path):
    suite = make_suite(tmp_path, {f"c{i}": {} for i in range(6)})
    base = make_run(tmp_path, "base", {(f"c{i}", "x"): [True, True] for i in range(6)}, k=2, suite=suite)
    r = cli("gate", str(base), "--baseline", str(suite / "baseline.json"))
    assert r.exit_code == 2  # no baseline yet: bad input
    r = cli("baseline", "accept", str(base), "--to", str(suite))
    assert r.exit_code == 0 and (suite / "baseline.json").exists() and (suite / "baseline-summary.md").exists()
    r = cli("gate", str(base), "--baseline", str(suite / "baseline.json"))
    assert r.exit_code == 0 and r.output.startswith("Gate: PASS")
    bad = make_run(tmp_path, "bad", {(f"c{i}", "x"): [False, False] for i in range(6)}, k=2, suite=suite)
    r = cli("gate", str(bad), "--baseline", str(suite / "baseline.json"), "--json")
    assert r.exit_code == 1 and json.loads(r.output)["passed"] is False
    inc = make_run(tmp_path, "inc", {(f"c{i}", "x"): [True, True] for i in range(6)}, k=2, suite=suite,
                   complete=False)
    r = cli("gate", str(inc), "--baseline", str(suite / "baseline.json"))
    assert r.exit_code == 1 and "INCOMPLETE" in r.output and "rates not read" in r.output
    r = CliRunner().invoke(main, ["baseline", "accept", str(inc), "--to", str(suite)])
    assert r.exit_code == 1 and "refusing" in r.output
    r = cli("noise", str(base), str(base))
    assert r.exit_code == 0 and "score overall" in r.output
    r = cli("noise", str(base), str(bad), "--strict")
    assert r.exit_code == 1 and "runs differ by more than the threshold" in r.output


PRICE = {"in_per_mtok": 1.0, "out_per_mtok": 2.0}


def _pipeline_suite(root: Path, n_cases: int, cap: float = 1.0) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps({
        "mode": "completion", "template": "prompt.txt",
        "generator": {"model": "scripted", "api_key_env": "EVALKIT_TEST_KEY"},
        "temperature": 0.8, "seed": 1234, "k": 3, "concurrency": 2, "cost_cap_usd": cap,
        "max_tokens_in": 64, "max_tokens_out": 8, "price": PRICE, "judge_price": PRICE, "max_attempts": 1,
        "gate": {"max_success_drop_points": 5, "max_cost_increase_pct": 20, "on_underpowered": "warn"},  # 10 cases
        "arms": [{"name": "base"}, {"name": "guided", "guidance": "guided.md"}]}))
    (root / "prompt.txt").write_text("${guidance}Q: ${input}\nA:")
    (root / "guided.md").write_text("Answer in one word. ")
    (root / "cases.jsonl").write_text("".join(
        json.dumps({"id": f"case-{i:02d}", "input": f"capital of France {i}?", "expected": "Paris",
                    "tags": ["capital"]}) + "\n" for i in range(n_cases)))
    return root


def test_end_to_end_run_grade_compare_gate(tmp_path, monkeypatch):
    """Real pipeline: samples over HTTP from the scripted server, graded by `evalkit
    grade`, compared, accepted as a baseline, gated; a cap too small for the run gives
    an INCOMPLETE run that the gate fails without reading its rates."""
    monkeypatch.setenv("EVALKIT_TEST_KEY", "test")
    suite = _pipeline_suite(tmp_path / "evals" / "capitals", 8)
    # the guided arm's prompt carries the guidance: it answers Paris; the bare arm is
    # right one time in three (weighted by the request's seed)
    script = {"rules": [{"match": "Answer in one word", "text": "Paris"},
                        {"match": "France", "texts": ["Paris", "Lyon", "Nice"], "weights": [0.3, 0.35, 0.35]}]}

    class Result:  # the CLI in process (click's runner), shaped like a finished process
        def __init__(self, args: tuple[str, ...]) -> None:
            r = CliRunner().invoke(main, list(args), catch_exceptions=False)
            self.returncode, self.stdout, self.stderr = r.exit_code, r.stdout, r.stderr

    def evalkit(*args: str) -> Result:
        return Result(args)

    with ScriptedServer(script) as srv:
        r1 = evalkit("run", str(suite), "--base-url", srv.base_url, "--no-progress", "--no-cache")
        assert r1.returncode == 0, r1.stderr
        run1 = Path(r1.stdout.split("run folder: ")[1].splitlines()[0].strip())
        r2 = evalkit("run", str(suite), "--base-url", srv.base_url, "--no-progress", "--no-cache")
        run2 = Path(r2.stdout.split("run folder: ")[1].splitlines()[0].strip())
    for run in (run1, run2):
        g = evalkit("grade", str(run))
        assert g.returncode == 0, g.stdout + g.stderr

    cmp_ = evalkit("compare", str(run1), "--baseline", "base", "--treatment", "guided", "--json")
    assert cmp_.returncode == 0, cmp_.stderr
    v = json.loads(cmp_.stdout)
    grades = [json.loads(x) for x in (run1 / "grades.jsonl").read_text().splitlines()]
    base_pass = {(g["case_id"], g["index"]): g["passed"] for g in grades if g["arm"] == "base"}
    assert all(g["passed"] for g in grades if g["arm"] == "guided")
    # independent tally: a case is a win unless the bare arm passed all three repeats
    expect_wins = sum(1 for c in range(8) if not all(base_pass[(f"case-{c:02d}", i)] for i in range(3)))
    assert v["wins"] == expect_wins and v["losses"] == 0 and v["n_trials"] == 8 and v["n_pairs"] == 24
    assert v["kind"] == ("pass" if expect_wins >= 6 else "inconclusive")
    print(f"end to end: {v['wins']}W/{v['ties']}T/{v['losses']}L over {v['n_trials']} cases -> {v['kind']}, "
          f"p = {v['p_value']:.4g}; paired difference {v['paired']['mean']:+.3f} (SE {v['paired']['se']:.3f})")

    acc = evalkit("baseline", "accept", str(run1), "--arm", "guided")
    assert acc.returncode == 0, acc.stderr
    assert json.loads((suite / "baseline.json").read_text())["gated_case_score"] == 1.0
    gate = evalkit("gate", str(run2), "--baseline", str(suite / "baseline.json"), "--arm", "guided")
    assert gate.returncode == 0 and gate.stdout.startswith("Gate: PASS"), gate.stdout + gate.stderr
    before = (suite / "baseline.json").read_text()

    small = _pipeline_suite(tmp_path / "evals" / "small", 8, cap=0.0004)
    (small / "baseline.json").write_text(before)
    with ScriptedServer(script) as srv:
        r3 = evalkit("run", str(small), "--base-url", srv.base_url, "--no-progress", "--no-cache")
    assert r3.returncode == 1
    run3 = Path(r3.stdout.split("run folder: ")[1].splitlines()[0].strip())
    gate = evalkit("gate", str(run3), "--baseline", str(small / "baseline.json"), "--arm", "guided", "--json")
    res = json.loads(gate.stdout)
    assert gate.returncode == 1 and res["read_rates"] is False and res["reasons"][0].startswith("INCOMPLETE")
    assert (suite / "baseline.json").read_text() == before


def test_compare_never_prints_an_endpoints_control_sequences(tmp_path, monkeypatch):
    """An HTTP 400 whose message holds a terminal escape (`\\x1b]0;PWNED-TITLE\\x07` sets
    the window title): it reached the terminal raw through the verdict's problems.
    Now every line is printable: the sequence shown as escapes, never run."""
    from test_client import HostileServer, completion_body

    monkeypatch.setenv("EVALKIT_TEST_KEY", "test")
    suite = _pipeline_suite(tmp_path / "evals" / "capitals", 4)
    hostile = "bad \x1b]0;PWNED-TITLE\x07 request \u202e"

    def answer(body):
        if "France 1?" in body.get("prompt", "") and "Answer in one word" in body["prompt"]:
            return 400, {"error": {"message": hostile, "type": "invalid_request_error"}}
        return completion_body("Paris")

    with HostileServer(answer) as srv:
        r = cli("run", str(suite), "--base-url", srv.base_url, "--no-progress", "--no-cache")
    assert r.exit_code == 1, r.output  # the case's guided samples errored
    run = r.stdout.split("run folder: ")[1].splitlines()[0].strip()
    assert cli("grade", run).exit_code in (0, 1)
    res = cli("compare", run, "--baseline", "base", "--treatment", "guided")
    assert res.exit_code == 0, res.output
    assert "PWNED-TITLE" in res.output  # the problem is shown ...
    assert "\x1b" not in res.output and "\x07" not in res.output and "\u202e" not in res.output  # ... inert
    assert "\\x1b]0;PWNED-TITLE\\x07" in res.output
