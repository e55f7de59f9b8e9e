"""Gates, baselines and run-to-run noise (evalkit.conclusions.gates).

Run folders are written into tmp_path by hand (conftest.make_run, following
docs/formats.md).
"""
from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import make_run, make_suite

from evalkit._cli.main import main
from evalkit.conclusions import gates as G
from evalkit.numbers import metrics
from evalkit.foundations.errors import EvalkitError
from evalkit.foundations.records import GateThresholds
from evalkit.runfolder.runload import keys_typed, load_run


def _gate_pair(tmp_path, base_outs, cur_outs, *, k, tags=None, sets=None, base_costs=None, cur_costs=None,
               gate=None):
    cases = {c: {"tags": (tags or {}).get(c, ["t"]), "set": (sets or {}).get(c, "capability")}
             for c, _ in base_outs}
    suite = make_suite(tmp_path, cases, gate=gate)
    base = make_run(tmp_path, "base", base_outs, k=k, suite=suite, tags=tags, costs=base_costs, gate=gate)
    G.accept_baseline(base, suite)
    cur = make_run(tmp_path, "cur", cur_outs, k=k, suite=suite, tags=tags, costs=cur_costs, gate=gate)
    return suite, cur


def test_gate_fails_on_incomplete_without_reading_rates(tmp_path):
    suite = make_suite(tmp_path, {"a": {}})
    base = make_run(tmp_path, "base", {("a", "x"): [True]}, k=1, suite=suite)
    G.accept_baseline(base, suite)
    cur = make_run(tmp_path, "cur", {("a", "x"): [True]}, k=1, suite=suite, complete=False, exit_code=1)
    (cur / "grades.jsonl").write_text("this is not json at all\n{{{\n")  # reading it would raise
    (cur / "results.jsonl").write_text("garbage\n")
    res = G.gate(cur, suite / "baseline.json")
    assert not res.passed and not res.read_rates and res.checks == ()
    assert any(r.startswith("INCOMPLETE: ") for r in res.reasons)
    assert res.causes == ["incomplete run"] and res.render().startswith("Gate: FAIL: incomplete run (")
    assert res.to_json()["causes"] == ["incomplete run"]
    assert any("exited 1" in r for r in res.reasons)


def test_gate_fails_on_runner_exit_and_missing_summary(tmp_path):
    suite = make_suite(tmp_path, {"a": {}})
    base = make_run(tmp_path, "base", {("a", "x"): [True]}, k=1, suite=suite)
    G.accept_baseline(base, suite)
    res = G.gate(base, suite / "baseline.json", runner_exit=3)
    assert not res.passed and not res.read_rates and "the runner exited 3" in res.reasons
    (base / "summary.json").unlink()
    res = G.gate(base, suite / "baseline.json")
    assert not res.passed and "no summary.json" in res.reasons[0]


def test_gate_passes_an_identical_run_and_never_writes_a_baseline(tmp_path):
    outs = {(f"c{i}", "x"): [i % 2 == 0] * 3 for i in range(10)}
    suite, cur = _gate_pair(tmp_path, outs, outs, k=3)
    before = (suite / "baseline.json").read_bytes(), (suite / "baseline-summary.md").read_bytes()
    res = G.gate(cur, suite / "baseline.json")
    assert res.passed and res.read_rates
    assert [(c.group, c.change) for c in res.checks] == [("overall", 0.0), ("tag:t", 0.0), ("per case", 0.0)]
    assert before == ((suite / "baseline.json").read_bytes(), (suite / "baseline-summary.md").read_bytes())
    assert sorted(p.name for p in suite.iterdir()) == ["baseline-summary.md", "baseline.json", "cases.jsonl",
                                                       "config.json"]


def test_gate_per_tag_drop(tmp_path):
    # 30 cases: tag "hard" (8 cases) collapses, the other 22 hold; overall drop 8/30 pts.
    tags = {f"c{i}": (["hard"] if i < 8 else ["easy"]) for i in range(30)}
    base = {(c, "x"): [True] * 4 for c in tags}
    cur = {(c, "x"): ([False] * 4 if tags[c] == ["hard"] else [True] * 4) for c in tags}
    suite, run = _gate_pair(tmp_path, base, cur, k=4, tags=tags, gate={"max_success_drop_points": 30})
    res = G.gate(run, suite / "baseline.json")
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
    res = G.gate(run, suite / "baseline.json")
    overall = next(c for c in res.checks if c.group == "overall")
    text = res.render()
    row = next(line for line in text.splitlines() if line.startswith("case score overall"))
    if direction == "drop":
        assert (overall.baseline, overall.current) == (1.0, pytest.approx(0.7))
        assert overall.change == pytest.approx(-30.0) and overall.exceeded and overall.failed
        assert not res.passed and "-30.0 pts" in row and "FAIL" in row
        assert any(r.startswith("case-score drop overall: -30.0 points") for r in res.reasons)
        assert res.causes == ["case score drop"] and text.startswith("Gate: FAIL: case score drop (")
    else:
        assert overall.change == pytest.approx(30.0) and not overall.exceeded and not overall.failed
        assert res.passed and "+30.0 pts" in row and row.endswith("ok")
    # the agent-evals shaped baseline (rates only) uses the same sign
    (suite / "baseline.json").write_text(json.dumps({"success_rate": 1.0 if direction == "drop" else 0.7}))
    res2 = G.gate(run, suite / "baseline.json")
    ov2 = next(c for c in res2.checks if c.group == "overall")
    assert ov2.change == pytest.approx(overall.change) and res2.passed is res.passed


