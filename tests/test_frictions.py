"""Small frictions a newcomer met (issue 42 item 9), each through the command line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit._cli.main import main


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
