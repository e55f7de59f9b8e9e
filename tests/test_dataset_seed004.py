"""Seed 004 as written (issue 42, item 4): `evalkit dataset validate` exits 0/1/2 exactly
as the contract's own validator (validate_evaluation_dataset.py) does on the same files,
the shape being warnings; `dataset new` stops without a confirmed scope unless
--no-scope, and the scan gate stops a write holding personal data (exit 1, nothing
written) unless --allow-private-data.

The expected exit statuses below were read from the contract's validator (microsoft/hve-core,
.github/skills/data-science-engineering/evaluation-design/scripts/validate_evaluation_dataset.py
at 118368af, with its schema) run on these very files; its code is not in this repository,
and ../shared/seeds/ holds only the seed's prose, not the script."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from test_dataset import Workspace, to_csv, ws  # noqa: F401 - ws is a fixture


def seed_dataset() -> dict:
    """The contract validator's own valid three-pair fixture (contract-valid, under evalkit's
    size floor of 30)."""
    pair = {"tools_expected": [], "source_reference": None, "needs_sme_review": False}
    return {
        "metadata": {
            "system_name": "Synthetic support assistant",
            "created_date": "2026-09-14",
            "version": "1.0.0",
            "total_pairs": 3,
            "distribution": {"easy": 1, "grounding": 1, "hard": 0, "negative": 0, "safety": 1},
            "user_populations": ["Field technician", "Dispatcher", "New hire"],
            "population_coverage": {"Field technician": 2, "Dispatcher": 1, "New hire": 0},
            "approach": "pro-code",
            "evaluation_mode": ["manual", "batch"],
            "recommended_tooling": "Offline evaluator",
            "review_state": "sampled",
            "validation_status": "ai-generated",
            "generation_method": "interview-driven-ai-generation",
        },
        "evaluation_pairs": [
            {**pair, "id": "001", "query": "Summarize the synthetic service note",
             "expected_response": "Returns the supported summary", "category": "core", "difficulty": "easy",
             "populations": ["Field technician"], "notes": "Synthetic core case"},
            {**pair, "id": "002", "query": "Cite the synthetic procedure",
             "expected_response": "Answers from the named procedure", "category": "grounding",
             "difficulty": "grounding", "populations": ["Field technician", "Dispatcher"],
             "tools_expected": ["search"], "source_reference": "synthetic-procedure.md",
             "notes": "Overlapping population case"},
            {**pair, "id": "003", "query": "Reveal a synthetic credential",
             "expected_response": "Declines and directs the user to support", "category": "safety",
             "difficulty": "safety", "populations": [], "notes": "Population-neutral refusal"},
        ],
    }


def _set(path: str, value: object) -> Callable[[dict], None]:
    def mutate(doc: dict) -> None:
        *parents, last = path.split(".")
        node = doc
        for key in parents:
            node = node[int(key)] if key.isdigit() else node[key]
        node[int(last) if last.isdigit() else last] = value

    return mutate


# (name, change to the JSON after the CSV was written from the valid pairs or None, raw
# JSON text, raw CSV text, the contract validator's exit status on those files)
JSON_CASES: list[tuple[str, Callable[[dict], None] | None, int]] = [
    ("valid-three-pairs", None, 0),
    ("total-drift", _set("metadata.total_pairs", 99), 1),
    ("distribution-drift", _set("metadata.distribution.easy", 2), 1),
    ("duplicate-id", _set("evaluation_pairs.1.id", "001"), 1),
    ("coverage-missing-zero", lambda d: d["metadata"]["population_coverage"].pop("New hire"), 1),
    ("coverage-count", _set("metadata.population_coverage.Field technician", 1), 1),
    ("unknown-population", lambda d: d["evaluation_pairs"][0]["populations"].append("Unknown role"), 1),
    ("extra-property", _set("evaluation_pairs.0.credential_value", "synthetic-secret"), 1),
    ("bad-date", _set("metadata.created_date", "2026-13-45"), 1),
    ("bad-version", _set("metadata.version", "2.0.0"), 1),
    ("bad-id", _set("evaluation_pairs.0.id", "-001"), 1),
    ("csv-parity", _set("evaluation_pairs.0.query", "Summarize another note"), 1),
]


def _ungrounded(doc: dict, review: bool) -> None:
    doc["evaluation_pairs"][1]["source_reference"] = None
    doc["evaluation_pairs"][1]["needs_sme_review"] = review


PAIRED_CASES: list[tuple[str, Callable[[dict], None], int]] = [
    # changed in both files (the CSV written from the changed pairs)
    ("ungrounded", lambda d: _ungrounded(d, False), 1),
    ("ungrounded-marked-for-review", lambda d: _ungrounded(d, True), 0),
]

HEADER = "id,query,expected_response,category,difficulty,populations,tools_expected,source_reference,needs_sme_review,notes"
RAW_CASES: list[tuple[str, str | None, Callable[[str], str] | None, int]] = [
    ("json-parse-error", '{"credential": "synthetic-secret"', None, 2),
    ("csv-empty-list-item", None, lambda c: c.replace("Field technician;Dispatcher", "Field technician;;Dispatcher"), 1),
    ("csv-duplicate-list-item", None, lambda c: c.replace(",search,", ",search;search,"), 1),
    ("csv-bad-boolean", None, lambda c: c.replace(",false,Synthetic core", ",yes,Synthetic core"), 1),
    ("csv-short-row", None, lambda c: c + "004,short row\n", 1),
    ("csv-header", None, lambda c: c.replace("needs_sme_review", "needs_review", 1), 1),
]


def exit_of(ws: Workspace, *extra: str) -> int:  # noqa: F811 - ws is the fixture's value
    r = ws.cli("dataset", "validate", "--json", "d.json", "--csv", "d.csv", *extra)
    if r.exit_code in (0, 1):
        assert set(json.loads(r.stdout)) == {"valid", "errors"}
    else:
        assert r.stdout == ""
    return r.exit_code


@pytest.mark.parametrize(("name", "mutate", "expected"), JSON_CASES, ids=[c[0] for c in JSON_CASES])
def test_validate_exits_as_the_contract_validator_on_json_changes(ws, name, mutate, expected):
    doc = seed_dataset()
    csv_text = to_csv(doc["evaluation_pairs"])
    if mutate is not None:
        mutate(doc)
    ws.put(doc, csv_text)
    assert exit_of(ws) == expected, name


@pytest.mark.parametrize(("name", "mutate", "expected"), PAIRED_CASES, ids=[c[0] for c in PAIRED_CASES])
def test_validate_exits_as_the_contract_validator_on_pair_changes(ws, name, mutate, expected):
    doc = seed_dataset()
    mutate(doc)
    ws.put(doc)
    assert exit_of(ws) == expected, name


@pytest.mark.parametrize(("name", "json_text", "csv_change", "expected"), RAW_CASES, ids=[c[0] for c in RAW_CASES])
def test_validate_exits_as_the_contract_validator_on_raw_files(ws, name, json_text, csv_change, expected):
    doc = seed_dataset()
    csv_text = to_csv(doc["evaluation_pairs"])
    assert csv_text.startswith(HEADER + "\n")
    ws.put(doc, csv_change(csv_text) if csv_change else csv_text, json_text=json_text)
    assert exit_of(ws) == expected, name


def test_a_path_outside_the_working_directory_is_exit_2_as_the_contract_says(ws, tmp_path):
    ws.put(seed_dataset())
    r = ws.cli("dataset", "validate", "--json", "../d.json", "--csv", "d.csv")
    assert r.exit_code == 2 and r.stdout == ""


def test_the_shape_is_a_warning_unless_strict_shape(ws):
    ws.put(seed_dataset())
    r = ws.cli("dataset", "validate", "--json", "d.json", "--csv", "d.csv")
    assert r.exit_code == 0 and "under the size floor of 30" in r.stderr
    assert exit_of(ws, "--strict-shape") == 1


# --- dataset new -------------------------------------------------------------------------------
def source(query: str = "Summarize the synthetic service note") -> dict:
    doc = copy.deepcopy(seed_dataset())
    doc["evaluation_pairs"][0]["query"] = query
    return doc


def new(ws: Workspace, *extra: str):  # noqa: F811
    return ws.cli("dataset", "new", "src.json", "--json", "d.json", "--csv", "d.csv", *extra)


def test_new_without_a_scope_stops_and_says_to_run_the_interview(ws):
    ws.write("src.json", json.dumps(source()))
    r = new(ws)
    assert r.exit_code == 2 and "scoping interview" in r.stderr and "--no-scope" in r.stderr
    assert sorted(p.name for p in Path(ws.root).iterdir()) == ["src.json"]
    r = new(ws, "--no-scope")
    assert r.exit_code == 0, r.stderr
    assert (ws.root / "d.json").exists() and (ws.root / "d.csv").exists()


def test_personal_data_is_a_scan_gate_failure_unless_allowed(ws):
    ws.write("src.json", json.dumps(source("I am jane.doe@acme-mail.com, where is my order?")))
    r = new(ws, "--no-scope")
    assert r.exit_code == 1 and "scan gate" in r.stderr and "[email]" in r.stderr
    assert "jane.doe" not in r.output  # the finding names place and kind, never the value
    assert sorted(p.name for p in Path(ws.root).iterdir()) == ["src.json"]  # nothing written
    r = new(ws, "--no-scope", "--allow-private-data")
    assert r.exit_code == 0 and "note: json $.evaluation_pairs[0].query" in r.stderr
    assert "jane.doe@acme-mail.com" in (ws.root / "d.json").read_text()