def test_gate_ignores_tags_below_min_cases(tmp_path):
    tags = {f"c{i}": (["tiny"] if i < 4 else ["big"]) for i in range(40)}
    base = {(c, "x"): [True] * 4 for c in tags}
    cur = {(c, "x"): ([False] * 4 if tags[c] == ["tiny"] else [True] * 4) for c in tags}
    suite, run = _gate_pair(tmp_path, base, cur, k=4, tags=tags, gate={"max_success_drop_points": 12})
    res = G.gate(run, suite / "baseline.json")
    assert res.passed, res.render()  # overall drop 10 pts <= 12; the 4-case tag is not gated
    assert "tag:tiny" not in [c.group for c in res.checks]


def test_gate_cost_increase(tmp_path):
    outs = {(f"c{i}", "x"): [True] * 3 for i in range(10)}
    base_costs = {c: 0.001 for c in outs}
    cur_costs = {c: 0.0013 for c in outs}
    suite, run = _gate_pair(tmp_path, outs, outs, k=3, base_costs=base_costs, cur_costs=cur_costs,
                            gate={"max_cost_increase_pct": 20})
    res = G.gate(run, suite / "baseline.json")
    cost = next(c for c in res.checks if c.kind == "cost")
    assert cost.change == pytest.approx(30.0) and cost.failed and not res.passed
    assert G.gate(run, suite / "baseline.json", GateThresholds(max_cost_increase_pct=35, on_underpowered="warn")).passed


@pytest.mark.parametrize("case_set,should_fail", [("regression", True), ("capability", False)])
def test_capability_gates_on_pass_at_k_regression_on_pass_hat_k(tmp_path, case_set, should_fail):
    # Every case goes from 5/5 to 4/5: pass@5 stays 1, pass^5 falls from 1 to 0.
    base = {(f"c{i}", "x"): [True] * 5 for i in range(12)}
    cur = {(f"c{i}", "x"): [True] * 4 + [False] for i in range(12)}
    suite, run = _gate_pair(tmp_path, base, cur, k=5, sets={c: case_set for c, _ in base})
    res = G.gate(run, suite / "baseline.json")
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
    assert baseline["gated_case_score"] == 1.0 and set(baseline["per_set"]) == {"capability"}
    assert {c["id"]: c["set"] for c in baseline["cases"]}["e0"] == "exploratory"  # kept, shown
    m = G.run_metrics(run)  # this hand-made run has no case table: its sets come from the suite
    assert [c.gated for c in m.cases].count(False) == 6 and metrics.gated_case_score(m) == 1.0
    res = G.gate(run, suite / "baseline.json")
    assert res.passed, res.render()
    overall = next(c for c in res.checks if c.group == "overall")
    assert overall.n_cases == 12 and overall.change == 0.0
    assert any("6 case(s) in sets with gate none (exploratory)" in n for n in res.notes)
    # the same collapse in the gated set fails the gate
    sets2 = {c: "capability" for c in sets}
    suite2, run2 = _gate_pair(tmp_path / "b", base, cur, k=5, sets=sets2)
    assert not G.gate(run2, suite2 / "baseline.json").passed


def test_gate_breach_within_noise_fails_on_its_size_and_passes_with_the_noise_guard(tmp_path):
    # 6 cases, k=1: one case flips. A 16.7-point drop, but two runs of one model at
    # p = 1/2 do that easily. The seed's gate (the default) fails on the observed drop and
    # says it is within noise; the noise guard (require_significance) keeps it green and says so.
    base = {(f"c{i}", "x"): [i < 3] for i in range(6)}
    cur = {(f"c{i}", "x"): [i < 2] for i in range(6)}
    suite, run = _gate_pair(tmp_path, base, cur, k=1)
    seed = G.gate(run, suite / "baseline.json")
    assert not seed.passed and seed.causes == ["case score drop"]
    assert any("fails the gate on its observed size" in n and "require_significance" in n for n in seed.notes)
    assert "FAIL (within noise)" in seed.render() and "fails on the observed change" in seed.render()
    guarded = G.gate(run, suite / "baseline.json", GateThresholds(require_significance=True))
    assert guarded.passed and any("within run-to-run noise" in n for n in guarded.notes)
    assert G.gate(run, suite / "baseline.json", alpha=0.05).passed  # alpha below 1: the guard, as before
    assert not G.gate(run, suite / "baseline.json", alpha=1.0).passed  # alpha 1: plain thresholds


