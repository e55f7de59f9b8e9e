"""A judge you can trust, end to end: the pairwise verdict (`evalkit.conclusions.compare`), judge
calibration bound to what was labelled, and judged results gated on it.

Judges are scripted servers of our own over real HTTP through the official client: a
fair one, one that always prefers the first answer, one that fails with HTTP 500 on
some calls, and two (lenient, harsh) that disagree with people.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_grading import write_run, write_suite

from evalkit.conclusions import gates
from evalkit.telling import labelling
from evalkit.foundations import records
from evalkit._cli.main import main
from evalkit.conclusions.compare import compare_arms
from evalkit.foundations.errors import InputError
from evalkit.conclusions.grading import grade_run
from evalkit.foundations.records import GradesSummary
from evalkit.calls.serve import ScriptedServer

ARMS = ("baseline", "treatment")
JUDGED = [{"id": f"c{i}", "input": f"Task {i}", "expected": {"rubric": "Says GOOD"}, "tags": ["open"]}
          for i in range(8)]
DETERMINISTIC = [{"id": "cap-fr", "input": "France", "expected": "Paris", "tags": ["golden"]},
                 {"id": "cap-es", "input": "Spain", "expected": "Madrid", "tags": ["golden"]}]

# Direct scoring: GOOD 5, FINE 3 (both judges score the same, so both can be calibrated).
DIRECT_RULES = [{"match": "output>>>\nGOOD", "text": "SCORE: 5 REASON: says good"},
                {"match": "output>>>\nFINE", "text": "SCORE: 3 REASON: only fine"},
                {"match": "output>>>\n", "text": "SCORE: 4 REASON: fine"}]
FAIR = {"model": "judge-model", "rules": [
    {"match": ["output A>>>\nGOOD", "output B>>>\nGOOD"], "text": "WINNER: TIE REASON: both good"},
    {"match": "output A>>>\nGOOD", "text": "WINNER: A REASON: A is good"},
    {"match": "output B>>>\nGOOD", "text": "WINNER: B REASON: B is good"},
    {"match": "Output A:", "text": "WINNER: TIE REASON: neither"},
    *DIRECT_RULES]}
FIRST_ALWAYS = {"model": "judge-model", "rules": [
    {"match": "Output A:", "text": "WINNER: A REASON: the first is better"}, *DIRECT_RULES]}
OUTAGES = dict(FAIR, faults=[{"kind": "500", "match": ["Output A:", "CASE-c3 "]}])


def two_arm_run(root: Path, *, better: str = "treatment", extra: dict | None = None, cases=JUDGED,
                tag: str = "") -> tuple[Path, Path]:
    """A graded-to-be run: 8 judged cases x 2 arms x k=2. In c0..c6 the `better` arm says
    GOOD and the other FINE (same length: no length preference to find); in c7 both say
    GOOD. Deterministic cases answer right in both arms."""
    suite = root / "suite"
    if not suite.exists():
        write_suite(root, cases=cases, opt_out=False,
                    extra={"k": 2, "arms": [{"name": a} for a in ARMS], **(extra or {})})
    run = write_run(root, suite, {c["id"]: [None, None] for c in cases}, arms=ARMS)
    lines = [json.loads(ln) for ln in (run / "results.jsonl").read_text().splitlines()]
    answers = {"cap-fr": "Paris", "cap-es": "Madrid"}
    for d in lines:
        if d["case_id"] in answers:
            d["output"] = answers[d["case_id"]]
            continue
        good = d["arm"] == better or d["case_id"] == "c7"
        d["output"] = f"{'GOOD' if good else 'FINE'} answer {tag}CASE-{d['case_id']} #{d['index']}"
    (run / "results.jsonl").write_text("".join(json.dumps(d) + "\n" for d in lines))
    meta = json.loads((run / "config.json").read_text())
    meta["k"] = 2
    (run / "config.json").write_text(json.dumps(meta))
    (run / "summary.json").write_text(json.dumps({"complete": True, "exit_code": 0, "ran": 1, "total": 1}))
    return suite, run


def label_like_a_person(path: Path, scorer, rater: str = "ana") -> None:
    """Fill a label file through the labelling class, as the notebook's buttons do."""
    s = labelling.LabelSession(path, rater=rater)
    while s.done < len(s):
        s.set_score(scorer(s.current["output"]))
        s.next_unlabelled()


