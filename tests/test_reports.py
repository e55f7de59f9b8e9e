"""Reports end to end: real runs against the scripted server, every notebook executed
through papermill (once per test session: kernels are slow), rendered to HTML, with
sidecar numbers checked against `evalkit.numbers.stats` computed here from the raw run files.

The runs hold hostile model output (`<script>alert(1)</script>`, `<img src=x
onerror=alert(1)>`) and a hostile judge justification; the pages must show them as text.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.foundations import fmt
from evalkit.conclusions import gates
from evalkit.telling import labelling
from evalkit.telling import nb
from evalkit.telling import reports
from evalkit.numbers import stats
from evalkit._cli.main import main
from evalkit.conclusions.grading import grade_run
from evalkit.running.runner import run_suite
from evalkit.calls.serve import ScriptedServer
from evalkit.runfolder.runload import run_verdicts

PANDALM = Path(__file__).resolve().parents[2] / "shared" / "data" / "pandalm"
SCRIPT_TAG = "<script>alert(1)</script>"
IMG_TAG = "<img src=x onerror=alert(1)>"
CAPITALS = {"France": "Paris", "Japan": "Tokyo", "Italy": "Rome", "Egypt": "Cairo", "Peru": "Lima", "Chile": "Santiago"}
K = 3


def _price() -> dict:
    return {"cost_cap_usd": 5.0, "max_tokens_in": 512, "max_tokens_out": 32,
            "price": {"in_per_mtok": 0.1, "out_per_mtok": 0.4}, "judge_price": {"in_per_mtok": 0.15, "out_per_mtok": 0.6},
            "gate": {"max_success_drop_points": 5, "max_cost_increase_pct": 20, "on_underpowered": "warn"}, "temperature": 0.8, "seed": 7,
            "concurrency": 8}


def _two_arm_suite(root: Path, base_url: str) -> Path:
    """Capital questions (guidance helps), two hostile cases, one judged case, human labels."""
    suite = root / "evals" / "capitals"
    for sub in ("guidance", "judge"):
        (suite / sub).mkdir(parents=True, exist_ok=True)
    cases = [{"id": f"cap-{c.lower()}", "input": f"What is the capital of {c}?", "expected": cap,
              "tags": ["golden", "capital"], "set": "regression" if i < 2 else "capability",
              "checks": [{"kind": "contains", "value": cap, "case_fold": True}]}
             for i, (c, cap) in enumerate(CAPITALS.items())]
    cases += [{"id": "xss-script", "input": "Say the script word", "expected": "safe", "tags": ["hostile"],
               "checks": [{"kind": "contains", "value": "safe"}]},
              {"id": "xss-img", "input": "Say the image word", "expected": "safe", "tags": ["hostile"],
               "checks": [{"kind": "contains", "value": "safe"}]},
              {"id": "judged-why", "input": "Why is Canberra the capital of Australia?",
               "expected": {"rubric": "Says it was a compromise between Sydney and Melbourne."}, "tags": ["judged"]}]
    (suite / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    (suite / "prompt.txt").write_text("${guidance}Q: ${input}\nA:")
    (suite / "guidance" / "skilled.md").write_text("GUIDED: answer with the capital city only.\n")
    (suite / "judge" / "rubric-v1.md").write_text("5: correct and concise. 1: wrong.\n")
    (suite / "judge" / "prompt-v1.md").write_text(
        "Rubric: ${rubric}\nQuestion: ${input}\nCriteria: ${expected}\nAnswer: ${output}\nGive a score.\n")
    cfg = {"mode": "completion", "template": "prompt.txt",
           "generator": {"model": "gen-model", "base_url": base_url, "api_key_env": "EVALKIT_TEST_KEY"},
           "judge": {"model": "judge-model", "base_url": base_url, "api_key_env": "EVALKIT_TEST_KEY"},
           "k": K, **_price(), "arms": [{"name": "baseline"}, {"name": "skilled", "guidance": "guidance/skilled.md"}],
           "allow_uncalibrated_judge": True}  # six judged samples cannot calibrate a judge: the suite opts out
    (suite / "config.json").write_text(json.dumps(cfg, indent=1))
    return suite


def _two_arm_script() -> dict:
    rules = [{"match": ["Give a score", "compromise"], "text": f"SCORE: 5 REASON: names the compromise {SCRIPT_TAG}"},
             {"match": "Give a score", "text": "SCORE: 2 REASON: vague"}]
    for country, cap in CAPITALS.items():
        rules.append({"match": ["GUIDED", country], "texts": [cap, "unknown"], "weights": [0.9, 0.1]})
        rules.append({"match": country, "texts": [cap, "I think it is Springfield"], "weights": [0.4, 0.6]})
    rules += [{"match": "script word", "text": SCRIPT_TAG}, {"match": "image word", "text": IMG_TAG},
              {"match": "Canberra", "texts": ["A compromise between Sydney and Melbourne.", "Because."]}]
    return {"rules": rules, "default": {"text": "unknown"}}


def _microtest_suite(root: Path) -> tuple[Path, Path]:
    """A chat unit whose task tempts a disclaimer; two wordings of the guidance against it."""
    suite = root / "evals" / "disclaimer"
    suite.mkdir(parents=True)
    cases = [{"id": f"task-{i}", "input": f"Write the release note for version {i}.", "expected": "no disclaimer",
              "tags": ["tempting"], "checks": [{"kind": "regex", "pattern": "^(?!.*as an ai)", "flags": "is"}]}
             for i in range(2)]
    (suite / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    (suite / "system.txt").write_text("You write release notes for the evalkit project.\n${guidance}")
    (suite / "prompt.txt").write_text("${input}")
    cfg = {"mode": "chat", "template": "prompt.txt", "system": "system.txt",
           "generator": {"model": "gen-model", "base_url": None, "api_key_env": "EVALKIT_TEST_KEY"},
           "judge": {"model": "judge-model", "base_url": None, "api_key_env": "EVALKIT_TEST_KEY"},
           "k": 5, **_price(), "arms": [{"name": "default"}]}
    (suite / "config.json").write_text(json.dumps(cfg, indent=1))
    variants = root / "variants"
    variants.mkdir()
    (variants / "firm.md").write_text("Never open with a disclaimer. Start with the change itself.\n")
    (variants / "soft.md").write_text("Please try to avoid disclaimers if possible.\n")
    return suite, variants


MICRO_SCRIPT = {"rules": [
    {"match": "Never open", "texts": ["Version shipped: faster reports.", "Version shipped: faster reports!"]},
    {"match": "try to avoid", "texts": ["As an AI, I think the version is good.", "Faster reports.",
                                        "Here are the notes: faster."]},
    {"match": "version 1.", "text": f"As an AI {SCRIPT_TAG}"},
    {"match": "release note", "texts": ["As an AI language model, I cannot know.", "As an AI: notes follow.",
                                        "Notes: faster."], "weights": [0.5, 0.25, 0.25]},
], "default": {"text": "unknown"}}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Two real runs (two-arm, graded with a judge and human labels; a micro-test made by
    `evalkit microtest`), reported through `evalkit report`."""
    os.environ.setdefault("EVALKIT_TEST_KEY", "test-key")
    root = tmp_path_factory.mktemp("reports")
    out = root / "reports"
    with ScriptedServer(_two_arm_script()) as srv:
        suite = _two_arm_suite(root, srv.base_url)
        res = run_suite(suite, progress=False)
        grade_run(res.path)
    gates.accept_baseline(res.path, suite, arm="skilled")  # the run is gated against itself: PASS
    # two people label every judged sample (drawn by `judge sample`, labelled through the labelling class)
    to = labelling.write_label_file(labelling.draw_items(res.path, 20), suite / "judge" / "human-sample.jsonl")
    for rater in ("ann", "bo"):
        session = labelling.LabelSession(to, rater=rater)
        for i in range(len(session)):
            session.go(i)
            session.set_score(4 if rater == "bo" or session.current["index"] % 2 == 0 else 2)
    runner = CliRunner()
    rep = runner.invoke(main, ["report", str(res.path), "--reports-dir", str(out), "--pandalm-dir", str(PANDALM)])
    msuite, variants = _microtest_suite(root)
    with ScriptedServer(MICRO_SCRIPT) as srv:
        micro = runner.invoke(main, ["microtest", str(msuite), "--variants", str(variants), "--reps", "5",
                                     "--base-url", srv.base_url, "--reports-dir", str(out), "--no-progress"])
    micro_run = Path(next(line.split(": ", 1)[1] for line in micro.output.splitlines()
                          if line.startswith("run folder: ")))
    return {"run": Path(res.path), "out": out, "cli": rep, "micro": micro, "micro_run": micro_run,
            "pages": out / Path(res.path).name, "micro_pages": out / micro_run.name}


