"""Say what answered (issue 42 item 6): a run answered by evalkit's scripted server
(`evalkit serve --scripted`, which gives the run its script's identity) records
`scripted` and the script's hash in summary.json and the run's config.json, and the
terminal, every page's arms table and the index row name it, never the config's model."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit._cli.main import main
from evalkit.calls.serve import ScriptedServer
from evalkit.telling.report_index import build_index, write_manifest
from evalkit.telling.reports import arms_table_html

CONFIG = {
    "mode": "completion",
    "template": "prompt.txt",
    "generator": {"model": "gemma-3-270m", "api_key_env": "EVALKIT_TEST_KEY"},
    "temperature": 0.0,
    "seed": 7,
    "k": 1,
    "concurrency": 2,
    "cost_cap_usd": 0.01,
    "max_tokens_in": 1000,
    "max_tokens_out": 40,
    "price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0},
    "judge_price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0},
}


def _suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A one-case prompt suite whose config names the embedded model (as the newcomer's did)."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "config.json").write_text(json.dumps(CONFIG))
    (suite / "prompt.txt").write_text("${input}\n")
    case = {"id": "a", "input": "say ok", "tags": ["golden"], "checks": [{"kind": "contains", "value": "ok"}]}
    (suite / "cases.jsonl").write_text(json.dumps(case) + "\n")
    monkeypatch.setenv("EVALKIT_TEST_KEY", "sk-test")
    return suite


@pytest.fixture
def scripted_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str, str]:
    """A run made under the scripted server as `evalkit serve --scripted` runs a command:
    (the run folder, the terminal's output, the script's hash)."""
    suite = _suite(tmp_path, monkeypatch)
    with ScriptedServer({"default": {"text": "ok"}}) as srv:
        monkeypatch.setenv("EVALKIT_BASE_URL", srv.base_url)
        monkeypatch.setenv(
            "EVALKIT_SERVED",
            json.dumps(
                {
                    "base_url": srv.base_url,
                    "model": None,
                    "status_file": str(tmp_path / "status.txt"),
                    "pid": os.getpid(),
                    "cache_identity": srv.cache_identity,
                }
            ),
        )
        res = CliRunner().invoke(main, ["run", str(suite), "--runs-dir", str(tmp_path / "runs"), "--no-progress"])
        assert res.exit_code == 0, res.output
        digest = srv.cache_identity.split("sha256=")[1]
    (run,) = (p for p in (tmp_path / "runs").iterdir() if (p / "summary.json").exists())
    return run, res.output, digest


def test_summary_and_config_record_scripted_and_the_scripts_hash(scripted_run: tuple[Path, str, str]) -> None:
    run, _, digest = scripted_run
    arm = json.loads((run / "summary.json").read_text())["per_arm"]["baseline"]
    assert arm["model"] == "scripted" and arm["answered_by"] == "scripted" and arm["script_sha256"] == digest
    settings = json.loads((run / "config.json").read_text())["arm_settings"]["baseline"]
    assert settings["answered_by"] == "scripted" and settings["script_sha256"] == digest


def test_the_terminal_the_pages_and_the_index_say_scripted(scripted_run: tuple[Path, str, str], tmp_path: Path) -> None:
    run, output, digest = scripted_run
    label = f"scripted (script {digest[:12]})"
    assert f"model {label}" in output and "gemma" not in output.split("run folder:")[1]
    page = arms_table_html(run)
    assert label in page and "gemma" not in page
    out = tmp_path / "reports" / run.name
    out.mkdir(parents=True)
    write_manifest(run, out, [], {})
    index = build_index(tmp_path / "reports").read_text()
    assert label in index and "gemma" not in index
    # the explorer's header and a diff's say it too, in the page's HTML before any script runs
    from evalkit.telling.explorer import write_diff, write_explorer

    explorer = write_explorer(run, out).path.read_text()
    head = explorer[: explorer.index("</header>")]
    assert f"answered by {label}" in head and "gemma" not in head
    diff = write_diff(run, run, out).path.read_text()
    head = diff[: diff.index("</header>")]
    assert f"the other run: answered by {label}" in head and f"this run: answered by {label}" in head
    # the CI Markdown the pull-request comment posts says it too
    from evalkit.runfolder.runload import as_run
    from evalkit.telling.ciout import answered_section

    assert answered_section(as_run(run)) == [f"**Answered by:** {label}"]


def test_a_cached_sample_keeps_the_latency_first_measured_and_the_figures_count_replays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evalkit.conclusions.grading import grade_run
    from evalkit.foundations._io import iter_jsonl
    from evalkit.running.runner import RunOptions, run_suite
    from evalkit.suites.reader import load_suite

    suite = _suite(tmp_path, monkeypatch)
    with ScriptedServer({"default": {"text": "ok"}, "latency_s": 0.2}) as srv:
        opts = RunOptions(runs_dir=str(tmp_path / "runs"), base_url=srv.base_url, progress=False)
        first = run_suite(load_suite(suite), opts)
        second = run_suite(load_suite(suite), opts)
    (measured,) = iter_jsonl(Path(first.path) / "results.jsonl")
    (replayed,) = iter_jsonl(Path(second.path) / "results.jsonl")
    assert measured["latency_ms"] >= 200 and not measured["cached"]
    assert replayed["cached"] and replayed["latency_ms"] == measured["latency_ms"]
    grade_run(second.path)
    overall = json.loads((Path(second.path) / "grades-summary.json").read_text())["overall"]
    assert overall["n_latency_replays"] == 1 and overall["latency_p50_ms"] == measured["latency_ms"]
    assert "(1 of 1 replayed)" in (Path(second.path) / "summary.md").read_text()


def test_a_served_judges_answers_are_keyed_by_its_script_not_its_port(monkeypatch: pytest.MonkeyPatch) -> None:
    """A newcomer edited the scripted judge's script and served it again on the same port:
    the judge cache must ask again (keyed by the script's hash, as the generator's answers),
    while a judge that is not the served one keeps the cache's own keying (None)."""
    from evalkit.conclusions.grading import _served_identity
    from evalkit.foundations.records import Endpoint

    judge = Endpoint("judge-model", "http://127.0.0.1:18181/v1", "K")
    served = {"base_url": "http://127.0.0.1:18181/v1", "model": None}
    monkeypatch.setenv("EVALKIT_SERVED", json.dumps({**served, "cache_identity": "scripted:sha256=aaa"}))
    first = _served_identity(judge)
    monkeypatch.setenv("EVALKIT_SERVED", json.dumps({**served, "cache_identity": "scripted:sha256=bbb"}))
    assert first == "scripted:sha256=aaa" and _served_identity(judge) == "scripted:sha256=bbb"
    assert _served_identity(Endpoint("judge-model", "https://api.example.com/v1", "K")) is None
