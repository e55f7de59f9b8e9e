"""Importers: agent-evals `evals.json` and Vally/SKRAFT `eval.yaml` become native suites
that lint clean, and are also read directly by `load_suite`."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.foundations.errors import InputError
from evalkit.suites.formats.agent_evals import read_agent_evals
from evalkit.suites.formats.vally import parse_duration, read_vally
from evalkit.intake.lint import import_suite, lint_suite, load_suite, write_native_suite
from evalkit.suites.suite import render_prompt

AGENT_EVALS = {
    "cases": [
        {"id": "pdf-basic", "set": "capability", "prompt": "convert report.pdf to markdown", "expect": "## ",
         "match": "contains"},
        {"id": "pdf-german", "set": "regression", "prompt": "extract text from Bescheid.pdf",
         "expect": "Grüße|Straße", "match": "regex"},
        {"id": "pdf-title", "set": "regression", "prompt": "give the title only", "expect": " Annual Report ",
         "match": "exact"},
        {"id": "pdf-default", "prompt": "say ok", "expect": "ok"},
    ]
}

VALLY = """\
name: outside-in-tdd
description: Checks that the feature is driven from an observable business behaviour.
type: capability
defaults:
  timeout: 3m
  runs: 3
stimuli:
  - name: Drive a business rule from the outside
    prompt: |
      Our online ordering application must apply a loyalty discount to the
      payable total. Implement it.
    graders:
      - type: prompt
    rubric:
      - Starts from a test that crosses the service's visible boundary.
      - Ties every production change to a test that failed before it.
  - name: Rename a variable
    prompt: Rename the variable x to total in this function.
    graders:
      - type: prompt
    rubric:
      - Renames the variable without adding tests it does not need.
    tags: { intent: non-activation }
  - name: Rename a variable
    prompt: Rename y to count.
    graders:
      - type: contains
        value: count