def _html(made, name: str, micro: bool = False) -> str:
    return (made["micro_pages" if micro else "pages"] / f"{name}.html").read_text(encoding="utf-8")


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def test_report_cli_renders_every_applicable_notebook(made):
    rep = made["cli"]
    assert rep.exit_code == 0, rep.output
    assert rep.output.strip().splitlines()[-1] == str(made["out"].resolve() / "index.html") or \
        Path(rep.output.strip().splitlines()[-1]).resolve() == (made["out"] / "index.html").resolve()
    pages = made["pages"]
    for name in ("run_summary", "pass_at_k", "skill_comparison", "judge_calibration", "power_planning"):
        page = (pages / f"{name}.html").read_text(encoding="utf-8")
        assert (pages / f"{name}.ipynb").exists(), name  # kept beside the page, reopens in JupyterLab
        assert re.search(r"<img[^>]+src=\"data:image/png;base64,", page), f"{name} has no embedded figure"
        assert "Traceback" not in page and 'data-mime-type="application/vnd.jupyter.stderr"' not in page, f"{name}: an error or warning"
        assert "<th>parameter</th>" in page and html_param(page, "run_dir", "evals/capitals/runs/" + made["run"].name)
        assert "def " not in re.sub(r"<style.*?</style>", "", page, flags=re.S), f"{name} shows code"
    assert not (pages / "micro_test.html").exists()  # not a micro-test run
    manifest = json.loads((pages / "report.json").read_text())
    assert manifest["skipped"] == {"micro_test": "not a micro-test run (see `evalkit microtest`)",
                                   "replay": "no trajectories (not an agent unit's run)"}
    assert all(nb["ok"] for nb in manifest["notebooks"])


def test_every_page_and_the_index_say_the_judge_counts_by_opt_out(made):
    from html import unescape

    notice = re.compile(r"Judge not calibrated \(\d+ of 20 labels\): judged samples count by the judge's score")
    for page in made["pages"].glob("*.html"):
        assert notice.search(unescape(page.read_text(encoding="utf-8"))), page.name
    index = unescape((made["out"] / "index.html").read_text(encoding="utf-8"))
    assert notice.search(index) and "direct judge" in index  # the verdict says what it rests on
    sc = json.loads((made["pages"] / "skill_comparison.json").read_text())
    assert sc["judge"] == "direct"
    grades = _jsonl(made["run"] / "grades.jsonl")
    assert all(g["judge_uncalibrated_override"] for g in grades if g["judge_score"] is not None)


def html_param(page: str, name: str, value: str) -> bool:
    import html as h

    return f"<code>{name}</code></td><td>{h.escape(json.dumps(value), quote=False)}</td>" in page


def test_pages_have_their_sections(made):
    expect = {
        "run_summary": ["Metrics per arm", "Per tag", "Latency and cost", "Against the baseline", "Findings"],
        "pass_at_k": ["Per set and per tag", "Capability and regression gates", "Passes sometimes, not reliably"],
        "skill_comparison": ["Verdict:", "unit of the test", "Trial by trial", "The sequential path", "Cost of each arm"],
        "judge_calibration": ["This run&#x27;s judge", "Reference, not this run&#x27;s judge: PandaLM", "Reference only (not this run&#x27;s judge)", "exact"],
        "power_planning": ["Trials a planned comparison needs", "This suite&#x27;s plan and this run"],
    }
    for name, sections in expect.items():
        page = _html(made, name)
        for s in sections:
            assert s in page or s.replace("&#x27;", "'") in page, f"{name}: missing {s!r}"
    # power_planning renders statically under papermill: no widget state, plots present
    assert "application/vnd.jupyter.widget-view+json" not in _html(made, "power_planning")


def _passes(run: Path) -> dict[tuple[str, str], tuple[int, int]]:
    """(case, arm) -> (n samples, c passed), straight from the run files."""
    grades = {(g["case_id"], g["arm"], g["index"]): g["passed"] for g in _jsonl(run / "grades.jsonl")}
    out: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for s in _jsonl(run / "results.jsonl"):
        key = (s["case_id"], s["arm"])
        out[key][0] += 1
        out[key][1] += grades.get((s["case_id"], s["arm"], s["index"])) is True
    return {k: (v[0], v[1]) for k, v in out.items()}


def test_pass_at_k_sidecar_matches_stats(made):
    side = json.loads((made["pages"] / "pass_at_k.json").read_text())
    counts = _passes(made["run"])
    for arm in ("baseline", "skilled"):
        per_case = [v for (c, a), v in sorted(counts.items()) if a == arm]
        assert len(per_case) == 9
        got = side["arms"][arm]
        assert got["k"] == [1, 2, 3]
        for i, k in enumerate(got["k"]):
            at, hat = stats.suite_pass_at_k(per_case, k), stats.suite_pass_hat_k(per_case, k)
            assert got["pass_at_k"][i] == pytest.approx(at.value, abs=1e-12)
            assert got["pass_at_k_se"][i] == pytest.approx(at.se, abs=1e-12)
            assert got["pass_hat_k"][i] == pytest.approx(hat.value, abs=1e-12)
            assert got["pass_hat_k_se"][i] == pytest.approx(hat.se, abs=1e-12)
        flaky = sorted(c for (c, a), (n, k) in counts.items() if a == arm and 0 < k < n)
        assert sorted(got["flaky"]) == flaky
    page = _html(made, "pass_at_k")
    for case in side["arms"]["baseline"]["flaky"]:
        assert case in page  # called out by name
    # the per-set curves j = 1..k of grades-summary.json, as `evalkit grade` prints them
    summary = json.loads((made["run"] / "grades-summary.json").read_text())
    assert "pass^j, j=1..k" in page and "pass@j, j=1..k" in page
    for arm, a in summary["per_arm"].items():
        for name, v in a["per_set_scores"].items():
            assert [p["j"] for p in v["curve"]] == [1, 2, 3]
            assert side["per_set"][arm][name]["curve"] == v["curve"]
            assert fmt.curve([p["pass_hat_j"] for p in v["curve"]]) in page


