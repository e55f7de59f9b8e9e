"""The seeds' rubric and judge findings in `evalkit lint`: a rubric with no scored
few-shot example (MEDIUM), a judged case a deterministic check could decide (LOW, naming
the check), a judge from the generator's model family (a warning; the same model stays an
error), each lint finding with its HIGH / MEDIUM / LOW; silent on data/factual and on the
suite `evalkit init` scaffolds."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from evalkit._cli.main import main
from evalkit.foundations.findings import Finding
from evalkit.checking.judge import deterministic_alternative, model_family, rubric_examples, same_family
from evalkit.intake.lint import lint_suite
from evalkit.suites.suite import scaffold_suite
from test_suite import BASE_CONFIG, write_suite

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = "5 best, 1 worst\n\nExample (score 5): Madrid.\nExample (score 2): Barcelona, probably.\n"
OPEN = [
    {"id": "a", "input": "x", "expected": "y", "tags": ["golden", "adversarial"]},
    {"id": "essay", "input": "Explain tides", "tags": ["open"],
     "expected": {"rubric": "A clear explanation of tides for a child, with the moon's pull and one example"}},
]


def _ours(report):
    """The findings this feature adds, as (severity, json path or file name, message)."""
    keys = ("few-shot", "deterministic", "model family")
    return [f for f in report.findings if any(k in f.message for k in keys)]


def test_rubric_without_scored_examples_is_medium_and_with_two_is_silent(tmp_path):
    root = write_suite(tmp_path / "u", cases=OPEN)
    found = _ours(lint_suite(root))
    assert [(f.level, f.severity, Path(f.path).name) for f in found] == [("warning", "MEDIUM", "rubric-v1.md")]
    assert "Example (score 5)" in found[0].message
    (root / "judge" / "rubric-v2.md").write_text(EXAMPLES)  # the highest version is the one the judge uses
    assert _ours(lint_suite(root)) == []
    assert rubric_examples(EXAMPLES) == [5, 2] and rubric_examples("5: great\n1: bad") == []
    assert rubric_examples("### Example: score 4\n> example, SCORE 1 - off task") == [4, 1]


def test_judged_cases_a_program_could_decide_are_low_naming_the_check(tmp_path):
    cases = OPEN + [
        {"id": "num", "input": "6*7", "expected": {"rubric": "The answer is 42"}, "tags": ["open"]},
        {"id": "shape", "input": "user", "expected": {"rubric": "Returns JSON with a name field"}, "tags": ["open"]},
        {"id": "word", "input": "France", "expected": {"rubric": "Mentions Paris"}, "tags": ["open"]},
    ]
    root = write_suite(tmp_path / "u", cases=cases)
    (root / "judge" / "rubric-v1.md").write_text(EXAMPLES)
    found = {f.line: f for f in _ours(lint_suite(root))}
    assert sorted(found) == [3, 4, 5]  # not the open-ended essay on line 2
    assert all(f.severity == "LOW" and f.json_path == "$.expected.rubric" for f in found.values())
    assert "'regex' check" in found[3].message and "42" in found[3].message
    assert "'json_schema' check" in found[4].message
    assert "'contains' check" in found[5].message and "'Paris'" in found[5].message
    assert deterministic_alternative("Accurate and polite") is None  # a quality, not an answer


def test_a_judge_of_the_generators_family_is_a_warning_and_the_same_model_an_error(tmp_path):
    for gen, judge in (("gpt-4o", "gpt-4o-mini"), ("claude-3-5-sonnet-latest", "claude-3-haiku"),
                       ("openai/gpt-4o-2024-08-06", "chatgpt-4o-latest")):
        cfg = dict(BASE_CONFIG, generator=dict(BASE_CONFIG["generator"], model=gen),
                   judge=dict(BASE_CONFIG["judge"], model=judge))
        report = lint_suite(write_suite(tmp_path / gen.replace("/", "_"), cfg, OPEN))
        fam = [f for f in report.warnings if "model family" in f.message]
        assert report.ok and len(fam) == 1 and fam[0].json_path == "$.judge.model" and fam[0].severity == "MEDIUM"
    cfg = dict(BASE_CONFIG, generator=dict(BASE_CONFIG["generator"], model="gpt-4o"),
               judge=dict(BASE_CONFIG["judge"], model="gpt-4o"))
    report = lint_suite(write_suite(tmp_path / "same", cfg, OPEN))
    assert any(f.json_path == "$.judge.model" and f.severity == "HIGH" for f in report.errors)
    assert not any("model family" in f.message for f in report.findings)
    cfg = dict(BASE_CONFIG, generator=dict(BASE_CONFIG["generator"], model="gpt-4o"),
               judge=dict(BASE_CONFIG["judge"], model="claude-3-5-sonnet"))
    assert not any("model family" in f.message for f in lint_suite(write_suite(tmp_path / "x", cfg, OPEN)).findings)
    assert model_family("gpt-4o-mini") == model_family("gpt-4o") != model_family("gpt-4")
    assert not same_family("judge-model", "gen-model") and not same_family("gpt-4o", "GPT-4o")


def test_lint_prints_and_records_each_findings_weight(tmp_path):
    root = write_suite(tmp_path / "u", cases=OPEN + [
        {"id": "num", "input": "6*7", "expected": {"rubric": "The answer is 42"}, "tags": ["open"]}])
    r = CliRunner().invoke(main, ["lint", str(root)])
    assert r.exit_code == 0, r.output
    assert "few-shot example" in r.output and "[MEDIUM]" in r.output and "'regex' check" in r.output
    assert "[LOW]" in r.output and "warning(s) (" in r.output and re.search(r"\b\d+ LOW\)", r.output)
    low = next(f for f in lint_suite(root).warnings if f.severity == "LOW")
    assert Finding.from_json(json.loads(json.dumps(low.to_json()))) == low and low.to_json()["severity"] == "LOW"
    assert Finding("HIGH", "x").severity == "HIGH" and "severity" not in Finding("HIGH", "x").to_json()


def test_silent_on_data_factual_and_the_init_scaffold(tmp_path):
    assert _ours(lint_suite(ROOT / "data" / "factual")) == []
    dest = scaffold_suite(tmp_path / "evals" / "mine")
    assert rubric_examples((dest / "judge" / "rubric-v1.md").read_text()) == [5, 2]
    judged = [json.loads(ln) for ln in (dest / "cases.jsonl").read_text().splitlines()]
    judged.append({"id": "open", "input": "Explain tides", "tags": ["open"],
                   "expected": {"rubric": "A clear explanation of tides for a child, with the moon's pull"}})
    (dest / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in judged))
    assert _ours(lint_suite(dest)) == []  # the scaffolded rubric has its two scored examples


def test_judged_estimate_is_judge_or_corrected(tmp_path):
    from evalkit.suites.reader import load_suite

    bad = lint_suite(write_suite(tmp_path / "bad", dict(BASE_CONFIG, judged_estimate="human"), OPEN))
    assert any(f.json_path == "$.judged_estimate" and '"human"' in f.message for f in bad.errors)
    good = write_suite(tmp_path / "good", dict(BASE_CONFIG, judged_estimate="corrected"), OPEN)
    assert load_suite(good).config.judged_estimate == "corrected"
    assert load_suite(write_suite(tmp_path / "plain", BASE_CONFIG, OPEN)).config.judged_estimate == "judge"