def person(output: str) -> int:
    return 5 if output.startswith("GOOD") else 3


def compare_cli(run: Path, *extra: str) -> dict:
    res = CliRunner().invoke(main, ["compare", str(run), "--baseline", "baseline", "--treatment", "treatment",
                                    "--json", *extra])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_fair_judge_gives_a_verdict_position_biased_and_failing_ones_are_inconclusive(tmp_path):
    suite, run = two_arm_run(tmp_path)
    runner = CliRunner()
    with ScriptedServer(FAIR) as fair:
        # uncalibrated: the judged results are held, grading exits 1, no verdict rests on them
        res = runner.invoke(main, ["grade", str(run), "--judge-base-url", fair.base_url, "--pairwise",
                                   "baseline,treatment"])
        assert res.exit_code == 1 and "JUDGE NOT TRUSTED: 32 judged sample(s) held" in res.stderr
        held = compare_cli(run, "--judge", "pairwise")
        assert held["kind"] == "inconclusive" and "not trusted" in held["reason"] and held["judge"] == "pairwise"
        direct = compare_cli(run, "--judge", "direct")
        assert direct["kind"] == "inconclusive" and "judged results held" in direct["reason"]
        # a person labels 20 items without editing JSON; grading again trusts the judge (replayed at $0)
        labels = suite / "judge" / "human-sample.jsonl"
        res = runner.invoke(main, ["judge", "sample", str(run), "-n", "20", "--to", str(labels)])
        assert res.exit_code == 0, res.output
        label_like_a_person(labels, person)
        before = fair.stats["requests"]
        res = runner.invoke(main, ["grade", str(run), "--judge-base-url", fair.base_url, "--pairwise",
                                   "baseline,treatment"])
        assert res.exit_code == 0, res.output
        assert fair.stats["requests"] == before and "judge trust: trusted: calibrated on this run's labels" in res.stdout
    v = compare_cli(run, "--judge", "pairwise")
    assert (v["kind"], v["wins"], v["ties"], v["losses"], v["errored"]) == ("pass", 7, 1, 0, 0)
    assert v["judge"] == "pairwise" and v["judge_checks"]["position_consistency"] == 1.0
    assert v["p_value"] == pytest.approx(2 / 2 ** 7)  # 7 wins, no loss: exact two-sided sign test
    text = CliRunner().invoke(main, ["compare", str(run), "--baseline", "baseline", "--treatment", "treatment",
                                     "--judge", "pairwise"]).stdout
    assert "judge: the pairwise judge (position consistency 100% (bar 75%), trusted)" in text

    # the same run, a judge that always prefers the first answer: a new endpoint, so asked again
    with ScriptedServer(FIRST_ALWAYS) as biased:
        r = grade_run(run, judge_base_url=biased.base_url, pairwise=ARMS)
        assert biased.stats["requests"] > 0  # the cache is scoped to the judge: nothing replayed from the fair one
    assert r.summary.judge_trust.trusted  # its direct scores agree with the person...
    p = r.summary.pairwise
    assert (p["wins"], p["ties"], p["losses"], p["position_consistency"]) == (0, 16, 0, 0.0)
    assert any(f.level == "HIGH" and f.message.startswith("position bias") for f in r.findings)
    b = compare_arms(run, "baseline", "treatment", judge="pairwise")
    assert b.kind == "inconclusive" and "position bias" in b.reason and "0%" in b.reason  # ...its pairs are not

    # a judge failing with HTTP 500 on some calls: the errored pairs cast no vote, never a loss
    with ScriptedServer(OUTAGES) as flaky:
        r = grade_run(run, judge_base_url=flaky.base_url, pairwise=ARMS)
    assert r.summary.pairwise["errored"] == 2 and r.exit_code == 1
    e = compare_arms(run, "baseline", "treatment", judge="pairwise")
    assert (e.kind, e.wins, e.ties, e.losses, e.errored) == ("inconclusive", 6, 1, 0, 1)
    assert dict(e.case_votes)["c3"] == "errored" and all("c3#" in x for x in e.problems)