def test_run_summary_sidecar_matches_counts(made):
    side = json.loads((made["pages"] / "run_summary.json").read_text())
    counts = _passes(made["run"])
    for arm in ("baseline", "skilled"):
        n = sum(v[0] for (c, a), v in counts.items() if a == arm)
        c = sum(v[1] for (c_, a), v in counts.items() if a == arm)
        got = side["arms"][arm]
        assert got["n_expected"] == n == 9 * K
        assert got["sample_pass_rate"] == pytest.approx(c / n)
        ci = stats.proportion_interval(c, n)
        assert (got["ci_low"], got["ci_high"]) == pytest.approx((ci.low, ci.high))
    summary = json.loads((made["run"] / "summary.json").read_text())
    assert side["spend_usd"] == pytest.approx(summary["spend_usd"])
    gate = side["gate"]  # as `evalkit report` recorded it in verdicts.json
    assert (gate["arm"], gate["passed"], gate["reasons"], gate["causes"], gate["read_rates"]) == (
        "skilled", True, [], [], True)
    assert json.loads((made["run"] / "verdicts.json").read_text())["gate"] == gate
    # which arm was gated against which baseline run and arm, on the page and the index
    said = f"arm skilled of {made['run'].name} against run {made['run'].name}, arm skilled"
    assert gate["recorded_by"] == "report" and gate["baseline_arm"] == "skilled"
    assert f"Gate PASS: {said}" in _html(made, "run_summary")
    assert f"<span class='pass'>gate passed</span>: {said}" in (made["out"] / "index.html").read_text()


def test_skill_comparison_sidecar_matches_sign_test(made):
    side = json.loads((made["pages"] / "skill_comparison.json").read_text())
    grades = {(g["case_id"], g["arm"], g["index"]): g["passed"] for g in _jsonl(made["run"] / "grades.jsonl")}
    votes = Counter()
    for case in {g[0] for g in grades}:
        net = 0
        for i in range(K):
            b, t = grades[(case, "baseline", i)], grades[(case, "skilled", i)]
            if b is None or t is None:
                votes["errored"] += 1
                break
            net += (t and not b) - (b and not t)
        else:
            votes["win" if net > 0 else "loss" if net < 0 else "tie"] += 1
    # the judged case's judge is scripted to answer, so no trial errored
    assert votes["errored"] == 0
    assert (side["wins"], side["losses"], side["ties"]) == (votes["win"], votes["loss"], votes["tie"])
    st = stats.sign_test(votes["win"], votes["loss"], votes["tie"])
    assert side["p_value"] == pytest.approx(st.p_value)
    assert side["baseline"] == "baseline" and side["treatment"] == "skilled"
    assert side["unit"].startswith("case")
    index = (made["out"] / "index.html").read_text()
    assert side["kind"] in index


def test_power_planning_sidecar_matches_stats(made):
    side = json.loads((made["pages"] / "power_planning.json").read_text())
    assert side["sample_sizes"], "no sample sizes"
    for row in side["sample_sizes"]:
        ss = stats.sign_test_sample_size(row["win_rate"], row["tie_rate"], side["alpha"], side["power"])
        assert (row["trials_first"], row["trials_stable"], row["trials_approx"]) == \
            (ss.trials_first, ss.trials_stable, ss.trials_approx)
        assert row["discordant_stable"] == ss.discordant_stable


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_judge_calibration_on_run_and_pandalm(made):
    side = json.loads((made["pages"] / "judge_calibration.json").read_text())
    grades = _jsonl(made["run"] / "grades.jsonl")
    judge = {f"{g['case_id']}/{g['arm']}/{g['index']}": g["judge_score"] for g in grades if g["judge_score"] is not None}
    labels = _jsonl(made["run"].parents[1] / "judge" / "human-sample.jsonl")
    outputs = {f"{d['case_id']}/{d['arm']}/{d['index']}": d["output"] for d in _jsonl(made["run"] / "results.jsonl")}
    # a label counts when it names the output the judge scored (its sha256), as the page says
    pairs = [(judge[x["item"]], x["score"]) for x in labels
             if x["item"] in judge and x["output_sha256"] == hashlib.sha256(outputs[x["item"]].encode()).hexdigest()]
    ag = stats.agreement([j for j, _ in pairs], [h for _, h in pairs], labels=[1, 2, 3, 4, 5])
    run = side["run"]
    assert run["labels"]["fresh"] == len(pairs) == 12 and run["labels"]["stale"] == 0
    assert (run["exact"], run["within_one"]) == pytest.approx((ag.exact, ag.within_one))
    assert run["confusion"] == [list(r) for r in ag.confusion]
    # real data, not ours: the judge against the majority of three annotators
    assert PANDALM.exists(), "../shared/data/pandalm is missing"
    items = json.loads((PANDALM / "testset-v1.json").read_text())
    gpt = {int(x["idx"]): str(x["gpt_result"]) for x in json.loads((PANDALM / "gpt-3.5-turbo-testset-v1.json").read_text())}
    human, jl = [], []
    for it in items:
        votes = Counter(str(it[f"annotator{i}"]) for i in (1, 2, 3)).most_common(1)[0]
        if votes[1] < 2:
            continue
        human.append(votes[0])
        r = gpt[int(it["idx"])]
        jl.append(r if r in ("0", "1", "2") else "0")
    pa = stats.agreement(jl, human, labels=["1", "0", "2"])
    pl = side["pandalm"]
    assert pl["n"] == len(human) == 999
    assert pl["exact"] == pytest.approx(pa.exact) and pl["kappa"] == pytest.approx(pa.kappa)
    assert pl["malformed"] == sum(1 for r in gpt.values() if r not in ("0", "1", "2", "Tie"))
    print(f"\nPandaLM gpt-3.5-turbo vs human majority: exact {pa.exact:.3f}, kappa {pa.kappa:.3f}")


