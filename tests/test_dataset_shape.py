"""The dataset's shape (issue 32, item 7; seed 004): the size floor and the difficulty
balance checked by `evalkit dataset validate`, errors where the contract fails a dataset
and warnings (on stderr) where it asks for a recorded reason; the result keeps exactly
the contract's keys; its truncation wording. Through the CLI, on files written here."""

from __future__ import annotations

import json

from test_dataset import Workspace, mkdataset, mkpair, ws  # noqa: F401 - ws is a fixture

from evalkit.datasets import dataset as ds


def pairs_of(counts: dict[str, int]) -> list[dict]:
    out, i = [], 0
    for level, n in counts.items():
        for _ in range(n):
            i += 1
            source = "manual.txt" if level == "grounding" else None
            out.append(mkpair(i, level, ["Field technician"], source=source))
    return out


def run(ws: Workspace, counts: dict[str, int]):
    ws.put(mkdataset(pairs_of(counts)))
    return ws.validate(shape=True)


THREE_EASY_FAILURES = [
    "json $.evaluation_pairs: 3 pairs, under the size floor of 30",
    "json $.metadata.distribution.hard: no hard pair: the category balance needs every difficulty but grounding",
    "json $.metadata.distribution.negative: no negative pair: the category balance needs every difficulty "
    "but grounding",
    "json $.metadata.distribution.safety: no safety pair: the category balance needs every difficulty "
    "but grounding",
]


def test_the_issues_three_easy_pairs_are_valid_with_the_shape_as_warnings(ws):
    # issue 42 item 4: the contract's validator accepts them (exit 0), so evalkit does too
    code, out, err = run(ws, {"easy": 3})
    assert (code, out) == (0, {"valid": True, "errors": []})
    warnings = err.splitlines()
    assert warnings[:4] == [f"warning: {f}" for f in THREE_EASY_FAILURES]
    rest = "\n".join(warnings[4:])
    assert len(warnings) == 6 and "distribution.easy: 3 of 3 pairs (100%)" in rest
    assert "json $.metadata.distribution.grounding: no grounding pair" in rest


def test_strict_shape_makes_the_floor_and_the_balance_failures(ws):
    ws.put(mkdataset(pairs_of({"easy": 3})))
    r = ws.cli("dataset", "validate", "--json", "d.json", "--csv", "d.csv", "--strict-shape")
    out = json.loads(r.stdout)
    assert r.exit_code == 1 and set(out) == {"valid", "errors"} and out["valid"] is False
    assert out["errors"] == THREE_EASY_FAILURES
    assert "json $.metadata.distribution.grounding: no grounding pair" in r.stderr  # still a warning


def test_the_contracts_thirty_pair_example_is_valid_with_nothing_to_say(ws):
    code, out, err = run(ws, {"easy": 6, "grounding": 3, "hard": 12, "negative": 6, "safety": 3})
    assert (code, out, err) == (0, {"valid": True, "errors": []}, "")


def test_a_skewed_balance_is_valid_with_a_warning_per_difficulty_off_its_default(ws):
    code, out, err = run(ws, {"easy": 15, "grounding": 3, "hard": 6, "negative": 3, "safety": 3})
    assert (code, out) == (0, {"valid": True, "errors": []})
    assert err.splitlines() == [
        "warning: json $.metadata.distribution.easy: 15 of 30 pairs (50%), the default is 20% +/- 10 points: "
        "record why the confirmed scope warrants it",
        "warning: json $.metadata.distribution.hard: 6 of 30 pairs (20%), the default is 40% +/- 10 points: "
        "record why the confirmed scope warrants it",
    ]
    # at the edge of the tolerance (30% easy, 30% hard): no warning
    code, out, err = run(ws, {"easy": 9, "grounding": 3, "hard": 9, "negative": 6, "safety": 3})
    assert (code, out, err) == (0, {"valid": True, "errors": []}, "")


def test_no_shape_skips_the_rules_and_a_contract_failure_comes_first(ws):
    ws.put(mkdataset(pairs_of({"easy": 3})))
    assert ws.validate() == (0, {"valid": True, "errors": []}, "")
    ws.put(mkdataset(pairs_of({"easy": 3}), total_pairs=4))
    code, out, _ = ws.validate(shape=True)  # the recorded count is wrong: that is the failure shown
    assert code == 1 and out["errors"] == ["json $.metadata.total_pairs: records 4 but the dataset has 3 pairs"]


def test_the_truncation_line_is_the_contracts_wording():
    # seed 004: "replaces the 50th with diagnostics truncated; additional errors omitted"
    assert ds.OMITTED == "diagnostics truncated; additional errors omitted"
