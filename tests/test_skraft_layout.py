"""Seed 002's SKRAFT layout (issue 42 item 3): `tests/skills/<skill>/eval.yaml` finds its
skill under `plugins/<plugin>/skills/<skill>/` (or `--skills-root`) and becomes a
baseline and a skilled arm, the skill the skilled arm's `skill_dir`; a name that matches
no skill is skipped with a non-zero exit; the dashboard counts the skill as covered."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from evalkit._cli.main import main
from evalkit.intake.lint import import_suite, lint_suite
from evalkit.suites.reader import load_suite
from evalkit.suites.suite import render_prompt
from evalkit.telling.dashboard import build_dashboard

SPEC = """\
name: outside-in-tdd
description: Checks that the feature is driven from an observable business behaviour.
type: capability
defaults:
  timeout: 3m
  runs: 3
stimuli:
  - name: Drive a business rule from the outside
    prompt: Apply a loyalty discount to the payable total. Implement it.
    graders:
      - type: contains
        value: test
  - name: Rename a variable
    prompt: Rename the variable x to total.
    graders:
      - type: contains
        value: total
    tags: { intent: non-activation }
"""
SKILL = "---\nname: outside-in-tdd\ndescription: Drive features from the outside.\n---\nStart from a failing test.\n"


def _repo(root: Path, spec_name: str = "outside-in-tdd", skill_name: str = "outside-in-tdd") -> Path:
    """A SKRAFT repository: the skill under plugins/skraft-framework/skills/, the spec
    under tests/skills/; returns the spec."""
    skill = root / "plugins" / "skraft-framework" / "skills" / skill_name
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(SKILL)
    spec = root / "tests" / "skills" / spec_name / "eval.yaml"
    spec.parent.mkdir(parents=True)
    spec.write_text(SPEC)
    return spec


def test_the_spec_finds_its_skill_and_runs_baseline_against_skilled(tmp_path: Path) -> None:
    spec = _repo(tmp_path)
    suite = load_suite(spec)
    assert [a.name for a in suite.config.arms] == ["baseline", "skilled"]
    skilled = suite.config.arm("skilled")
    assert (spec.parent / str(skilled.skill_dir)).resolve() == (
        tmp_path / "plugins" / "skraft-framework" / "skills" / "outside-in-tdd"
    ).resolve()
    base = render_prompt(suite.config, suite.cases[0], suite.config.arm("baseline"))
    assert render_prompt(suite.config, suite.cases[0], skilled) == SKILL + base
    assert "Start from a failing test." not in base
    assert lint_suite(spec).ok


def test_a_name_that_matches_no_skill_is_skipped_with_a_non_zero_exit(tmp_path: Path) -> None:
    spec = _repo(tmp_path, spec_name="outside-in-tdd", skill_name="outside-in")
    for cmd in (["lint", str(spec)], ["run", str(spec), "--plan-only"]):
        res = CliRunner().invoke(main, cmd)
        assert res.exit_code != 0, res.output
        assert "skipped: no skill named 'outside-in-tdd'" in res.output, res.output


def test_skills_root_names_where_the_skill_is(tmp_path: Path) -> None:
    spec = tmp_path / "specs" / "outside-in-tdd" / "eval.yaml"
    spec.parent.mkdir(parents=True)
    spec.write_text(SPEC)
    assert [a.name for a in load_suite(spec).config.arms] == ["baseline"]  # no layout: one arm, as before
    skills = tmp_path / "elsewhere"
    (skills / "outside-in-tdd").mkdir(parents=True)
    (skills / "outside-in-tdd" / "SKILL.md").write_text(SKILL)
    suite = load_suite(spec, skills_root=skills)
    assert suite.config.arm("skilled").skill == SKILL
    res = CliRunner().invoke(main, ["lint", str(spec), "--skills-root", str(skills)])
    assert res.exit_code == 0, res.output


def test_the_dashboard_counts_the_skill_as_covered(tmp_path: Path) -> None:
    _repo(tmp_path)
    d = build_dashboard(tmp_path)
    (skill,) = d.skills
    assert [(c.arm, c.baseline, c.how) for c in skill.coverage] == [("skilled", "baseline", "skill_dir")]


def test_import_copies_the_skill_into_the_native_suite(tmp_path: Path) -> None:
    spec = _repo(tmp_path)
    dest = import_suite(spec, tmp_path / "evals" / "tdd")
    suite = load_suite(dest)
    assert suite.config.arm("skilled").skill_dir == "skills/outside-in-tdd"
    assert (dest / "skills" / "outside-in-tdd" / "SKILL.md").read_text() == SKILL


V01 = Path(__file__).parent / "data" / "runs" / "v0.1"
STAMP = "20261201-094733"


def test_verdict_unit_trial_records_the_skraft_count_with_the_case_level_verdict_beside(tmp_path: Path) -> None:
    suite = tmp_path / "v0.1"
    shutil.copytree(V01, suite)
    run = suite / "runs" / STAMP
    doc = json.loads((run / "config.json").read_text())
    doc["config"]["verdict_unit"] = "trial"
    (run / "config.json").write_text(json.dumps(doc))
    out = CliRunner().invoke(main, ["compare", str(run), "--baseline", "baseline", "--treatment", "skilled"])
    # the audit's figures on this fixture: case level 4W/2T/0L inconclusive, SKRAFT count 6W/6T/0L pass
    assert out.output.startswith("verdict: pass\n"), out.output
    assert "unit of the test: trial (SKRAFT count" in out.output
    assert "beside it (not deciding): inconclusive by case (one vote per case" in out.output
    assert "4W/2T/0L" in out.output and "tally: 6W/6T/0L" in out.output
    recorded = json.loads((run / "verdicts.json").read_text())["comparisons"][0]
    assert recorded["unit"].startswith("trial") and recorded["kind"] == "pass"
    assert recorded["beside"]["unit"].startswith("case") and recorded["beside"]["kind"] == "inconclusive"


def test_verdict_unit_is_validated(tmp_path: Path) -> None:
    suite = tmp_path / "v0.1"
    shutil.copytree(V01, suite)
    cfg = json.loads((suite / "config.json").read_text())
    (suite / "config.json").write_text(json.dumps({**cfg, "verdict_unit": "trial"}))
    assert load_suite(suite).config.verdict_unit == "trial"
    (suite / "config.json").write_text(json.dumps({**cfg, "verdict_unit": "stimulus"}))
    assert any("verdict_unit must be" in str(f) for f in lint_suite(suite).errors)


def test_a_prompt_that_names_the_skill_or_copies_its_wording_and_no_non_activation_case_warn(tmp_path: Path) -> None:
    spec = _repo(tmp_path)
    rule = "Always write the acceptance test in the language of the business first."
    (spec.parents[3] / "plugins" / "skraft-framework" / "skills" / "outside-in-tdd" / "SKILL.md").write_text(
        SKILL + rule + "\n"
    )
    spec.write_text(
        SPEC.replace("Apply a loyalty discount", "Use outside-in TDD to apply a loyalty discount").replace(
            "Rename the variable x to total.", rule
        )
    )
    warnings = [str(w) for w in lint_suite(spec).warnings]
    assert any("$.stimuli[0].prompt" in w and "names the skill 'outside-in-tdd'" in w for w in warnings), warnings
    assert any("$.stimuli[1].prompt" in w and "copies 8 words in a row" in w for w in warnings), warnings
    assert not any("no non-activation case" in w for w in warnings)
    spec.write_text(SPEC.replace("    tags: { intent: non-activation }\n", ""))
    warnings = [str(w) for w in lint_suite(spec).warnings]
    assert any("no non-activation case" in w for w in warnings) and not any(".prompt" in w for w in warnings)
