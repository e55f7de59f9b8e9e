"""Two-arm and single-arm verdicts (evalkit.conclusions.verdicts).

Run folders are written into tmp_path by hand (conftest.make_run, following
docs/formats.md), so each test controls exactly which trial passed, errored or is
missing.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from conftest import make_run, two_arm

from evalkit.numbers import stats
from evalkit.conclusions import verdicts as V
from evalkit.foundations.errors import InputError


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
    assert v.to_json()["case_votes"][6] == ["c6", "errored"]
    assert sorted(p.split("#")[0] for p in v.problems) == ["c6", "c7"] and "HTTP 500" in v.problems[0]
    assert v.p_value == pytest.approx(stats.sign_test(6, 0, 0).p_value)  # clean votes only
    text = v.render()
    assert "6W/0T/0L, 2 errored/unmatched, 8 units" in text
    assert "p on the 6 clean vote(s) only" in text and "not a verdict" in text
    d = v.to_json()
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


def test_conformance_verdict(tmp_path):
    ok = make_run(tmp_path, "ok", {(f"c{i}", "agent"): [True, True] for i in range(3)}, k=2)
    assert V.conformance_verdict(ok).kind == "pass"
    below = make_run(tmp_path, "below", {("a", "agent"): [True, True], ("b", "agent"): [True, False]}, k=2)
    v = V.conformance_verdict(below)
    assert v.kind == "regression" and v.below_trials == ("b#1",)
    err = make_run(tmp_path, "err", {("a", "agent"): [True, False], ("b", "agent"): [True, None]}, k=2)
    v = V.conformance_verdict(err)
    assert v.kind == "inconclusive" and v.problems == ("b#1: ungraded (judge failed)",)


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


def _sign_and_paired_disagree() -> dict:
    """12 cases x 5 repeats: six cases won by two repeats, one lost by one, five tied.
    The sign test sees 6 wins to 1 loss (p = 0.125: no-improvement), while the 60 trials'
    paired difference (+18.3 points) has a 95% interval above zero."""
    cases = {f"w{i}": ([True, True, False, False, False], [True, True, True, True, False]) for i in range(6)}
    cases["lost"] = ([True, True, True, False, False], [True, True, False, False, False])
    cases.update({f"t{i}": ([True, True, True, False, False], [True, True, True, False, False]) for i in range(5)})
    return two_arm(cases)


def test_a_sign_test_and_a_paired_difference_that_disagree_say_why_the_verdict_stands(tmp_path):
    v = V.two_arm_verdict(make_run(tmp_path, "r", _sign_and_paired_disagree(), k=5), "baseline", "skilled")
    assert v.kind == "no-improvement" and v.p_value == pytest.approx(0.125)
    assert v.paired.low > 0 and v.paired.mean == pytest.approx(11 / 60)
    why = v.disagreement()
    assert why is not None
    for said in ("p = 0.125", "not significant", "excludes zero", "repeats within a case are not independent",
                 "60 trials are repeats of 12 cases"):
        assert said in why, (said, why)
    assert "pre-registered" not in why  # no plan.json: the test is the verdict's, not called pre-registered
    assert why in v.render()  # the terminal (`evalkit compare`) says it under the paired line
    assert V.Verdict.from_json(json.loads(json.dumps(v.to_json()))).disagreement() == why  # and a page, from verdicts.json


def test_a_sign_test_and_a_paired_difference_that_agree_say_nothing_more(tmp_path):
    cases = {f"w{i}": ([False] * 3, [True, True, False]) for i in range(8)}
    v = V.two_arm_verdict(make_run(tmp_path, "r", two_arm(cases), k=3), "baseline", "skilled")
    assert v.kind == "pass" and v.paired.low > 0
    assert v.disagreement() is None and "Why the two differ" not in v.render()
    flat = {f"c{i}": ([True, False], [True, False]) for i in range(8)}  # no difference either way
    assert V.two_arm_verdict(make_run(tmp_path, "flat", two_arm(flat), k=2), "baseline", "skilled").disagreement() is None


def test_a_significant_sign_test_beside_a_paired_interval_over_zero_says_why_too():
    from dataclasses import replace

    from evalkit.foundations.records_plan import PairedDifference

    v = V.verdict_from_tally(8, 0, 0)  # every case voted for the treatment: p = 0.0078
    v = replace(v, paired=PairedDifference(mean=0.02, se=0.02, correlation=0.5, low=-0.02, high=0.06, n=80,
                                             se_unpaired=0.03, n_clusters=8))
    why = v.disagreement()
    assert v.kind == "pass" and why is not None
    assert "significant at alpha 0.05" in why and "not significant" not in why and "includes zero" in why


def _plain_trials(run_dir, baseline="baseline", treatment="skilled"):
    """The paired trials of a run every key of which has one sample and a true/false
    grade, read straight from its files (the last grade line of a key counts)."""
    cfg = json.loads((run_dir / "config.json").read_text())
    passed = {}
    for line in (run_dir / "grades.jsonl").read_text().splitlines():
        g = json.loads(line)
        passed[(g["case_id"], g["arm"], g["index"])] = g["passed"]
    out = []
    for case in cfg["cases"]:
        for i in range(cfg["k"]):
            b, t = passed[(case, baseline, i)], passed[(case, treatment, i)]
            out.append((case, i, b, t, "win" if t and not b else "loss" if b and not t else "tie", None))
    return out


def _clean_run(tmp_path, seed, n_cases=40, k=5):
    rnd = np.random.default_rng(seed)
    outcomes = {f"case {i:03d}" if i % 7 else f"Zé {i}": ([bool(x) for x in rnd.random(k) < 0.5],
                                                           [bool(x) for x in rnd.random(k) < 0.7])
                for i in rng_order(rnd, n_cases)}
    return make_run(tmp_path, f"r{seed}", two_arm(outcomes), k=k)


def rng_order(rnd, n):
    return [int(i) for i in rnd.permutation(n)]  # cases planned out of their names' sorted order


def test_a_clean_run_is_paired_column_by_column_as_its_files_say(tmp_path):
    """A run whose every key has one sample and a true/false grade is paired column by
    column (`_CleanPairs`): its trials, their frame and the verdict are what the files
    say, and what pairing trial by trial gives (the path every other run takes)."""
    from evalkit.runfolder import runload
    from evalkit.telling import nb

    for seed in range(3):
        run_dir = _clean_run(tmp_path, seed)
        if seed == 2:  # a regraded key: the last grade line counts
            lines = (run_dir / "grades.jsonl").read_text().splitlines()
            first = json.loads(lines[0])
            first["passed"] = not first["passed"]
            (run_dir / "grades.jsonl").write_text("\n".join([*lines, json.dumps(first)]) + "\n")
        run = runload.load_run(run_dir)
        assert V._CleanPairs.of(run, "baseline", "skilled") is not None
        want = _plain_trials(run_dir)
        got = V.paired_trials(run, "baseline", "skilled")
        assert [(t.case_id, t.index, t.baseline_passed, t.treatment_passed, t.outcome, t.problem) for t in got] == want
        frame = V.paired_frame(run, "baseline", "skilled")
        assert list(frame.itertuples(index=False, name=None)) == want
        pd.testing.assert_frame_equal(frame, nb.records_frame(got))
        v = V.two_arm_verdict(run, "baseline", "skilled")
        votes = {}
        for case, _, b, t, _, _ in want:
            votes[case] = votes.get(case, 0) + int(t) - int(b)
        assert [c for c, _ in v.case_votes] == list(votes)
        assert [o for _, o in v.case_votes] == ["win" if n > 0 else "loss" if n < 0 else "tie" for n in votes.values()]
        assert (v.wins, v.losses, v.ties, v.n_pairs, v.problems) == (
            sum(n > 0 for n in votes.values()), sum(n < 0 for n in votes.values()),
            sum(n == 0 for n in votes.values()), len(want), ())
        slow = V.two_arm_verdict(run, "baseline", "skilled", overrides={("no such case", "baseline", 0): True})
        assert slow == v  # an override of no sample changes nothing, and takes the trial-by-trial path


@pytest.mark.parametrize("spoil", ["missing", "nograde", "ungraded", "extra index", "errored"])
def test_a_run_with_any_unclean_trial_is_paired_trial_by_trial(tmp_path, spoil):
    """One missing, ungraded or errored sample, or an index past k, and the run is paired
    trial by trial, which says why for each trial it cannot count."""
    from evalkit.runfolder import runload
    from evalkit.telling import nb

    outs = {f"c{i}": ([True, False, True], [True, True, False]) for i in range(8)}
    errors = ()
    if spoil in ("missing", "nograde"):
        outs["c3"][1][2] = spoil
    elif spoil == "ungraded":
        outs["c3"][1][2] = None
    elif spoil == "extra index":
        outs["c3"] = ([True, False, True, True], [True, True, False, False])
    else:
        outs["c3"][1][2] = "missing"
        errors = [("c3", "skilled", 2)]
    run = runload.load_run(make_run(tmp_path, "r", two_arm(outs), k=3, errors=errors))
    assert V._CleanPairs.of(run, "baseline", "skilled") is None
    trials = V.paired_trials(run, "baseline", "skilled")
    frame = V.paired_frame(run, "baseline", "skilled")
    pd.testing.assert_frame_equal(frame, nb.records_frame(trials))  # the frame the page made of the records
    bad = [t for t in trials if t.outcome == "errored"]
    v = V.two_arm_verdict(run, "baseline", "skilled")
    if spoil == "extra index":
        assert not bad and len(trials) == 8 * 3 + 1 and v.n_pairs == 25
    else:
        assert [(t.case_id, t.index) for t in bad] == [("c3", 2)] and v.kind == "inconclusive"


def test_an_index_past_64_bits_signed_takes_the_trial_by_trial_path(tmp_path):
    """One grade line at index 2**63 makes pandas read the grades' index as uint64: the
    run is paired trial by trial (the column-wise grid takes int64 indices only), and the
    verdict is the one that path gives (the extra grade has no sample: nothing changes)."""
    from evalkit.runfolder import runload

    run_dir = make_run(tmp_path, "r", two_arm({"c0": ([True, False], [True, True]),
                                               "c1": ([False, False], [True, False])}), k=2)
    with open(run_dir / "grades.jsonl", "a") as fh:
        fh.write(json.dumps({"case_id": "c0", "arm": "baseline", "index": 2**63, "passed": True}) + "\n")
    run = runload.load_run(run_dir)
    assert run.grades["index"].dtype == np.uint64 and V._CleanPairs.of(run, "baseline", "skilled") is None
    v = V.two_arm_verdict(run, "baseline", "skilled")
    assert (v.wins, v.ties, v.losses, v.n_pairs) == (2, 0, 0, 4)
    assert len(V.paired_frame(run, "baseline", "skilled")) == 4