def test_gate_with_agent_evals_shaped_baseline(tmp_path):
    suite = make_suite(tmp_path, {f"c{i}": {} for i in range(5)})
    (suite / "baseline.json").write_text(json.dumps(
        {"run_stamp": "x", "summary": "baseline-summary.md", "success_rate": 0.9, "cost_per_task_usd": 0.001,
         "per_tag": {"t": 0.9}}))
    run = make_run(tmp_path, "cur", {(f"c{i}", "x"): [i < 3] for i in range(5)}, k=1, suite=suite)
    res = G.gate(run, suite / "baseline.json")
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
    t = GateThresholds(max_success_drop_points=5, max_cost_increase_pct=10, min_tag_cases=5, on_underpowered="warn",
                       require_significance=True)  # the noise guard's own promise

    def sample(probs):
        c = rng.binomial(k, probs)
        return G.RunMetrics(k=k, cases=tuple(
            G.CaseResult(f"c{i}", sets[i], tags[i], k, int(c[i]),
                         tuple(float(x) for x in rng.gamma(4.0, 0.00025, size=k)))
            for i in range(n_cases)))

    reps = 250
    alarms = sum(not G.gate_metrics(sample(p), sample(p), t, n_resamples=400, seed=r).passed for r in range(reps))
    rate = alarms / reps
    drop = np.clip(p - 0.35, 0, 1)
    detected = sum(not G.gate_metrics(sample(drop), sample(p), t, n_resamples=400, seed=r).passed
                   for r in range(40)) / 40
    print(f"gate false-alarm rate {rate:.3f} ({reps} pairs of runs); detection of a real drop {detected:.2f}")
    assert rate <= 0.05
    assert detected >= 0.8


def test_accept_baseline_writes_both_files(tmp_path):
    suite = make_suite(tmp_path, {"a": {"set": "regression", "tags": ["g"]}, "b": {"tags": ["g"]}})
    run = make_run(tmp_path, "20260102-000000", {("a", "x"): [True, True], ("b", "x"): [True, False]}, k=2,
                   suite=suite, tags={"a": ["g"], "b": ["g"]})
    bj, bs = G.accept_baseline(run)  # suite from the run's config
    doc = json.loads(bj.read_text())
    assert doc["run_stamp"] == "20260102-000000" and doc["summary"] == "baseline-summary.md"
    assert doc["k"] == 2 and doc["arm"] == "x"
    # a: regression, pass^2 with 2/2 = 1; b: capability, pass@2 with 1/2 = 1
    assert doc["gated_case_score"] == pytest.approx(1.0)
    assert doc["per_set"]["regression"]["gate"] == "pass^k" and doc["per_set"]["regression"]["pass_hat_k"] == 1.0
    assert doc["per_tag"] == {"g": 1.0} and doc["per_tag_cases"] == {"g": 2}
    assert doc["cost_per_case_usd"] == pytest.approx(0.002)  # 2 samples x $0.001, per case
    assert "# Baseline: run 20260102-000000" in bs.read_text() and "# Summary" in bs.read_text()
    assert not list(suite.glob(".*.tmp"))


def test_accept_baseline_refuses_incomplete_or_ungraded(tmp_path):
    suite = make_suite(tmp_path, {"a": {}})
    inc = make_run(tmp_path, "inc", {("a", "x"): [True]}, k=1, suite=suite, complete=False)
    with pytest.raises(EvalkitError, match="INCOMPLETE"):
        G.accept_baseline(inc, suite)
    ung = make_run(tmp_path, "ung", {("a", "x"): [None]}, k=1, suite=suite)
    with pytest.raises(EvalkitError, match="ungraded"):
        G.accept_baseline(ung, suite)
    assert not (suite / "baseline.json").exists() and not (suite / "baseline-summary.md").exists()


def test_noise_identical_runs_and_too_tight_thresholds(tmp_path):
    rng = np.random.default_rng(3)
    tags = {f"c{i}": [f"g{i % 2}"] for i in range(20)}
    a = {(c, "x"): list(rng.random(4) < 0.5) for c in tags}
    b = {(c, "x"): list(rng.random(4) < 0.5) for c in tags}
    ra = make_run(tmp_path, "a", {k: [bool(x) for x in v] for k, v in a.items()}, k=4, tags=tags,
                  gate={"max_success_drop_points": 1})
    rb = make_run(tmp_path, "b", {k: [bool(x) for x in v] for k, v in b.items()}, k=4, tags=tags,
                  gate={"max_success_drop_points": 1})
    rep = G.noise(ra, rb)
    assert not rep.ok  # 1 point is inside the noise of 20 cases x 4 samples at p = 1/2
    overall = rep.checks[0]
    assert overall.group == "overall" and overall.noise95 > 1 and not overall.above_noise
    assert overall.se is not None and overall.se > 0
    loose = G.noise(ra, rb, GateThresholds(max_success_drop_points=60, max_cost_increase_pct=50))
    assert loose.ok and all(c.above_noise for c in loose.checks)
    same = G.noise(ra, ra, GateThresholds(max_success_drop_points=60, max_cost_increase_pct=50))
    assert same.checks[0].observed == 0.0