def test_microtest_command_and_notebook(made):
    micro = made["micro"]
    assert micro.exit_code == 0, micro.output
    side = json.loads((made["micro_pages"] / "micro_test.json").read_text())
    grades = _jsonl(made["micro_run"] / "grades.jsonl")
    for arm in ("control", "firm", "soft"):
        mine = [g for g in grades if g["arm"] == arm]
        k = sum(1 for g in mine if g["passed"] is not True)
        assert len(mine) == 10  # 2 cases x 5 repetitions
        assert (side["arms"][arm]["samples"], side["arms"][arm]["flagged"]) == (10, k)
        ci = stats.proportion_interval(k, 10)
        assert (side["arms"][arm]["ci_low"], side["arms"][arm]["ci_high"]) == pytest.approx((ci.low, ci.high))
    assert side["arms"]["firm"]["flagged"] == 0 and side["arms"]["control"]["flagged"] > 0
    assert side["arms"]["firm"]["shapes"] == 1  # both wordings fold to one shape
    assert not side["nothing_to_fix"] and "Best variant: firm" in side["conclusion"]
    assert side["conclusion"] in micro.output
    # named because the test says so: each variant's p and Holm-adjusted p, on the page and in verdicts.json
    firm = side["arms"]["firm"]
    assert side["best"] == "firm" and firm["p_value"] <= firm["p_adjusted"] <= 0.05
    assert run_verdicts(made["micro_run"]).microtest.arms["firm"].p_adjusted == firm["p_adjusted"]
    page = _html(made, "micro_test", micro=True)
    assert "Holm-adjusted p" in page and "exact stratified test by case" in page
    assert "Every flagged output" in page and re.search(r"<img[^>]+src=\"data:image/png", page)


def test_hostile_outputs_render_as_text(made):
    pages = [p for d in (made["pages"], made["micro_pages"]) for p in d.glob("*.html")] + [made["out"] / "index.html"]
    shown = 0
    for p in pages:
        page = p.read_text(encoding="utf-8")
        assert "<script>alert" not in page.lower(), p.name
        assert "<img src=x" not in page.lower(), p.name
        assert "onerror=alert" not in page.replace("onerror=alert(1)&gt;", ""), p.name
        shown += page.count("&lt;script&gt;alert(1)&lt;/script&gt;") + page.count("&lt;img src=x onerror=alert(1)&gt;")
    # the hostile outputs are on the pages, as text: the paired table, the judge's justification, the flagged list
    assert "&lt;img src=x onerror=alert(1)&gt;" in _html(made, "skill_comparison")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in _html(made, "skill_comparison")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in _html(made, "judge_calibration")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in _html(made, "micro_test", micro=True)
    assert shown >= 4


def test_files_users_share_are_readable_by_others_under_the_umask(made):
    umask = os.umask(0o022)
    os.umask(umask)
    suite = Path(json.loads((made["run"] / "config.json").read_text())["suite"])
    shared = [made["out"] / "index.html", suite / "baseline.json", suite / "baseline-summary.md",
              *made["pages"].iterdir(), *(p for p in made["run"].iterdir() if p.is_file())]
    assert len(shared) > 15
    for f in shared:
        # readable by group and others as far as the umask lets them (mkstemp alone: 0600)
        assert f.stat().st_mode & 0o444 == 0o444 & ~umask, (f, oct(f.stat().st_mode))


def test_a_fifo_human_sample_fails_judge_calibration_without_hanging(made, tmp_path):
    import shutil

    from conftest import fifo_watchdog

    meta = json.loads((made["run"] / "config.json").read_text())
    suite = tmp_path / "suite"
    shutil.copytree(meta["suite"], suite, ignore=shutil.ignore_patterns("runs"))
    run = suite / "runs" / made["run"].name
    shutil.copytree(made["run"], run)
    (run / "config.json").write_text(json.dumps({**meta, "suite": str(suite)}))
    fifo = suite / "judge" / "human-sample.jsonl"
    fifo.unlink()
    os.mkfifo(fifo)
    with fifo_watchdog(fifo, after=20) as released:
        rep = CliRunner().invoke(main, ["report", str(run), "--only", "judge_calibration",
                                        "--reports-dir", str(tmp_path / "out")])
    assert released == []
    # the report reads the labels before any notebook runs (to record whether the judge
    # may be trusted): bad input, exit 2, naming the file
    assert rep.exit_code == 2 and str(fifo) in rep.output
    assert "not a regular file: it is a FIFO (named pipe)" in rep.output, rep.output


def test_index_lists_runs_with_trend(made):
    index = (made["out"] / "index.html").read_text(encoding="utf-8")
    for key in ("run", "micro_run"):
        assert made[key].name in index
    assert "capitals" in index and "disclaimer" in index
    # one run of the capitals suite: no chart of one point per arm; the micro-test is listed but is
    # no point of its suite's trend (issue 42: micro-test and replay runs stay out of trends)
    assert "<svg" not in index and "one run so far (a trend needs two): baseline" in index
    assert "a micro-test: not in the trend" in index and "control 0%, firm 100%" in index
    trend = index[index.index("Trend of the sample pass rate"):]
    assert "disclaimer" not in trend and "capitals" in trend
    assert "Content-Security-Policy" in index
    assert 'href=\'' + made["run"].name + "/skill_comparison.html'" in index


def test_the_run_summary_opens_with_its_conclusion_and_shows_what_each_arm_was_given(made):
    """Issue 42: the box on top (verdict, gate, cost change, HIGH findings), an Arms section with
    each arm's texts and a diff against the baseline arm, the guidance named in the arms table,
    pooled figures labelled as pooled, the comparison page titled for any two arms."""
    page = _html(made, "run_summary")
    box = page.index("ek-summary-box")
    assert box < page.index("Metrics per arm") < page.index("Findings")
    head = page[box:box + 3000]
    assert "skilled vs baseline: pass (" in head and "exact sign test, one vote per case)" in head
    assert "gate: <b>PASS (arm skilled" in head and "cost per case $" in head
    assert "HIGH findings:" in head
    arms = page[page.index("What each arm was given"):page.index("Metrics per arm")]
    assert "GUIDED: answer with the capital city only." in arms and "(as run," in arms
    assert "+GUIDED: answer with the capital city only." in arms  # the diff against arm baseline
    assert "guidance: guidance/skilled.md" in page  # the arms table no longer says "none" for it
    assert "all arms (pooled)" in page and "<td>all arms</td>" not in page
    comparison = _html(made, "skill_comparison")
    assert "Arm comparison" in comparison and "differ by: guidance (a skill comparison)" in comparison


def test_no_page_shows_a_machine_path(made):
    """Pages travel: the run's folder is written relative to its project, never as the absolute
    path of the machine that made it (the parameters table, the plan's title, ...)."""
    project = str(made["run"].parents[3])
    pages = sorted(made["pages"].glob("*.html")) + sorted(made["micro_pages"].glob("*.html"))
    assert len(pages) >= 5
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert project not in text, page.name
    assert "evals/capitals/runs/" + made["run"].name in _html(made, "run_summary")


def test_plan_notebooks_follows_the_run(tmp_path):
    """Which notebooks apply: single-arm ungraded run gets the summary only."""
    run = tmp_path / "run1"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"arms": ["only"], "k": 1, "cases": [], "suite": str(tmp_path / "no")}))
    plans, skipped = reports.plan_notebooks(run, tmp_path / "out")
    assert list(plans) == ["run_summary"]
    assert set(skipped) == {"pass_at_k", "skill_comparison", "judge_calibration", "power_planning", "micro_test",
                            "replay"}
    (run / "grades.jsonl").write_text(json.dumps({"case_id": "a", "arm": "only", "index": 0, "judge_score": 3}) + "\n")
    plans, _ = reports.plan_notebooks(run, tmp_path / "out")
    assert set(plans) == {"run_summary", "pass_at_k", "judge_calibration"}


