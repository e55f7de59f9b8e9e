"""Pages a team shares (issue 42 items 7 and 8): where a notebook finds its run, what a
page says of paths, the arms' texts as run, the box on top of the run summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalkit.foundations.errors import EvalkitError, InputError
from evalkit.foundations.layout import project_root, shown_path, without_machine_paths
from evalkit.foundations.records import RunVerdicts
from evalkit.foundations.records_gate import Verdict
from evalkit.running.runner import input_hashes
from evalkit.suites.reader import load_suite
from evalkit.telling import arms, nb


def _run(suite: Path, name: str, created: str, **meta: object) -> Path:
    run = suite / "runs" / name
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"created": created, **meta}))
    return run


def _repo(tmp_path: Path) -> tuple[Path, Path]:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "notebooks").mkdir()
    return repo, repo / "evals" / "unit"


def test_a_notebook_opened_in_notebooks_finds_the_runs_of_its_repository(tmp_path, monkeypatch):
    repo, suite = _repo(tmp_path)
    old = _run(suite, "20260101-000000", "2026-01-01T00:00:00+00:00")
    new = _run(suite, "20260201-000000", "2026-02-01T00:00:00+00:00")
    _run(suite, "20260301-000000", "2026-03-01T00:00:00+00:00", replay_only=True)  # a replay: never the default
    micro = _run(suite, "20260401-000000", "2026-04-01T00:00:00+00:00")
    (micro / "microtest.json").write_text("{}")  # a micro-test: never the default
    monkeypatch.chdir(repo / "notebooks")  # where JupyterLab starts the kernel of notebooks/x.ipynb
    assert nb.search_roots() == [repo / "notebooks", repo]
    assert nb.newest_run() == new.resolve()
    # run_dir as the README writes it, from the repository's root
    assert nb.resolve_run("evals/unit/runs/20260101-000000") == old.resolve()
    with pytest.raises(InputError, match=r"looked for it under notebooks, \."):
        nb.resolve_run("evals/unit/runs/nope")


def test_the_jupyterlab_root_is_a_place_to_look_too(tmp_path, monkeypatch):
    """A project with no .git, opened with `jupyter lab` at its top: the running server's
    root (its runtime file, as jupyter_server writes it) is searched."""
    project = tmp_path / "project"
    (project / "notebooks").mkdir(parents=True)
    run = _run(project / "evals" / "unit", "20260101-000000", "2026-01-01T00:00:00+00:00")
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    monkeypatch.chdir(project / "notebooks")
    with pytest.raises(InputError, match="no run found"):
        nb.resolve_run("")
    info = {"pid": os.getpid(), "root_dir": str(project), "port": 1, "url": "http://127.0.0.1:1/", "secure": False,
            "base_url": "/", "token": "", "hostname": "127.0.0.1", "password": False, "sock": "", "version": "2"}
    (runtime / f"jpserver-{os.getpid()}.json").write_text(json.dumps(info))
    assert project in nb.search_roots()
    assert nb.resolve_run("") == run.resolve()


def test_paths_on_a_page_are_the_projects_never_the_machines(tmp_path, monkeypatch):
    repo, suite = _repo(tmp_path)
    run = suite / "runs" / "20260101-000000"
    monkeypatch.chdir(tmp_path)
    assert project_root(run) == repo and shown_path(run) == "evals/unit/runs/20260101-000000"
    loose = tmp_path / "elsewhere" / "evals" / "s" / "runs" / "r"  # no repository: the folder above evals/
    assert project_root(loose) == tmp_path / "elsewhere"
    text = f"plan ({repo}/evals/unit/plan.json), run {run}, home {Path.home()}/x"
    shown = without_machine_paths(text, run)
    assert str(tmp_path) not in shown and "plan (evals/unit/plan.json)" in shown and "home ~/x" in shown


def _suite(tmp_path: Path) -> Path:
    suite = tmp_path / "evals" / "s"
    (suite / "guidance").mkdir(parents=True)
    (suite / "prompt.txt").write_text("${guidance}Q: ${input}\nA:")
    (suite / "guidance" / "skilled.md").write_text("Answer with the city only.\n")
    (suite / "cases.jsonl").write_text(json.dumps({"id": "c1", "input": "x?", "expected": "y", "tags": ["t"]}) + "\n")
    cfg = {"mode": "completion", "template": "prompt.txt", "k": 1, "cost_cap_usd": 1, "max_tokens_in": 100,
           "max_tokens_out": 10, "generator": {"model": "m", "base_url": None, "api_key_env": "K"},
           "price": {"in_per_mtok": 1, "out_per_mtok": 1}, "judge_price": {"in_per_mtok": 1, "out_per_mtok": 1},
           "arms": [{"name": "baseline"}, {"name": "skilled", "guidance": "guidance/skilled.md"}]}
    (suite / "config.json").write_text(json.dumps(cfg))
    return suite


def test_an_arms_texts_are_shown_as_run_and_an_edit_since_is_said(tmp_path):
    suite = _suite(tmp_path)
    loaded = load_suite(suite)
    meta = {"suite": str(suite), "arms": ["baseline", "skilled"],
            "inputs": input_hashes(loaded, list(loaded.config.arms))}  # what `evalkit run` records
    texts = arms.arm_texts(meta)
    assert {(t.arm, t.part, t.as_run) for t in texts} == {
        ("baseline", "prompt", True), ("skilled", "prompt", True), ("skilled", "guidance", True)}
    page = arms.arms_html(texts)
    assert "+Answer with the city only." in page and "prompt: the same as arm baseline" in page
    assert arms.what_differs(meta, texts, "baseline", "skilled").endswith("guidance (a skill comparison).")
    (suite / "guidance" / "skilled.md").write_text("<b>Edited</b> after the run.\n")
    edited = arms.arms_html(arms.arm_texts(meta))
    assert "EDITED SINCE THE RUN" in edited and "&lt;b&gt;Edited&lt;/b&gt;" in edited and "<b>Edited" not in edited


def test_an_arms_texts_come_from_its_config_whatever_its_cases_say_now(tmp_path):
    """The arms' texts are read from the suite's config.json alone: a case edited into a
    bad one since the run (or 5,000 cases to validate) does not hide them, and a
    config that no longer reads shows none."""
    suite = _suite(tmp_path)
    loaded = load_suite(suite)
    meta = {"suite": str(suite), "arms": ["baseline", "skilled"],
            "inputs": input_hashes(loaded, list(loaded.config.arms))}
    want = arms.arm_texts(meta)
    with open(suite / "cases.jsonl", "a") as fh:
        fh.write('{"id": "c1", "input": 7}\n')  # a duplicate id, a wrong type: the suite no longer loads
    with pytest.raises(EvalkitError):
        load_suite(suite)
    assert arms.arm_texts(meta) == want and len(want) == 3
    (suite / "config.json").write_text("{")
    assert arms.arm_texts(meta) == []


def test_the_summary_box_names_the_verdict_gate_cost_and_the_first_three_high_findings():
    v = Verdict(kind="pass", unit="case", wins=9, losses=1, ties=2, errored=0, n_trials=12, p_value=0.0215,
                p_one_sided=0.0107, reason="r", baseline_arm="baseline", treatment_arm="skilled")
    from evalkit.foundations.records import GradesSummary

    summary = GradesSummary.from_json({
        "complete": True, "k": 1, "overall": {},
        "per_arm": {"baseline": {"overall": {"cost_per_case_usd": 0.002}},
                    "skilled": {"overall": {"cost_per_case_usd": 0.003}}},
        "findings": [{"level": "HIGH", "message": f"<i>high {i}</i>"} for i in range(5)]
        + [{"level": "MEDIUM", "message": "medium"}],
    })
    box = arms.summary_box(RunVerdicts(run="r", comparisons=(v,)), summary, "scripted")
    assert "skilled vs baseline: pass (9W/2T/1L, p = 0.021, exact sign test, one vote per case)" in box
    assert "not gated" in box
    assert "skilled $0.003 (+50.0% vs baseline)" in box
    assert "HIGH findings: <b>5</b>" in box and box.count("&lt;i&gt;high") == 3 and "and 2 more" in box
    assert "medium" not in box and "answered by: <b>scripted</b>" in box


def test_the_index_shows_the_judges_spend_beside_the_runs(tmp_path):
    """A newcomer read $0.00047 in the index's spend column where grade had said $0.0015
    (generator + judge): the judge's spend is shown beside the run's, each named."""
    from evalkit.telling.report_index import build_index

    for name, judge in (("r1", 0.00103), ("r2", 0.0)):
        (tmp_path / name).mkdir()
        manifest = {"run": name, "created": f"2026-12-06T00:00:0{name[-1]}+00:00", "suite": "s", "arms": ["a"],
                    "headline": {"a": 0.5}, "spend_usd": 0.00047, "judge_spend_usd": judge, "verdicts": [],
                    "notebooks": []}
        (tmp_path / name / "report.json").write_text(json.dumps(manifest))
    index = build_index(tmp_path).read_text()
    assert "spend (run, then judge)" in index and index.count("+ judge $0.001") == 1


def test_finding_a_run_imports_no_jupyter_server_and_skips_a_dead_server(tmp_path, monkeypatch):
    """Looking for the JupyterLab root reads the runtime files itself: importing
    jupyter_server.serverapp cost a report's kernel 5.9 s at load 2.5 (issue 44 item 7). A dead
    server's file names no root and is left where it is."""
    project = tmp_path / "project"
    (project / "notebooks").mkdir(parents=True)
    run = _run(project / "evals" / "unit", "20260101-000000", "2026-01-01T00:00:00+00:00")
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    info = {"pid": int(dead.stdout), "root_dir": str(project)}
    (runtime / f"jpserver-{info['pid']}.json").write_text(json.dumps(info))
    (runtime / "jpserver-torn.json").write_text('{"pid": ')
    code = (
        "import sys; from evalkit.telling import nb; "
        f"print(nb.resolve_run({str(run)!r}), {str(project)!r} in map(str, nb.search_roots()), "
        "'jupyter_server.serverapp' in sys.modules)"
    )
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(runtime), "PYTHONPATH": str(Path(__file__).parents[1])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=project / "notebooks", env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(run.resolve()), "False", "False"]
    assert (runtime / f"jpserver-{info['pid']}.json").exists()