def test_noise_on_a_cache_replay_says_so_and_measures_nothing(tmp_path):
    # issue 41: a run and its cache replay gave SE 0.00 and "above noise" with no word that
    # the two runs share every request
    outcomes = {(f"c{i}", "x"): [i % 3 != 0] * 2 for i in range(12)}
    ra = make_run(tmp_path, "a", outcomes, k=2)
    rb = make_run(tmp_path, "b", outcomes, k=2)  # the same requests (hashes), answered afresh
    lines = [json.loads(x) for x in (rb / "results.jsonl").read_text().splitlines()]
    (rb / "results.jsonl").write_text("".join(json.dumps({**x, "cached": True}) + "\n" for x in lines))
    rep = G.noise(ra, rb, GateThresholds(max_success_drop_points=60, max_cost_increase_pct=50))
    assert rep.replay and not rep.ok
    assert "cache replay" in rep.notes[0] and "--no-cache" in rep.notes[0] and "24 of 24" in rep.notes[0]
    assert rep.render().startswith("NO NOISE MEASURED")
    r = CliRunner().invoke(main, ["noise", str(ra), str(rb), "--strict"])
    assert r.exit_code == 1 and "re-run with `evalkit run --no-cache` (or other seeds)" in r.output, r.output
    fresh = G.noise(ra, make_run(tmp_path, "c", outcomes, k=2), GateThresholds(max_success_drop_points=60))
    assert not fresh.replay and fresh.ok and "share every request hash" in fresh.notes[0]
    # one sample answered from the cache is no replay: the noise is measured, the note counts it
    lines = [json.loads(x) for x in (rb / "results.jsonl").read_text().splitlines()]
    (rb / "results.jsonl").write_text("".join(json.dumps({**x, "cached": i == 0}) + "\n" for i, x in enumerate(lines)))
    part = G.noise(ra, rb, GateThresholds(max_success_drop_points=60, max_cost_increase_pct=50))
    assert not part.replay and part.ok and part.checks and not part.render().startswith("NO NOISE MEASURED")
    assert "0 of 24 sample(s) of the first run and 1 of 24 of the second were answered from the response cache" in (
        part.notes[0]
    )
    lines = [json.loads(x) for x in (rb / "results.jsonl").read_text().splitlines()]
    (rb / "results.jsonl").write_text("".join(json.dumps({**x, "request_hash": x["request_hash"] + "s2"}) + "\n"
                                              for x in lines))
    other = G.noise(ra, rb, GateThresholds(max_success_drop_points=60, max_cost_increase_pct=50))
    assert not other.replay and other.ok and not any("request hash" in n for n in other.notes)


def test_holm_matches_statsmodels():
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(11)
    for _ in range(4):
        p = list(rng.random(int(rng.integers(2, 9))) ** 3)
        assert G.holm(p) == pytest.approx(list(multipletests(p, method="holm")[1]))


# -- a gate that says what it can see --------------------------------------------------

def test_detectable_drop_matches_statsmodels_normal_power():
    """`stats.detectable_drop` / `cases_for_drop` against statsmodels' NormalIndPower
    (an independent implementation of the two-sample normal power function): the
    standardised effect it solves for, times sqrt(p(1-p)), is the drop."""
    import math

    from statsmodels.stats.power import NormalIndPower

    from evalkit.numbers import stats

    solver = NormalIndPower()
    for n in (2, 10, 40, 150, 1000):
        for p in (0.05, 0.5, 0.75, 0.9, 0.99):
            for alpha in (0.01, 0.05, 0.2):
                es = solver.solve_power(nobs1=n, alpha=alpha, power=0.8, ratio=1.0, alternative="larger")
                assert stats.detectable_drop(n, p, alpha, 0.8) == pytest.approx(es * math.sqrt(p * (1 - p)), rel=1e-4)
    for drop, p in ((0.03, 0.75), (0.03, 0.9), (0.10, 0.5), (0.05, 0.95)):
        nobs = solver.solve_power(effect_size=drop / math.sqrt(p * (1 - p)), alpha=0.05, power=0.8, ratio=1.0,
                                  alternative="larger")
        assert stats.cases_for_drop(drop, p) == math.ceil(nobs - 1e-6)
    # by hand, the two cases at 100%: p = (2*1 + 1)/(2 + 2) = 0.75,
    # (z.95 + z.80) sqrt(2 * .75 * .25 / 2) = (1.6449 + 0.8416) * 0.4330 = 1.0767 (107.7 points);
    # a 3-point drop needs 2 * .1875 * 2.4865^2 / 0.03^2 = 2576.07 -> 2577 cases
    assert stats.planning_rate(1.0, 2) == 0.75
    assert stats.detectable_drop(2, 0.75) == pytest.approx(1.0767, abs=1e-4)
    assert stats.cases_for_drop(0.03, 0.75) == 2577
    assert stats.detectable_drop(5, 0.5, alpha=1.0) == 0.0  # no noise guard: every drop is seen