def test_the_suite_chooses_the_pairwise_judge_and_grade_asks_it(tmp_path):
    suite, run = two_arm_run(tmp_path, extra={"verdict_judge": "pairwise", "allow_uncalibrated_judge": True})
    with ScriptedServer(FAIR) as fair:
        r = grade_run(run, judge_base_url=fair.base_url)  # no --pairwise: the config's first two arms
    assert r.summary.pairwise["baseline"] == "baseline" and (run / "pairwise.jsonl").exists()
    v = compare_cli(run)
    assert v["judge"] == "pairwise" and v["kind"] == "pass" and v["judge_checks"]["opt_out"] is True
    assert "NOT calibrated" in records.judge_line(v["judge"], v["judge_checks"])
    assert r.exit_code == 0 and all(g.judge_uncalibrated_override for g in r.grades if g.judge_score is not None)
    assert any(f.level == "MEDIUM" and "not calibrated" in f.message for f in r.findings)  # no labels: seed 001
    # swapped arms: the same tally read the other way round
    res = CliRunner().invoke(main, ["compare", str(run), "--baseline", "treatment", "--treatment", "baseline",
                                    "--json", "--judge", "pairwise"])
    sw = json.loads(res.stdout)
    assert (sw["wins"], sw["losses"], sw["kind"]) == (0, 7, "regression")


def test_labels_drawn_for_one_run_are_stale_on_another_and_a_calibration_holds_for_its_judge_only(tmp_path):
    suite, run_a = two_arm_run(tmp_path)
    runner = CliRunner()
    with ScriptedServer(FAIR) as fair:
        grade_run(run_a, judge_base_url=fair.base_url)
        labels = suite / "judge" / "human-sample.jsonl"
        labelling.write_label_file(labelling.draw_items(run_a, 20), labels)
        label_like_a_person(labels, person)
        assert grade_run(run_a, judge_base_url=fair.base_url).summary.judge_trust.basis == "labels"
        res = runner.invoke(main, ["judge", "calibrate", str(run_a)])
        assert res.exit_code == 0, res.output
        assert "100% exact / 100% within one on 20 label(s)" in res.stdout
        record = json.loads((suite / "judge" / "calibration.json").read_text())["calibrations"][0]
        assert record["judge"]["base_url"] == fair.base_url and record["judge"]["model"] == "judge-model"
        assert len(record["judge"]["rubric_sha256"]) == 64 and record["run"] == run_a.name

        # another run of the same suite: other outputs, so every label is stale; the record holds
        _, run_b = two_arm_run(tmp_path, tag="second ")
        rb = grade_run(run_b, judge_base_url=fair.base_url)
        ha = rb.summary.human_agreement
        assert ha["n"] == 0 and ha["labels"]["stale_output"] == 20 and ha["labels"]["stale_from_runs"] == [run_a.name]
        assert any(f.level == "MEDIUM" and "20 stale" in f.message and run_a.name in f.message for f in rb.findings)
        trust = rb.summary.judge_trust
        assert trust.trusted and trust.basis == "calibration.json" and rb.exit_code == 0
        res = runner.invoke(main, ["judge", "calibrate", str(run_b)])  # nothing labelled on this run
        assert res.exit_code == 2 and "no label matches" in res.output
    # the same model served elsewhere is another judge: the record is void, and says so
    with ScriptedServer(FAIR) as elsewhere:
        rc = grade_run(run_b, judge_base_url=elsewhere.base_url)
    trust = rc.summary.judge_trust
    assert not trust.trusted and rc.held == 32 and rc.exit_code == 1
    assert any("judge changed since calibration" in f.message and "endpoint" in f.message for f in rc.findings)
    # labels with no hashes (an older label file) are read, and unverifiable
    old = tmp_path / "old-labels.jsonl"
    old.write_text("".join(json.dumps({"item": f"c{i}/treatment/0", "score": 5, "rater": "bo"}) + "\n"
                           for i in range(8)))
    with ScriptedServer(FAIR) as fair2:
        rd = grade_run(run_b, judge_base_url=fair2.base_url, labels=old)
    assert rd.summary.human_agreement["labels"]["unverifiable"] == 8
    assert any("8 unverifiable" in f.message for f in rd.findings)