def test_report_refuses_bad_input(tmp_path):
    res = CliRunner().invoke(main, ["report", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "not a run folder" in res.output
    run = tmp_path / "r"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"arms": ["a"], "k": 1}))
    res = CliRunner().invoke(main, ["report", str(run), "--only", "skill_comparison", "--reports-dir",
                                    str(tmp_path / "rep")])
    assert res.exit_code == 2 and "does not apply" in res.output
    assert not (tmp_path / "rep").exists()


def test_fresh_kernel_per_notebook_and_a_failing_notebook(tmp_path):
    """`reuse_kernels=False` gives each notebook its own kernel; a notebook that raises is
    still rendered, its error reported, and the next one in the lane runs clean."""
    import nbformat

    src = tmp_path / "nbs"
    src.mkdir()
    for name, body in (("pass_at_k", "leak = 1\nraise ValueError('boom <b>')"),
                       ("run_summary", "x = 41 + 1\nprint(x, 'leak' in globals())")):
        nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                               "language": "python"}})
        p = nbformat.v4.new_code_cell('run_dir: str = ""  # run\nreport_dir: str = ""  # out', metadata={"tags": ["parameters"]})
        nb.cells = [p, nbformat.v4.new_code_cell(body)]
        nbformat.write(nb, src / f"{name}.ipynb")
    plans = {"run_summary": {"run_dir": "r"}, "pass_at_k": {"run_dir": "r"}}
    for reuse in (False, True):
        out = tmp_path / f"out-{reuse}"
        res = {r.name: r for r in reports.run_notebooks(plans, out, source_dir=src, parallel=False, reuse_kernels=reuse)}
        assert res["pass_at_k"].error == "ValueError: boom <b>" and res["pass_at_k"].html.exists()
        assert "boom &lt;b&gt;" in res["pass_at_k"].html.read_text()
        assert res["run_summary"].ok and ">42 False" in res["run_summary"].html.read_text()


def test_a_warm_up_given_up_meanwhile_stops_waiting_for_its_kernel():
    """A report refused while its kernels still import (bad input found meanwhile) does
    not wait for them to finish: the lane asks `cancelled` between short waits on the
    shell channel, and a reply still ends the wait with the code's status."""
    import queue
    import threading

    given_up = threading.Event()

    class Busy:  # a kernel client whose kernel is still importing: no reply yet
        def __init__(self, reply_on: int | None = None) -> None:
            self.waits: list[float] = []
            self.reply_on = reply_on

        def execute(self, code, **kwargs):
            return "warm-up"

        def get_shell_msg(self, timeout):
            self.waits.append(timeout)
            if len(self.waits) == self.reply_on:
                return {"parent_header": {"msg_id": "warm-up"}, "content": {"status": "ok"}}
            if len(self.waits) == 3:
                given_up.set()  # the report gave up while the kernel was busy
            raise queue.Empty

    kc = Busy()
    assert reports._run_code(kc, "import pandas", timeout_s=600, cancelled=given_up.is_set) is False
    assert len(kc.waits) == 3 and max(kc.waits) <= reports._CANCEL_POLL_S
    given_up.clear()
    kc = Busy(reply_on=2)
    assert reports._run_code(kc, "import pandas", timeout_s=600, cancelled=given_up.is_set) is True
    with pytest.raises(queue.Empty):  # its own timeout still holds
        reports._run_code(Busy(), "import pandas", timeout_s=0.0, cancelled=lambda: False)


def test_a_report_of_the_replay_alone_warms_its_kernel_up_without_matplotlib(tmp_path):
    """The replay page draws no figure: its kernel is warmed up with what it imports, and
    any other report (or one not naming its notebooks) with matplotlib as well."""
    import nbformat

    replay = nbformat.read(reports.notebooks_dir() / "replay.ipynb", as_version=4)
    assert not any("matplotlib" in c.source or "plt." in c.source for c in replay.cells)
    assert "import numpy, pandas\n" in reports._warm_up(tmp_path, ["replay"])
    for asked in (None, ["run_summary"], ["replay", "pass_at_k"]):
        assert "import matplotlib.pyplot, scipy.stats, statsmodels.stats.proportion, numpy, pandas\n" in (
            reports._warm_up(tmp_path, asked)
        )
    assert repr(str(tmp_path)) in reports._warm_up(tmp_path, None)  # the run it loads


def test_a_page_that_cannot_be_rendered_fails_its_notebook_alone(tmp_path, monkeypatch):
    """Pages are rendered on their own thread while the lane runs the next notebook: one
    that cannot be rendered is that notebook's failure (its executed .ipynb kept), and
    every other notebook still gets its page."""
    import nbformat

    src = tmp_path / "nbs"
    src.mkdir()
    for name in ("pass_at_k", "run_summary", "power_planning"):
        nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                               "language": "python"}})
        p = nbformat.v4.new_code_cell('run_dir: str = ""  # run', metadata={"tags": ["parameters"]})
        nb.cells = [p, nbformat.v4.new_code_cell(f"print('page of {name}')")]
        nbformat.write(nb, src / f"{name}.ipynb")
    real = reports.render_html

    def render(ipynb, parameters, *, title):
        if Path(ipynb).stem == "run_summary":
            raise OSError("disk gone")
        return real(ipynb, parameters, title=title)

    monkeypatch.setattr(reports, "render_html", render)
    plans = {n: {"run_dir": "r"} for n in ("pass_at_k", "run_summary", "power_planning")}
    res = {r.name: r for r in reports.run_notebooks(plans, tmp_path / "out", source_dir=src, parallel=False)}
    assert res["run_summary"].error == "render failed: OSError: disk gone" and res["run_summary"].html is None
    assert res["run_summary"].ipynb.exists()
    for name in ("pass_at_k", "power_planning"):
        assert res[name].ok and f"page of {name}" in res[name].html.read_text()


def test_ingested_tau_bench_run_summarised_from_grades(tmp_path):
    """A run ingested from tau-bench carries its grades: `ingest` writes the grades
    summary from them, with the same sample pass rate `evalkit grade` defines."""
    from evalkit.runfolder.runload import grades_summary

    trials = PANDALM.parent / "tau-bench" / "gpt-4o-airline.trials.jsonl"
    assert trials.exists(), "../shared/data/tau-bench is missing"
    res = CliRunner().invoke(main, ["ingest", str(trials), "--to", str(tmp_path / "tau")])
    assert res.exit_code == 0, res.output
    rows = _jsonl(trials)
    wins = sum(1 for r in rows if abs(float(r["reward"]) - 1.0) < 1e-6)
    s = grades_summary(tmp_path / "tau")
    arm = next(iter(s.per_arm))
    assert s.source == "ingest" and s.overall.n_expected == len(rows) == 200
    assert s.per_arm[arm].overall.sample_pass_rate == pytest.approx(wins / len(rows))
    plans, _ = reports.plan_notebooks(tmp_path / "tau", tmp_path / "out")
    assert set(plans) == {"run_summary", "pass_at_k"}