def test_detectable_drop_has_its_power_in_a_seeded_simulation():
    """At n = cases_for_drop(0.05, 0.8) cases per run, a one-sided pooled two-proportion
    z test at alpha 0.05 rejects a true 5-point drop around a common rate of 0.8
    (0.825 -> 0.775) about 80% of the time."""
    from scipy.stats import norm

    from evalkit.numbers import stats

    p, drop = 0.8, 0.05
    n = stats.cases_for_drop(drop, p)  # 2 * .16 * 2.4865^2 / .0025 = 791.4 -> 792
    assert n == 792
    rng = np.random.default_rng(26)
    reps = 20000
    xb, xc = rng.binomial(n, p + drop / 2, reps), rng.binomial(n, p - drop / 2, reps)
    pool = (xb + xc) / (2 * n)
    z = (xb - xc) / n / np.sqrt(2 * pool * (1 - pool) / n)
    power = float(np.mean(z > norm.ppf(0.95)))
    assert power == pytest.approx(0.8, abs=0.015)  # binomial SE of the estimate ~0.003


def _gate_cli(*args):
    from click.testing import CliRunner

    from evalkit._cli.main import main
    return CliRunner().invoke(main, ["gate", *map(str, args)])


def test_two_cases_cannot_pass_a_50_point_drop(tmp_path):
    # The case: two cases, baseline 100%, new run 50%. The noise guard is right
    # that two cases cannot show the drop; the gate must not call that a pass.
    base = {("a", "x"): [True], ("b", "x"): [True]}
    cur = {("a", "x"): [True], ("b", "x"): [False]}
    suite, run = _gate_pair(tmp_path, base, cur, k=1)
    seed = G.gate(run, suite / "baseline.json")  # the seed's gate: the observed drop fails it, power is said
    assert not seed.passed and seed.causes == ["case score drop"] and seed.power.underpowered
    assert any(n.startswith("warning: UNDERPOWERED") and "evalkit noise" in n for n in seed.notes)
    # with both opt-ins (the noise guard and on_underpowered "fail", the defaults before issue 41)
    for p in (suite / "config.json", run / "config.json"):
        cfg = json.loads(p.read_text())
        (cfg.get("config") or cfg)["gate"] = {"on_underpowered": "fail", "require_significance": True}
        p.write_text(json.dumps(cfg))
    res = G.gate(run, suite / "baseline.json")
    assert not res.passed and res.status == "UNDERPOWERED" and res.causes == ["underpowered"]
    assert not res.regression  # nothing was measured as worse: the gate could not see
    pw = res.power
    assert pw.n_cases == 2 and pw.underpowered and pw.threshold_points == 3.0  # the seed's default
    assert pw.detectable_drop_points == pytest.approx(107.67, abs=0.01) and pw.cases_needed == 2577
    # past 100 points the figure is no drop at all, and the sentence says so
    assert res.render().startswith("Gate: UNDERPOWERED (UNDERPOWERED: 2 gated case(s) detect no drop (not even 100 points)")
    assert "needs 2,577 gated cases" in res.render()
    assert G.GateResult.from_json(json.loads(json.dumps(res.to_json()))).power == pw
    junit = tmp_path / "gate.xml"
    r = _gate_cli(run, "--baseline", suite / "baseline.json", "--junit", junit)
    assert r.exit_code == 1 and "Gate: UNDERPOWERED" in r.output
    import junitparser

    cases = {c.name: c for s in junitparser.JUnitXml.fromfile(str(junit)) for c in s}
    assert cases["power"].is_error and not cases["power"].is_passed  # an error, never a pass


def _init_gate(*folders):
    """Give suite and run folders exactly the gate `evalkit init` writes (no test defaults)."""
    from evalkit.suites.suite_scaffold import DEFAULT_CONFIG

    for f in folders:
        cfg = json.loads((f / "config.json").read_text())
        (cfg.get("config") or cfg)["gate"] = dict(DEFAULT_CONFIG["gate"])
        (f / "config.json").write_text(json.dumps(cfg))


def test_the_default_gate_holds_a_20_case_suite_as_the_ci_workflow_runs_it(tmp_path):
    # issue 41: with `evalkit init`'s gate (3 points), a 20-case suite gated against an
    # identical run exited 1 UNDERPOWERED, so the CI workflow failed every pull request.
    # The seed's gate: an identical run passes (what it cannot see is said); a drop fails.
    base = {(f"c{i:02d}", "x"): [True] * 4 + [i % 2 == 0] for i in range(20)}
    suite, same = _gate_pair(tmp_path, base, base, k=5)
    _init_gate(suite, same, tmp_path / "runs" / "base")
    ci = tmp_path / "ci"
    ci.mkdir()
    args = ["--baseline", suite / "baseline.json", "--runner-exit", "0"]  # the workflow's gate step
    r = _gate_cli(same, *args, "--junit", ci / "gate.xml", "--markdown", ci / "gate.md")
    assert r.exit_code == 0 and r.output.startswith("Gate: PASS"), r.output
    assert "power: 20 gated case(s) detect a drop of" in r.output and "warning: UNDERPOWERED" in r.output
    assert "evalkit noise" in r.output and (ci / "gate.md").read_text().startswith("## evalkit gate: PASS")
    # a 20-point drop: 4 of the 20 cases now fail every sample
    drop = {c: ([False] * 5 if int(c[0][1:]) < 4 else o) for c, o in base.items()}
    worse = make_run(tmp_path, "worse", drop, k=5, suite=suite)
    _init_gate(worse)
    r = _gate_cli(worse, *args, "--json")
    res = G.GateResult.from_json(json.loads(r.output))
    assert r.exit_code == 1 and res.causes == ["case score drop"], r.output
    assert res.reasons[0].startswith("case-score drop overall: -20.0 points (beyond 3 points)")
    assert res.thresholds.on_underpowered == "warn" and not res.thresholds.require_significance