"""


def write(p: Path, text: str) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    return p


def test_agent_evals_mapping_keeps_that_harness_semantics(tmp_path):
    f = write(tmp_path / "pdf-skill" / "evals.json", json.dumps(AGENT_EVALS, ensure_ascii=False, indent=2))
    imp = read_agent_evals(f)
    assert imp.format == "agent-evals" and imp.name == "pdf-skill"
    by_id = {c["id"]: c for _, _, c in imp.cases}
    assert by_id["pdf-basic"]["checks"] == [{"kind": "contains", "value": "## ", "case_fold": True}]
    assert by_id["pdf-german"]["checks"] == [{"kind": "regex", "pattern": "Grüße|Straße", "flags": "i"}]
    assert by_id["pdf-title"]["checks"] == [{"kind": "exact", "value": "Annual Report", "trim": True,
                                             "case_fold": True}]
    assert by_id["pdf-default"]["checks"][0]["kind"] == "contains"  # match defaults to contains
    assert by_id["pdf-default"]["set"] == "capability"
    assert by_id["pdf-german"]["set"] == "regression" and by_id["pdf-german"]["input"].startswith("extract")
    lines = [line for line, _, _ in imp.cases]
    assert lines == sorted(lines) and lines[0] > 1  # each case points at its line in the file


def test_import_agent_evals_writes_native_suite_that_lints_clean(tmp_path):
    f = write(tmp_path / "pdf-skill" / "evals.json", json.dumps(AGENT_EVALS, indent=2))
    dest = import_suite(f, tmp_path / "evals" / "pdf-skill")
    report = lint_suite(dest)
    assert report.ok, [str(e) for e in report.errors]
    assert not lint_suite(dest, strict=True).errors
    suite = load_suite(dest)
    assert len(suite.cases) == 4 and suite.config.mode == "completion"
    assert suite.config.generator.base_url is None and suite.config.generator.model == "gemma-3-270m"
    assert suite.config.judge.model != suite.config.generator.model
    assert (dest / ".gitignore").read_text() == "runs/\n"
    assert render_prompt(suite.config, suite.cases[3], suite.config.arm("baseline")) == "say ok\n"


def test_load_suite_reads_agent_evals_file_directly(tmp_path):
    f = write(tmp_path / "s" / "evals.json", json.dumps(AGENT_EVALS))
    suite = load_suite(f)
    assert [c.id for c in suite.cases] == ["pdf-basic", "pdf-german", "pdf-title", "pdf-default"]
    assert suite.cases[1].checks[0].options["pattern"] == "Grüße|Straße"
    # a folder holding only evals.json is read the same way
    assert len(load_suite(f.parent).cases) == 4


def test_agent_evals_wildcard_expectation_warns(tmp_path):
    f = write(tmp_path / "evals.json", json.dumps({"cases": [{"id": "a", "prompt": "p", "expect": "a*b"}]}))
    report = lint_suite(f)
    assert report.ok and any("wildcards" in w.message for w in report.warnings)


def test_agent_evals_bad_inputs_name_the_place(tmp_path):
    f = write(tmp_path / "evals.json", '{"cases": [\n {"id": "a", "prompt": "p"},\n'
                                       ' {"id": "b", "prompt": "p", "expect": "x", "set": 7}\n]}')
    with pytest.raises(InputError) as ei:
        read_agent_evals(f)
    text = str(ei.value)
    assert f"{f}:2 ($.cases[0].expect)" in text and f"{f}:3 ($.cases[1].set)" in text
    write(f, '{"tests": []}')
    with pytest.raises(InputError, match="cases"):
        read_agent_evals(f)


def test_agent_evals_other_sets_import_with_gate_none(tmp_path):
    """A set other than capability and regression (agent-evals accepts any) imports as
    that set: `evalkit import` lists it with gate none, lint warns, and the native suite
    and the evals.json read directly agree."""
    from click.testing import CliRunner

    from evalkit._cli.main import main

    doc = {"cases": AGENT_EVALS["cases"][:2] + [
        {"id": "explore-1", "set": "exploratory", "prompt": "p", "expect": "x"},
        {"id": "explore-2", "set": "Edge Cases", "prompt": "p", "expect": "y"}]}
    f = write(tmp_path / "evals.json", json.dumps(doc))
    res = CliRunner().invoke(main, ["import", str(f), "--to", str(tmp_path / "suite")])
    assert res.exit_code == 0, res.output
    assert "set capability: 1 case(s), gate pass@k" in res.output
    assert "set regression: 1 case(s), gate pass^k" in res.output
    assert "set exploratory: 1 case(s), gate none" in res.output
    assert "set edge-cases: 1 case(s), gate none" in res.output and "imported as 'edge-cases'" in res.output
    native = {c.id: c.set for c in load_suite(tmp_path / "suite").cases}
    assert native == {c.id: c.set for c in load_suite(f).cases}
    assert native["explore-1"] == "exploratory" and native["explore-2"] == "edge-cases"
    report = lint_suite(tmp_path / "suite")
    assert report.ok and any("gate \"none\"" in w.message and w.json_path == "$.set" for w in report.warnings)


def test_vally_mapping(tmp_path):
    f = write(tmp_path / "tests" / "skills" / "outside-in-tdd" / "eval.yaml", VALLY)
    imp = read_vally(f)
    assert imp.name == "outside-in-tdd" and imp.config["k"] == 3 and imp.config["timeout_s"] == 180.0
    cases = [c for _, _, c in imp.cases]
    assert [c["id"] for c in cases] == ["drive-a-business-rule-from-the-outside", "rename-a-variable",
                                        "rename-a-variable-2"]
    assert cases[0]["expected"] == {"rubric": [
        "Starts from a test that crosses the service's visible boundary.",
        "Ties every production change to a test that failed before it."]}
    assert cases[1]["intent"] == "non-activation" and "non-activation" in cases[1]["tags"]
    assert cases[2]["checks"] == [{"kind": "contains", "value": "count"}]
    assert [line for line, _, _ in imp.cases] == [8, 17, 24]


def test_import_vally_writes_native_suite_that_lints_clean(tmp_path):
    f = write(tmp_path / "eval.yaml", VALLY)
    skill = write(tmp_path / "SKILL.md", "Drive every change from a failing outside-in test.\n\n")
    dest = import_suite(f, tmp_path / "evals" / "tdd", guidance=skill)
    report = lint_suite(dest)
    assert report.ok, [str(e) for e in report.errors]
    suite = load_suite(dest)
    assert suite.name == "outside-in-tdd" and suite.config.k == 3 and suite.config.timeout_s == 180.0
    assert [a.name for a in suite.config.arms] == ["baseline", "skilled"]
    assert suite.cases[0].judged and suite.cases[0].rubric.startswith("- Starts from a test")
    assert suite.cases[1].intent == "non-activation"
    assert suite.rubric_files == ("judge/rubric-v1.md",) and suite.prompt_files == ("judge/prompt-v1.md",)
    base = render_prompt(suite.config, suite.cases[2], suite.config.arm("baseline"))
    skilled = render_prompt(suite.config, suite.cases[2], suite.config.arm("skilled"))
    assert skilled == "Drive every change from a failing outside-in test.\n\n" + base


def test_load_suite_reads_vally_directly_with_config_section(tmp_path):
    text = VALLY.replace("defaults:", "config:").replace("3m", "90s")
    suite = load_suite(write(tmp_path / "eval.yaml", text))
    assert suite.config.timeout_s == 90.0 and len(suite.cases) == 3


@pytest.mark.parametrize("value,seconds", [("3m", 180.0), ("90s", 90.0), ("1h", 3600.0), ("500ms", 0.5),
                                           (45, 45.0), ("2.5m", 150.0)])
def test_parse_duration(value, seconds):
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("bad", ["3 minutes", "-1m", "0s", True, None])
def test_parse_duration_refuses(bad):
    assert parse_duration(bad) is None


def test_vally_bad_inputs_name_the_line(tmp_path):
    f = write(tmp_path / "eval.yaml", VALLY.replace("timeout: 3m", "timeout: soon"))
    with pytest.raises(InputError) as ei:
        read_vally(f)
    assert f"{f}:5 ($.defaults.timeout)" in str(ei.value)
    f = write(tmp_path / "eval.yaml", VALLY.replace("      - type: prompt\n    rubric:\n      - Renames", "      - type: prompt\n    xrubric:\n      - Renames"))
    report = lint_suite(f)
    assert any("no rubric" in e.message and e.line == 20 for e in report.errors)
    assert any("unknown key 'xrubric'" in w.message for w in report.warnings)


def test_vally_stimulus_with_no_grader_and_no_rubric_is_an_error(tmp_path):
    f = write(tmp_path / "eval.yaml", "name: x\nstimuli:\n  - name: lonely\n    prompt: hi\n")
    report = lint_suite(f)
    assert any("case 'lonely'" in e.message and "neither a check nor a rubric" in e.message and e.line == 3
               for e in report.errors)


def test_vally_yaml_aliases_and_malformed_yaml_refused(tmp_path):
    f = write(tmp_path / "eval.yaml", "name: x\nbase: &b {prompt: hi}\nstimuli:\n  - *b\n")
    with pytest.raises(InputError, match="aliases"):
        read_vally(f)
    write(f, "name: [unclosed\n")
    with pytest.raises(InputError, match="malformed YAML"):
        read_vally(f)


def test_import_refuses_non_empty_destination_and_leaves_it_untouched(tmp_path):
    f = write(tmp_path / "evals.json", json.dumps(AGENT_EVALS))
    dest = tmp_path / "evals" / "taken"
    write(dest / "keep.txt", "mine")
    with pytest.raises(InputError, match="not empty"):
        import_suite(f, dest)
    assert [p.name for p in dest.iterdir()] == ["keep.txt"]


def test_write_native_suite_refuses_an_invalid_suite_and_leaves_nothing(tmp_path):
    dest = tmp_path / "evals" / "x"
    cfg = json.loads((Path(__file__).resolve().parents[1] / "data" / "factual" / "config.json").read_text())
    cfg["arms"] = [{"name": "baseline"}]
    with pytest.raises(InputError) as ei:
        write_native_suite(dest, cfg, [{"id": "a", "input": "x", "tags": ["t"]}], {"prompt.txt": "${input}"})
    assert "neither a check nor a rubric" in str(ei.value) and str(dest / "cases.jsonl") in str(ei.value)
    assert not dest.exists() and list((tmp_path / "evals").iterdir()) == []
    out = write_native_suite(dest, cfg, [{"id": "a", "input": "x", "expected": "y", "tags": ["t"]}],
                             {"prompt.txt": "${guidance}${input}"})
    assert load_suite(out).cases[0].checks[0].options == {"value": "y", "case_fold": True}


def test_unknown_foreign_keys_warn_and_fail_under_strict(tmp_path):
    f = write(tmp_path / "eval.yaml", VALLY.replace("type: capability", "type: capability\nowner: team-a"))
    assert lint_suite(f).ok
    report = lint_suite(f, strict=True)
    assert any(e.json_path == "$.owner" and e.line == 4 and "unknown key" in e.message for e in report.errors)


def _stimuli(*names: str) -> str:
    return "name: t\nstimuli:\n" + "".join(
        f'  - name: "{n}"\n    prompt: "p{i}"\n    graders: [{{type: contains, value: "x"}}]\n'
        for i, n in enumerate(names))


@pytest.mark.parametrize("names, ids", [
    (("a", "a", "a-2"), ["a", "a-3", "a-2"]),  # the renamed duplicate skips the later stimulus' own id
    (("a-2", "a", "a"), ["a-2", "a", "a-3"]),
    (("a", "a", "a", "a-3"), ["a", "a-2", "a-4", "a-3"]),
    (("A B", "a-b", "a b!"), ["a-b", "a-b-2", "a-b-3"]),  # names that slugify alike
])
def test_vally_duplicate_names_get_unique_stable_ids(tmp_path, names, ids):
    f = write(tmp_path / "eval.yaml", _stimuli(*names))
    got = [c["id"] for _, _, c in read_vally(f).cases]
    assert got == ids and len(set(got)) == len(got)
    assert [c["id"] for _, _, c in read_vally(f).cases] == got  # the same on every import
    assert [c["input"] for _, _, c in read_vally(f).cases] == [f"p{i}" for i in range(len(names))]
    dest = import_suite(f, tmp_path / "evals" / "t")  # used to be refused: duplicate id
    assert [c.id for c in load_suite(dest).cases] == ids


def test_a_run_of_an_evals_json_suite_finds_its_suite_and_case_sets(tmp_path):
    # Review finding: the suite lookup wanted cases.jsonl, so every case of an
    # evals.json suite counted as capability (gated on pass@k, not pass^k).
    # A run of evalkit 0.1 kept no case table: its sets are read from that suite.
    from evalkit.runfolder.runload import case_table
    from evalkit.runfolder.runs import find_suite_dir

    suite = tmp_path / "pdf-skill"
    write(suite / "evals.json", json.dumps(AGENT_EVALS))
    run = suite / "runs" / "20261130-000000"
    run.mkdir(parents=True)
    ids = [c["id"] for c in AGENT_EVALS["cases"]]
    write(run / "config.json", json.dumps({"suite": "elsewhere/pdf-skill", "arms": ["baseline"], "k": 1, "cases": ids}))
    assert find_suite_dir(run, "elsewhere/pdf-skill") == suite
    table = case_table(run)
    sets = {c.id: c.set for c in table.cases}
    assert sets["pdf-german"] == "regression" and sets["pdf-basic"] == "capability"
    assert "evals.json" in table.source


def test_agent_evals_rules_match_evalkit_grade(tmp_path):
    # Review finding: the importer and `evalkit grade --eval-file` disagreed on the same
    # file (case of set/match, an empty match, a missing prompt, a missing set).
    from evalkit.conclusions.agentevals import load_eval_file

    doc = {"cases": [{"id": "a", "set": "Regression", "prompt": "p", "expect": "x+", "match": "Regex"},
                     {"id": "b", "set": "capability", "expect": "ok", "match": ""}]}
    f = write(tmp_path / "s" / "evals.json", json.dumps(doc))
    graded = {c.id: (c.set, c.match, c.prompt) for c in load_eval_file(f)}
    imported = {c["id"]: c for _, _, c in read_agent_evals(f).cases}
    assert graded == {"a": ("regression", "regex", "p"), "b": ("capability", "contains", "")}
    assert imported["a"]["set"] == "regression" and imported["a"]["checks"][0]["kind"] == "regex"
    assert imported["b"]["input"] == "" and imported["b"]["checks"][0]["kind"] == "contains"
    no_set = write(tmp_path / "t" / "evals.json", json.dumps({"cases": [{"id": "c", "prompt": "p", "expect": "y"}]}))
    warnings = [w.message for w in read_agent_evals(no_set).warnings]
    assert any(m.startswith("no set: imported as capability") for m in warnings)


def test_a_foreign_suite_file_found_in_a_folder_must_resolve_inside_it(tmp_path):
    import os

    f = write(tmp_path / "elsewhere" / "evals.json", json.dumps(AGENT_EVALS))
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "evals.json").symlink_to(f)
    report = lint_suite(tmp_path / "s")
    assert any(x.path == str(tmp_path / "s" / "evals.json") and "outside the suite folder" in x.message
               for x in report.errors), [str(x) for x in report.errors]
    (tmp_path / "s" / "evals.json").unlink()
    os.mkfifo(tmp_path / "s" / "eval.yaml")
    report = lint_suite(tmp_path / "s")
    assert [x.message for x in report.errors] == ["not a regular file: it is a FIFO (named pipe)"]
    with pytest.raises(InputError, match="not a regular file: it is a FIFO"):
        import_suite(tmp_path / "s" / "eval.yaml", tmp_path / "native")
    assert not (tmp_path / "native").exists()


def test_agent_evals_contains_is_kept_byte_for_byte_on_import_and_in_grade_eval_file(tmp_path):
    # seed 000's own fixture: `"expect": "## "` is a Markdown heading, not any run of '#'
    from evalkit.checking.graders import GRADERS
    from evalkit.conclusions.agentevals import load_eval_file, match_sample

    f = write(tmp_path / "s" / "evals.json", json.dumps({"cases": AGENT_EVALS["cases"][:3]}))
    [basic] = [c for c in load_suite(f).cases if c.id == "pdf-basic"]
    check = basic.checks[0]
    assert check.options["value"] == "## "
    assert not GRADERS["contains"]("###x", **check.options).passed
    assert GRADERS["contains"]("# Report\n## Intro", **check.options).passed
    [graded] = [c for c in load_eval_file(f) if c.id == "pdf-basic"]
    assert not match_sample("###x", graded) and match_sample("# Report\n## Intro", graded)