@pytest.mark.parametrize("name,text,message", [
    (".hidden.md", "Be brief.", "the variant's name '.hidden' cannot name an arm"),
    ("blank.md", "  \n", "file is empty"),
    ("latin1.txt", b"caf\xe9", "invalid UTF-8"),
])
def test_microtest_refuses_a_variant_that_cannot_be_an_arm(tmp_path, name, text, message):
    # Review finding: variant stems were not checked like arm names (a leading-dot file
    # became an arm), and each file was read twice.
    variants = tmp_path / "variants"
    variants.mkdir()
    (variants / "ok.md").write_text("Answer with one word.")
    f = variants / name
    f.write_bytes(text) if isinstance(text, bytes) else f.write_text(text)
    r = CliRunner().invoke(main, ["microtest", str(tmp_path), "--variants", str(variants)])
    assert r.exit_code == 2 and message in r.output and str(f) in r.output, r.output


def test_an_ungraded_or_empty_run_says_so_first_and_report_exits_1(tmp_path):
    """Nothing to report is said at the top of each page and in the exit status, never 'No findings.'."""
    from conftest import make_run

    ungraded = make_run(tmp_path, "ungraded", {("c1", "a"): [True, False]}, k=2)
    (ungraded / "grades.jsonl").unlink()  # never graded
    empty = make_run(tmp_path, "empty", {("c1", "a"): ["missing", "missing"]}, k=2, complete=False)
    out = tmp_path / "reports"
    for run, said in ((ungraded, "Nothing to report yet: this run is not graded"),
                      (empty, "Nothing to report: this run has no sample")):
        rep = CliRunner().invoke(main, ["report", str(run), "--reports-dir", str(out), "--only", "run_summary"])
        assert rep.exit_code == 1, rep.output
        assert f"error: {said}" in rep.output
        page = (out / run.name / "run_summary.html").read_text(encoding="utf-8")
        assert said in page and page.index(said) < page.index("Metrics per arm")
        assert "No findings.</b>" not in page
    index = (out / "index.html").read_text(encoding="utf-8")
    assert "not graded: nothing to report" in index


def test_skill_comparison_on_the_pairwise_judge_says_so(tmp_path):
    from test_compare import FAIR, two_arm_run

    from evalkit.calls.serve import ScriptedServer

    _, run = two_arm_run(tmp_path, extra={"verdict_judge": "pairwise", "allow_uncalibrated_judge": True})
    with ScriptedServer(FAIR) as srv:
        grade_run(run, judge_base_url=srv.base_url)
    rep = reports.report_run(run, tmp_path / "reports", notebooks=["skill_comparison"])
    assert rep.ok, [nb.error for nb in rep.notebooks]
    page = (rep.out_dir / "skill_comparison.html").read_text(encoding="utf-8")
    assert "Verdict: pass" in page and "the pairwise judge (position consistency 100%" in page
    assert "Pairwise trials" in page and "Judge not calibrated" in page
    side = json.loads((rep.out_dir / "skill_comparison.json").read_text())
    assert (side["judge"], side["wins"], side["ties"], side["losses"]) == ("pairwise", 7, 1, 0)
    manifest = json.loads((rep.out_dir / "report.json").read_text())
    assert manifest["verdicts"][0]["judge"] == "pairwise"
    assert "pairwise judge" in (tmp_path / "reports" / "index.html").read_text(encoding="utf-8")


def test_judge_calibration_is_made_only_with_something_to_calibrate(tmp_path):
    # issue 33: a suite with a judge configured but no judged case rendered "nothing to calibrate"
    run = tmp_path / "run1"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"arms": ["a", "b"], "k": 1, "cases": [], "suite": str(tmp_path / "no"),
                                                 "config": {"judge": {"model": "judge-model"}}}))
    (run / "grades.jsonl").write_text(json.dumps({"case_id": "c", "arm": "a", "index": 0, "judge_score": None}) + "\n")
    plans, skipped = reports.plan_notebooks(run, tmp_path / "out")
    assert "judge_calibration" not in plans
    assert skipped["judge_calibration"].startswith("nothing to calibrate: no judge score, no pairwise trial")
    plans, _ = reports.plan_notebooks(run, tmp_path / "out", pandalm_dir=tmp_path)  # PandaLM's reference asked for
    assert "judge_calibration" in plans
    no_judge = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**no_judge, "config": {}}))
    plans, _ = reports.plan_notebooks(run, tmp_path / "out", pandalm_dir=tmp_path)  # no judge: no reference page
    assert "judge_calibration" not in plans
    (run / "pairwise.jsonl").write_text(json.dumps({"case_id": "c", "index": 0}) + "\n")
    plans, _ = reports.plan_notebooks(run, tmp_path / "out")
    assert "judge_calibration" in plans


def test_the_skill_comparison_page_says_why_a_sign_test_and_a_paired_interval_disagree(tmp_path):
    """Issue 41: a no-improvement verdict (6W/1L, p = 0.125) beside a paired difference
    whose 95% interval excludes zero, with one sentence on the page reconciling them."""
    import html as h

    from conftest import make_run
    from test_verdicts import _sign_and_paired_disagree

    run = make_run(tmp_path, "r", _sign_and_paired_disagree(), k=5)
    rep = reports.report_run(run, tmp_path / "reports", notebooks=["skill_comparison"])
    assert rep.ok, [nb.error for nb in rep.notebooks]
    page = h.unescape((rep.out_dir / "skill_comparison.html").read_text(encoding="utf-8"))
    assert "Verdict: no-improvement" in page
    # no plan.json here: the sign test is the verdict, but not said to be pre-registered
    assert "Why the two differ: the verdict is the case-level sign test (6W/1L, p = 0.125" in page
    assert "repeats within a case are not independent evidence" in page


def test_a_page_of_a_run_whose_judge_counts_uncalibrated_by_default_says_so(tmp_path):
    """Issue 41: no key set, no labels: the judge's scores count, and every page says
    "Judge not calibrated (0 of 20 labels)" above its numbers."""
    from html import unescape

    from test_grading import GENEROUS, JUDGED_ONLY, write_run, write_suite

    suite = write_suite(tmp_path, cases=JUDGED_ONLY, opt_out=None)
    run = write_run(tmp_path, suite, {c["id"]: ["a river"] * 3 for c in JUDGED_ONLY})
    with ScriptedServer(GENEROUS) as srv:
        assert grade_run(run, judge_base_url=srv.base_url).exit_code == 0
    rep = reports.report_run(run, tmp_path / "reports", notebooks=["run_summary"])
    assert rep.ok, [nb.error for nb in rep.notebooks]
    page = unescape((rep.out_dir / "run_summary.html").read_text(encoding="utf-8"))
    assert "Judge not calibrated (0 of 20 labels): judged samples count by the judge's score" in page


