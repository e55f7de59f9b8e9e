"""The evaluation guide (issue 32, item 8): `evalkit dataset guide` written from a
confirmed scope and a real suite (one `dataset to-suite` built, and the factual example),
each metric with the reason the scope gives, the gaps where the scope names what the
suite does not measure, and the refusal of an unconfirmed scope."""
from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from test_dataset import SOURCE_YAML, Workspace, source_pairs
from test_scope import ANSWERS, scope_file

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    """A confirmed scope, a 10-pair dataset from it, its suite, and a reviewed sample."""
    monkeypatch.chdir(tmp_path)
    ws = Workspace(tmp_path)
    scope_file(ws)
    ws.write("src.yaml", SOURCE_YAML.format(pairs=source_pairs(2)))
    r = ws.cli("dataset", "new", "src.yaml", "--json", "d.json", "--csv", "d.csv", "--scope", "scope.json")
    assert r.exit_code == 0, r.stderr
    ws.write("ctx/manual.txt", "Hold the red button for five seconds.")
    r = ws.cli("dataset", "to-suite", "--json", "d.json", "--csv", "d.csv", "--out", "evals/fs", "--context-dir", "ctx")
    assert r.exit_code == 0, r.stderr
    r = ws.cli("dataset", "sample", "--json", "d.json", "--csv", "d.csv", "--out", "sheet.csv", "--size", "5")
    assert r.exit_code == 0, r.stderr
    return ws


def guide(ws: Workspace, *args: str):
    return ws.cli("dataset", "guide", "--scope", "scope.json", "--out", "guide.md", *args)


def test_the_guide_is_derived_from_the_scope_and_the_suite(ws):
    r = guide(ws, "--suite", "evals/fs", "--json", "d.json", "--csv", "d.csv", "--review", "sheet.csv")
    assert r.exit_code == 0, r.stderr
    text = (ws.root / "guide.md").read_text()
    # the scope, area by area, the unknowns with what they cost
    assert "# Evaluation guide: Field service assistant" in text
    assert "| user_populations | Field technician; Dispatcher; New hire |" in text
    assert "| prohibited_content | unknown |" in text and "| revisit | unknown |" in text
    assert "- **prohibited_content**: safety pairs cannot be aimed" in text and "Revisit: unknown." in text
    # the metrics, counted from the suite's own files
    cases = [json.loads(x) for x in (ws.root / "evals/fs/cases.jsonl").read_text().splitlines()]
    kinds = Counter(ch["kind"] for c in cases for ch in c.get("checks", []))
    config = json.loads((ws.root / "evals/fs/config.json").read_text())
    assert kinds["activation"] and kinds["refusal"] and kinds["grounding"]
    assert f"**Tool use** (activation on {kinds['activation']} case(s)): the scope names the tools lookup_job" in text
    assert f"**Groundedness** (grounding on {kinds['grounding']} case(s)): answers must rest on manual.txt" in text
    assert f"**Refusal** (refusal on {kinds['refusal']} case(s)): the system must refuse: Refuse to bypass" in text
    k = config.get("k", 5)
    assert f"k = {k} samples per case: pass@{k}" in text
    assert f"**Judged sample pass rate** on {len(cases)} case(s)" in text and "judge/rubric-v1.md" in text
    assert "allow_uncalibrated_judge" not in config and "require_calibration" not in config.get("judge", {})
    assert 'flagged "judge not calibrated (n of 20 labels)"' in text  # the default judge trust (issue 41)
    assert "**Format**: the scope requires Plain text, at most five numbered steps; no deterministic check" in text
    assert "Gap" not in text
    assert "The evaluation runs on every pull request and nightly" in text
    # the gate as the suite decides it: the seed's gate unless it asks for the noise guard (issue 41)
    guarded = (config.get("gate") or {}).get("require_significance", (config.get("gate") or {}).get("alpha", 1) < 1)
    assert ("when beyond run-to-run noise at alpha" if guarded else "as observed (the seed's gate;") in text
    assert "Unsafe repair advice, Leaking customer addresses" in text
    # curation notes from the dataset and the review's outcome
    assert "- 10 pairs, version 1.0.0" in text and "easy 2, grounding 2, hard 2, negative 2, safety 2" in text
    assert "Sample review: 5 pair(s): keep 0, revise 0, drop 0. Review incomplete: 5 with no verdict" in text
    # review boxes unchecked: reviewers tick them themselves
    assert "- [ ] Content reviewed by Service lead" in text and "[x]" not in text.lower()
    r = guide(ws, "--suite", "evals/fs")
    assert r.exit_code == 2 and "refusing to overwrite" in r.stderr
    assert guide(ws, "--suite", "evals/fs", "--force").exit_code == 0
    assert "No dataset was given" in (ws.root / "guide.md").read_text()


def test_what_the_scope_names_and_the_suite_does_not_measure_is_a_gap(ws):
    shutil.copytree(REPO / "data" / "factual", ws.root / "factual")
    r = guide(ws, "--suite", "factual")
    assert r.exit_code == 0, r.stderr
    text = (ws.root / "guide.md").read_text()
    assert "**Gap, tool use**: the scope names the tools lookup_job but no case checks a tool call." in text
    assert "**Gap, groundedness**: the scope names the grounding sources manual.txt" in text
    assert "**Gap, refusal**" in text
    cases = [json.loads(x) for x in (ws.root / "factual/cases.jsonl").read_text().splitlines() if x.strip()]
    contains = sum(ch["kind"] == "contains" for c in cases for ch in c.get("checks", []))
    assert f"contains on {contains} case(s)" in text and "the scope requires: Plain text" in text


def test_an_unconfirmed_scope_writes_no_guide(ws):
    scope_file(ws, confirm=False, leave_out=("reviewers",))
    r = guide(ws, "--suite", "evals/fs")
    assert r.exit_code == 2 and "scope.json" in r.stderr and "reviewers" in r.stderr
    assert not (ws.root / "guide.md").exists()
    assert set(ANSWERS) >= {"reviewers", "revisit"}
