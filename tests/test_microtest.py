"""Micro-test conclusions that cannot mislead: a variant that does not beat the control is
never "best" and the exit status says so; counts name their unit; a re-run says its
answers came from the response cache, and --no-cache draws fresh samples."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import browser_run
from evalkit._cli.main import main
from evalkit.calls.serve import ScriptedServer


_suite = browser_run.make_microtest_suite
SCRIPT = browser_run.MICRO_SCRIPT


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv("EVALKIT_TEST_KEY", "test-key")


def test_a_worse_variant_is_never_best_and_a_rerun_says_it_came_from_the_cache(tmp_path, env):
    suite, variants = _suite(tmp_path)
    args = ["microtest", str(suite), "--variants", str(variants), "--reps", "5", "--no-progress",
            "--reports-dir", str(tmp_path / "reports")]
    with ScriptedServer(SCRIPT) as srv:
        first = CliRunner().invoke(main, args + ["--base-url", srv.base_url])
        assert first.exit_code == 1, first.output  # the guidance does not help: scripts can tell
        assert "Best variant" not in first.output
        assert "No variant beats the control (the least flagged, quote, in 10 of 10)" in first.output
        assert "of 10 samples: 2 cases x 5 repetitions per case" in first.output
        assert "from the response cache" not in first.output
        sent = srv.stats["requests"]
        again = CliRunner().invoke(main, args + ["--base-url", srv.base_url])
        assert again.exit_code == 1
        assert "note: 20 of 20 samples came from the response cache" in again.output and "--no-cache" in again.output
        assert srv.stats["requests"] == sent  # replayed: nothing was sent
        fresh = CliRunner().invoke(main, args + ["--base-url", srv.base_url, "--no-cache"])
        assert fresh.exit_code == 1 and "from the response cache" not in fresh.output
        assert srv.stats["requests"] == 2 * sent
    run = Path(next(ln.split(": ", 1)[1] for ln in first.output.splitlines() if ln.startswith("run folder: ")))
    page = (tmp_path / "reports" / run.name / "micro_test.html").read_text(encoding="utf-8")
    shown = [int(x) for x in __import__("re").findall(r"quote / task-0 / repetition (\d+)", page)]
    assert shown == sorted(shown) == [1, 2, 3, 4, 5]  # flagged outputs in repetition order