def test_a_suite_that_set_todays_keys_keeps_their_meaning(tmp_path):
    # alpha (the noise guard's level before issue 41) keeps its noise guard; on_underpowered "fail" fails
    from evalkit.suites.reader import load_suite
    from evalkit.suites.suite_scaffold import DEFAULT_CONFIG, PROMPT_FILE

    suite = make_suite(tmp_path, {f"c{i}": {} for i in range(3)})
    (suite / PROMPT_FILE).write_text("Q: ${input}\nA:")
    for gate, guard, under in [({}, False, "warn"), ({"alpha": 0.05}, True, "warn"), ({"alpha": 1}, False, "warn"),
                               ({"alpha": 0.1, "require_significance": False}, False, "warn"),
                               ({"require_significance": True, "on_underpowered": "fail"}, True, "fail")]:
        t = G.thresholds_from({"gate": gate})
        assert (t.require_significance, t.on_underpowered) == (guard, under), gate
        cfg = {**DEFAULT_CONFIG, "gate": gate}
        (suite / "config.json").write_text(json.dumps(cfg))
        assert load_suite(suite).config.gate == t, gate
    with pytest.raises(EvalkitError, match="require_significance"):
        G.thresholds_from({"gate": {"require_significance": "yes"}})


def test_on_underpowered_warn_makes_it_a_warning(tmp_path):
    base = {("a", "x"): [True], ("b", "x"): [True]}
    cur = {("a", "x"): [True], ("b", "x"): [False]}
    suite, run = _gate_pair(tmp_path, base, cur, k=1, gate={"on_underpowered": "warn", "require_significance": True})
    res = G.gate(run, suite / "baseline.json")
    assert res.passed and res.status == "PASS" and res.power.underpowered
    assert any(n.startswith("warning: UNDERPOWERED (gate.on_underpowered warn): 2 gated case(s)") for n in res.notes)
    assert _gate_cli(run, "--baseline", suite / "baseline.json").exit_code == 0


def test_a_powered_gate_fails_a_significant_drop_and_passes_an_identical_run(tmp_path):
    # 150 cases all passing: planned at (150 + 1)/152 = 0.9934, the detectable drop is
    # 2.4865 * sqrt(2 * .9934 * .0066 / 150) = 2.33 points, under the 3-point threshold.
    base = {(f"c{i:03d}", "x"): [True] for i in range(150)}
    cur = {(f"c{i:03d}", "x"): [i >= 30] for i in range(150)}  # 30 of 150 fail: -20 points
    suite, run = _gate_pair(tmp_path, base, cur, k=1, gate={"on_underpowered": "fail"})
    res = G.gate(run, suite / "baseline.json")
    assert res.power.detectable_drop_points == pytest.approx(2.33, abs=0.01) and not res.power.underpowered
    assert res.status == "FAIL" and res.causes == ["case score drop"]
    same = G.gate(make_run(tmp_path, "same", base, k=1, suite=suite, gate={"on_underpowered": "fail"}),
                  suite / "baseline.json")
    assert same.passed and same.status == "PASS" and not same.power.underpowered


def test_the_metrics_of_every_arm_at_once_are_each_arm_s_own(tmp_path):
    """`run_metrics_by_arm` (the pass@k page's) reads the case table, grades and case
    order once for every arm, and gives each arm what `run_metrics` gives it: ungraded,
    missing and no-grade samples, costs and tags included; an arm not in the run is
    refused as `run_metrics` refuses it."""
    from conftest import two_arm

    run = make_run(tmp_path, "1-r", two_arm({
        "c1": ([True, False, None], [True, True, "nograde"]),
        "c2": ([False, "missing", True], [None, True, False]),
        "c3": ([True, True, True], [False, False, "missing"]),
    }), k=3, tags={"c1": ["a"], "c2": ["b", "c"]}, costs={("c1", "baseline"): 0.25, ("c3", "skilled"): 0.5})
    both = G.run_metrics_by_arm(run, ["skilled", "baseline"])
    assert list(both) == ["skilled", "baseline"]
    for arm, m in both.items():
        assert m == G.run_metrics(run, arm=arm)
    with pytest.raises(EvalkitError, match="not in the run"):
        G.run_metrics_by_arm(run, ["baseline", "nope"])


# -- run_metrics against a plain reading of the run folder's files --------------------------

ODD_PASSED = [True, False, None, float("nan"), "true", "false", "", 0, 1, 2.5]
NUMBERS = [1e-6, 0.0, -0.0, None, float("nan"), 3, 1e300]  # a float column, NaN where null
ODD_COST = [*NUMBERS, "0.5", "abc", True, []]  # a column of objects


