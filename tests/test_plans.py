"""Power plans, pre-registration and the plan check (evalkit.numbers.plans)."""
from __future__ import annotations

import json

import pytest
from conftest import make_run, make_suite, two_arm

from evalkit.conclusions import gates as G
from evalkit.numbers import plans as P
from evalkit.numbers import stats
from evalkit.conclusions import verdicts as V
from evalkit.foundations.errors import InputError


def test_plan_write_load_and_check(tmp_path):
    suite = make_suite(tmp_path, {"a": {}}, seed=4242)
    plan = P.plan_power(0.75, 0.3, 0.05, 0.8)
    ss = stats.sign_test_sample_size(0.75, 0.3, 0.05, 0.8)
    assert (plan.n_trials, plan.n_discordant, plan.n_trials_approx) == (ss.trials_stable, ss.discordant_stable,
                                                                         ss.trials_approx)
    assert stats.sign_test_power(plan.n_trials, 0.75, 0.3) >= 0.8
    path = P.write_plan(plan, suite)
    loaded = P.load_plan(path)
    assert loaded.seed == 4242 and loaded.n_trials == plan.n_trials and loaded.test == "sign"
    short = V.verdict_from_tally(9, 4, 2, unit=V.UNIT_CASE)
    pc = P.check_against_plan(short, loaded)
    assert not pc.ok and any("stopped short: 15 of" in f for f in pc.flags)
    enough = V.verdict_from_tally(30, loaded.n_trials - 33, 3, unit=V.UNIT_CASE)
    assert P.check_against_plan(enough, loaded).ok
    changed = V.verdict_from_tally(30, loaded.n_trials - 33, 3, unit=V.UNIT_CASE, alpha=0.1)
    assert any("alpha" in f for f in P.check_against_plan(changed, loaded).flags)
    trial_unit = V.verdict_from_tally(30, loaded.n_trials - 33, 3)
    assert any("unit" in f for f in P.check_against_plan(trial_unit, loaded).flags)
    (suite / "plan.json").write_text("{not json")
    with pytest.raises(InputError, match="plan.json"):
        P.load_plan(suite)


def test_compare_with_plan_flags_short_run(tmp_path):
    suite = make_suite(tmp_path, {f"c{i}": {} for i in range(8)})
    P.write_plan(P.plan_power(0.8, 0.0, 0.05, 0.8), suite)
    outs = two_arm({f"c{i}": ([False], [True]) for i in range(8)})
    v = V.two_arm_verdict(make_run(tmp_path, "r", outs, k=1, suite=suite), "baseline", "skilled",
                          plan=P.load_plan(suite))
    assert v.kind == "pass" and v.plan_check is not None and not v.plan_check.ok
    assert "stopped short: 8 of" in v.plan_check.flags[0]


@pytest.mark.parametrize("tie_rate", [0.0, 0.3, 0.5])
def test_a_sequential_plan_takes_the_design_with_the_fewest_expected_pairs(tie_rate):
    """issue 46: the plan truncates its SPRT where it stops soonest on average at the
    planned effect (here 3x the fixed pairs), alpha and power still held exactly: at most
    0.6 of the plan's fixed cases, where the default 1.5x cap needs 0.58 to 0.61."""
    plan = P.plan_power(0.75, tie_rate, 0.05, 0.8, sequential=True)
    q = plan.sequential
    default = stats.SequentialSignTest(0.75, 0.05, 0.8).operating_characteristics(0.75, tie_rate)
    assert q["params"]["max_discordant"] == 90 and q["max_discordant"] == 90
    assert q["type_i_error"] <= 0.05 and q["power_exact"] >= 0.8
    assert q["expected_trials"] < default.expected_trials and q["ratio_to_fixed_stable"] <= 0.6


def test_a_plan_written_before_the_cap_search_keeps_its_design(tmp_path):
    plan = P.plan_power(0.75, 0.0, 0.05, 0.8, sequential=True)
    old = {**plan.sequential, "params": {"win_rate": 0.75, "alpha": 0.05, "power": 0.8}, "max_discordant": 45}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({**plan.to_json(), "sequential": old}))
    design = stats.SequentialSignTest(**P.load_plan(path).sequential_params()).design
    assert design.max_discordant == 45 and design == stats.SequentialSignTest(0.75, 0.05, 0.8).design


