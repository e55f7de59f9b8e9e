"""Ingest other harnesses' results: inspect-ai logs, tau-bench trials, agent-evals folders.

Figures are checked against values computed independently here (brute force over
k-subsets), never against the code under test.
"""
from __future__ import annotations

import itertools
import json
import shutil
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.numbers import stats
from evalkit._cli.main import main
from evalkit.runfolder.runload import load_run

HERE = Path(__file__).parent
FIXTURES = HERE / "data" / "ingest"
TAU = HERE.parent.parent / "shared" / "data" / "tau-bench" / "gpt-4o-airline.trials.jsonl"
sys.path.insert(0, str(FIXTURES))
from make_inspect_logs import EXPECTED, make_logs  # noqa: E402


def cli(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def brute_pass_hat_k(outcomes: list[bool], k: int) -> float:
    """Fraction of k-subsets (without replacement) in which every trial passed."""
    subsets = list(itertools.combinations(outcomes, k))
    return sum(all(s) for s in subsets) / len(subsets)


def brute_pass_at_k(outcomes: list[bool], k: int) -> float:
    subsets = list(itertools.combinations(outcomes, k))
    return sum(any(s) for s in subsets) / len(subsets)


def per_case(run) -> dict[str, list[bool]]:
    out: dict[str, list[bool]] = defaultdict(list)
    for row in run.grades.sort_values(["case_id", "index"]).itertuples():
        out[row.case_id].append(bool(row.passed))
    return out


@pytest.mark.parametrize("name", ["capitals.eval", "capitals.json"])
def test_committed_inspect_fixture(tmp_path: Path, name: str) -> None:
    res = cli("ingest", FIXTURES / name, "--to", tmp_path / "run")
    assert res.exit_code == 0, res.output
    run = load_run(tmp_path / "run")
    assert run.config["source"] == "inspect-ai"
    assert len(run.config["sources"][0]["sha256"]) == 64
    assert len(run.samples) == 9
    assert sorted(run.samples.groupby("case_id")["index"].apply(sorted).tolist()) == [[0, 1, 2]] * 3
    counts = {c: (len(v), sum(v)) for c, v in per_case(run).items()}
    assert counts == EXPECTED
    assert run.summary["complete"] is True
    assert (tmp_path / "run" / "samples" / "fr" / "offlinemock_model" / "sample-1.txt").read_text() \
        == "The capital is Paris."
    # usage kept from the log
    assert (run.samples["prompt_tokens"] > 0).all() and (run.samples["completion_tokens"] > 0).all()


def test_fresh_inspect_logs_written_by_inspect_ai(tmp_path: Path) -> None:
    """inspect-ai (dev extra) writes both log formats with its mock model; both ingest to
    the same samples, and pass^k matches a brute-force count."""
    paths = make_logs(tmp_path / "logs")
    runs = {}
    for fmt, p in paths.items():
        res = cli("ingest", p, "--to", tmp_path / fmt)
        assert res.exit_code == 0, res.output
        runs[fmt] = load_run(tmp_path / fmt)
    a, b = (per_case(r) for r in runs.values())
    assert {c: sorted(v) for c, v in a.items()} == {c: sorted(v) for c, v in b.items()}
    for k in (1, 2, 3):
        est = stats.suite_pass_hat_k([(len(v), sum(v)) for v in a.values()], k)
        expect = sum(brute_pass_hat_k(v, k) for v in a.values()) / len(a)
        assert est.value == pytest.approx(expect, abs=1e-12)


def test_tau_bench_pass_hat_k_matches_brute_force(tmp_path: Path) -> None:
    assert TAU.exists(), "../shared/data/tau-bench is missing"
    res = cli("ingest", TAU, "--to", tmp_path / "tau")
    assert res.exit_code == 0, res.output
    run = load_run(tmp_path / "tau")
    assert len(run.samples) == 200 and run.samples["case_id"].nunique() == 50
    # independent read of the raw file
    raw: dict[int, list[bool]] = defaultdict(list)
    for line in TAU.read_text().splitlines():
        r = json.loads(line)
        raw[r["task_id"]].append(abs(float(r["reward"]) - 1.0) <= 1e-6)
    ours = per_case(run)
    assert {f"task-{t}": sorted(v) for t, v in raw.items()} == {c: sorted(v) for c, v in ours.items()}
    print()
    for k in (1, 2, 3, 4):
        hat = stats.suite_pass_hat_k([(len(v), sum(v)) for v in ours.values()], k).value
        at = stats.suite_pass_at_k([(len(v), sum(v)) for v in ours.values()], k).value
        expect_hat = sum(brute_pass_hat_k(v, k) for v in raw.values()) / len(raw)
        expect_at = sum(brute_pass_at_k(v, k) for v in raw.values()) / len(raw)
        assert hat == pytest.approx(expect_hat, abs=1e-12)
        assert at == pytest.approx(expect_at, abs=1e-12)
        print(f"tau-bench gpt-4o airline: k={k} pass^k={hat:.4f} pass@k={at:.4f}")


def test_tau_bench_curve_in_the_grades_summary_and_the_grade_lines(tmp_path: Path) -> None:
    """Conformance: the ingested tau-bench run's grades-summary.json holds pass^j for
    j = 1..4 as the paper's curve .420/.273/.220/.200 (gpt-4o airline), and pass@j, each
    with its SE, equal to brute force over every j-subset of each task's trials; the
    compact lines `evalkit grade` prints show the same curve."""
    import math

    from evalkit._cli.grade import summary_lines
    from evalkit.conclusions.grading import summarize_run

    assert TAU.exists(), "../shared/data/tau-bench is missing"
    assert cli("ingest", TAU, "--to", tmp_path / "tau").exit_code == 0
    raw: dict[int, list[bool]] = defaultdict(list)
    for line in TAU.read_text().splitlines():
        r = json.loads(line)
        raw[r["task_id"]].append(abs(float(r["reward"]) - 1.0) <= 1e-6)
    summary = json.loads((tmp_path / "tau" / "grades-summary.json").read_text())
    [arm] = summary["per_arm"].values()
    curve = arm["scores"]["curve"]
    assert [p["j"] for p in curve] == [1, 2, 3, 4]
    # by hand from the paper's table (tau-bench, gpt-4o airline): .420 .273 .220 .200
    assert [round(p["pass_hat_j"], 3) for p in curve] == [0.42, 0.273, 0.22, 0.2]
    for p in curve:
        j = p["j"]
        hat = [brute_pass_hat_k(v, j) for v in raw.values()]
        at = [brute_pass_at_k(v, j) for v in raw.values()]
        for key, per_case in (("pass_hat_j", hat), ("pass_at_j", at)):
            mean = sum(per_case) / 50
            se = math.sqrt(sum((x - mean) ** 2 for x in per_case) / 49 / 50)
            assert p[key] == pytest.approx(mean, abs=1e-12) and p[key + "_se"] == pytest.approx(se, abs=1e-12)
    lines = summary_lines(summarize_run(tmp_path / "tau"), tmp_path / "tau")
    assert any(line.startswith("  curve pass^j j=1..4: .420/.273/.220/.200 (SE ") for line in lines), lines


def test_agent_evals_outputs_folder(tmp_path: Path) -> None:
    ev = tmp_path / "evals.json"
    ev.write_text(json.dumps({"cases": [
        {"id": "cap", "set": "capability", "prompt": "Capital of France?", "expect": "paris"},
        {"id": "reg", "set": "regression", "prompt": "2+2", "expect": "^4$", "match": "regex"},
        {"id": "gone", "set": "capability", "prompt": "x", "expect": "y"}]}))
    out = tmp_path / "outputs"
    for case, texts in {"cap": ["PARIS", "Lyon"], "reg": [" 4 ", "4", "5"]}.items():
        (out / case).mkdir(parents=True)
        for i, t in enumerate(texts, 1):
            (out / case / f"sample-{i}.txt").write_text(t)
    res = cli("ingest", out, "--to", tmp_path / "run", "--eval-file", ev)
    assert res.exit_code == 0, res.output
    run = load_run(tmp_path / "run")
    assert {c: (len(v), sum(v)) for c, v in per_case(run).items()} == {"cap": (2, 1), "reg": (3, 2)}
    assert run.summary["complete"] is False and "gone" in run.summary["reason"]
    assert (tmp_path / "run" / "summary.md").read_text().startswith("INCOMPLETE:")


def test_agent_evals_ingest_keeps_each_case_set(tmp_path: Path) -> None:
    """The harness's sets travel into the ingested run, so its metrics gate a regression
    case on pass^k, a capability case on pass@k and an exploratory one not at all."""
    from evalkit.conclusions.gates import run_metrics
    from evalkit.numbers.metrics import gated_case_score, score_of
    from evalkit.runfolder.runload import grades_summary

    ev = tmp_path / "evals.json"
    ev.write_text(json.dumps({"cases": [
        {"id": "cap", "set": "capability", "prompt": "p", "expect": "ok"},
        {"id": "reg", "set": "regression", "prompt": "p", "expect": "ok"},
        {"id": "exp", "set": "exploratory", "prompt": "p", "expect": "ok"}]}))
    out = tmp_path / "outputs"
    for case in ("cap", "reg", "exp"):
        (out / case).mkdir(parents=True)
        for i, t in enumerate(["ok", "no", "ok"], 1):
            (out / case / f"sample-{i}.txt").write_text(t)
    assert cli("ingest", out, "--to", tmp_path / "run", "--eval-file", ev).exit_code == 0
    m = run_metrics(tmp_path / "run")
    assert {c.case_id: (c.set, c.gated) for c in m.cases} == {
        "cap": ("capability", True), "reg": ("regression", True), "exp": ("exploratory", False)}
    by = m.by_id()
    assert score_of(m, by["cap"]) == 1.0 and score_of(m, by["reg"]) == 0.0  # pass@3 and pass^3 of 2/3
    assert gated_case_score(m) == 0.5  # the exploratory case is in no gated case score
    # the run recorded its case table, and its grades summary says the same
    summary = grades_summary(tmp_path / "run")
    scores = summary.per_arm["agent"].per_set_scores
    assert scores["regression"].gated_case_score == 0.0 and scores["exploratory"].n_gated == 0


def test_two_sources_as_arms_with_unmatched_cases_are_inconclusive(tmp_path: Path) -> None:
    before = tmp_path / "before.jsonl"
    after = tmp_path / "after.jsonl"
    before.write_text("".join(json.dumps({"task_id": t, "trial": i, "reward": 0.0}) + "\n"
                              for t in range(8) for i in range(2)))
    after.write_text("".join(json.dumps({"task_id": t, "trial": i, "reward": 1.0}) + "\n"
                             for t in range(1, 9) for i in range(2)))
    run = tmp_path / "run"
    assert cli("ingest", before, "--to", run, "--arm", "before").exit_code == 0
    res = cli("ingest", after, "--to", run, "--arm", "after", "--into")
    assert res.exit_code == 0, res.output
    loaded = load_run(run)
    assert sorted(loaded.samples["arm"].unique()) == ["after", "before"]
    res = cli("compare", run, "--baseline", "before", "--treatment", "after", "--json")
    verdict = json.loads(res.output)
    assert verdict["kind"] == "inconclusive"
    text = json.dumps(verdict)
    assert "task-0" in text and "task-8" in text  # the unmatched cases are listed
    # same arm twice is refused, and the run is left as it was
    res = cli("ingest", after, "--to", run, "--arm", "after", "--into")
    assert res.exit_code == 2 and "already" in res.output
    assert len(load_run(run).samples) == 32


def _assert_nothing_written(dest: Path) -> None:
    assert not dest.exists()
    assert not [p for p in dest.parent.iterdir() if p.name.startswith(f".{dest.name}.")]


def test_truncated_eval_archive(tmp_path: Path) -> None:
    src = tmp_path / "cut.eval"
    data = (FIXTURES / "capitals.eval").read_bytes()
    src.write_bytes(data[: len(data) // 2])
    res = cli("ingest", src, "--to", tmp_path / "run")
    assert res.exit_code == 2
    assert "cut.eval" in res.output and "corrupt" in res.output
    _assert_nothing_written(tmp_path / "run")


def _ingest_mutated_log(tmp_path: Path, mutate) -> object:
    """Ingest the committed inspect JSON log after `mutate(log)`; the CLI result."""
    log = json.loads((FIXTURES / "capitals.json").read_text())
    mutate(log)
    src = tmp_path / "log.json"
    src.write_text(json.dumps(log))
    return cli("ingest", src, "--to", tmp_path / "run")


def test_unknown_inspect_log_version(tmp_path: Path) -> None:
    res = _ingest_mutated_log(tmp_path, lambda log: log.update(version=99))
    assert res.exit_code == 2
    assert "unknown inspect log format version 99" in res.output and "$.version" in res.output
    _assert_nothing_written(tmp_path / "run")


def test_sample_without_scores(tmp_path: Path) -> None:
    res = _ingest_mutated_log(tmp_path, lambda log: log["samples"][4].pop("scores"))
    assert res.exit_code == 2
    assert "$.samples[4].scores" in res.output and "no scores" in res.output
    _assert_nothing_written(tmp_path / "run")


def test_numeric_scores_need_a_threshold(tmp_path: Path) -> None:
    log = json.loads((FIXTURES / "capitals.json").read_text())
    for i, s in enumerate(log["samples"]):
        s["scores"]["includes"]["value"] = 0.25 * (i % 5)
    src = tmp_path / "numeric.json"
    src.write_text(json.dumps(log))
    res = cli("ingest", src, "--to", tmp_path / "run")
    assert res.exit_code == 2 and "--threshold" in res.output
    res = cli("ingest", src, "--to", tmp_path / "run", "--threshold", "0.5")
    assert res.exit_code == 0, res.output
    passed = load_run(tmp_path / "run").grades["passed"].tolist()
    assert passed == [0.25 * (i % 5) >= 0.5 for i in range(9)]


def test_bad_tau_line_names_file_and_line(tmp_path: Path) -> None:
    src = tmp_path / "trials.jsonl"
    src.write_text('{"task_id": 1, "trial": 0, "reward": 1.0}\n{"task_id": 2, "trial": 0\n')
    res = cli("ingest", src, "--to", tmp_path / "run")
    assert res.exit_code == 2 and "trials.jsonl:2" in res.output
    _assert_nothing_written(tmp_path / "run")


def test_existing_destination_is_not_overwritten(tmp_path: Path) -> None:
    dest = tmp_path / "run"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine")
    res = cli("ingest", FIXTURES / "capitals.eval", "--to", dest)
    assert res.exit_code == 2
    assert (dest / "keep.txt").read_text() == "mine"
    shutil.rmtree(dest)


PROMPTFOO = FIXTURES / "promptfoo-capitals.json"


def test_promptfoo_output_with_repeats_and_providers(tmp_path: Path) -> None:
    """A real promptfoo 0.118.13 output (tests/data/ingest/promptfooconfig.yaml run with
    `promptfoo eval --repeat 2 -o promptfoo-capitals.json`, echo providers): each
    provider is an arm, each repeat a sample."""
    res = cli("ingest", PROMPTFOO, "--to", tmp_path / "run")
    assert res.exit_code == 0, res.output
    run = load_run(tmp_path / "run")
    raw = json.loads(PROMPTFOO.read_text())["results"]["results"]
    expect: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for r in raw:
        expect[(r["testCase"]["description"], r["provider"]["label"])].append(r["success"])
    got: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for row in run.grades.itertuples():
        got[(row.case_id, row.arm)].append(bool(row.passed))
    assert {k: sorted(v) for k, v in got.items()} == {k: sorted(v) for k, v in expect.items()}
    assert sorted(run.samples["arm"].unique()) == ["echo-polite", "echo-terse"]
    assert run.samples.groupby(["case_id", "arm"])["index"].apply(sorted).tolist() == [[0, 1]] * 6
    verdict = json.loads(cli("compare", tmp_path / "run", "--baseline", "echo-terse",
                             "--treatment", "echo-polite", "--json").output)
    assert (verdict["wins"], verdict["losses"], verdict["ties"]) == (1, 0, 2)
    assert verdict["kind"] == "inconclusive"  # fewer than 6 discordant cases


def test_promptfoo_unknown_version(tmp_path: Path) -> None:
    data = json.loads(PROMPTFOO.read_text())
    data["results"]["version"] = 7
    src = tmp_path / "pf.json"
    src.write_text(json.dumps(data))
    res = cli("ingest", src, "--to", tmp_path / "run")
    assert res.exit_code == 2 and "$.results.version" in res.output
    _assert_nothing_written(tmp_path / "run")


def test_one_based_trials_pair_with_zero_based_ones(tmp_path: Path) -> None:
    """Trial numbers are ranks, whatever they start from: a 1-based and a 0-based source
    of the same tasks pair trial by trial."""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("".join(json.dumps({"task_id": t, "trial": i, "reward": 0.0}) + "\n"
                         for t in range(10) for i in (1, 2, 3)))
    b.write_text("".join(json.dumps({"task_id": t, "trial": i, "reward": 1.0}) + "\n"
                         for t in range(10) for i in (0, 1, 2)))
    run = tmp_path / "run"
    assert cli("ingest", a, "--to", run, "--arm", "a").exit_code == 0
    assert cli("ingest", b, "--to", run, "--arm", "b", "--into").exit_code == 0
    loaded = load_run(run)
    assert loaded.config["k"] == 3 and sorted(loaded.samples["index"].unique()) == [0, 1, 2]
    v = json.loads(cli("compare", run, "--baseline", "a", "--treatment", "b", "--json").output)
    assert (v["wins"], v["losses"], v["kind"]) == (10, 0, "pass")


def test_promptfoo_errored_rows_are_errors_not_fails(tmp_path: Path) -> None:
    data = json.loads(PROMPTFOO.read_text())
    row = data["results"]["results"][0]
    row.update({"success": False, "failureReason": 2, "error": "provider timed out"})
    row["response"] = {"error": "provider timed out"}
    src = tmp_path / "pf.json"
    src.write_text(json.dumps(data))
    res = cli("ingest", src, "--to", tmp_path / "run")
    assert res.exit_code == 0, res.output
    run = load_run(tmp_path / "run")
    assert len(run.samples) == 11 and len(run.errors) == 1
    assert run.errors.iloc[0]["error"] == "provider timed out"
    assert run.summary["complete"] is False
    assert (tmp_path / "run" / "summary.md").read_text().startswith("INCOMPLETE: 2/3 cases")
    v = json.loads(cli("compare", tmp_path / "run", "--baseline", "echo-terse", "--treatment", "echo-polite",
                       "--json").output)
    assert v["kind"] == "inconclusive"


@pytest.mark.parametrize("field,value", [("epoch", "two"), ("epoch", 0)])
def test_bad_inspect_epoch(tmp_path: Path, field: str, value) -> None:
    res = _ingest_mutated_log(tmp_path, lambda log: log["samples"][2].update({field: value}))
    assert res.exit_code == 2 and "$.samples[2].epoch" in res.output
    _assert_nothing_written(tmp_path / "run")


def test_inspect_log_without_samples(tmp_path: Path) -> None:
    res = _ingest_mutated_log(tmp_path, lambda log: log.update(samples=[]))
    assert res.exit_code == 2 and "no samples" in res.output
    _assert_nothing_written(tmp_path / "run")


def test_non_integer_tau_trial(tmp_path: Path) -> None:
    src = tmp_path / "t.jsonl"
    src.write_text('{"task_id": 1, "trial": "first", "reward": 1.0}\n')
    res = cli("ingest", src, "--to", tmp_path / "run")
    assert res.exit_code == 2 and "t.jsonl:1" in res.output and "not an integer" in res.output
    _assert_nothing_written(tmp_path / "run")


PROMPTFOO_REPEAT = FIXTURES / "promptfoo-repeat.json"


def test_promptfoo_repeats_group_by_test_identity_and_expansions_separate(tmp_path: Path) -> None:
    """A real promptfoo 0.123.1 output (`--repeat 3`, tests without a description, one
    description over `country: [Italy, Spain]`, two prompts on one provider, against the
    scripted server): promptfoo gives each repeat its own testIdx, so a case is a test's
    identity (vars, asserts) within an arm (provider x prompt): 6 cases of 3 samples per
    arm, never 36 cases of 1, and the expansion is two cases, each named by the
    description."""
    res = cli("ingest", PROMPTFOO_REPEAT, "--to", tmp_path / "run")
    assert res.exit_code == 0, res.output
    run = load_run(tmp_path / "run")
    raw = json.loads(PROMPTFOO_REPEAT.read_text())
    assert raw["metadata"]["promptfooVersion"] == "0.123.1" and raw["runtimeOptions"]["repeat"] == 3
    rows = raw["results"]["results"]
    assert len({r["testIdx"] for r in rows}) == 18  # each repeat has its own testIdx
    # independent grouping of the raw rows: (vars, asserts) x prompt label
    expect: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: r["testIdx"]):
        key = json.dumps([r["testCase"]["vars"], r["testCase"]["assert"]], sort_keys=True)
        expect[(key, f"scripted-{r['prompt']['label']}")].append(r["success"])
    assert len(expect) == 12 and all(len(v) == 3 for v in expect.values())
    assert run.config["k"] == 3 and run.samples["case_id"].nunique() == 6
    assert sorted(run.samples["arm"].unique()) == ["scripted-polite", "scripted-terse"]
    got: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for row in run.grades.sort_values("index").itertuples():
        got[(row.case_id, row.arm)].append(bool(row.passed))
    assert sorted(sorted(v) for v in got.values()) == sorted(sorted(v) for v in expect.values())
    assert run.samples.groupby(["case_id", "arm"])["index"].apply(sorted).tolist() == [[0, 1, 2]] * 12
    cases = set(run.samples["case_id"])
    assert {"southern capitals [country=Italy]", "southern capitals [country=Spain]",
            "country=Peru", "country=Japan"} <= cases
    # the two France tests differ only in their asserts: two cases, named by them
    assert {"country=France [icontains paris]", "country=France [contains Lyon]"} <= cases
    # pass@k per case from the peer's own per-row success, brute force over k-subsets
    for (key, arm), outcomes in expect.items():
        vars_, asserts = json.loads(key)
        cid = next(c for (c, a) in got if a == arm and vars_["country"] in c
                   and (vars_["country"] != "France" or asserts[0]["value"] in c))
        assert sorted(got[(cid, arm)]) == sorted(outcomes)
        for k in (1, 2, 3):
            assert stats.pass_at_k(3, sum(outcomes), k) == pytest.approx(brute_pass_at_k(outcomes, k), abs=1e-12)
    # two prompts of one config pair case by case
    v = json.loads(cli("compare", tmp_path / "run", "--baseline", "scripted-terse", "--treatment",
                       "scripted-polite", "--json").output)
    assert v["wins"] + v["ties"] + v["losses"] == 6


ERRORED_LOG = FIXTURES / "capitals-errored.eval"


def _check_errored_inspect_run(run_dir: Path, log: Path) -> None:
    from inspect_ai.log import read_eval_log

    peer = read_eval_log(str(log))
    assert peer.status == "success" and peer.results.completed_samples == 49
    bad = [(s.id, s.epoch) for s in peer.samples if s.error]
    assert len(bad) == 1
    run = load_run(run_dir)
    assert len(run.samples) == 49 and len(run.errors) == 1
    err = run.errors.iloc[0]
    assert (err["case_id"], err["index"]) == (bad[0][0], bad[0][1] - 1)
    assert err["error"].startswith(f"sample {bad[0][0]!r} epoch {bad[0][1]} errored: ")
    assert run.summary["complete"] is False
    assert (run_dir / "summary.md").read_text().startswith("INCOMPLETE: 9/10 cases (1 inspect sample(s) errored)")
    assert not ((run.grades["case_id"] == bad[0][0]) & (run.grades["index"] == bad[0][1] - 1)).any()
    # evalkit's pass@2 per case equals inspect's own pass_at_2 reducer, which also leaves
    # the errored epoch out (n = 4 for that case)
    reduced = {s.sample_id: s.value for r in peer.reductions if r.reducer == "pass_at_2" for s in r.samples}
    ours = per_case(run)
    assert len(ours[bad[0][0]]) == 4
    for cid, outcomes in ours.items():
        assert stats.pass_at_k(len(outcomes), sum(outcomes), 2) == pytest.approx(reduced[cid], abs=1e-12)
    # never a pass: the gate refuses the incomplete run without reading a rate
    gate = cli("gate", run_dir, "--baseline", FIXTURES / "no-such-baseline.json")
    assert gate.exit_code == 1 and "INCOMPLETE" in gate.output


def test_inspect_errored_sample_is_kept_as_errored(tmp_path: Path) -> None:
    """inspect-ai 0.3.285 finished `success` with 49 of 50 samples scored (one provider
    answer was malformed): the log is read, the errored sample is an error (counted,
    shown, never a pass) whose message says the sample errored."""
    res = cli("ingest", ERRORED_LOG, "--to", tmp_path / "run")
    assert res.exit_code == 0, res.output
    assert "INCOMPLETE" in res.stderr
    _check_errored_inspect_run(tmp_path / "run", ERRORED_LOG)


def test_fresh_inspect_log_with_an_errored_sample_over_http(tmp_path: Path) -> None:
    """The same log written now by inspect-ai through its openai provider against the
    scripted server over HTTP."""
    from make_inspect_logs import make_errored_log

    log = make_errored_log(tmp_path / "logs")
    res = cli("ingest", log, "--to", tmp_path / "run")
    assert res.exit_code == 0, res.output
    _check_errored_inspect_run(tmp_path / "run", log)


LM_EVAL_DIR = FIXTURES / "lm-eval" / "scripted"


def _lm_eval_copy(tmp_path: Path, mutate=None) -> Path:
    """A copy of the real lm-eval 0.4.13 output (samples + results side by side), each
    line optionally mutated in place."""
    dest = tmp_path / "lm" / "scripted"
    dest.mkdir(parents=True)
    for f in LM_EVAL_DIR.iterdir():
        shutil.copy(f, dest / f.name)
    samples = next(dest.glob("samples_capitals_*.jsonl"))
    if mutate is not None:
        recs = [json.loads(line) for line in samples.read_text().splitlines()]
        for r in recs:
            mutate(r)
        samples.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return samples


def test_lm_eval_log_samples_repeats_are_samples(tmp_path: Path) -> None:
    """lm-evaluation-harness 0.4.13 `--log_samples` (local-completions against the
    scripted server, `repeats: 3`, filter `first` = regex + take_first, exact_match with
    ignore_case and ignore_punctuation): each repeat is a sample, re-graded as lm-eval
    grades, and lm-eval's own score of the first repeat is reproduced for every doc."""
    samples = next(LM_EVAL_DIR.glob("samples_capitals_*.jsonl"))
    res = cli("ingest", samples, "--to", tmp_path / "run")
    assert res.exit_code == 0, res.output
    run = load_run(tmp_path / "run")
    assert run.config["source"] == "lm-eval" and run.config["k"] == 3 and run.summary["complete"] is True
    raw = [json.loads(line) for line in samples.read_text().splitlines()]
    first = {r["doc_id"]: r for r in raw if r["filter"] == "first"}
    assert all(len(r["resps"][0]) == 3 for r in first.values())
    ours = per_case(run)
    assert set(ours) == {f"capitals-{d}" for d in first}
    for d, r in first.items():
        # lm-eval sent one seed with every repeat: the seeded server answered alike
        assert len(set(r["resps"][0])) == 1
        assert ours[f"capitals-{d}"] == [r["exact_match"] == 1.0] * 3
    md = (tmp_path / "run" / "summary.md").read_text()
    assert "pass@k equals pass@1" in md and "filter first (of first, maj@3)" in md
    # the majority-vote filter reduces the repeats: one sample per doc, lm-eval's score
    res = cli("ingest", samples, "--to", tmp_path / "maj", "--filter", "maj@3")
    assert res.exit_code == 0, res.output
    maj = per_case(load_run(tmp_path / "maj"))
    assert maj == {f"capitals-{r['doc_id']}": [r["exact_match"] == 1.0] for r in raw if r["filter"] == "maj@3"}
    assert "reduces the 3 repeats to one answer" in (tmp_path / "maj" / "summary.md").read_text()


def test_lm_eval_varied_repeats_give_pass_at_k(tmp_path: Path) -> None:
    """The same real file with repeats 2 and 3 changed (repeat 1, the one lm-eval scored,
    kept): evalkit filters and matches each repeat as lm-eval would (`" Lyon."` is
    extracted and fails exact_match; `" Paris!"` and `" no idea"` do not fit the
    filter's regex, fall back to `[invalid]` and fail), so pass@k and pass^k are those of
    the varied outcomes."""
    variants = {0: [" Lyon.", " Paris!"], 1: [" Lima.", " Lima."], 5: [" no idea", " Santiago."]}

    def vary(r: dict) -> None:
        if r["doc_id"] in variants:
            r["resps"][0][1:] = variants[r["doc_id"]]

    samples = _lm_eval_copy(tmp_path, vary)
    res = cli("ingest", samples, "--to", tmp_path / "run")
    assert res.exit_code == 0, res.output
    ours = per_case(load_run(tmp_path / "run"))
    expect = {"capitals-0": [True, False, False], "capitals-1": [False, True, True],
              "capitals-5": [True, False, True]}
    for cid, outcomes in expect.items():
        assert ours[cid] == outcomes
        for k in (1, 2, 3):
            assert stats.pass_at_k(3, sum(outcomes), k) == pytest.approx(brute_pass_at_k(outcomes, k), abs=1e-12)
            assert stats.pass_hat_k(3, sum(outcomes), k) == pytest.approx(brute_pass_hat_k(outcomes, k), abs=1e-12)


def test_lm_eval_regrade_that_disagrees_with_lm_eval_is_refused(tmp_path: Path) -> None:
    def flip(r: dict) -> None:
        if r["doc_id"] == 2 and r["filter"] == "first":
            r["exact_match"] = 1.0

    samples = _lm_eval_copy(tmp_path, flip)
    res = cli("ingest", samples, "--to", tmp_path / "run")
    assert res.exit_code == 2 and f"{samples}:3" in res.output and "disagrees with lm-eval's exact_match" in res.output
    _assert_nothing_written(tmp_path / "run")
    res = cli("ingest", samples, "--to", tmp_path / "run2", "--filter", "strict")
    assert res.exit_code == 2 and "no filter 'strict'" in res.output


def test_a_fifo_or_a_device_as_the_source_is_refused_without_hanging_or_reading(tmp_path: Path) -> None:
    import os

    from conftest import fifo_watchdog, run_evalkit_limited

    fifo = tmp_path / "results.json"
    os.mkfifo(fifo)
    for fmt in (None, "inspect", "promptfoo", "tau-bench"):
        with fifo_watchdog(fifo) as released:
            res = cli("ingest", fifo, "--to", tmp_path / "run", *(("--format", fmt) if fmt else ()))
        assert released == [], fmt
        assert res.exit_code == 2 and f"{fifo}: not a regular file: it is a FIFO (named pipe)" in res.output, fmt
        _assert_nothing_written(tmp_path / "run")
    zero = tmp_path / "zero.jsonl"
    zero.symlink_to("/dev/zero")
    proc = run_evalkit_limited("ingest", zero, "--to", tmp_path / "run", timeout=60)
    assert proc.returncode == 2 and f"{zero}: not a regular file: it is a character device" in proc.stderr, \
        proc.stderr[-2000:]
    _assert_nothing_written(tmp_path / "run")


def test_a_special_file_among_agent_evals_outputs_is_an_error_not_a_dropped_sample(tmp_path: Path) -> None:
    import os

    from conftest import fifo_watchdog

    ev = tmp_path / "evals.json"
    ev.write_text(json.dumps({"cases": [{"id": "cap", "set": "capability", "prompt": "?", "expect": "paris"}]}))
    (tmp_path / "outputs" / "cap").mkdir(parents=True)
    (tmp_path / "outputs" / "cap" / "sample-1.txt").write_text("Paris")
    fifo = tmp_path / "outputs" / "cap" / "sample-2.txt"
    os.mkfifo(fifo)
    with fifo_watchdog(fifo) as released:
        res = cli("ingest", tmp_path / "outputs", "--to", tmp_path / "run", "--eval-file", ev)
    assert released == []
    assert res.exit_code == 2 and f"{fifo}: not a regular file: it is a FIFO (named pipe)" in res.output
    _assert_nothing_written(tmp_path / "run")
