"""Stopping once the pre-registered test has decided (`evalkit.running.until_decided`):
`evalkit run --until-decided` against the scripted server on issue 46's case (60 cases,
k=2, the guided arm flags 10% of its answers, the base arm 70%), the record it leaves,
the verdict `compare` gives on it, resume both ways, the refusals, per-case stopping,
and the sequential design's error rates checked by a seeded simulation."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import write_engine_suite
from evalkit._cli.main import main
from evalkit.calls.serve import ScriptedServer
from evalkit.foundations.errors import InputError
from evalkit.numbers import stats
from evalkit.numbers.plans import plan_power, write_plan
from evalkit.running.runner import run_suite
from evalkit.running.until_decided import seeded_order

N_CASES, K = 60, 2
FIXED_CALLS = N_CASES * 2 * K
# The guided arm's prompt says "Answer in one word."; each answer is "ok" (passes the
# case's default check) or "FLAGGED", drawn per request seed with these weights.
SCRIPT = {"rules": [
    {"match": "Answer in one word", "texts": ["FLAGGED", "ok"], "weights": [0.1, 0.9]},
    {"match": "Q:", "texts": ["FLAGGED", "ok"], "weights": [0.7, 0.3]},
]}
SAME = {"rules": [{"match": "Q:", "texts": ["FLAGGED", "ok"], "weights": [0.5, 0.5]}]}


def suite_of(root: Path, n: int = N_CASES, *, plan: str | None = "sequential", sets=("capability",), **config):
    cases = [{"id": f"case-{i:02d}", "input": f"question {i}?", "expected": "ok", "tags": ["t"],
              "set": sets[i % len(sets)]} for i in range(n)]
    suite = write_engine_suite(root, cases, **{"k": K, **config})
    if plan is not None:
        write_plan(plan_power(0.75, 0.0, 0.05, 0.8, sequential=plan == "sequential", suite_cases=n), suite)
    return suite


def cli(*args: str):
    return CliRunner().invoke(main, list(args))


def test_issue_case_stops_early_with_a_pass_and_its_saving(tmp_path):
    suite = suite_of(tmp_path / "suite")
    with ScriptedServer(SCRIPT) as srv:
        res = cli("run", str(suite), "--runs-dir", str(tmp_path / "runs"), "--base-url", srv.base_url,
                  "--no-progress", "--until-decided")
        sent = len(srv.requests)
    assert res.exit_code == 0, res.output
    run = next(p for p in (tmp_path / "runs").iterdir() if p.is_dir())
    summary = json.loads((run / "summary.json").read_text())
    stop = summary["stopping"]
    assert summary["complete"] and stop["stopped_early"] and stop["decision"] == "pass"
    assert stop["calls"] == summary["samples_ran"] == sent <= 0.6 * FIXED_CALLS
    assert stop["fixed_calls"] == FIXED_CALLS and stop["calls_saved"] == FIXED_CALLS - sent
    per_call = {a: (m["paid_usd"] + m["avoided_usd"]) / m["samples"] for a, m in summary["per_arm"].items()}
    assert stop["saved_usd"] > 0 and stop["fixed_usd"] == pytest.approx(sum(per_call.values()) * N_CASES * K)
    assert stop["at_case"] < N_CASES and stop["of_cases"] == N_CASES
    assert f"stopped early at {stop['at_case']} of 60 cases (pass), saved $" in res.output
    assert "**Stopped early at" in (run / "summary.md").read_text()
    meta = json.loads((run / "config.json").read_text())
    assert meta["cases"] == seeded_order([f"case-{i:02d}" for i in range(N_CASES)], 1234) != sorted(meta["cases"])
    assert meta["stopping"] == "sequential"
    # graded: the cases never drawn are not missing; compare gives the sequential verdict held to the plan
    assert cli("grade", str(run)).exit_code == 0
    grades = json.loads((run / "grades-summary.json").read_text())
    assert grades["overall"]["n_missing"] == 0
    out = cli("compare", str(run), "--baseline", "base", "--treatment", "guided", "--json")
    verdict = json.loads(out.output)
    v = verdict.get("verdict", verdict)
    assert v["kind"] == "pass" and v["test"] == "sequential-sign"
    assert v["n_trials"] == stop["at_case"] and v["plan_check"]["ok"], v
    # the report index's row says it, with the saving
    from evalkit.telling import report_index
    report_index.write_manifest(run, tmp_path / "reports" / run.name, [], {})
    line = f"stopped early at {stop['at_case']} of 60 cases (pass), saved $"
    assert line in report_index.build_index(tmp_path / "reports").read_text()


def test_a_stopped_run_resumes_on_the_same_sequence_or_completes_the_fixed_design(tmp_path):
    suite = suite_of(tmp_path / "suite")
    with ScriptedServer(SCRIPT) as srv:
        first = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False, until_decided=True)
        n = len(srv.requests)
        again = run_suite(suite, resume=first.path, base_url=srv.base_url, progress=False, until_decided=True)
        assert len(srv.requests) == n  # the same sequence has decided: nothing more to draw
        assert again.stopping is not None and again.stopping["at_case"] == first.stopping["at_case"]
        full = run_suite(suite, resume=first.path, base_url=srv.base_url, progress=False, until_decided=False)
    assert full.complete and full.samples_ran == FIXED_CALLS and len(srv.requests) == FIXED_CALLS
    assert full.stopping is None
    assert json.loads((first.path / "summary.json").read_text()).get("stopping") is None


def test_refused_without_a_sequential_plan(tmp_path):
    bare = suite_of(tmp_path / "bare", 8, plan=None)
    res = cli("run", str(bare), "--until-decided", "--base-url", "http://127.0.0.1:9", "--no-progress")
    assert res.exit_code == 2 and "evalkit power" in res.output and "--sequential --write" in res.output
    # the command it names writes the plan that lets the run go on
    command = re.search(r"`evalkit (power [^`]+)`", " ".join(res.output.split())).group(1)
    assert cli(*command.split()).exit_code == 0
    assert json.loads((bare / "plan.json").read_text())["test"] == "sequential-sign"
    fixed = suite_of(tmp_path / "fixed", 40, plan="sign")
    with pytest.raises(InputError, match="needs a sequential plan"):
        run_suite(fixed, base_url="http://127.0.0.1:9", progress=False, until_decided=True)
    assert not (tmp_path / "bare" / "runs").exists() and not (tmp_path / "fixed" / "runs").exists()


def test_config_stopping_is_validated_and_read(tmp_path):
    bad = suite_of(tmp_path / "bad", 8, stopping="early")
    res = cli("lint", str(bad))
    assert res.exit_code != 0 and "$.stopping" in res.output
    suite = suite_of(tmp_path / "cfg", stopping="sequential")
    with ScriptedServer(SCRIPT) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
    assert res.stopping is not None and res.stopping["stopped_early"] and res.samples_ran < FIXED_CALLS


def test_no_effect_runs_out_or_stops_on_futility_and_the_verdict_says_so(tmp_path):
    suite = suite_of(tmp_path / "suite")
    with ScriptedServer(SAME) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False, until_decided=True)
    assert res.complete and res.stopping is not None
    assert res.stopping["decision"] in ("no-improvement", "continue")


# the base arm always flags its answer (fails), the guided arm never does (passes)
_ALWAYS = {"rules": [{"match": "Answer in one word", "text": "ok"}, {"match": "Q:", "text": "FLAGGED"}]}


def _per_case_suite(tmp_path: Path) -> Path:
    """10 cases, half regression and half capability, k=4, stopping per case, one call at a time."""
    return suite_of(tmp_path / "suite", 10, plan=None, sets=("regression", "capability"), stopping="per_case",
                    k=4, concurrency=1)


def test_per_case_stops_a_regression_case_at_its_first_failure_and_a_capability_case_at_its_first_pass(tmp_path):
    suite = _per_case_suite(tmp_path)
    with ScriptedServer(_ALWAYS) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
    # base always fails: its regression cases stop after 1 sample, capability cases run all 4;
    # guided always passes: its capability cases stop after 1, regression cases run all 4.
    assert res.complete and res.samples_ran == 5 * (1 + 4) + 5 * (4 + 1)
    assert res.stopping is not None and res.stopping["calls_saved"] == 80 - 50 and res.stopping["saved_usd"] > 0
    assert cli("grade", str(res.path)).exit_code == 0
    grades = json.loads((res.path / "grades-summary.json").read_text())
    assert grades["overall"]["n_missing"] == 0
    sets = {arm: grades["per_arm"][arm]["per_set_scores"] for arm in ("base", "guided")}
    # the gated case scores are the full design's: pass^4 of a regression case is 0 once one
    # sample failed, pass@4 of a capability case 1 once one passed (a skipped sample counts failed)
    assert sets["base"]["regression"]["gated_case_score"] == 0.0
    assert sets["guided"]["capability"]["gated_case_score"] == 1.0
    assert sets["guided"]["regression"]["gated_case_score"] == 1.0  # ran all 4: every one passed
    # what it changes: the ungated pass^4 of a capability case stopped at its first pass
    assert sets["guided"]["capability"]["pass_hat_k"] == 0.0


# a case's k=2 samples per arm that cast each vote: win, tie, loss
_SAMPLES = {1: {"guided": ("ok", "ok"), "base": ("FLAGGED", "FLAGGED")},
            0: {"guided": ("ok", "FLAGGED"), "base": ("FLAGGED", "ok")},
            -1: {"guided": ("FLAGGED", "FLAGGED"), "base": ("ok", "ok")}}


def _one_run(suite, plan, votes: list[int]):
    """One simulated run through `SequentialStop`: each case's samples graded as they land,
    cases landing out of order (blocks of three, last first), as concurrent calls do."""
    from evalkit.running.until_decided import SequentialStop

    order = [c.id for c in suite.cases]
    watch = SequentialStop(suite, plan, ["base", "guided"], K, order)
    for start in range(0, len(order), 3):
        for i in reversed(range(start, min(start + 3, len(order)))):
            if watch.settled:
                break
            for arm, outputs in _SAMPLES[votes[i]].items():
                for index, out in enumerate(outputs):
                    watch.add((order[i], arm, index), {"output": out, "tool_calls": None})
    return watch


@pytest.mark.parametrize(("win_rate", "tie_rate"), [(0.5, 0.3), (0.75, 0.0), (0.75, 0.3)])
def test_simulated_error_rates_hold_under_repeated_looks(tmp_path, win_rate, tie_rate):
    """A seeded simulation (300 runs) of the run's own stop (`SequentialStop`, votes from
    graded samples, cases landing out of order): it decides as the plan's test does on the
    votes in the seeded order; under no effect it passes no more often than alpha, at the
    planned effect at least as often as the plan's power, on at most 0.6 of the plan's
    fixed cases on average (each bound with three Monte Carlo SEs; the benchmark's 20,000
    runs give 0.55 without ties and 0.57 at a tie rate of 0.3)."""
    from evalkit.running.until_decided import sequential_plan
    from evalkit.suites.reader import load_suite

    suite = load_suite(suite_of(tmp_path / "suite"))
    plan = sequential_plan(suite)
    fixed = plan_power(0.75, tie_rate, 0.05, 0.8).n_trials
    rng = np.random.default_rng(46)
    runs, passes, used = 300, 0, []
    for _ in range(runs):
        u = rng.random(N_CASES)
        votes = np.where(u < tie_rate, 0, np.where(u < tie_rate + (1 - tie_rate) * win_rate, 1, -1)).tolist()
        watch = _one_run(suite, plan, votes)
        direct = stats.SequentialSignTest(**plan.sequential_params()).run(votes)
        assert (watch.test.decision, watch.fed) == (direct.decision, direct.trials)
        passes += watch.test.decision == "pass"
        used.append(watch.fed)
    rate, se = passes / runs, (0.8 * 0.2 / runs) ** 0.5
    if win_rate == 0.5:
        assert rate <= 0.05 + 3 * (0.05 * 0.95 / runs) ** 0.5
    else:
        assert rate >= 0.8 - 3 * se
        assert np.mean(used) <= 0.6 * fixed + 3 * np.std(used) / runs**0.5


def test_the_run_summary_page_says_it_stopped_early_and_what_it_saved(monkeypatch):
    from types import SimpleNamespace

    from evalkit.telling import nb
    shown = []
    monkeypatch.setattr(nb, "banner", lambda kind, text: shown.append((kind, text)))
    stop = {"mode": "sequential", "stopped_early": True, "at_case": 13, "of_cases": 60, "decision": "pass",
            "saved_usd": 0.0125, "calls_saved": 185, "fixed_calls": 240}
    run = SimpleNamespace(summary={"complete": True, "stopping": stop}, config={}, samples=[1])
    monkeypatch.setattr(nb, "run_state", lambda run, summary: None)
    nb.show_state(run, None)
    assert shown == [("pass", "Stopped early at 13 of 60 cases (pass), saved $0.0125 (185 of 240 calls)")]
    shown.clear()
    nb.show_state(SimpleNamespace(summary={"complete": True}, config={}, samples=[1]), None)
    assert shown == []


def test_an_errored_sample_stops_the_drawing_and_a_resume_carries_on_the_sequence(tmp_path):
    suite = suite_of(tmp_path / "suite")
    first = seeded_order([f"case-{i:02d}" for i in range(N_CASES)], 1234)[0]
    broken = {**SCRIPT, "faults": [{"kind": "500", "match": f"question {int(first[-2:])}?"}]}
    with ScriptedServer(broken) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False, until_decided=True)
    assert not res.complete and res.exit_code == 1
    assert res.stopping is not None and res.stopping["decision"] == "continue" and res.stopping["at_case"] == 0
    assert f"sample {first}/" in res.stopping["reason"] and "has no vote" in (res.reason or "")
    assert res.samples_ran < 4 * 4  # the cases in flight when it errored, no more
    out = CliRunner().invoke(main, ["run", str(suite), "--resume", str(res.path), "--until-decided", "--no-progress"]
                             + ["--base-url", "http://127.0.0.1:9"])
    assert out.exit_code == 1  # nothing listens there: the resume is the CLI's, on the same sequence
    with ScriptedServer(SCRIPT) as srv:
        again = run_suite(suite, resume=res.path, base_url=srv.base_url, progress=False, until_decided=True)
    assert again.complete and again.stopping is not None and again.stopping["decision"] == "pass"
    assert again.stopping["calls"] == again.samples_ran <= 0.6 * FIXED_CALLS


def test_an_error_after_the_decision_leaves_the_run_decided(tmp_path):
    from evalkit.running.until_decided import SequentialStop, sequential_plan
    from evalkit.suites.reader import load_suite

    suite = load_suite(suite_of(tmp_path / "suite", 20))
    order = [c.id for c in suite.cases]
    watch = SequentialStop(suite, sequential_plan(suite), ["base", "guided"], K, order)
    keys = iter(watch.gate(iter([(c, a, i) for c in order for a in ("base", "guided") for i in range(K)])))
    while not watch.settled:  # the guided arm passes, the base arm fails: a win per case
        key = next(keys)
        watch.add(key, {"output": "ok" if key[1] == "guided" else "FLAGGED", "tool_calls": None})
    assert watch.test.decision == "pass" and list(keys) == []  # nothing more is drawn
    watch.error((order[-1], "base", 0))  # a case in flight past the decision errored
    n = 2 * watch.fed  # samples per arm
    per_arm = {"base": {"samples": n, "paid_usd": 0.0, "avoided_usd": 0.004},  # every base call a cache hit
               "guided": {"samples": n, "paid_usd": 0.006, "avoided_usd": 0.0}}
    record = watch.record(calls=4 * watch.fed, spend_usd=0.006, per_arm=per_arm)
    assert watch.errored is None and record.stopped_early and record.at_case == watch.fed < 20
    # the fixed design at each arm's list price (paid + avoided by the cache), less this run's at list price
    assert record.fixed_usd == pytest.approx(0.004 / n * 40 + 0.006 / n * 40)
    assert record.saved_usd == pytest.approx(record.fixed_usd - 0.01) and record.saved_usd > 0
    assert {k[0] for k in record.not_run} == set(order[watch.fed:])


def test_a_sample_its_checks_cannot_grade_casts_no_vote_and_stops_the_drawing(tmp_path, monkeypatch):
    from evalkit.running import until_decided
    from evalkit.suites.reader import load_suite

    suite = load_suite(suite_of(tmp_path / "suite", 10))
    order = [c.id for c in suite.cases]
    real = until_decided.grade_sample

    def grade(case, sample, path):
        if case.id == order[1]:
            raise ValueError("a check that cannot run on this answer")
        return real(case, sample, path)

    monkeypatch.setattr(until_decided, "grade_sample", grade)
    watch = until_decided.SequentialStop(suite, until_decided.sequential_plan(suite), ["base", "guided"], K, order)
    keys = watch.gate(iter([(c, a, i) for c in order for a in ("base", "guided") for i in range(K)]))
    for key in keys:
        watch.add(key, {"output": "ok" if key[1] == "guided" else "FLAGGED", "tool_calls": None})
    assert watch.errored == f"{order[1]}/base/0" and watch.fed == 1 and len(watch.drawn) == 2
    assert "has no vote" in watch.record(calls=8, spend_usd=0.01, per_arm={"base": {}, "guided": {}}).reason


def test_a_plain_resume_keeps_the_runs_recorded_stopping_mode(tmp_path):
    suite = suite_of(tmp_path / "suite")  # config.json says nothing of stopping: the run's record does
    with ScriptedServer(SCRIPT) as srv:
        first = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False, until_decided=True)
        n = len(srv.requests)
        again = run_suite(suite, resume=first.path, base_url=srv.base_url, progress=False)
    assert len(srv.requests) == n < FIXED_CALLS  # not the fixed design's remaining calls
    assert again.stopping is not None and again.stopping["mode"] == "sequential" and again.stopping["stopped_early"]


def test_no_until_decided_completes_a_per_case_run_and_the_run_records_it(tmp_path):
    suite = _per_case_suite(tmp_path)
    with ScriptedServer(_ALWAYS) as srv:
        first = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        assert first.samples_ran == 50
        full = run_suite(suite, resume=first.path, base_url=srv.base_url, progress=False, until_decided=False)
        assert len(srv.requests) == 80
    assert full.complete and full.samples_ran == 80 and full.stopping is None
    assert json.loads((first.path / "config.json").read_text())["stopping"] == "fixed"


def test_compare_on_a_stopped_run_gives_no_fixed_test_verdict_and_no_naive_p_value(tmp_path):
    suite = suite_of(tmp_path / "suite")
    with ScriptedServer(SCRIPT) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False, until_decided=True)
    assert res.stopping is not None and res.stopping["stopped_early"]
    assert cli("grade", str(res.path)).exit_code == 0

    def verdict():
        out = cli("compare", str(res.path), "--baseline", "base", "--treatment", "guided", "--json")
        data = json.loads(out.output)
        return data.get("verdict", data)

    with_plan = verdict()  # the sequential verdict: no fixed-n p-value or clustered interval beside it
    assert with_plan["kind"] == "pass" and with_plan["p_value"] is None and with_plan.get("paired") is None
    (suite / "plan.json").unlink()
    bare = verdict()  # a fixed sign test on the cases the stopping rule chose would not hold its alpha
    assert bare["kind"] == "inconclusive" and "sequential plan" in bare["reason"] and bare["p_value"] is None


def test_gate_and_compare_count_a_per_case_runs_skipped_samples_as_decided(tmp_path):
    suite = suite_of(tmp_path / "suite", 10, plan=None, sets=("regression", "capability"), k=4, concurrency=1)
    with ScriptedServer(_ALWAYS) as srv:  # guided always passes: its capability cases stop at the first pass
        fixed = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False, arms=["guided"])
        assert cli("grade", str(fixed.path)).exit_code == 0
        assert cli("baseline", "accept", str(fixed.path)).exit_code == 0
        cfg = json.loads((suite / "config.json").read_text())
        (suite / "config.json").write_text(json.dumps({**cfg, "stopping": "per_case"}))
        stopped = run_suite(suite, runs_dir=tmp_path / "runs2", base_url=srv.base_url, progress=False)
    assert stopped.complete and stopped.stopping["stopped_early"]
    assert cli("grade", str(stopped.path)).exit_code == 0
    gate = cli("gate", str(stopped.path), "--arm", "guided", "--baseline", str(suite / "baseline.json"))
    assert gate.exit_code == 0 and "fewer than k" not in gate.output, gate.output
    out = cli("compare", str(stopped.path), "--baseline", "base", "--treatment", "guided", "--json")
    data = json.loads(out.output)
    v = data.get("verdict", data)
    # every case decided in both arms: no key is errored or unmatched, and a skipped sample
    # is a failure (guided's capability case: 1 pass of 4 against base's 0; its regression case 4 against 0)
    assert v["errored"] == 0 and v["wins"] == 10 and v["kind"] == "pass", v
    assert v.get("paired") is None  # no per-sample pass-rate interval over samples never drawn


def test_the_plan_says_and_fits_the_most_cases_its_design_may_need(tmp_path):
    # the design is truncated at its cap on discordant pairs: a shorter suite loses power
    long = plan_power(0.75, 0.0, 0.05, 0.8, sequential=True)  # no suite: the fewest expected pairs, 90 pairs
    assert long.sequential["max_discordant"] == long.sequential["max_trials"] == long.max_trials() == 90
    seq = stats.SequentialSignTest(**long.sequential_params())
    assert seq.power_within(35, 0.75) == pytest.approx(0.715, abs=5e-4)  # the "cases needed: 35" suite
    assert seq.power_within(10_000, 0.75) == pytest.approx(seq.design.power_exact)
    assert plan_power(0.75, 0.3, 0.05, 0.8, sequential=True).max_trials() == math.ceil(90 / 0.7)
    out = cli("power", "--win-rate", "0.75", "--alpha", "0.05", "--power", "0.8", "--sequential")
    assert "most cases the sequential design may need: 90" in out.output
    # written for a suite of 60 cases: the design with the fewest expected pairs among those that fit
    fits = suite_of(tmp_path / "fits", 60, plan=None)
    out = cli("power", "--win-rate", "0.75", "--alpha", "0.05", "--power", "0.8", "--sequential", "--write", str(fits))
    plan = json.loads((fits / "plan.json").read_text())["sequential"]
    assert out.exit_code == 0 and plan["max_trials"] <= 60 and plan["fits_suite"], out.output
    assert plan["power_at_suite"] >= 0.8 and "hold the design" in out.output
    # a suite smaller than any candidate's maximum: the power at its size, said
    small = suite_of(tmp_path / "small", 20, plan=None)
    out = cli("power", "--win-rate", "0.75", "--alpha", "0.05", "--power", "0.8", "--sequential", "--write", str(small))
    plan = json.loads((small / "plan.json").read_text())["sequential"]
    assert not plan["fits_suite"] and f"on 20 cases is {plan['power_at_suite']:.3f}" in out.output
    assert plan["power_at_suite"] < 0.8


def test_run_until_decided_refuses_a_suite_shorter_than_the_plans_maximum_and_lint_warns(tmp_path):
    suite = suite_of(tmp_path / "suite", 60, plan=None)
    plan = plan_power(0.75, 0.0, 0.05, 0.8, sequential=True)  # may need 90 cases
    # an old plan.json (before max_trials was recorded) is read the same way
    old = plan.to_json()
    del old["sequential"]["max_trials"]
    (suite / "plan.json").write_text(json.dumps(old))
    res = cli("run", str(suite), "--until-decided", "--base-url", "http://127.0.0.1:9", "--no-progress")
    text = " ".join(res.output.split())
    assert res.exit_code == 2 and "60 cases" in text and "up to 90" in text and "--sequential --write" in text
    assert not (suite / "runs").exists()
    lint = cli("lint", str(suite))
    assert "may need up to 90" in " ".join(lint.output.split())
