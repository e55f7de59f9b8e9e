"""Small frictions a newcomer met (issue 42 item 9), each through the command line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit._cli.main import main


def _suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str, k: int, n_cases: int) -> Path:
    """A prompt suite of `n_cases` cases on `model`, one sample at a time."""
    price = {"in_per_mtok": 1.0, "out_per_mtok": 2.0}
    config = {
        "mode": "completion",
        "template": "prompt.txt",
        "generator": {"model": model, "api_key_env": "EK_KEY"},
        "temperature": 0.0,
        "seed": 1,
        "k": k,
        "concurrency": 1,
        "cost_cap_usd": 0.05,
        "max_tokens_in": 200,
        "max_tokens_out": 8,
        "price": price,
        "judge_price": price,
    }
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "config.json").write_text(json.dumps(config))
    (suite / "prompt.txt").write_text("${input}\n")
    case = {"tags": ["golden"], "checks": [{"kind": "contains", "value": "x"}]}
    (suite / "cases.jsonl").write_text(
        "".join(json.dumps({"id": f"c{i}", "input": f"q {i}", **case}) + "\n" for i in range(n_cases))
    )
    monkeypatch.setenv("EK_KEY", "sk-test")
    return suite


@pytest.mark.parametrize("spec", ["evalkit", "vendor/missing"])
def test_init_ci_checks_the_evalkit_spec_before_writing_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    monkeypatch.chdir(repo)
    res = CliRunner().invoke(main, ["init", "evals/unit", "--ci", "github", "--evalkit-spec", spec])
    assert res.exit_code == 2 and "--evalkit-spec" in res.output, res.output
    assert sorted(p.name for p in repo.iterdir()) == [".git"]  # no suite folder, no workflow


def test_the_same_not_retried_error_on_the_first_samples_stops_the_run_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model the server does not have (HTTP 404, not retried): 36 samples planned, the
    run stops after the first three fail alike instead of sending all 36."""
    from evalkit.calls.serve import ScriptedServer

    suite = _suite(tmp_path, monkeypatch, "gpt-typo", 3, 12)
    with ScriptedServer({"model": "gemma-3-270m", "default": {"text": "x"}}) as srv:
        res = CliRunner().invoke(
            main, ["run", str(suite), "--runs-dir", str(tmp_path / "runs"), "--base-url", srv.base_url, "--no-progress"]
        )
        assert srv.stats["requests"] == 3, res.output
    assert res.exit_code == 1
    (run,) = (p for p in (tmp_path / "runs").iterdir() if p.is_dir())
    summary = json.loads((run / "summary.json").read_text())
    assert summary["samples_errored"] == 3 and summary["samples_missing"] == 33
    assert summary["reason"].startswith("the first 3 samples failed with the same error: attempt 1: HTTP 404")
    assert "The model `gpt-typo` does not exist" in summary["reason"]


def test_a_replay_only_run_that_misses_every_sample_leaves_no_run_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite = _suite(tmp_path, monkeypatch, "m", 2, 1)
    runs = tmp_path / "runs"
    res = CliRunner().invoke(
        main,
        [
            "run",
            str(suite),
            "--runs-dir",
            str(runs),
            "--replay-only",
            "--no-progress",
            "--base-url",
            "http://127.0.0.1:9/v1",
        ],
    )
    assert res.exit_code == 1 and "none of the 2 samples has a cached answer, so no run folder was left" in res.output
    assert not [p for p in runs.iterdir() if p.is_dir()]


def _embedded_identity() -> str | None:
    from evalkit.calls.serve import LocalModelServer, default_model_path
    from evalkit.foundations.errors import EvalkitError

    try:
        return LocalModelServer(default_model_path()).cache_identity
    except EvalkitError:
        return None


@pytest.mark.skipif(_embedded_identity() is None, reason="the embedded model is not installed")
def test_replay_only_without_a_server_replays_the_embedded_models_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Answers `evalkit serve` gave (keyed by the model file's identity, not the port)
    replay with no server up: the identity comes from the file."""
    import os

    from evalkit.calls.serve import ScriptedServer

    suite = _suite(tmp_path, monkeypatch, "gemma-3-270m", 2, 2)
    runs = tmp_path / "runs"
    with ScriptedServer({"default": {"text": "x"}}) as srv:  # standing in for the embedded model under serve
        served = {
            "base_url": srv.base_url,
            "model": "gemma-3-270m",
            "status_file": str(tmp_path / "status"),
            "pid": os.getpid(),
            "cache_identity": _embedded_identity(),
        }
        monkeypatch.setenv("EVALKIT_SERVED", json.dumps(served))
        first = CliRunner().invoke(
            main, ["run", str(suite), "--runs-dir", str(runs), "--base-url", srv.base_url, "--no-progress"]
        )
        assert first.exit_code == 0, first.output
    monkeypatch.delenv("EVALKIT_SERVED")
    monkeypatch.delenv("EVALKIT_BASE_URL", raising=False)
    replay = CliRunner().invoke(main, ["run", str(suite), "--runs-dir", str(runs), "--replay-only", "--no-progress"])
    assert replay.exit_code == 0, replay.output
    assert "baseline: 4 samples, 0 errors, 0 missing" in replay.output


def test_the_power_widgets_print_the_plan_command_that_writes_what_they_show() -> None:
    """Exploring with the sliders ends in the command that pre-registers the plan, and the
    command runs: the plan it writes holds the sliders' values."""
    from evalkit.telling import nb

    assert nb.power_command(0.75, 0.2, 0.05, 0.8, "evals/my unit") == (
        "evalkit power --win-rate 0.75 --tie-rate 0.2 --alpha 0.05 --power 0.8 --write 'evals/my unit'"
    )
    assert 'print("to pre-register this plan:", nb.power_command(win_rate, tie_rate, alpha, power))' in (
        Path(__file__).parent.parent / "notebooks" / "power_planning.ipynb"
    ).read_text().replace('\\"', '"')


def test_the_printed_power_command_writes_the_plan(tmp_path: Path) -> None:
    import shlex

    from evalkit.telling import nb

    suite = tmp_path / "suite"
    suite.mkdir()
    args = shlex.split(nb.power_command(0.75, 0.2, 0.05, 0.8, str(suite)))[1:]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    plan = json.loads((suite / "plan.json").read_text())
    assert json.dumps(plan).count("0.75") >= 1 and "0.2" in json.dumps(plan)