def test_the_kernels_take_the_report_s_reading_of_the_run_instead_of_reading_it_again(tmp_path, monkeypatch):
    """`report_run` reads the run once: its kernels are handed that reading (`_Handoff`)
    before the first notebook, which finds the run in `runload`'s cache without having
    opened it; the pickle it came in is gone once the report is written."""
    import nbformat

    from conftest import make_run, two_arm

    run = make_run(tmp_path, "1-r", two_arm({f"c{i}": ([True, False], [True, True]) for i in range(4)}), k=2)
    src = tmp_path / "nbs"
    src.mkdir()
    nb_ = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                            "language": "python"}})
    p = nbformat.v4.new_code_cell('run_dir: str = ""  # run\nreport_dir: str = ""  # out', metadata={"tags": ["parameters"]})
    nb_.cells = [p, nbformat.v4.new_code_cell(
        "from evalkit.runfolder import runload\n"
        "print('cached before any open:', sorted(p.name for p in runload._RUN_CACHE))\n"
        "print('rows:', len(runload.load_run(run_dir, cache=True).samples))")]
    nbformat.write(nb_, src / "run_summary.ipynb")
    import tempfile

    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))  # where this process makes its temporary folders
    res = reports.report_run(run, tmp_path / "reports", notebooks=["run_summary"], source_dir=src)
    page = res.notebooks[0].html.read_text()
    assert res.ok and "cached before any open: ['1-r']" in page and "rows: 16" in page
    assert not any(private.glob("evalkit-report-*"))  # the pickle removed


def test_a_kernel_started_after_the_reading_takes_the_hand_off_too(tmp_path, monkeypatch):
    """On two lanes, one kernel warms up while the report reads the run and the other
    once it has (`_Lanes.grow(..., ahead=True)`): each finds the run in its cache before
    its notebook opens it, the reading handed off, not read again."""
    import nbformat

    from conftest import make_run, two_arm

    run = make_run(tmp_path, "1-r", two_arm({f"c{i}": ([True, False], [True, True]) for i in range(4)}), k=2)
    src = tmp_path / "nbs"
    src.mkdir()
    for name in ("run_summary", "pass_at_k"):
        nb_ = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                "language": "python"}})
        p = nbformat.v4.new_code_cell('run_dir: str = ""  # run\nreport_dir: str = ""  # out',
                                      metadata={"tags": ["parameters"]})
        # pass_at_k (the first taken) waits for run_summary's file: the other lane must run it
        wait = (f"import pathlib, time\nflag = pathlib.Path({str(tmp_path / 'flag')!r})\n"
                "for _ in range(2400):\n    if flag.exists():\n        break\n    time.sleep(0.05)\n"
                if name == "pass_at_k" else f"import pathlib\npathlib.Path({str(tmp_path / 'flag')!r}).touch()\n")
        nb_.cells = [p, nbformat.v4.new_code_cell(
            "import os\nfrom evalkit.runfolder import runload\n"
            "print('cached before any open:', sorted(p.name for p in runload._RUN_CACHE), 'kernel', os.getpid())"),
            nbformat.v4.new_code_cell(wait)]
        nbformat.write(nb_, src / f"{name}.ipynb")
    grown = []
    real_grow = reports._Lanes.grow
    monkeypatch.setattr(reports._Lanes, "grow", lambda self, n, **kw: (grown.append((n, kw)), real_grow(self, n, **kw)))
    res = reports.report_run(run, tmp_path / "reports", notebooks=["run_summary", "pass_at_k"], source_dir=src,
                             workers=2)
    pages = [nb.html.read_text() for nb in res.notebooks]
    assert res.ok and all("cached before any open: [&#x27;1-r&#x27;]" in p or "cached before any open: ['1-r']" in p
                          for p in pages), pages
    kernels = {re.search(r"kernel (\d+)", p).group(1) for p in pages}
    assert (2, {"ahead": True}) in grown and len(kernels) == 2  # two lanes, each its own kernel


def test_the_handoff_is_the_reports_own_reading_taken_by_the_adopt_code(tmp_path):
    """What a kernel runs to take the hand-off (`_ADOPT`, run here as the kernel runs it)
    puts the report's reading in the cache, the same rows; the kernels' warm-up then
    imports only, and reads no run of its own."""
    from conftest import make_run, two_arm

    from evalkit.runfolder import runload

    run = make_run(tmp_path, "1-r", two_arm({"c1": ([True, False], [True, True])}), k=2)
    loaded, signature = runload.load_run_signed(run)
    handoff = reports._Handoff()
    handoff.offer(loaded, signature)
    path = handoff.taken()
    assert path is not None and path.is_file() and path.parent.stat().st_mode & 0o077 == 0  # private
    runload._RUN_CACHE.clear()
    exec(reports._ADOPT.format(path=str(path)), {})
    assert [p.name for p in runload._RUN_CACHE] == ["1-r"]
    assert runload.load_run(run, cache=True).grades.equals(loaded.grades)
    handoff.close()
    assert not path.exists()
    assert "open_run" not in reports._warm_up(run, None, load=False)
    unchanged = reports._Handoff()
    unchanged.offer(loaded, None)  # the run changed while it was read: nothing handed off, no one waits
    assert unchanged.taken() is None


def test_a_reading_of_a_run_changed_since_is_not_adopted(tmp_path):
    """`runload.adopt_run` puts a reading in the cache only while the folder's files are
    as they were read: a grade appended since means the run is read again."""
    from conftest import make_run, two_arm

    from evalkit.runfolder import runload

    run = make_run(tmp_path, "1-r", two_arm({"c1": ([True], [False])}), k=1)
    loaded, signature = runload.load_run_signed(run)
    assert signature is not None and runload.adopt_run(loaded, signature)
    assert runload.load_run(run, cache=True).samples.equals(loaded.samples)
    with open(run / "grades.jsonl", "a") as fh:
        fh.write(json.dumps({"case_id": "c1", "arm": "skilled", "index": 0, "passed": True}) + "\n")
    assert not runload.adopt_run(loaded, signature)
    assert runload.load_run(run, cache=True).grades["passed"].tolist()[-1] is True  # read again


def test_work_forked_beside_the_report_says_what_it_returned_or_raised():
    """`_Forked` runs its work in a child process: the value comes back, an exception is
    raised here with its type and message, and a child that dies says how."""
    assert reports._Forked(lambda: {"pages": ["explorer.html"], "pid": os.getpid()}).result()["pid"] != os.getpid()

    def fails():
        raise ValueError("no <page>")

    with pytest.raises(Exception, match=r"ValueError: no <page>"):
        reports._Forked(fails).result()

    def dies():
        os.kill(os.getpid(), 9)

    with pytest.raises(Exception, match="killed by signal 9"):
        reports._Forked(dies).result()


def test_work_forked_off_the_critical_path_yields_the_cores_and_leaves_this_process_as_it_was():
    """`_Forked(..., nice=n)`: the child runs at n more niceness (the explorer's page,
    `EXPLORER_NICE`, beside the kernel and its hand-off); this process's stays."""
    mine = os.nice(0)
    assert reports._Forked(lambda: os.nice(0), nice=5).result() == min(mine + 5, 19)
    assert reports._Forked(lambda: os.nice(0)).result() == mine
    assert os.nice(0) == mine and reports.EXPLORER_NICE > 0


def test_a_forked_child_s_answer_is_read_even_when_asked_for_after_its_deadline():
    """`result()` asked after the deadline (the explorer's, after notebooks that took
    longer than it) reads what the child said: its value, not "killed"."""
    f = reports._Forked(lambda: 42, deadline_s=0.0)
    os.waitid(os.P_PID, f._pid, os.WEXITED | os.WNOWAIT)  # the child has answered and left, not reaped
    assert f.result() == 42


