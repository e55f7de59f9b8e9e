"""Verdicts, plans, gates, baselines and noise (evalkit.verdicts).

Run folders are written into tmp_path by hand, following docs/formats.md, so each
test controls exactly which trial passed, errored or is missing.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evalkit import stats
from evalkit import verdicts as V
from evalkit.errors import EvalkitError, InputError
from evalkit.records import GateThresholds


# --------------------------------------------------------------------------- helpers


def make_suite(root: Path, cases: dict[str, dict], *, gate: dict | None = None, seed: int = 7) -> Path:
    """A suite folder with cases.jsonl (id, set, tags) and a config.json."""
    suite = root / "evals" / "unit"
    suite.mkdir(parents=True, exist_ok=True)
    with open(suite / "cases.jsonl", "w") as fh:
        for cid, c in cases.items():
            fh.write(json.dumps({"id": cid, "input": cid, "expected": "x", "tags": c.get("tags", ["t"]),
                                 "set": c.get("set", "capability")}) + "\n")
    (suite / "config.json").write_text(json.dumps({"seed": seed, "gate": gate or {}}))
    return suite


def make_run(root: Path, name: str, outcomes: dict[tuple[str, str], list], *, k: int, suite: Path | None = None,
             tags: dict[str, list[str]] | None = None, costs: dict[tuple[str, str], float] | None = None,
             complete: bool = True, exit_code: int = 0, errors: list[tuple[str, str, int]] = (),
             gate: dict | None = None, config_hash: str = "h1") -> Path:
    """A run folder. outcomes[(case, arm)] lists each index's grade: True/False, None
    (ungraded: passed null), "nograde" (sample with no grade line) or "missing" (no sample)."""
    run = root / "runs" / name
    run.mkdir(parents=True)
    cases = list(dict.fromkeys(c for c, _ in outcomes))
    arms = list(dict.fromkeys(a for _, a in outcomes))
    (run / "config.json").write_text(json.dumps({
        "suite": str(suite) if suite else "", "suite_name": "unit", "config": {"gate": gate or {}, "k": k},
        "config_hash": config_hash, "arms": [{"name": a} for a in arms], "k": k, "cases": cases,
        "created": "2026-01-01T00:00:00Z", "source": "evalkit"}))
    res, grades = [], []
    for (case, arm), outs in outcomes.items():
        for i, o in enumerate(outs):
            if o == "missing":
                continue
            cost = (costs or {}).get((case, arm), 0.001)
            res.append({"case_id": case, "tags": (tags or {}).get(case, ["t"]), "arm": arm, "index": i, "seed": i,
                        "model": "m", "output": "o", "tool_calls": [], "finish_reason": "stop",
                        "usage": {"prompt_tokens": 3, "completion_tokens": 1}, "latency_ms": 1.0,
                        "cost_usd": cost, "request_hash": f"{case}{arm}{i}", "cached": False,
                        "cost_avoided_usd": 0.0})
            if o == "nograde":
                continue
            grades.append({"case_id": case, "arm": arm, "index": i, "passed": o,
                           "checks": [{"name": "contains", "passed": bool(o), "reason": ""}],
                           "error": "judge failed" if o is None else None, "judge_cost_usd": 0.0})
    with open(run / "results.jsonl", "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in res)
    with open(run / "grades.jsonl", "w") as fh:
        fh.writelines(json.dumps(g) + "\n" for g in grades)
    if errors:
        with open(run / "errors.jsonl", "w") as fh:
            for case, arm, i in errors:
                fh.write(json.dumps({"case_id": case, "arm": arm, "index": i, "error": "HTTP 500",
                                     "attempts": 4}) + "\n")
    total = len(cases) * len(arms) * k
    (run / "summary.json").write_text(json.dumps({
        "complete": complete, "ran": len(res), "total": total, "reason": None if complete else "cost cap reached",
        "spend_usd": 0.01, "avoided_usd": 0.0, "cap_usd": 1.0, "per_arm": {}, "exit_code": exit_code}))
    head = "" if complete else f"INCOMPLETE: {len(res)}/{total} cases (cost cap reached)\n"
    (run / "summary.md").write_text(head + "# Summary\n")
    return run


def two_arm(cases: dict[str, tuple[list, list]]) -> dict[tuple[str, str], list]:
    out = {}
    for cid, (b, t) in cases.items():
        out[(cid, "baseline")] = b
        out[(cid, "skilled")] = t
    return out


# --------------------------------------------------------------------------- tally verdicts


def test_seed_example_9w_4t_2l_is_no_improvement():
    v = V.verdict_from_tally(9, 4, 2)
    assert v.kind == "no-improvement"
    assert v.p_value == pytest.approx(134 / 2048)  # 2 * P(Bin(11, 1/2) <= 2)
    assert round(v.p_value, 3) == 0.065
    assert v.p_one_sided == pytest.approx(67 / 2048)
    assert v.n_trials == 15 and v.discordant == 11


@pytest.mark.parametrize("w,t,l,kind,why", [
    (6, 0, 0, "pass", "significant"),          # smallest significant tally: p = 2/64
    (0, 0, 6, "regression", "baseline"),
    (5, 0, 0, "inconclusive", "discordant"),   # a flawless 5W sweep scores 0.0625
    (5, 9, 0, "inconclusive", "discordant"),   # many trials, still only 5 discordant
    (7, 0, 1, "no-improvement", "chance"),     # p = 0.0703
    (3, 1, 0, "inconclusive", "4 trial(s)"),   # fewer than 5 trials
    (4, 1, 0, "inconclusive", "discordant"),   # exactly 5 trials: passes the trial floor, not the pair floor
])
def test_tally_edges(w, t, l, kind, why):
    v = V.verdict_from_tally(w, t, l)
    assert v.kind == kind
    assert why in v.reason


def test_errored_or_unmatched_trials_make_any_tally_inconclusive():
    assert V.verdict_from_tally(20, 0, 0, errored=1).kind == "inconclusive"
    v = V.verdict_from_tally(20, 0, 0, trials=21)
    assert v.kind == "inconclusive" and "unmatched" in v.reason and v.errored == 1
    with pytest.raises(InputError):
        V.verdict_from_tally(5, 5, 5, trials=10)
    with pytest.raises(InputError):
        V.verdict_from_tally(-1, 0, 0)


def test_sign_test_verdict_false_positive_rate_under_no_effect():
    """Seeded simulation: with no effect (win rate 1/2 among non-ties, 30% ties), the
    verdict says pass or regression at most 5% of the time across trial counts."""
    rng = np.random.default_rng(20260501)
    hits = total = 0
    for n in (8, 15, 25, 40):
        for _ in range(300):
            outcome = rng.choice(3, size=n, p=[0.35, 0.3, 0.35])  # win, tie, loss
            v = V.verdict_from_tally(int((outcome == 0).sum()), int((outcome == 1).sum()), int((outcome == 2).sum()))
            hits += v.kind in ("pass", "regression")
            total += 1
    rate = hits / total
    print(f"sign-test verdict false-positive rate under no effect: {rate:.4f} over {total} tallies")
    assert rate <= 0.05
    assert rate > 0  # the test can reject at all


# --------------------------------------------------------------------------- two-arm runs


def test_repeats_do_not_inflate_n(tmp_path):
    # 5 cases x 3 repeats, the treatment wins every trial: 15 winning pairs would give
    # p = 6e-5 per trial, but the unit is the case: 5 votes, below six discordant.
    outs = two_arm({f"c{i}": ([False] * 3, [True] * 3) for i in range(5)})
    v = V.two_arm_verdict(make_run(tmp_path, "r", outs, k=3), "baseline", "skilled")
    assert v.kind == "inconclusive" and (v.wins, v.losses, v.ties) == (5, 0, 0)
    assert v.n_trials == 5 and v.n_pairs == 15
    assert v.unit.startswith("case")
    assert v.paired.n == 15 and v.paired.n_clusters == 5
    assert v.paired.mean == pytest.approx(1.0)


def test_run_verdict_pass_regression_and_majority_vote(tmp_path):
    cases = {f"w{i}": ([False] * 3, [True, True, False]) for i in range(7)}  # majority win
    cases["split"] = ([True, False, False], [False, True, False])  # one win, one loss, one tie: tie
    cases["lean"] = ([False, False, True], [True, False, True])    # W, T, T: net win
    v = V.two_arm_verdict(make_run(tmp_path, "r", two_arm(cases), k=3), "baseline", "skilled")
    assert (v.wins, v.ties, v.losses) == (8, 1, 0)
    assert dict(v.case_votes)["split"] == "tie" and dict(v.case_votes)["lean"] == "win"
    assert v.kind == "pass"
    assert v.p_value == pytest.approx(stats.sign_test(8, 0, 1).p_value)
    # the clustered analysis covers every trial: treatment pass rate minus baseline's
    t_rate = (7 * 2 + 1 + 2) / 27
    b_rate = (0 + 1 + 1) / 27
    assert v.paired.mean == pytest.approx(t_rate - b_rate)
    v2 = V.two_arm_verdict(tmp_path / "runs" / "r", "skilled", "baseline")
    assert v2.kind == "regression" and v2.losses == 8


@pytest.mark.parametrize("bad,expect", [
    ("missing", "unmatched"),   # the treatment's sample never produced a line
    (None, "ungraded"),         # passed: null is never a pass
    ("nograde", "not graded"),
])
def test_errored_or_unmatched_trial_makes_run_inconclusive(tmp_path, bad, expect):
    cases = {f"c{i}": ([False] * 2, [True] * 2) for i in range(10)}
    cases["c3"] = ([False, False], [True, bad])
    v = V.two_arm_verdict(make_run(tmp_path, "r", two_arm(cases), k=2), "baseline", "skilled")
    assert v.kind == "inconclusive"
    assert v.errored == 1
    assert len(v.problems) == 1 and v.problems[0].startswith("c3#1") and expect in v.problems[0]
    # c3 has a bad trial: it casts no vote (its clean repeat is not its majority) and
    # counts once as errored, so the tally adds up to the units.
    assert (v.wins, v.ties, v.losses, v.errored, v.n_trials) == (9, 0, 0, 1, 10)
    assert v.wins + v.ties + v.losses + v.errored == v.n_trials


def test_case_with_an_errored_trial_casts_no_vote(tmp_path):
    # Review finding: 8 cases, each with one errored repeat, were tallied "2W/1T/5L,
    # 8 errored, 8 units". A case with any bad trial must not vote.
    cases = {f"c{i}": ([False, False, True], [True, True, False]) for i in range(6)}
    cases["c6"] = ([False, True, True], [True, "missing", True])   # clean repeats: W, -, T
    cases["c7"] = ([True, True, True], [False, False, None])       # clean repeats: L, L, ungraded
    run = make_run(tmp_path, "r", two_arm(cases), k=3, errors=[("c6", "skilled", 1)])
    v = V.two_arm_verdict(run, "baseline", "skilled")
    assert v.kind == "inconclusive"
    assert (v.wins, v.ties, v.losses, v.errored, v.n_trials) == (6, 0, 0, 2, 8)
    assert v.wins + v.ties + v.losses + v.errored == v.n_trials
    # the per-case votes the report shows are the ones tallied
    assert dict(v.case_votes) == {**{f"c{i}": "win" for i in range(6)}, "c6": "errored", "c7": "errored"}
    assert v.to_dict()["case_votes"][6] == ["c6", "errored"]
    assert sorted(p.split("#")[0] for p in v.problems) == ["c6", "c7"] and "HTTP 500" in v.problems[0]
    assert v.p_value == pytest.approx(stats.sign_test(6, 0, 0).p_value)  # clean votes only
    text = v.render()
    assert "6W/0T/0L, 2 errored/unmatched, 8 units" in text
    assert "p on the 6 clean vote(s) only" in text and "not a verdict" in text
    d = v.to_dict()
    assert d["p_value_scope"].startswith("clean votes only (6 of 8 units")
    # every case errored: no vote at all, still inconclusive, tally still adds up
    bad = {f"c{i}": ([True, True], [True, "missing"]) for i in range(6)}
    v = V.two_arm_verdict(make_run(tmp_path, "all_bad", two_arm(bad), k=2), "baseline", "skilled")
    assert (v.wins, v.ties, v.losses, v.errored, v.n_trials, v.kind) == (0, 0, 0, 6, 6, "inconclusive")


def test_errors_jsonl_entry_is_named(tmp_path):
    cases = {f"c{i}": ([False], [True]) for i in range(8)}
    cases["c0"] = ([False], ["missing"])
    run = make_run(tmp_path, "r", two_arm(cases), k=1, errors=[("c0", "skilled", 0)])
    v = V.two_arm_verdict(run, "baseline", "skilled")
    assert v.kind == "inconclusive" and "HTTP 500" in v.problems[0]


def test_unknown_arm_and_ungraded_run_are_input_errors(tmp_path):
    run = make_run(tmp_path, "r", two_arm({"a": ([True], [True])}), k=1)
    with pytest.raises(InputError, match="not in the run"):
        V.two_arm_verdict(run, "baseline", "nope")
    (run / "grades.jsonl").unlink()
    with pytest.raises(InputError, match="not graded"):
        V.two_arm_verdict(run, "baseline", "skilled")


# --------------------------------------------------------------------------- conformance


def test_conformance_verdict(tmp_path):
    ok = make_run(tmp_path, "ok", {(f"c{i}", "agent"): [True, True] for i in range(3)}, k=2)
    assert V.conformance_verdict(ok).kind == "pass"
    below = make_run(tmp_path, "below", {("a", "agent"): [True, True], ("b", "agent"): [True, False]}, k=2)
    v = V.conformance_verdict(below)
    assert v.kind == "regression" and v.below_trials == ("b#1",)
    err = make_run(tmp_path, "err", {("a", "agent"): [True, False], ("b", "agent"): [True, None]}, k=2)
    v = V.conformance_verdict(err)
    assert v.kind == "inconclusive" and v.problems == ("b#1: ungraded (judge failed)",)


# --------------------------------------------------------------------------- plans


def test_plan_write_load_and_check(tmp_path):
    suite = make_suite(tmp_path, {"a": {}}, seed=4242)
    plan = V.plan_power(0.75, 0.3, 0.05, 0.8)
    ss = stats.sign_test_sample_size(0.75, 0.3, 0.05, 0.8)
    assert (plan.n_trials, plan.n_discordant, plan.n_trials_approx) == (ss.trials_stable, ss.discordant_stable,
                                                                         ss.trials_approx)
    assert stats.sign_test_power(plan.n_trials, 0.75, 0.3) >= 0.8
    path = V.write_plan(plan, suite)
    loaded = V.load_plan(path)
    assert loaded.seed == 4242 and loaded.n_trials == plan.n_trials and loaded.test == "sign"
    short = V.verdict_from_tally(9, 4, 2, unit=V.UNIT_CASE)
    pc = V.check_against_plan(short, loaded)
    assert not pc.ok and any("stopped short: 15 of" in f for f in pc.flags)
    enough = V.verdict_from_tally(30, loaded.n_trials - 33, 3, unit=V.UNIT_CASE)
    assert V.check_against_plan(enough, loaded).ok
    changed = V.verdict_from_tally(30, loaded.n_trials - 33, 3, unit=V.UNIT_CASE, alpha=0.1)
    assert any("alpha" in f for f in V.check_against_plan(changed, loaded).flags)
    trial_unit = V.verdict_from_tally(30, loaded.n_trials - 33, 3)
    assert any("unit" in f for f in V.check_against_plan(trial_unit, loaded).flags)
    (suite / "plan.json").write_text("{not json")
    with pytest.raises(InputError, match="plan.json"):
        V.load_plan(suite)


def test_compare_with_plan_flags_short_run(tmp_path):
    suite = make_suite(tmp_path, {f"c{i}": {} for i in range(8)})
    V.write_plan(V.plan_power(0.8, 0.0, 0.05, 0.8), suite)
    outs = two_arm({f"c{i}": ([False], [True]) for i in range(8)})
    v = V.two_arm_verdict(make_run(tmp_path, "r", outs, k=1, suite=suite), "baseline", "skilled",
                          plan=V.load_plan(suite))
    assert v.kind == "pass" and v.plan_check is not None and not v.plan_check.ok
    assert "stopped short: 8 of" in v.plan_check.flags[0]


# --------------------------------------------------------------------------- gates


def _gate_pair(tmp_path, base_outs, cur_outs, *, k, tags=None, sets=None, base_costs=None, cur_costs=None,
               gate=None):
    cases = {c: {"tags": (tags or {}).get(c, ["t"]), "set": (sets or {}).get(c, "capability")}
             for c, _ in base_outs}
    suite = make_suite(tmp_path, cases, gate=gate)
    base = make_run(tmp_path, "base", base_outs, k=k, suite=suite, tags=tags, costs=base_costs, gate=gate)
    V.accept_baseline(base, suite)
    cur = make_run(tmp_path, "cur", cur_outs, k=k, suite=suite, tags=tags, costs=cur_costs, gate=gate)
    return suite, cur


def test_gate_fails_on_incomplete_without_reading_rates(tmp_path):
    suite = make_suite(tmp_path, {"a": {}})
    base = make_run(tmp_path, "base", {("a", "x"): [True]}, k=1, suite=suite)
    V.accept_baseline(base, suite)
    cur = make_run(tmp_path, "cur", {("a", "x"): [True]}, k=1, suite=suite, complete=False, exit_code=1)
    (cur / "grades.jsonl").write_text("this is not json at all\n{{{\n")  # reading it would raise
    (cur / "results.jsonl").write_text("garbage\n")
    res = V.gate(cur, suite / "baseline.json")
    assert not res.passed and not res.read_rates and res.checks == ()
    assert any(r.startswith("INCOMPLETE: ") for r in res.reasons)
    assert res.causes == ["incomplete run"] and res.render().startswith("Gate: FAIL: incomplete run (")
    assert res.to_dict()["causes"] == ["incomplete run"]
    assert any("exited 1" in r for r in res.reasons)


def test_gate_fails_on_runner_exit_and_missing_summary(tmp_path):
    suite = make_suite(tmp_path, {"a": {}})
    base = make_run(tmp_path, "base", {("a", "x"): [True]}, k=1, suite=suite)
    V.accept_baseline(base, suite)
    res = V.gate(base, suite / "baseline.json", runner_exit=3)
    assert not res.passed and not res.read_rates and "the runner exited 3" in res.reasons
    (base / "summary.json").unlink()
    res = V.gate(base, suite / "baseline.json")
    assert not res.passed and "no summary.json" in res.reasons[0]


def test_gate_passes_an_identical_run_and_never_writes_a_baseline(tmp_path):
    outs = {(f"c{i}", "x"): [i % 2 == 0] * 3 for i in range(10)}
    suite, cur = _gate_pair(tmp_path, outs, outs, k=3)
    before = (suite / "baseline.json").read_bytes(), (suite / "baseline-summary.md").read_bytes()
    res = V.gate(cur, suite / "baseline.json")
    assert res.passed and res.read_rates
    assert [(c.group, c.change) for c in res.checks] == [("overall", 0.0), ("tag:t", 0.0), ("per task", 0.0)]
    assert before == ((suite / "baseline.json").read_bytes(), (suite / "baseline-summary.md").read_bytes())
    assert sorted(p.name for p in suite.iterdir()) == ["baseline-summary.md", "baseline.json", "cases.jsonl",
                                                       "config.json"]


def test_gate_per_tag_drop(tmp_path):
    # 30 cases: tag "hard" (8 cases) collapses, the other 22 hold; overall drop 8/30 pts.
    tags = {f"c{i}": (["hard"] if i < 8 else ["easy"]) for i in range(30)}
    base = {(c, "x"): [True] * 4 for c in tags}
    cur = {(c, "x"): ([False] * 4 if tags[c] == ["hard"] else [True] * 4) for c in tags}
    suite, run = _gate_pair(tmp_path, base, cur, k=4, tags=tags, gate={"max_success_drop_points": 30})
    res = V.gate(run, suite / "baseline.json")
    assert not res.passed
    failed = [c.group for c in res.checks if c.failed]
    assert failed == ["tag:hard"], res.render()
    overall = next(c for c in res.checks if c.group == "overall")
    assert overall.change == pytest.approx(-100 * 8 / 30) and not overall.exceeded


@pytest.mark.parametrize("direction", ["drop", "rise"])
def test_gate_change_is_signed_current_minus_baseline(tmp_path, direction):
    # Review finding: 1.000 -> 0.700 was printed as "+30.0 pts". The change is current
    # minus baseline; a drop fails, the same rise passes.
    good = {(f"c{i}", "x"): [True] * 3 for i in range(10)}
    bad = {(f"c{i}", "x"): ([False] * 3 if i < 3 else [True] * 3) for i in range(10)}
    base, cur = (good, bad) if direction == "drop" else (bad, good)
    suite, run = _gate_pair(tmp_path, base, cur, k=3, gate={"max_success_drop_points": 10, "alpha": 1.0})
    res = V.gate(run, suite / "baseline.json")
    overall = next(c for c in res.checks if c.group == "overall")
    text = res.render()
    row = next(line for line in text.splitlines() if line.startswith("success overall"))
    if direction == "drop":
        assert (overall.baseline, overall.current) == (1.0, pytest.approx(0.7))
        assert overall.change == pytest.approx(-30.0) and overall.exceeded and overall.failed
        assert not res.passed and "-30.0 pts" in row and "FAIL" in row
        assert any(r.startswith("success-rate drop overall: -30.0 points") for r in res.reasons)
        assert res.causes == ["success drop"] and text.startswith("Gate: FAIL: success drop (")
    else:
        assert overall.change == pytest.approx(30.0) and not overall.exceeded and not overall.failed
        assert res.passed and "+30.0 pts" in row and row.endswith("ok")
    # the agent-evals shaped baseline (rates only) uses the same sign
    (suite / "baseline.json").write_text(json.dumps({"success_rate": 1.0 if direction == "drop" else 0.7}))
    res2 = V.gate(run, suite / "baseline.json")
    ov2 = next(c for c in res2.checks if c.group == "overall")
    assert ov2.change == pytest.approx(overall.change) and res2.passed is res.passed


def test_gate_ignores_tags_below_min_cases(tmp_path):
    tags = {f"c{i}": (["tiny"] if i < 4 else ["big"]) for i in range(40)}
    base = {(c, "x"): [True] * 4 for c in tags}
    cur = {(c, "x"): ([False] * 4 if tags[c] == ["tiny"] else [True] * 4) for c in tags}
    suite, run = _gate_pair(tmp_path, base, cur, k=4, tags=tags, gate={"max_success_drop_points": 12})
    res = V.gate(run, suite / "baseline.json")
    assert res.passed, res.render()  # overall drop 10 pts <= 12; the 4-case tag is not gated
    assert "tag:tiny" not in [c.group for c in res.checks]


def test_gate_cost_increase(tmp_path):
    outs = {(f"c{i}", "x"): [True] * 3 for i in range(10)}
    base_costs = {c: 0.001 for c in outs}
    cur_costs = {c: 0.0013 for c in outs}
    suite, run = _gate_pair(tmp_path, outs, outs, k=3, base_costs=base_costs, cur_costs=cur_costs,
                            gate={"max_cost_increase_pct": 20})
    res = V.gate(run, suite / "baseline.json")
    cost = next(c for c in res.checks if c.kind == "cost")
    assert cost.change == pytest.approx(30.0) and cost.failed and not res.passed
    assert V.gate(run, suite / "baseline.json", GateThresholds(max_cost_increase_pct=35)).passed


@pytest.mark.parametrize("case_set,should_fail", [("regression", True), ("capability", False)])
def test_capability_gates_on_pass_at_k_regression_on_pass_hat_k(tmp_path, case_set, should_fail):
    # Every case goes from 5/5 to 4/5: pass@5 stays 1, pass^5 falls from 1 to 0.
    base = {(f"c{i}", "x"): [True] * 5 for i in range(12)}
    cur = {(f"c{i}", "x"): [True] * 4 + [False] for i in range(12)}
    suite, run = _gate_pair(tmp_path, base, cur, k=5, sets={c: case_set for c, _ in base})
    res = V.gate(run, suite / "baseline.json")
    overall = next(c for c in res.checks if c.group == "overall")
    assert overall.change == pytest.approx(-100.0 if case_set == "regression" else 0.0)
    assert res.passed is (not should_fail)


def test_sets_with_gate_none_are_shown_never_gated(tmp_path):
    """Cases in a set other than capability and regression (agent-evals' `exploratory`)
    are kept in the metrics but leave every success rate, baseline and gate alone: 12
    gated cases hold at 5/5 while 6 exploratory ones collapse to 0/5."""
    sets = {f"c{i}": "capability" for i in range(12)} | {f"e{i}": "exploratory" for i in range(6)}
    base = {(c, "x"): [True] * 5 for c in sets}
    cur = {(c, "x"): [True] * 5 if sets[c] == "capability" else [False] * 5 for c in sets}
    suite, run = _gate_pair(tmp_path, base, cur, k=5, sets=sets)
    baseline = json.loads((suite / "baseline.json").read_text())
    assert baseline["success_rate"] == 1.0 and set(baseline["per_set"]) == {"capability"}
    assert {c["id"]: c["set"] for c in baseline["cases"]}["e0"] == "exploratory"  # kept, shown
    m = V.run_metrics(run, suite_dir=suite)
    assert [c.gated for c in m.cases].count(False) == 6 and m.success_rate() == 1.0
    res = V.gate(run, suite / "baseline.json")
    assert res.passed, res.render()
    overall = next(c for c in res.checks if c.group == "overall")
    assert overall.n_cases == 12 and overall.change == 0.0
    assert any("6 case(s) in sets with gate none (exploratory)" in n for n in res.notes)
    # the same collapse in the gated set fails the gate
    sets2 = {c: "capability" for c in sets}
    suite2, run2 = _gate_pair(tmp_path / "b", base, cur, k=5, sets=sets2)
    assert not V.gate(run2, suite2 / "baseline.json").passed


def test_gate_breach_within_noise_passes_with_a_note(tmp_path):
    # 6 cases, k=1: one case flips. A 16.7-point drop, but two runs of one model at
    # p = 1/2 do that easily: the noise guard keeps the gate green and says so.
    base = {(f"c{i}", "x"): [i < 3] for i in range(6)}
    cur = {(f"c{i}", "x"): [i < 2] for i in range(6)}
    suite, run = _gate_pair(tmp_path, base, cur, k=1)
    res = V.gate(run, suite / "baseline.json")
    assert res.passed and any("within run-to-run noise" in n for n in res.notes)
    strict = V.gate(run, suite / "baseline.json", alpha=1.0)  # alpha 1: plain thresholds
    assert not strict.passed


def test_gate_with_agent_evals_shaped_baseline(tmp_path):
    suite = make_suite(tmp_path, {f"c{i}": {} for i in range(5)})
    (suite / "baseline.json").write_text(json.dumps(
        {"run_stamp": "x", "summary": "baseline-summary.md", "success_rate": 0.9, "cost_per_task_usd": 0.001,
         "per_tag": {"t": 0.9}}))
    run = make_run(tmp_path, "cur", {(f"c{i}", "x"): [i < 3] for i in range(5)}, k=1, suite=suite)
    res = V.gate(run, suite / "baseline.json")
    assert not res.passed
    assert {c.group for c in res.checks if c.failed} == {"overall", "tag:t"}


def test_gate_false_alarm_rate_on_two_runs_of_one_model():
    """Seeded simulation: two runs of one model (same per-case pass probabilities and
    cost distribution) fail the gate at most 5% of the time; a real 20-point drop fails
    it most of the time."""
    rng = np.random.default_rng(7)
    n_cases, k = 40, 5
    p = rng.beta(2, 1.2, size=n_cases)
    sets = ["regression" if i % 3 == 0 else "capability" for i in range(n_cases)]
    tags = [(f"tag{i % 4}",) for i in range(n_cases)]
    t = GateThresholds(max_success_drop_points=5, max_cost_increase_pct=10, min_tag_cases=5)

    def sample(probs):
        c = rng.binomial(k, probs)
        return V.RunMetrics(k=k, cases=tuple(
            V.CaseResult(f"c{i}", sets[i], tags[i], k, int(c[i]),
                         tuple(float(x) for x in rng.gamma(4.0, 0.00025, size=k)))
            for i in range(n_cases)))

    reps = 250
    alarms = sum(not V.gate_metrics(sample(p), sample(p), t, n_resamples=400, seed=r).passed for r in range(reps))
    rate = alarms / reps
    drop = np.clip(p - 0.35, 0, 1)
    detected = sum(not V.gate_metrics(sample(drop), sample(p), t, n_resamples=400, seed=r).passed
                   for r in range(40)) / 40
    print(f"gate false-alarm rate {rate:.3f} ({reps} pairs of runs); detection of a real drop {detected:.2f}")
    assert rate <= 0.05
    assert detected >= 0.8


# --------------------------------------------------------------------------- baselines


def test_accept_baseline_writes_both_files(tmp_path):
    suite = make_suite(tmp_path, {"a": {"set": "regression", "tags": ["g"]}, "b": {"tags": ["g"]}})
    run = make_run(tmp_path, "20260102-000000", {("a", "x"): [True, True], ("b", "x"): [True, False]}, k=2,
                   suite=suite, tags={"a": ["g"], "b": ["g"]})
    bj, bs = V.accept_baseline(run)  # suite from the run's config
    doc = json.loads(bj.read_text())
    assert doc["run_stamp"] == "20260102-000000" and doc["summary"] == "baseline-summary.md"
    assert doc["k"] == 2 and doc["arm"] == "x"
    # a: regression, pass^2 with 2/2 = 1; b: capability, pass@2 with 1/2 = 1
    assert doc["success_rate"] == pytest.approx(1.0)
    assert doc["per_set"]["regression"]["metric"] == "pass^2"
    assert doc["per_tag"] == {"g": 1.0} and doc["per_tag_cases"] == {"g": 2}
    assert doc["cost_per_task_usd"] == pytest.approx(0.002)
    assert "# Baseline: run 20260102-000000" in bs.read_text() and "# Summary" in bs.read_text()
    assert not list(suite.glob(".*.tmp"))


def test_accept_baseline_refuses_incomplete_or_ungraded(tmp_path):
    suite = make_suite(tmp_path, {"a": {}})
    inc = make_run(tmp_path, "inc", {("a", "x"): [True]}, k=1, suite=suite, complete=False)
    with pytest.raises(EvalkitError, match="INCOMPLETE"):
        V.accept_baseline(inc, suite)
    ung = make_run(tmp_path, "ung", {("a", "x"): [None]}, k=1, suite=suite)
    with pytest.raises(EvalkitError, match="ungraded"):
        V.accept_baseline(ung, suite)
    assert not (suite / "baseline.json").exists() and not (suite / "baseline-summary.md").exists()


# --------------------------------------------------------------------------- noise


def test_noise_identical_runs_and_too_tight_thresholds(tmp_path):
    rng = np.random.default_rng(3)
    tags = {f"c{i}": [f"g{i % 2}"] for i in range(20)}
    a = {(c, "x"): list(rng.random(4) < 0.5) for c in tags}
    b = {(c, "x"): list(rng.random(4) < 0.5) for c in tags}
    ra = make_run(tmp_path, "a", {k: [bool(x) for x in v] for k, v in a.items()}, k=4, tags=tags,
                  gate={"max_success_drop_points": 1})
    rb = make_run(tmp_path, "b", {k: [bool(x) for x in v] for k, v in b.items()}, k=4, tags=tags,
                  gate={"max_success_drop_points": 1})
    rep = V.noise(ra, rb)
    assert not rep.ok  # 1 point is inside the noise of 20 cases x 4 samples at p = 1/2
    overall = rep.checks[0]
    assert overall.group == "overall" and overall.noise95 > 1 and not overall.above_noise
    assert overall.se is not None and overall.se > 0
    loose = V.noise(ra, rb, GateThresholds(max_success_drop_points=60, max_cost_increase_pct=50))
    assert loose.ok and all(c.above_noise for c in loose.checks)
    same = V.noise(ra, ra, GateThresholds(max_success_drop_points=60, max_cost_increase_pct=50))
    assert same.checks[0].observed == 0.0


def test_holm_matches_statsmodels():
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(11)
    for _ in range(4):
        p = list(rng.random(int(rng.integers(2, 9))) ** 3)
        assert V.holm(p) == pytest.approx(list(multipletests(p, method="holm")[1]))


def test_sequential_plan_stops_early_and_records_its_path(tmp_path):
    suite = make_suite(tmp_path, {f"c{i}": {} for i in range(30)})
    plan = V.plan_power(0.9, 0.0, 0.05, 0.8, sequential=True)
    V.write_plan(plan, suite)
    loaded = V.load_plan(suite)
    assert loaded.test == "sequential-sign" and loaded.sequential_params() == {"win_rate": 0.9, "alpha": 0.05,
                                                                                "power": 0.8}
    assert loaded.sequential["type_i_error"] <= 0.05
    assert loaded.sequential["expected_trials"] < loaded.n_trials
    outs = two_arm({f"c{i}": ([False], [True]) for i in range(30)})
    v = V.two_arm_verdict(make_run(tmp_path, "r", outs, k=1, suite=suite), "baseline", "skilled", plan=loaded)
    seq = stats.SequentialSignTest(0.9, 0.05, 0.8)
    expect = seq.run([1] * 30)
    assert v.kind == "pass" and v.test == "sequential-sign"
    assert v.n_trials == expect.trials < 30 and v.wins == expect.wins
    assert [s["decision"] for s in v.sequential["path"]][-1] == "pass" and len(v.sequential["path"]) == v.n_trials
    assert v.plan_check.ok, v.plan_check.flags
    fixed = V.two_arm_verdict(tmp_path / "runs" / "r", "baseline", "skilled", plan=V.plan_power(0.9))
    assert any("changed the test" in f for f in V.check_against_plan(fixed, loaded).flags)


def test_conformance_numeric_threshold_uses_share_of_checks(tmp_path):
    run = make_run(tmp_path, "r", {("a", "agent"): [True, True], ("b", "agent"): [True, True]}, k=2)
    lines = [json.loads(x) for x in (run / "grades.jsonl").read_text().splitlines()]
    lines[3]["checks"] = [{"name": "contains", "passed": True, "reason": ""},
                          {"name": "regex", "passed": False, "reason": "no match"}]
    (run / "grades.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert V.conformance_verdict(run, 0.5).kind == "pass"
    v = V.conformance_verdict(run, 0.75)
    assert v.kind == "regression" and v.below_trials == ("b#1",)
    with pytest.raises(InputError):
        V.conformance_verdict(run, 2.0)


def test_plan_baseline_and_config_files_that_are_not_json_objects_are_input_errors(tmp_path):
    # Review finding: invalid UTF-8 in plan.json / baseline.json raised UnicodeDecodeError
    # (a traceback, not exit 2), and a config.json holding a list crashed write_plan.
    (tmp_path / "plan.json").write_bytes(b'{"test": "sign",\n "note": "\xff"}\n')
    with pytest.raises(InputError) as ei:
        V.load_plan(tmp_path / "plan.json")
    assert ei.value.line == 2 and "invalid UTF-8" in str(ei.value)
    (tmp_path / "baseline.json").write_text("[1, 2]")
    with pytest.raises(InputError, match="a baseline must be a JSON object, got list"):
        V.load_baseline(tmp_path / "baseline.json")
    (tmp_path / "config.json").write_text("[]")
    before = (tmp_path / "plan.json").read_bytes()
    with pytest.raises(InputError, match="config must be a JSON object"):
        V.write_plan(V.plan_power(0.75), tmp_path)
    assert (tmp_path / "plan.json").read_bytes() == before  # nothing written


def test_a_plan_or_baseline_in_a_suite_folder_must_resolve_inside_it(tmp_path):
    import os

    from conftest import fifo_watchdog

    suite = make_suite(tmp_path, {"a": {}})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    V.write_plan(V.plan_power(0.75), elsewhere)  # a plan outside any suite: read where it is
    assert V.load_plan(elsewhere / "plan.json").test == "sign"
    (suite / "plan.json").symlink_to(elsewhere / "plan.json")
    with pytest.raises(InputError, match="outside the suite folder"):
        V.load_plan(suite)
    (elsewhere / "baseline.json").write_text(json.dumps({"success_rate": 0.5}))
    assert V.load_baseline(elsewhere / "baseline.json")["success_rate"] == 0.5
    (suite / "baseline.json").symlink_to(elsewhere / "baseline.json")
    with pytest.raises(InputError, match="outside the suite folder"):
        V.load_baseline(suite / "baseline.json")
    (suite / "plan.json").unlink()
    os.mkfifo(suite / "plan.json")
    with fifo_watchdog(suite / "plan.json") as released:
        with pytest.raises(InputError, match="not a regular file: it is a FIFO"):
            V.load_plan(suite)
    assert released == []