def test_sequential_plan_stops_early_and_records_its_path(tmp_path):
    suite = make_suite(tmp_path, {f"c{i}": {} for i in range(30)})
    plan = P.plan_power(0.9, 0.0, 0.05, 0.8, sequential=True)
    P.write_plan(plan, suite)
    loaded = P.load_plan(suite)
    assert loaded.test == "sequential-sign" and loaded.sequential_params() == {"win_rate": 0.9, "alpha": 0.05,
                                                                                "power": 0.8, "max_discordant": 24}
    assert loaded.sequential["type_i_error"] <= 0.05
    assert loaded.sequential["expected_trials"] < loaded.n_trials
    outs = two_arm({f"c{i}": ([False], [True]) for i in range(30)})
    v = V.two_arm_verdict(make_run(tmp_path, "r", outs, k=1, suite=suite), "baseline", "skilled", plan=loaded)
    seq = stats.SequentialSignTest(**loaded.sequential_params())
    expect = seq.run([1] * 30)
    assert v.kind == "pass" and v.test == "sequential-sign"
    assert v.n_trials == expect.trials < 30 and v.wins == expect.wins
    assert [s["decision"] for s in v.sequential["path"]][-1] == "pass" and len(v.sequential["path"]) == v.n_trials
    assert v.plan_check.ok, v.plan_check.flags
    fixed = V.two_arm_verdict(tmp_path / "runs" / "r", "baseline", "skilled", plan=P.plan_power(0.9))
    assert any("changed the test" in f for f in P.check_against_plan(fixed, loaded).flags)


def test_plan_baseline_and_config_files_that_are_not_json_objects_are_input_errors(tmp_path):
    # Review finding: invalid UTF-8 in plan.json / baseline.json raised UnicodeDecodeError
    # (a traceback, not exit 2), and a config.json holding a list crashed write_plan.
    (tmp_path / "plan.json").write_bytes(b'{"test": "sign",\n "note": "\xff"}\n')
    with pytest.raises(InputError) as ei:
        P.load_plan(tmp_path / "plan.json")
    assert ei.value.line == 2 and "invalid UTF-8" in str(ei.value)
    (tmp_path / "baseline.json").write_text("[1, 2]")
    with pytest.raises(InputError, match="a baseline must be a JSON object, got list"):
        G.load_baseline(tmp_path / "baseline.json")
    (tmp_path / "config.json").write_text("[]")
    before = (tmp_path / "plan.json").read_bytes()
    with pytest.raises(InputError, match="config must be a JSON object"):
        P.write_plan(P.plan_power(0.75), tmp_path)
    assert (tmp_path / "plan.json").read_bytes() == before  # nothing written


def test_a_plan_or_baseline_in_a_suite_folder_must_resolve_inside_it(tmp_path):
    import os

    from conftest import fifo_watchdog

    suite = make_suite(tmp_path, {"a": {}})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    P.write_plan(P.plan_power(0.75), elsewhere)  # a plan outside any suite: read where it is
    assert P.load_plan(elsewhere / "plan.json").test == "sign"
    (suite / "plan.json").symlink_to(elsewhere / "plan.json")
    with pytest.raises(InputError, match="outside the suite folder"):
        P.load_plan(suite)
    (elsewhere / "baseline.json").write_text(json.dumps({"success_rate": 0.5}))
    assert G.load_baseline(elsewhere / "baseline.json").gated_case_score == 0.5
    (suite / "baseline.json").symlink_to(elsewhere / "baseline.json")
    with pytest.raises(InputError, match="outside the suite folder"):
        G.load_baseline(suite / "baseline.json")
    (suite / "plan.json").unlink()
    os.mkfifo(suite / "plan.json")
    with fifo_watchdog(suite / "plan.json") as released:
        with pytest.raises(InputError, match="not a regular file: it is a FIFO"):
            P.load_plan(suite)
    assert released == []