def test_a_forked_child_always_leaves_and_is_always_waited_for():
    """A child whose error cannot even be said still exits (never returning into the
    parent's code) with the fallback error; one silent past its deadline is killed; an
    interrupted wait closes its pipe once and reaps the child, and a second `result()`
    says it was interrupted instead of touching the pipe's number again."""
    import signal
    import time

    class Unsayable(Exception):
        def __str__(self):
            raise RuntimeError("no words")

    def unsayable():
        raise Unsayable()

    with pytest.raises(Exception, match="failed before it could say why"):
        reports._Forked(unsayable).result()
    hold, release = os.pipe()  # a child's work blocks on `hold` until the test writes to `release`

    def held():
        return os.read(hold, 1).decode()

    t0 = time.monotonic()
    slow = reports._Forked(held, deadline_s=0.5)  # nothing is ever written: it never answers
    assert slow._work is None  # the child has the work: nothing here keeps what it holds
    with pytest.raises(Exception, match="said nothing in time"):
        slow.result()
    assert time.monotonic() - t0 < 20

    def interrupt(signum, frame):
        os.write(release, b"x")  # the child may finish now: the interrupted wait reaps it
        raise KeyboardInterrupt

    waited = reports._Forked(held)
    pid = waited._pid
    before = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(KeyboardInterrupt):
            waited.result()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
        os.close(hold)
        os.close(release)
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped
    with pytest.raises(Exception, match="interrupted"):
        waited.result()


def test_an_explorer_child_that_dies_is_a_skipped_page_not_a_failed_report(tmp_path, monkeypatch):
    """The explorer pages are written by a forked child: one killed (the OOM killer, a
    signal) leaves the report's notebooks, manifest and index written, the page listed
    as skipped with why."""
    from conftest import make_run, two_arm

    run = make_run(tmp_path, "1-r", two_arm({f"c{i}": ([True, False], [True, True]) for i in range(3)}), k=2)

    def killed(*args, **kwargs):
        os.kill(os.getpid(), 9)

    monkeypatch.setattr(reports, "_explorer_pages", killed)
    res = reports.report_run(run, tmp_path / "reports", notebooks=["run_summary"])
    assert res.ok and res.notebooks[0].html.is_file() and res.index.is_file()
    assert "killed by signal 9" in res.skipped["explorer"]
    assert "explorer" in json.loads((res.out_dir / "report.json").read_text())["skipped"]


def test_a_report_uses_a_lane_per_core_up_to_the_notebooks():
    """Lanes: one per core up to the notebooks (a 200,000-sample run's report too, where
    memory allows: its second kernel pays, issue 44), the workers asked for, or one when
    not parallel."""
    cores = os.cpu_count() or 1
    assert reports._lane_count(4, True, None) == min(4, cores)
    assert reports._lane_count(4, True, 3) == 3 and reports._lane_count(2, True, 8) == 2
    assert reports._lane_count(4, False, 3) == 1 and reports._lane_count(0, True, None) == 1


def test_the_lanes_are_no_more_than_kernels_holding_the_run_fit_in_half_the_memory(tmp_path, monkeypatch):
    """A kernel holding a run costs its imports and four times the run's files' bytes (its
    peak while it parses them): a run of 1 GiB on a machine with 16 GiB available gets one
    lane per 2 x 4.2 GiB, whatever the cores; `workers` is what the user asked for and
    stands (0 is not a number of lanes); a small run keeps a lane per core; a machine that
    says nothing of its memory is not limited. The report reads its run's two files'
    sizes, and the machine's MemAvailable (a positive number here, on Linux)."""
    monkeypatch.setattr(reports.os, "cpu_count", lambda: 16)
    gib = 1 << 30
    assert reports.KERNEL_IMPORTS_BYTES + 4 * gib == 4 * gib + (200 << 20)
    assert reports._lane_count(7, True, None, gib, available=16 * gib) == 1  # 8 GiB / 4.2 GiB
    assert reports._lane_count(7, True, None, gib, available=20 * gib) == 2
    assert reports._lane_count(7, True, None, gib, available=64 * gib) == 7  # 7 fit: the notebooks are 7
    assert reports._lane_count(7, True, None, gib, available=1) == 1  # never none
    assert reports._lane_count(7, True, 6, gib, available=8 * gib) == 6  # asked for
    assert reports._lane_count(7, True, 0, gib, available=8 * gib) == 1  # 0: none asked for
    assert reports._lane_count(7, True, None, 50 << 20, available=8 * gib) == 7  # 400 MB a kernel
    assert reports._lane_count(7, False, None, gib, available=64 * gib) == 1
    monkeypatch.setattr(reports, "_available_memory", lambda: None)
    assert reports._lane_count(7, True, None, gib) == 7
    monkeypatch.undo()
    if sys.platform.startswith("linux"):
        assert reports._available_memory() > 0
    run = tmp_path / "run"
    run.mkdir()
    assert reports._run_bytes(run) == 0
    (run / "results.jsonl").write_bytes(b"x" * 300)
    (run / "grades.jsonl").write_bytes(b"y" * 45)
    (run / "errors.jsonl").write_bytes(b"z" * 1000)  # not what a kernel holds of the run
    assert reports._run_bytes(run) == 345


def test_a_containers_memory_limit_is_what_the_lanes_count_not_the_hosts_memory(tmp_path):
    """A container's memory cgroup, as /proc/self/cgroup and /sys/fs/cgroup show it: v2's
    memory.max less memory.current, v1's limit less usage, in the process's own folder or at
    the top of the mount; "max" or v1's huge number is no limit; the least limit counts."""
    def layout(name, cgroup, files):
        root = tmp_path / name
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        (tmp_path / f"{name}.cgroup").write_text(cgroup)
        return str(tmp_path / f"{name}.cgroup"), str(root)

    v2 = layout("v2", "0::/pod/app\n", {"pod/app/memory.max": "4294967296\n", "pod/app/memory.current": "1073741824\n"})
    assert reports._cgroup_memory_left(*v2) == 3 << 30
    top = layout("top", "0::/\n", {"memory.max": "2147483648\n", "memory.current": "0\n"})  # a container's own view
    assert reports._cgroup_memory_left(*top) == 2 << 30
    unlimited = layout("max", "0::/x\n", {"x/memory.max": "max\n", "x/memory.current": "5\n"})
    assert reports._cgroup_memory_left(*unlimited) is None
    v1 = layout("v1", "4:memory:/docker/abc\n0::/\n1:cpu:/\n", {
        "memory/docker/abc/memory.limit_in_bytes": str(3 << 30), "memory/docker/abc/memory.usage_in_bytes": str(1 << 30)})
    assert reports._cgroup_memory_left(*v1) == 2 << 30
    huge = layout("huge", "4:memory:/\n", {
        "memory/memory.limit_in_bytes": "9223372036854771712", "memory/memory.usage_in_bytes": "3185500160"})
    assert reports._cgroup_memory_left(*huge) is None  # this machine's own v1 top: no limit
    over = layout("over", "0::/a\n", {"a/memory.max": "100", "a/memory.current": "150"})
    assert reports._cgroup_memory_left(*over) == 0
    assert reports._cgroup_memory_left(str(tmp_path / "none"), str(tmp_path)) is None
