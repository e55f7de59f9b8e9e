"""A suite name cannot edit the workflow (issue 31): `evalkit init NAME --ci github` with
each hostile name, through the CLI in a real git repository. Names YAML can carry are
written by PyYAML and parse back to the very same paths everywhere they appear (env,
watched paths, cache paths); names with `${{`, control characters or line separators
are refused with exit 2 and the reason, before anything is written."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from evalkit._cli.main import main

SPEC = "evalkit @ git+https://example.org/evalkit.git@0123456789abcdef0123456789abcdef01234567"


def _init(repo: Path, name: str, *extra: str):
    cwd = os.getcwd()
    os.chdir(repo)
    try:
        return CliRunner().invoke(main, ["init", f"evals/{name}", "--ci", "github", "--evalkit-spec", SPEC, *extra])
    finally:
        os.chdir(cwd)


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    r.mkdir()
    subprocess.run(["git", "init", "-q", str(r)], check=True)
    return r


@pytest.mark.parametrize("name", ["a: b", "a #c", "it's \"q\"", "key: [x, y]", "&anchor *ref", "- item", "%YAML"])
def test_names_yaml_can_carry_survive_everywhere(repo: Path, name: str) -> None:
    res = _init(repo, name)
    assert res.exit_code == 0, res.output
    text = (repo / ".github" / "workflows" / "evalkit.yml").read_text()
    doc = yaml.safe_load(text)
    assert set(doc) == {"name", "on", "permissions", "concurrency", "jobs"}  # no key a name made
    job = doc["jobs"]["evalkit"]
    rel = f"evals/{name}"
    assert job["env"]["EVALKIT_SUITE"] == rel
    assert f"{rel}/**" in doc["on"]["pull_request"]["paths"]
    caches = [s["with"]["path"] for s in job["steps"] if s.get("uses", "").startswith("actions/cache/")]
    assert caches == [f"{rel}/runs/cache.sqlite"] * 2
    assert (repo / "evals" / name / "config.json").is_file()


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("x${{ github.event.pull_request.title }}", "'${{'"),
        ("a\tb", "U+0009"),
        ("a\nb", "U+000A"),
        ("a\rb", "U+000D"),
        ("a\u2028b", "U+2028"),
        ("a\u0085b", "U+0085"),
        ("a\x1bb", "U+001B"),
    ],
)
def test_names_that_would_edit_the_workflow_are_refused(repo: Path, name: str, reason: str) -> None:
    res = _init(repo, name)
    assert res.exit_code == 2, res.output
    assert "cannot go into a CI workflow" in res.output and reason in res.output
    assert "Traceback" not in res.output
    assert not (repo / ".github").exists() and not (repo / "evals").exists()


def test_a_hostile_watch_pattern_is_refused(repo: Path) -> None:
    res = _init(repo, "ok", "--watch", "src/**\n  evil: 1")
    assert res.exit_code == 2 and "--watch pattern" in res.output and "U+000A" in res.output
    assert not (repo / ".github").exists()
