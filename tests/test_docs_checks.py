"""docs/formats.md documents every check kind and every option of each (issue 33): the
kinds and options are `evalkit.foundations.checks`' own, so a kind or option added there without a
line in the docs fails here."""

from __future__ import annotations

import re
from pathlib import Path

from evalkit.foundations.checks import CHECK_KINDS, CHECK_OPTIONS

FORMATS = Path(__file__).resolve().parents[1] / "docs" / "formats.md"


def _checks_section() -> dict[str, str]:
    text = FORMATS.read_text(encoding="utf-8")
    start = text.index("\n## Checks (`cases.jsonl` -> `checks[]`)")
    end = text.index("\n## ", start + 1)
    section = text[start:end]
    parts = re.split(r"^### `([a-z_]+)`\n", section, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_every_check_kind_has_its_subsection_with_an_example_and_a_failure_reason():
    by_kind = _checks_section()
    assert set(CHECK_KINDS) <= set(by_kind), f"undocumented kinds: {set(CHECK_KINDS) - set(by_kind)}"
    assert set(by_kind) <= set(CHECK_KINDS), f"documented kinds that do not exist: {set(by_kind) - set(CHECK_KINDS)}"
    for kind, body in by_kind.items():
        assert f'"kind": "{kind}"' in body, f"{kind}: no example"
        assert "Fails with:" in body, f"{kind}: no failure reason shown"


def test_every_option_of_every_kind_is_documented_in_its_subsection():
    by_kind = _checks_section()
    missing = {
        kind: sorted(o for o in options if f"`{o}`" not in by_kind.get(kind, ""))
        for kind, options in CHECK_OPTIONS.items()
    }
    assert not {k: v for k, v in missing.items() if v}, missing


def test_the_examples_are_valid_checks(tmp_path):
    # each example, as a case's only check, passes lint's validation of its kind and options
    import json

    from evalkit.intake.lint import lint_suite
    from evalkit.suites.suite import scaffold_suite

    suite = tmp_path / "unit"
    scaffold_suite(suite)
    (suite / "scorers" / "word_count.py").write_text("def score(output, case):\n    return True\n")
    lines = []
    for kind, body in _checks_section().items():
        if kind == "state":  # needs input.state and a unit that calls tools: test_conversations lints it
            continue
        example = json.loads(re.search(r"```json\n(.*?)\n```", body, flags=re.S).group(1))
        lines.append({"id": f"doc-{kind.replace('_', '-')}", "input": "x", "tags": ["docs"], "expected": "x",
                      "context": "1875", "checks": [example]})
    (suite / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in lines))
    report = lint_suite(suite)
    assert not report.errors, [f"{e.json_path}: {e.message}" for e in report.errors]