def write_odd_graded_run(root, seed, *, odd_keys=False, with_k=True, verdicts=ODD_PASSED, grade_lines="odd"):
    """A graded run folder with what a per-sample reading must get right: samples with no
    grade, duplicated grade keys (the last line wins) and duplicated samples, a grade for
    no sample, odd verdicts (null, NaN, "true", "false", numbers) and costs (null, NaN, a
    number in a string, not a number), judge costs, judge versions as strings and not,
    errored keys, a per-case stopping run's decided keys, a third arm the config does not
    name, a case table in another order that misses a case. `odd_keys`: case ids written
    as numbers on some lines and indices as 2.0 or "2", so the key columns are not typed;
    `verdicts`: the `passed` values drawn (true and false alone: a bool column);
    `grade_lines` "aligned": one grade line for each sample line, in the same order (as
    `evalkit grade` writes them), a duplicated sample's key graded twice; "reordered": one
    for each, in another order."""
    rnd = random.Random(seed)
    run = root / "runs" / f"2026010{seed}-000000"
    run.mkdir(parents=True)
    cases = [str(i) if odd_keys and i % 3 == 0 else f"case {i} é" for i in range(30)]
    cases[1:3] = ["nul\x00 1", "lone \ud800"]  # what a hash of the text must still tell apart
    arms = ["baseline", "guided", "third"]

    def key(case, arm, i):  # as a writer may spell it
        if odd_keys and case.isdigit() and rnd.random() < 0.5:
            case = int(case)
        index = rnd.choice([i, i, i, float(i), str(i)]) if odd_keys else i
        return {"case_id": case, "arm": arm, "index": index}

    results, grades, errors, not_run = [], [], [], []
    for case in cases[:-1]:  # the last case is planned and never sampled
        for arm in arms:
            for i in range(4):
                if rnd.random() < 0.1:
                    not_run.append([case, arm, i])  # decided before it ran
                    continue
                r = {**key(case, arm, i), "tags": rnd.choice([["a"], [], None, ["b", "c"]]),
                     "output": rnd.choice(["Paris", None, ""])}
                for col, values in (("cost_usd", ODD_COST), ("cost_avoided_usd", NUMBERS)):
                    if rnd.random() < 0.9:
                        r[col] = rnd.choice(values)
                copies = 2 if rnd.random() < 0.03 else 1
                results += [r] * copies
                if rnd.random() < 0.05:
                    errors.append({**key(case, arm, i), "error": "HTTP 500", "attempts": 3})
                # no grade, one, or a duplicated key; aligned: one for each sample line
                for _ in range(rnd.choice([0, 1, 1, 1, 1, 1, 2]) if grade_lines == "odd" else copies):
                    g = {**key(case, arm, i), "checks": [{"name": "contains", "passed": False, "reason": "no"}]}
                    for col, values in (("passed", verdicts), ("judge_cost_usd", ODD_COST),
                                        ("judge_cost_avoided_usd", NUMBERS),
                                        ("judge_version", [None, "v1", "v2", 3, ["v1"]]),
                                        ("judge_unstable", [False, True, None])):
                        if col == "passed" or rnd.random() < 0.9:
                            g[col] = rnd.choice(values)
                    grades.append(g)
    if grade_lines == "odd":
        grades.append({"case_id": cases[0], "arm": "guided", "index": 9, "passed": True, "judge_cost_usd": 1.0})
        rnd.shuffle(results)
    if grade_lines != "aligned":
        rnd.shuffle(grades)  # a duplicated key's last line is whichever the shuffle puts last
    not_run.append([cases[-1], "baseline", 0])  # a decided key of a case with no sample
    config = {"suite": None, "arms": [{"name": "baseline"}, {"name": "guided"}], "cases": cases,
              "config_hash": "h1"} | ({"k": 4} if with_k else {})
    table = [{"id": c, "set": rnd.choice(["capability", "regression", "smoke"]), "tags": ["t"], "judged": False}
             for c in cases[1:]]
    rnd.shuffle(table)
    files = {"results.jsonl": results, "grades.jsonl": grades, "errors.jsonl": errors}
    for name, rows in files.items():
        (run / name).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (run / "config.json").write_text(json.dumps(config))
    (run / "summary.json").write_text(json.dumps({"complete": True, "stopping": {"mode": "per_case",
                                                                               "not_run": not_run}}))
    (run / "case-table.json").write_text(json.dumps({"schema": "evalkit.case-table/1", "source": "run",
                                                     "cases": table}))
    return run


def _plain_number(x):
    try:
        v = float(x)
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if v != v else v


