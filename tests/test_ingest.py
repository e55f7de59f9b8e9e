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

from evalkit import stats
from evalkit.cli import main
from evalkit.runs import load_run

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