def _rates(summary: GradesSummary) -> dict:
    return {a: b.overall.sample_pass_rate for a, b in summary.per_arm.items()}


def test_a_judge_below_the_bars_moves_no_rate_gate_or_verdict_unless_opted_out(tmp_path):
    cases = JUDGED + DETERMINISTIC
    suite, run = two_arm_run(tmp_path, cases=cases)
    lenient = {"model": "judge-model", "rules": [{"match": "output>>>", "text": "SCORE: 5 REASON: great"}]}
    harsh = {"model": "judge-model", "rules": [{"match": "output>>>", "text": "SCORE: 1 REASON: poor"}]}
    # a baseline accepted while the suite opted out (the judge counted then)
    base_suite, base_run = two_arm_run(tmp_path / "b", cases=cases, extra={"allow_uncalibrated_judge": True})
    with ScriptedServer(lenient) as srv:
        grade_run(base_run, judge_base_url=srv.base_url)
    baseline_json, _ = gates.accept_baseline(base_run, base_suite, arm="treatment")

    results = {}
    for name, script in (("lenient", lenient), ("harsh", harsh)):
        with ScriptedServer(script) as srv:
            grade_run(run, judge_base_url=srv.base_url)
            labels = suite / "judge" / "human-sample.jsonl"
            labelling.write_label_file(labelling.draw_items(run, 20), labels, force=True)
            label_like_a_person(labels, lambda out: 3)  # a person who finds every answer middling
            r = grade_run(run, judge_base_url=srv.base_url)
            cal = r.summary.judge_trust.calibration
            assert cal["n"] == 20 and not cal["passed"] and "below the bars" in cal["reason"]
            assert any(f.level == "HIGH" and "kappa" in f.message for f in r.findings)
            res = CliRunner().invoke(main, ["judge", "calibrate", str(run)])
            assert res.exit_code == 1 and "NOT CALIBRATED: below the bars" in res.stderr
            v = compare_arms(run, "baseline", "treatment", judge="direct")
            g = gates.gate(run, baseline_json, arm="treatment")
            opted = grade_run(run, judge_base_url=srv.base_url, allow_uncalibrated_judge=True)
            results[name] = (_rates(r.summary), (v.kind, v.wins, v.ties, v.losses, v.errored),
                             (g.passed, g.read_rates, g.causes), _rates(opted.summary))
    (rates_l, verdict_l, gate_l, opted_l), (rates_h, verdict_h, gate_h, opted_h) = results["lenient"], results["harsh"]
    assert rates_l == rates_h == {"baseline": pytest.approx(4 / 20), "treatment": pytest.approx(4 / 20)}
    assert verdict_l == verdict_h and verdict_l[0] == "inconclusive"
    assert gate_l == gate_h == (False, False, [gates.GATE_CAUSE_JUDGE])
    # opted out, the judge's answers count: the lenient one passes every judged sample, the harsh none
    assert opted_l == {"baseline": 1.0, "treatment": 1.0} and opted_h == {"baseline": 0.2, "treatment": 0.2}


def test_pairwise_verdict_needs_the_latest_gradings_pairwise_file(tmp_path):
    suite, run = two_arm_run(tmp_path, extra={"allow_uncalibrated_judge": True})
    with ScriptedServer(FAIR) as fair:
        grade_run(run, judge_base_url=fair.base_url, pairwise=ARMS)
        assert (run / "pairwise.jsonl").exists()
        grade_run(run, judge_base_url=fair.base_url)  # without the pairwise judge: the old file goes
    assert not (run / "pairwise.jsonl").exists()
    with pytest.raises(InputError, match="--pairwise baseline,treatment"):
        compare_arms(run, "baseline", "treatment", judge="pairwise")
    res = CliRunner().invoke(main, ["compare", str(run), "--baseline", "baseline", "--treatment", "treatment",
                                    "--judge", "pairwise"])
    assert res.exit_code == 2