def plain_metrics(path, arm):
    """`run_metrics` of `arm` read straight from the run folder's JSON lines, one sample at
    a time: each sample's grade the last line of its (case id, arm, index) key; a verdict
    None when null or NaN, else its truth; a cost the list price, generator + avoided +
    judge + judge avoided, each a number or 0.0; a decided key a failed sample at no cost."""
    read = lambda name: [json.loads(x) for x in (path / name).read_text(encoding="utf-8").splitlines() if x.strip()]
    grades = {(str(g["case_id"]), str(g["arm"]), int(g["index"])): g for g in read("grades.jsonl")}
    config, summary = json.loads((path / "config.json").read_text()), json.loads((path / "summary.json").read_text())
    per, versions = {}, {}
    for s in read("results.jsonl"):
        if s["arm"] != arm:
            continue
        case = str(s["case_id"])
        d = per.setdefault(case, {"tags": tuple(s.get("tags") or ()), "n": 0, "c": 0, "costs": [], "ungraded": 0})
        g = grades.get((case, arm, int(s["index"])))
        p = None if g is None else g.get("passed")
        verdict = None if p is None or (isinstance(p, float) and p != p) else bool(p)
        d["n"] += 1
        d["c"] += verdict is True
        d["ungraded"] += verdict is None
        g = g or {}
        d["costs"].append(metrics.list_price(*(_plain_number(x) for x in (
            s.get("cost_usd"), s.get("cost_avoided_usd"), g.get("judge_cost_usd"), g.get("judge_cost_avoided_usd")))))
        if isinstance(g.get("judge_version"), str):
            versions[g["judge_version"]] = versions.get(g["judge_version"], 0) + 1
    for case, key_arm, _ in summary["stopping"]["not_run"]:
        if key_arm == arm and case in per:
            per[case]["n"] += 1
            per[case]["costs"].append(0.0)
    sets = {c["id"]: c["set"] for c in json.loads((path / "case-table.json").read_text())["cases"]}
    order = list(dict.fromkeys([*config["cases"], *(str(s["case_id"]) for s in read("results.jsonl"))]))
    top = max(versions.values(), default=0)
    return G.RunMetrics(
        k=config.get("k") or max(d["n"] for d in per.values()),
        cases=tuple(G.CaseResult(c, sets.get(c, "capability"), per[c]["tags"], per[c]["n"], per[c]["c"],
                                 tuple(per[c]["costs"]), per[c]["ungraded"]) for c in order if c in per),
        arm=arm, run_stamp=path.name, config_hash="h1",
        judge_version=next((v for v, n in versions.items() if n == top), None), sets_from="run")


@pytest.mark.parametrize("seed, odd_keys, with_k, verdicts, grade_lines", [
    (1, False, True, ODD_PASSED, "odd"), (2, False, False, [True, False], "odd"), (3, True, True, ODD_PASSED, "odd"),
    (4, True, False, [True, False], "odd"), (5, False, True, ODD_PASSED, "aligned"),
    (6, True, False, ODD_PASSED, "aligned"), (7, False, True, [True, False], "reordered")])
def test_run_metrics_is_the_plain_reading_of_the_run_folder(tmp_path, seed, odd_keys, with_k, verdicts, grade_lines):
    """Every per-case count, cost (in sample order), tag, set, the case order, k and the
    judge version of `run_metrics` / `run_metrics_by_arm` (read column-wise) are the ones a
    plain line-by-line reading of the files gives, on a run with odd keys and values."""
    path = write_odd_graded_run(tmp_path, seed, odd_keys=odd_keys, with_k=with_k, verdicts=verdicts,
                                grade_lines=grade_lines)
    run = load_run(path)
    assert len(run.errors) and (run.grades["passed"].dtype == bool) is (len(verdicts) == 2)
    assert run.samples["cost_avoided_usd"].dtype == float and run.samples["cost_usd"].dtype == object
    assert run.grades["judge_cost_avoided_usd"].dtype == float and run.grades["judge_cost_usd"].dtype == object
    assert (keys_typed(run.samples) and keys_typed(run.grades)) is not odd_keys
    want = {arm: plain_metrics(path, arm) for arm in ("third", "baseline", "guided")}
    assert G.run_metrics_by_arm(run, ["third", "baseline", "guided"]) == want
    assert G.run_metrics_by_arm(run, ["guided"]) == {"guided": want["guided"]}  # one arm of three
    assert G.run_metrics(run, arm="baseline") == want["baseline"]
    every = [c for m in want.values() for c in m.cases]
    assert {c.set for c in every} == {"capability", "regression", "smoke"}
    assert any(c.c for c in every) and want["guided"].judge_version
    assert any(c.ungraded for c in every) is (grade_lines == "odd" or None in verdicts)


def test_run_metrics_reads_no_value_of_another_arm_or_of_no_sample(tmp_path):
    """A cost no float holds (an integer of 400 digits) on another arm's sample, or on a
    grade no sample has, is never read: the arm's metrics are what they were; on the
    arm's own sample it is refused, as it was."""
    from conftest import two_arm

    outcomes = two_arm({"c1": ([True, False], [True, None]), "c2": ([False, True], [True, True])})
    clean, odd = make_run(tmp_path, "clean", outcomes, k=2), make_run(tmp_path, "odd", outcomes, k=2)
    lines = [json.loads(x) for x in (odd / "results.jsonl").read_text().splitlines()]
    lines[-1]["cost_usd"] = 10**400
    assert lines[-1]["arm"] == "skilled"
    (odd / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    with open(odd / "grades.jsonl", "a") as fh:
        fh.write(json.dumps({"case_id": "c1", "arm": "baseline", "index": 7, "passed": True,
                             "judge_cost_usd": 10**400}) + "\n")
    got = G.run_metrics(load_run(odd), arm="baseline")
    assert got == dataclasses.replace(G.run_metrics(load_run(clean), arm="baseline"), run_stamp="odd")
    with pytest.raises(OverflowError):
        G.run_metrics(load_run(odd), arm="skilled")
