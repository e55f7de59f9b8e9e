"""The evaluation dataset contract (issue 7): `evalkit dataset validate | new | sample |
to-suite`. Fixtures are built here, written to a temporary working directory, and run
through the real CLI; each validation asserts its exit code and the shape of what it
printed. How long validation takes is measured in benchmarks/bench_dataset.py, not here."""
from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.datasets import dataset as ds
from evalkit._cli.main import main
from evalkit.foundations.errors import InputError, InputErrors

POPS = ["Field technician", "Dispatcher", "New hire"]
HEADER = ["id", "query", "expected_response", "category", "difficulty", "populations",
          "tools_expected", "source_reference", "needs_sme_review", "notes"]
SECRET = "SECRET-PAIR-CONTENT-7731"


# --- builders ------------------------------------------------------------------------------
def mkpair(i: int, difficulty: str = "easy", populations=(), tools=(), source=None, sme=False,
           query: str | None = None, **extra) -> dict:
    p = {"id": f"p{i:04d}", "query": query if query is not None else f"question {i}?",
         "expected_response": f"states fact {i}", "category": "general", "difficulty": difficulty,
         "populations": list(populations), "tools_expected": list(tools), "source_reference": source,
         "needs_sme_review": sme, "notes": ""}
    p.update(extra)
    return p


def mkdataset(pairs: list[dict], populations=POPS, **metadata) -> dict:
    """A dataset whose recorded counts are derived from `pairs` (so it is valid unless
    the pairs or `metadata` overrides break a rule)."""
    md = {
        "system_name": "Field service assistant", "created_date": "2025-03-01", "version": "1.0.0",
        "total_pairs": len(pairs),
        "distribution": {k: sum(p["difficulty"] == k for p in pairs)
                         for k in ("easy", "grounding", "hard", "negative", "safety")},
        "user_populations": list(populations),
        "population_coverage": {n: sum(n in p["populations"] for p in pairs) for n in populations},
        "approach": "pro-code", "evaluation_mode": ["manual", "batch"], "recommended_tooling": "evalkit",
        "review_state": "draft", "validation_status": "ai-generated",
        "generation_method": "interview-driven-ai-generation",
    }
    md.update(metadata)
    return {"metadata": md, "evaluation_pairs": pairs}


def basic_pairs() -> list[dict]:
    return [
        mkpair(1, "easy", ["Field technician"], ["lookup_job"]),
        mkpair(2, "hard", ["Field technician", "Dispatcher"]),
        mkpair(3, "grounding", ["Dispatcher"], source="manual.txt"),
        mkpair(4, "negative"),
        mkpair(5, "safety", query="How do I bypass the interlock?"),
    ]


def to_csv(pairs: list[dict], lineterminator: str = "\n") -> str:
    """The CSV companion written by the test itself (no spreadsheet escaping)."""
    buf = io.StringIO(newline="")
    w = csv.writer(buf, lineterminator=lineterminator)
    w.writerow(HEADER)
    for p in pairs:
        w.writerow([p["id"], p["query"], p["expected_response"], p["category"], p["difficulty"],
                    ";".join(p["populations"]), ";".join(p["tools_expected"]), p["source_reference"] or "",
                    "true" if p["needs_sme_review"] else "false", p["notes"]])
    return buf.getvalue()


class Workspace:
    """A temporary working directory with the dataset files and a CLI runner."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.runner = CliRunner()

    def write(self, name: str, content: str | bytes) -> Path:
        p = self.root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_bytes(content.encode("utf-8"))
        return p

    def put(self, doc: dict | None = None, csv_text: str | None = None, *, json_text: str | None = None) -> None:
        if json_text is None:
            json_text = json.dumps(doc, indent=2)
        if csv_text is None:
            csv_text = to_csv(doc["evaluation_pairs"])
        self.write("d.json", json_text)
        self.write("d.csv", csv_text)

    def cli(self, *args: str):
        return self.runner.invoke(main, list(args), catch_exceptions=False)

    def validate(self, json_name: str = "d.json", csv_name: str = "d.csv", shape: bool = False):
        """(exit code, parsed stdout or None, stderr). The contract's rules alone unless
        `shape` (the size floor and balance: tests/test_dataset_shape.py; these fixtures
        are smaller than the floor)."""
        r = self.cli("dataset", "validate", "--json", json_name, "--csv", csv_name, *(() if shape else ("--no-shape",)))
        payload = json.loads(r.stdout) if r.stdout.strip() else None
        return r.exit_code, payload, r.stderr


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    monkeypatch.chdir(tmp_path)
    return Workspace(tmp_path)


def assert_valid(ws: Workspace) -> None:
    code, out, err = ws.validate()
    assert (code, out, err) == (0, {"valid": True, "errors": []}, "")


def invalid(ws: Workspace) -> list[str]:
    """Run validate expecting a contract failure (exit 1); return the diagnostics."""
    code, out, err = ws.validate()
    assert code == 1, (code, out, err)
    assert set(out) == {"valid", "errors"} and out["valid"] is False and out["errors"]
    assert all(isinstance(e, str) for e in out["errors"]) and len(out["errors"]) <= 50
    assert err == ""
    return out["errors"]


def exit2(ws: Workspace, json_name: str = "d.json", csv_name: str = "d.csv") -> str:
    """Run validate expecting an exit-2 error: message on stderr only."""
    code, out, err = ws.validate(json_name, csv_name)
    assert code == 2, (code, out, err)
    assert out is None  # nothing on stdout
    assert err.startswith("error: ") or "Usage:" in err
    return err


# --- the valid fixture and one fixture per rule -------------------------------------------------
def test_valid_dataset(ws):
    ws.put(mkdataset(basic_pairs()))
    assert_valid(ws)


def test_wrong_total(ws):
    ws.put(mkdataset(basic_pairs(), total_pairs=6))
    assert invalid(ws) == ["json $.metadata.total_pairs: records 6 but the dataset has 5 pairs"]


def test_wrong_distribution(ws):
    doc = mkdataset(basic_pairs())
    doc["metadata"]["distribution"].update(easy=2, hard=0)
    ws.put(doc)
    assert invalid(ws) == [
        "json $.metadata.distribution.easy: records 2 but 1 pairs have difficulty easy",
        "json $.metadata.distribution.hard: records 0 but 1 pairs have difficulty hard",
    ]


def test_coverage_count_mismatch_names_no_population(ws):
    doc = mkdataset(basic_pairs())
    doc["metadata"]["population_coverage"]["Dispatcher"] = 5  # the pairs name it twice
    ws.put(doc)
    errors = invalid(ws)
    assert errors == ["json $.metadata.population_coverage[key #2]: records 5 but 2 pairs name "
                      "$.metadata.user_populations[1]"]
    assert "Dispatcher" not in errors[0]  # dynamic property names are redacted


def test_coverage_counts_overlap_and_need_not_sum_to_total(ws):
    pairs = [mkpair(i, "hard", POPS) for i in range(1, 4)]  # 3 pairs, coverage 3+3+3 = 9
    ws.put(mkdataset(pairs))
    assert_valid(ws)


def test_missing_zero_key(ws):
    doc = mkdataset(basic_pairs())
    assert doc["metadata"]["population_coverage"]["New hire"] == 0
    del doc["metadata"]["population_coverage"]["New hire"]
    ws.put(doc)
    assert invalid(ws) == ["json $.metadata.population_coverage: has no entry for "
                           "$.metadata.user_populations[2] (record 0 when no pair names it)"]


def test_coverage_key_for_unconfirmed_population(ws):
    doc = mkdataset(basic_pairs())
    doc["metadata"]["population_coverage"]["Auditor"] = 0
    ws.put(doc)
    assert invalid(ws) == ["json $.metadata.population_coverage[key #4]: is not a confirmed population "
                           "(not in $.metadata.user_populations)"]


def test_unknown_population(ws):
    pairs = basic_pairs()
    pairs[1]["populations"].append("Auditor")
    doc = mkdataset(pairs)  # coverage counts only the confirmed populations
    ws.put(doc)
    assert invalid(ws) == ["json $.evaluation_pairs[1].populations[2]: names a population not in "
                           "$.metadata.user_populations"]


def test_grounding_without_source(ws):
    pairs = basic_pairs()
    pairs[2]["source_reference"] = None
    ws.put(mkdataset(pairs))
    assert invalid(ws) == ["json $.evaluation_pairs[2]: a grounding pair needs a source_reference "
                           "or needs_sme_review: true"]


def test_grounding_flagged_for_review_is_valid(ws):
    pairs = basic_pairs()
    pairs[2].update(source_reference=None, needs_sme_review=True)
    ws.put(mkdataset(pairs))
    assert_valid(ws)


def test_duplicate_ids(ws):
    pairs = basic_pairs()
    pairs[3]["id"] = pairs[0]["id"]
    ws.put(mkdataset(pairs))
    errors = invalid(ws)
    assert errors[0] == "json $.evaluation_pairs[3].id: duplicates the id of $.evaluation_pairs[0]"


@pytest.mark.parametrize("field, value", [
    ("query", SECRET), ("expected_response", SECRET), ("category", SECRET), ("difficulty", "hard"),
    ("populations", "Dispatcher"), ("tools_expected", "lookup_job;" + "x"), ("source_reference", SECRET),
    ("needs_sme_review", "true"), ("notes", SECRET),
])
def test_csv_drift_from_json(ws, field, value):
    pairs = basic_pairs()
    ws.put(mkdataset(pairs))
    rows = list(csv.reader(io.StringIO(to_csv(pairs), newline="")))
    rows[1][HEADER.index(field)] = value  # the first pair's row
    buf = io.StringIO(newline="")
    csv.writer(buf, lineterminator="\n").writerows(rows)
    ws.write("d.csv", buf.getvalue())
    errors = invalid(ws)
    assert errors == [f"csv line 2, field {field}: differs from $.evaluation_pairs[0].{field}"]
    assert SECRET not in json.dumps(errors)


def test_csv_rows_match_by_id_missing_and_extra_rows(ws):
    pairs = basic_pairs()
    ws.put(mkdataset(pairs), to_csv(pairs[:4] + [mkpair(9)]))
    assert invalid(ws) == ["csv line 6, field id: no JSON pair has this id",
                           "json $.evaluation_pairs[4]: has no CSV row"]


def test_csv_rows_in_another_order_still_match(ws):
    pairs = basic_pairs()
    ws.put(mkdataset(pairs), to_csv(list(reversed(pairs))))
    assert_valid(ws)


def test_rules_report_in_the_stated_order(ws):
    pairs = basic_pairs()
    pairs[4]["id"] = pairs[0]["id"]  # 1 duplicate id
    pairs[2]["source_reference"] = None  # 6 grounding without source
    pairs[1]["populations"] = ["Field technician", "Auditor"]  # 5 unknown population
    doc = mkdataset(pairs, total_pairs=9)  # 2 total
    doc["metadata"]["distribution"]["easy"] = 3  # 3 distribution
    doc["metadata"]["population_coverage"].pop("New hire")  # 4 coverage
    ws.put(doc, to_csv(pairs[:4]) + "p0077,q,e,c,easy,,,,false,\n")  # 7 csv
    errors = invalid(ws)
    order = ["duplicates the id", "total_pairs", "distribution.easy", "has no entry", "names a population",
             "a grounding pair", "no JSON pair has this id"]
    positions = [next(i for i, e in enumerate(errors) if key in e) for key in order]
    assert positions == sorted(positions), errors


# --- schema ---------------------------------------------------------------------------------------
def test_schema_is_draft_2020_12_and_enforces_date_format():
    schema = ds.load_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    doc = mkdataset(basic_pairs())
    for bad in ("2025-02-30", "2025-2-3", "yesterday", "2025-13-01"):
        doc["metadata"]["created_date"] = bad
        result = ds.validate_texts(json.dumps(doc), to_csv(doc["evaluation_pairs"]))
        assert result.errors == ("json $.metadata.created_date: must be a calendar date YYYY-MM-DD",), bad
    doc["metadata"]["created_date"] = "2024-02-29"
    assert ds.validate_texts(json.dumps(doc), to_csv(doc["evaluation_pairs"])).valid


def test_schema_failures_name_fields_and_never_echo_values(ws):
    pairs = basic_pairs()
    pairs[0]["difficulty"] = SECRET
    pairs[1]["needs_sme_review"] = SECRET
    del pairs[3]["notes"]
    pairs[4][SECRET] = "x"
    doc = mkdataset(pairs, review_state=SECRET)
    ws.put(doc, to_csv(basic_pairs()))
    errors = invalid(ws)
    assert SECRET not in json.dumps(errors)
    assert "json $.evaluation_pairs[0].difficulty: must be one of: \"easy\", \"grounding\", \"hard\", " \
           "\"negative\", \"safety\"" in errors
    assert "json $.evaluation_pairs[1].needs_sme_review: must be of type boolean" in errors
    assert "json $.evaluation_pairs[3].notes: missing required field" in errors
    assert "json $.evaluation_pairs[4]: has 1 property the contract does not define" in errors
    assert any(e.startswith("json $.metadata.review_state: must be one of") for e in errors)


def test_schema_setup_error_is_exit_2(tmp_path):
    bad = tmp_path / "schema.json"
    bad.write_text('{"type": 12}')
    with pytest.raises(InputError) as exc:
        ds.validate_texts("{}", "", schema_path=bad)
    assert exc.value.exit_code == 2 and "not a valid Draft 2020-12 schema" in str(exc.value)


# --- CSV parsing --------------------------------------------------------------------------------
def test_csv_quoted_commas_and_line_breaks_are_not_rows(ws):
    pairs = basic_pairs()
    pairs[0]["query"] = 'Line one, with a comma\nline two "quoted"\n\nline four'
    pairs[1]["notes"] = "a,b,c"
    ws.put(mkdataset(pairs))
    assert_valid(ws)


def test_csv_list_items_are_trimmed_and_empty_source_is_null(ws):
    pairs = basic_pairs()
    text = to_csv(pairs).replace("Field technician;Dispatcher", " Field technician ;  Dispatcher ")
    ws.put(mkdataset(pairs), text)
    assert_valid(ws)


@pytest.mark.parametrize("cell, message", [
    ("Field technician;;Dispatcher", "has an empty item"),
    ("Field technician;", "has an empty item"),
    ("Dispatcher;Dispatcher", "names the same item twice"),
])
def test_csv_bad_list_items(ws, cell, message):
    pairs = basic_pairs()
    ws.put(mkdataset(pairs), to_csv(pairs).replace("Field technician;Dispatcher", cell))
    errors = invalid(ws)
    assert len(errors) == 1 and errors[0].startswith("csv line 3, field populations: " + message)


@pytest.mark.parametrize("value", ["True", "yes", "1", ""])
def test_csv_boolean_is_true_or_false(ws, value):
    pairs = basic_pairs()
    text = to_csv(pairs).splitlines(keepends=True)
    text[1] = text[1].replace(",false,", f",{value},")
    ws.put(mkdataset(pairs), "".join(text))
    assert invalid(ws) == ["csv line 2, field needs_sme_review: must be true or false"]


def test_csv_rows_with_too_few_or_too_many_fields(ws):
    pairs = basic_pairs()
    lines = to_csv(pairs).splitlines(keepends=True)
    lines[1] = lines[1].rstrip("\n") + ",extra\n"
    lines[2] = lines[2].rsplit(",", 1)[0] + "\n"
    ws.put(mkdataset(pairs), "".join(lines))
    errors = invalid(ws)
    assert errors == ["csv line 2: has 11 fields, expected 10", "csv line 3: has 9 fields, expected 10"]


def test_csv_header_must_be_exact(ws):
    pairs = basic_pairs()
    ws.put(mkdataset(pairs), to_csv(pairs).replace("tools_expected", "tools", 1))
    assert invalid(ws) == ["csv line 1: header must be exactly " + ",".join(HEADER)]


def test_csv_malformed_quoting_is_a_parse_error(ws):
    pairs = basic_pairs()
    ws.put(mkdataset(pairs), to_csv(pairs) + 'p0009,"never closed,q\n')
    err = exit2(ws)
    assert "d.csv" in err and "not valid CSV" in err


def test_csv_blank_line_is_a_row_with_no_fields(ws):
    pairs = basic_pairs()
    lines = to_csv(pairs).splitlines(keepends=True)
    ws.put(mkdataset(pairs), "".join(lines[:3] + ["\n"] + lines[3:]))
    assert invalid(ws) == ["csv line 4: has 0 fields, expected 10"]


# --- resource limits: at the limit, and just past it ----------------------------------------------
def count_nodes(x) -> int:
    """The test's own count: containers and scalars, property names excluded."""
    n, stack = 0, [x]
    while stack:
        v = stack.pop()
        n += 1
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return n


def padded_json(doc: dict, size: int) -> str:
    text = json.dumps(doc)
    assert len(text.encode()) <= size
    return text[:-1] + " " * (size - len(text.encode())) + "}"


def test_limit_file_size(ws):
    doc = mkdataset(basic_pairs())
    ws.put(doc, json_text=padded_json(doc, 5 * 1024 * 1024))
    assert (ws.root / "d.json").stat().st_size == 5 * 1024 * 1024
    assert_valid(ws)
    ws.put(doc, json_text=padded_json(doc, 5 * 1024 * 1024 + 1))
    assert invalid(ws) == ["json: file is 5,242,881 bytes, over the 5,242,880-byte (5 MiB) limit"]
    ws.put(doc, to_csv(doc["evaluation_pairs"]) + "\n" * (5 * 1024 * 1024))
    assert invalid(ws)[0].startswith("csv: file is 5,2")


def test_limit_pairs(ws):
    pairs = [mkpair(i, "easy") for i in range(1000)]
    ws.put(mkdataset(pairs))
    assert_valid(ws)
    pairs.append(mkpair(1000, "easy"))
    ws.put(mkdataset(pairs))
    assert invalid(ws) == ["json $.evaluation_pairs: 1,001 pairs, over the 1,000 limit",
                           "csv line 1002: more than 1,000 data rows"]


def test_limit_csv_rows(ws):
    pairs = [mkpair(i, "easy") for i in range(1001)]
    ws.put(mkdataset(pairs[:1000]), to_csv(pairs))
    assert invalid(ws) == ["csv line 1002: more than 1,000 data rows"]


def test_limit_list_entries(ws):
    pairs = basic_pairs()
    pairs[0]["tools_expected"] = [f"tool_{i}" for i in range(64)]
    ws.put(mkdataset(pairs))
    assert_valid(ws)
    pairs[0]["tools_expected"].append("tool_64")
    ws.put(mkdataset(pairs))
    assert invalid(ws) == ["json $.evaluation_pairs[0].tools_expected: 65 entries, over the 64 limit",
                           "csv line 2, field tools_expected: 65 items, over the 64 limit"]


def test_limit_coverage_properties(ws):
    pops = [f"Population {i}" for i in range(64)]
    pairs = [mkpair(1, "hard", pops)]
    doc = mkdataset(pairs, populations=pops)
    assert len(doc["metadata"]["population_coverage"]) == 64
    ws.put(doc)
    assert_valid(ws)
    doc["metadata"]["population_coverage"]["Population 64"] = 0
    ws.put(doc)
    assert invalid(ws) == ["json $.metadata.population_coverage: 65 properties, over the 64 limit"]


def test_limit_evaluation_modes(ws):
    doc = mkdataset(basic_pairs())
    assert doc["metadata"]["evaluation_mode"] == ["manual", "batch"]
    ws.put(doc)
    assert_valid(ws)
    doc["metadata"]["evaluation_mode"] = ["manual", "batch", "manual"]
    ws.put(doc)
    assert invalid(ws) == ["json $.metadata.evaluation_mode: 3 evaluation modes, over the 2 limit"]


def test_limit_content_string(ws):
    pairs = basic_pairs()
    pairs[0]["query"] = "q" * 16_384
    ws.put(mkdataset(pairs))
    assert_valid(ws)
    pairs[0]["query"] = "q" * 16_385
    ws.put(mkdataset(pairs))
    assert invalid(ws) == [
        "json $.evaluation_pairs[0].query: 16,385 characters, over the 16,384 limit for a content string",
        "csv line 2, field query: 16,385 characters, over the 16,384 limit",
    ]


def test_limit_id_and_list_item(ws):
    pairs = basic_pairs()
    pairs[0]["id"] = "i" * 256
    pairs[0]["tools_expected"] = ["t" * 256]
    ws.put(mkdataset(pairs))
    assert_valid(ws)
    pairs[0]["id"] = "i" * 257
    pairs[0]["tools_expected"] = ["t" * 257]
    ws.put(mkdataset(pairs))
    assert invalid(ws) == [
        "json $.evaluation_pairs[0].id: 257 characters, over the 256 limit for an id or name",
        "json $.evaluation_pairs[0].tools_expected[0]: 257 characters, over the 256 limit for an id or name",
        "csv line 2, field id: 257 characters, over the 256 limit",
        "csv line 2, field tools_expected: an item of 257 characters, over the 256 limit for a name",
    ]


def test_limit_property_name(ws):
    long_pop = "P" * 256
    pairs = [mkpair(1, "hard", [long_pop])]
    ws.put(mkdataset(pairs, populations=[long_pop]))
    assert_valid(ws)
    long_pop = "P" * 257
    pairs = [mkpair(1, "hard", [long_pop])]
    ws.put(mkdataset(pairs, populations=[long_pop]))
    errors = invalid(ws)
    assert "json $.metadata.population_coverage[key #1]: property name of 257 characters, " \
           "over the 256 limit" in errors
    assert long_pop not in json.dumps(errors)


def nested(levels: int):
    x: list = [0]
    for _ in range(levels - 1):
        x = [x]
    return x


def test_limit_depth(ws):
    # The contract's own layout is 4 levels deep; an extra property carries the nesting
    # (the schema then refuses the property, but the depth guard must not fire at 8).
    doc = mkdataset(basic_pairs())
    doc["extra"] = nested(7)  # the root is level 1: 1 + 7 = 8
    ws.put(doc)
    assert invalid(ws) == ["json $: has 1 property the contract does not define"]
    doc["extra"] = nested(8)
    ws.put(doc)
    assert invalid(ws) == ["json $: nested 9 levels deep, over the 8 limit"]


def node_filler(count: int) -> list:
    """A list of lists holding `count` nodes in all (itself included)."""
    assert count >= 101
    ints = count - 1 - 100
    return [[0] * (ints // 100 + (1 if i < ints % 100 else 0)) for i in range(100)]


def test_limit_nodes_json_and_csv_combined(ws):
    pairs = basic_pairs()
    doc = mkdataset(pairs)
    csv_nodes = 1 + (len(pairs) + 1) * 11  # root, then each record and its 10 fields
    room = 100_000 - csv_nodes - count_nodes(doc)
    doc["extra"] = node_filler(room)
    assert count_nodes(doc) + csv_nodes == 100_000
    ws.put(doc)
    assert invalid(ws) == ["json $: has 1 property the contract does not define"]  # no node diagnostic
    doc["extra"] = node_filler(room + 1)
    ws.put(doc)
    assert invalid(ws) == ["csv line 6: more than 100,000 JSON and CSV nodes"]


def test_limit_nodes_json_alone(ws):
    doc = mkdataset(basic_pairs())
    doc["extra"] = node_filler(100_001 - count_nodes(doc))
    assert count_nodes(doc) == 100_001
    ws.put(doc)
    assert invalid(ws) == ["json $: 100,001 nodes, over the 100,000 limit for JSON and CSV together"]


def test_limit_diagnostics(ws):
    pairs = [mkpair(i, "grounding") for i in range(50)]
    ws.put(mkdataset(pairs))
    errors = invalid(ws)
    assert len(errors) == 50 and all("a grounding pair needs" in e for e in errors)
    pairs.append(mkpair(50, "grounding"))
    ws.put(mkdataset(pairs))
    errors = invalid(ws)
    assert len(errors) == 50
    assert all("a grounding pair needs" in e for e in errors[:49])
    assert errors[49] == ds.OMITTED and "omitted" in errors[49]


def test_limit_diagnostics_across_csv_format_problems(ws):
    pairs = [mkpair(i, "easy") for i in range(60)]
    ws.put(mkdataset(pairs), to_csv(pairs).replace(",false,", ",no,"))
    errors = invalid(ws)
    assert errors[:49] == [f"csv line {n}, field needs_sme_review: must be true or false" for n in range(2, 51)]
    assert errors[49] == ds.OMITTED


# --- hostile files --------------------------------------------------------------------------------
def test_hostile_nesting_bomb(ws):
    ws.put(mkdataset(basic_pairs()), json_text="[" * 2_000_000 + "]" * 2_000_000)
    assert invalid(ws) == ["json $: nested 2,000,000 levels deep, over the 8 limit",
                           "json $: 2,000,000 nodes, over the 100,000 limit for JSON and CSV together"]
    ws.put(mkdataset(basic_pairs()), json_text='{"a":' * 50_000 + "1" + "}" * 50_000)
    assert invalid(ws) == ["json $: nested 50,000 levels deep, over the 8 limit"]
    ws.put(mkdataset(basic_pairs()), json_text="[" * (5 * 1024 * 1024))  # never closed
    assert invalid(ws)[0] == "json $: nested 5,242,880 levels deep, over the 8 limit"


def test_hostile_nesting_bomb_inside_strings_is_just_text(ws):
    pairs = basic_pairs()
    pairs[0]["notes"] = "[" * 16_000
    ws.put(mkdataset(pairs))
    assert_valid(ws)


def test_hostile_6_mib_file(ws):
    ws.put(mkdataset(basic_pairs()), json_text="[" * (6 * 1024 * 1024))
    assert invalid(ws) == ["json: file is 6,291,456 bytes, over the 5,242,880-byte (5 MiB) limit"]


def test_hostile_1_mib_string(ws):
    pairs = basic_pairs()
    big = "A" * (1024 * 1024)
    doc = mkdataset(basic_pairs())
    doc["evaluation_pairs"][0]["query"] = big
    ws.put(doc, to_csv(pairs))
    assert invalid(ws) == ["json $.evaluation_pairs[0].query: 1,048,576 characters, over the 16,384 limit "
                           "for a content string"]
    pairs[0]["query"] = big
    ws.put(mkdataset(basic_pairs()), to_csv(pairs))
    assert invalid(ws) == ["csv line 2: a field is longer than 16,448 characters"]


def test_hostile_invalid_utf8(ws):
    ws.put(mkdataset(basic_pairs()))
    ws.write("d.json", (ws.root / "d.json").read_bytes().replace(b"question 2?", b"question \xff?"))
    err = exit2(ws)
    assert "d.json:" in err and "not valid UTF-8" in err
    ws.put(mkdataset(basic_pairs()))
    ws.write("d.csv", b"id,\xc3(\n")
    assert "d.csv:1: not valid UTF-8" in exit2(ws)


def test_hostile_bom(ws):
    doc = mkdataset(basic_pairs())
    ws.put(doc, json_text="\ufeff" + json.dumps(doc))
    assert "byte order mark" in exit2(ws)
    ws.put(doc, "\ufeff" + to_csv(doc["evaluation_pairs"]))
    assert "d.csv:1: starts with a UTF-8 byte order mark" in exit2(ws)


def test_hostile_crlf_line_ends(ws):
    pairs = basic_pairs()
    pairs[0]["query"] = "two\nlines"
    doc = mkdataset(pairs)
    text = to_csv(pairs, lineterminator="\r\n").replace("two\nlines", "two\r\nlines")
    ws.put(doc, text, json_text=json.dumps(doc, indent=2).replace("\n", "\r\n"))
    assert b"\r\n" in (ws.root / "d.csv").read_bytes() and b"\r\n" in (ws.root / "d.json").read_bytes()
    assert_valid(ws)


def test_hostile_nul_bytes(ws):
    doc = mkdataset(basic_pairs())
    ws.put(doc, json_text=json.dumps(doc).replace("question 1?", "question 1\x00?"))
    assert "contains a NUL byte" in exit2(ws)
    ws.put(doc, to_csv(doc["evaluation_pairs"]).replace("question 1?", "question 1\x00?"))
    assert "d.csv:2: contains a NUL byte" in exit2(ws)
    pairs = basic_pairs()
    pairs[0]["notes"] = "escaped \u0000 in JSON"  # valid JSON text, but no CSV could carry it
    ws.put(mkdataset(pairs), to_csv(basic_pairs()), json_text=json.dumps(mkdataset(pairs)))
    assert "json $.evaluation_pairs[0].notes: must not contain a NUL character" in invalid(ws)


@pytest.mark.parametrize("formula", ["=SUM(A1:A3)", "+1", "-cmd", "@import", "=HYPERLINK(\"x\")"])
def test_hostile_formula_cell_is_text(ws, formula):
    pairs = basic_pairs()
    pairs[0]["query"] = formula
    pairs[1]["notes"] = formula
    doc = mkdataset(pairs)
    ws.put(doc)  # written raw, as a hand-made CSV would be: plain text
    assert_valid(ws)
    ws.put(doc, ds.csv_text(pairs))  # written by evalkit: escaped for spreadsheets
    assert f"\n{pairs[0]['id']},'{formula[0]}" in (ws.root / "d.csv").read_text() or \
        f"\n{pairs[0]['id']},\"'{formula[0]}" in (ws.root / "d.csv").read_text()
    assert_valid(ws)


@pytest.mark.parametrize("text", ["'=x", "'hello", "''", "'", "''=", "=", "'+'", "plain", ""])
def test_spreadsheet_escape_round_trips(text):
    assert ds.unescape_cell(ds.escape_cell(text)) == text
    assert ds.escape_cell(text)[:1] not in ("=", "+", "-", "@")


def test_quote_prefixed_content_round_trips_through_new(ws):
    pairs = basic_pairs()
    for i, text in enumerate(["'=x", "'hello", "=1+1"]):
        pairs[i]["notes"] = text
    doc = mkdataset(pairs)
    ws.put(doc, ds.csv_text(pairs))
    assert_valid(ws)


@pytest.mark.parametrize("path", ["../d.json", "sub/../d.json", "/etc/hostname"])
def test_hostile_paths(ws, path):
    ws.put(mkdataset(basic_pairs()))
    (ws.root / "sub").mkdir()
    err = exit2(ws, json_name=path)
    assert "must not contain '..'" in err or "outside the working directory" in err


def test_hostile_symlink_out_of_the_working_directory(ws, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside") / "d.json"
    outside.write_text(json.dumps(mkdataset(basic_pairs())))
    ws.put(mkdataset(basic_pairs()))
    os.symlink(outside, ws.root / "link.json")
    assert "outside the working directory" in exit2(ws, json_name="link.json")


def test_json_parse_errors_are_exit_2(ws):
    doc = mkdataset(basic_pairs())
    ws.put(doc, json_text=json.dumps(doc)[:-2])
    assert "not valid JSON" in exit2(ws)
    ws.put(doc, json_text='{"metadata": 1, "metadata": 2}')
    assert "repeats a property name" in exit2(ws)
    ws.put(doc, json_text='{"metadata": NaN}')
    assert "not valid JSON" in exit2(ws)


def test_missing_file_and_missing_option(ws):
    ws.put(mkdataset(basic_pairs()))
    assert "file not found" in exit2(ws, json_name="nope.json")
    r = ws.cli("dataset", "validate", "--json", "d.json")
    assert r.exit_code == 2 and r.stdout == "" and "--csv" in r.stderr


# --- Python API guard ----------------------------------------------------------------------------
def test_guard_api_counts_repeated_references_and_fails_cycles():
    shared = list(range(999))
    # one list object, visited 99 or 101 times: each visit counts its 1 + 999 nodes
    assert ds.check_structure({"a": [shared] * 99}) == 1 + 1 + 99 * 1000
    with pytest.raises(InputErrors) as exc:
        ds.check_structure({"a": [shared] * 101})
    assert "more than 100,000 JSON and CSV nodes" in str(exc.value)
    cyclic: list = []
    cyclic.append(cyclic)
    with pytest.raises(InputErrors) as exc:
        ds.check_structure(cyclic)
    assert "nested deeper than 8 levels" in str(exc.value)


def test_scan_json_text_matches_parsed_count():
    doc = mkdataset(basic_pairs())
    doc["x"] = [[], {}, [1, [2, {"k": "a,b]"}]], "s\\\"[", None, True]
    text = json.dumps(doc, indent=1)
    depth, nodes = ds.scan_json_text(text)
    assert nodes == count_nodes(doc) == ds.check_structure(json.loads(text))
    assert depth == 5


# --- authoring: new, sample, to-suite ---------------------------------------------------------
SOURCE_YAML = """\
metadata:
  system_name: Field service assistant
  created_date: 2025-03-01
  user_populations: [Field technician, Dispatcher, New hire]
  approach: pro-code
  evaluation_mode: [batch]
  recommended_tooling: evalkit
  generation_method: interview-driven-ai-generation
  total_pairs: 99
evaluation_pairs:
{pairs}
"""


def source_pairs(n_per_level: int = 3) -> str:
    out = []
    pops = ["Field technician", "Dispatcher", "New hire"]
    k = 0
    for level in ("easy", "grounding", "hard", "negative", "safety"):
        for j in range(n_per_level):
            k += 1
            pop = pops[k % 3] if level != "safety" else None
            out.append(f"  - query: \"{level} question {j}, with a comma\"\n"
                       f"    expected_response: \"=Observable behaviour {j}\"\n"
                       f"    category: {level}-scenarios\n"
                       f"    difficulty: {level}\n"
                       + (f"    populations: [{pop}]\n" if pop else "")
                       + ("    tools_expected: [lookup_job]\n" if level == "hard" else "")
                       + ("    source_reference: manual.txt\n" if level == "grounding" else ""))
    return "".join(out)


def test_new_writes_both_forms_from_one_source(ws):
    ws.write("src.yaml", SOURCE_YAML.format(pairs=source_pairs()))
    r = ws.cli("dataset", "new", "src.yaml", "--json", "d.json", "--csv", "d.csv", "--no-scope")
    assert r.exit_code == 0, r.stderr
    assert "metadata.total_pairs" in r.stderr  # the source's stale count was recomputed
    doc = json.loads((ws.root / "d.json").read_text())
    md = doc["metadata"]
    assert md["total_pairs"] == 15 and md["distribution"] == dict.fromkeys(
        ["easy", "grounding", "hard", "negative", "safety"], 3)
    assert md["population_coverage"] == {"Field technician": 4, "Dispatcher": 4, "New hire": 4}
    assert md["created_date"] == "2025-03-01" and md["review_state"] == "draft"
    assert [p["id"] for p in doc["evaluation_pairs"]][:3] == ["001", "002", "003"]
    assert "'=Observable" in (ws.root / "d.csv").read_text()  # escaped for spreadsheets
    assert_valid(ws)
    r = ws.cli("dataset", "new", "src.yaml", "--json", "d.json", "--csv", "d.csv", "--no-scope")
    assert r.exit_code == 2 and "refusing to overwrite" in r.stderr


def test_new_writes_files_with_ordinary_permissions(ws):
    import os

    ws.write("src.yaml", SOURCE_YAML.format(pairs=source_pairs()))
    old = os.umask(0o022)
    try:
        r = ws.cli("dataset", "new", "src.yaml", "--json", "d.json", "--csv", "d.csv", "--no-scope")
    finally:
        os.umask(old)
    assert r.exit_code == 0, r.stderr
    for name in ("d.json", "d.csv"):  # shared with reviewers: 0644, where mkstemp alone gives 0600
        assert oct((ws.root / name).stat().st_mode & 0o777) == "0o644", name


def test_new_refuses_an_invalid_source_and_writes_nothing(ws):
    ws.write("src.yaml", SOURCE_YAML.format(pairs=source_pairs()).replace("source_reference: manual.txt",
                                                                          "notes: no source"))
    r = ws.cli("dataset", "new", "src.yaml", "--json", "d.json", "--csv", "d.csv", "--no-scope")
    assert r.exit_code == 2 and r.stdout == ""
    assert "a grounding pair needs a source_reference" in r.stderr
    assert not (ws.root / "d.json").exists() and not (ws.root / "d.csv").exists()
    assert [p.name for p in ws.root.iterdir()] == ["src.yaml"]


def test_new_refuses_yaml_aliases(ws):
    ws.write("src.yaml", "a: &x [1, 2]\nb: *x\n")
    r = ws.cli("dataset", "new", "src.yaml", "--json", "d.json", "--csv", "d.csv", "--no-scope")
    assert r.exit_code == 2 and "aliases are not allowed" in r.stderr


def make_source_dataset(ws: Workspace, n_per_level: int = 4) -> None:
    ws.write("src.yaml", SOURCE_YAML.format(pairs=source_pairs(n_per_level)))
    r = ws.cli("dataset", "new", "src.yaml", "--json", "d.json", "--csv", "d.csv", "--no-scope")
    assert r.exit_code == 0, r.stderr


def test_sample_is_stratified_seeded_and_advances_review_state(ws):
    make_source_dataset(ws, 6)
    pairs = json.loads((ws.root / "d.json").read_text())["evaluation_pairs"]
    a = ds.sample_pairs(pairs, 8, seed=1)
    assert a == ds.sample_pairs(pairs, 8, seed=1)
    assert {p["difficulty"] for p in a} == {"easy", "grounding", "hard", "negative", "safety"}
    assert {n for p in a for n in p["populations"]} == {"Field technician", "Dispatcher", "New hire"}
    draws = {tuple(p["id"] for p in ds.sample_pairs(pairs, 8, seed=s)) for s in range(10)}
    assert len(draws) > 1  # the seed matters
    sizes = {lvl: sum(p["difficulty"] == lvl for p in ds.sample_pairs(pairs, 20, seed=3))
             for lvl in ("easy", "grounding", "hard", "negative", "safety")}
    assert sizes == dict.fromkeys(sizes, 4)  # proportional: 20 of 30, equal strata

    r = ws.cli("dataset", "sample", "--json", "d.json", "--csv", "d.csv", "--out", "review.csv",
                  "--size", "8", "--seed", "1")
    assert r.exit_code == 0, r.stderr
    sheet = list(csv.DictReader(io.StringIO((ws.root / "review.csv").read_text(), newline="")))
    assert [row["id"] for row in sheet] == [p["id"] for p in a]
    assert all(row["review_feedback"] == "" and row["expected_response"].startswith("'=") for row in sheet)
    assert json.loads((ws.root / "d.json").read_text())["metadata"]["review_state"] == "sampled"
    assert_valid(ws)
    r = ws.cli("dataset", "sample", "--json", "d.json", "--csv", "d.csv", "--confirm")
    assert r.exit_code == 0 and "confirmed" in r.stdout
    assert json.loads((ws.root / "d.json").read_text())["metadata"]["review_state"] == "confirmed"
    r = ws.cli("dataset", "sample", "--json", "d.json", "--csv", "d.csv", "--out", "again.csv")
    assert r.exit_code == 2 and "already confirmed" in r.stderr


def test_confirm_needs_a_sampled_dataset(ws):
    make_source_dataset(ws)
    r = ws.cli("dataset", "sample", "--json", "d.json", "--csv", "d.csv", "--confirm")
    assert r.exit_code == 2 and "review_state is draft" in r.stderr
    assert json.loads((ws.root / "d.json").read_text())["metadata"]["review_state"] == "draft"


def test_small_sample_still_covers_each_population_first(ws):
    pairs = [mkpair(1, "hard", ["Field technician"]), mkpair(2, "hard", ["Field technician"]),
             mkpair(3, "hard", ["Dispatcher"]), mkpair(4, "hard", ["New hire"])]
    for seed in range(5):
        got = ds.sample_pairs(pairs, 3, seed=seed)
        assert {n for p in got for n in p["populations"]} == set(POPS)


def test_to_suite_maps_pairs_to_cases(ws):
    make_source_dataset(ws, 2)
    ws.write("ctx/manual.txt", "Hold the red button for five seconds.")
    r = ws.cli("dataset", "to-suite", "--json", "d.json", "--csv", "d.csv", "--out", "evals/fs",
                  "--context-dir", "ctx")
    assert r.exit_code == 0, r.stderr
    cases = [json.loads(line) for line in (ws.root / "evals/fs/cases.jsonl").read_text().splitlines()]
    pairs = json.loads((ws.root / "d.json").read_text())["evaluation_pairs"]
    assert [c["id"] for c in cases] == [p["id"] for p in pairs]
    for c, p in zip(cases, pairs):
        assert c["input"] == p["query"] and c["expected"] == {"rubric": p["expected_response"]}
        assert f"difficulty:{p['difficulty']}" in c["tags"]
        assert {t for t in c["tags"] if t.startswith("population:")} == {f"population:{n}" for n in p["populations"]}
        kinds = [k["kind"] for k in c.get("checks", [])]
        assert ("refusal" in kinds) == (p["difficulty"] == "safety")
        assert [k["tool"] for k in c.get("checks", []) if k["kind"] == "activation"] == p["tools_expected"]
        if p["difficulty"] == "grounding":
            assert c["context"] == "Hold the red button for five seconds." and "grounding" in kinds
        else:
            assert "context" not in c
    config = json.loads((ws.root / "evals/fs/config.json").read_text())
    assert [t["function"]["name"] for t in config["tools"]] == ["lookup_job"]
    assert config["mode"] == "chat"


def test_to_suite_refuses_an_invalid_dataset(ws):
    make_source_dataset(ws, 1)
    doc = json.loads((ws.root / "d.json").read_text())
    doc["metadata"]["total_pairs"] = 1
    ws.write("d.json", json.dumps(doc))
    r = ws.cli("dataset", "to-suite", "--json", "d.json", "--csv", "d.csv", "--out", "evals/fs")
    assert r.exit_code == 2 and "dataset is not valid" in r.stderr
    assert not (ws.root / "evals").exists()


def test_end_to_end_new_validate_to_suite_lint(ws):
    make_source_dataset(ws, 3)
    code, out, err = ws.validate()
    assert (code, out) == (0, {"valid": True, "errors": []})
    r = ws.cli("dataset", "to-suite", "--json", "d.json", "--csv", "d.csv", "--out", "evals/field-service")
    assert r.exit_code == 0, r.stderr
    r = ws.cli("lint", "evals/field-service")
    assert r.exit_code == 0, r.stderr
    assert "0 error(s)" in r.stdout
    from evalkit.suites.reader import load_suite

    suite = load_suite(ws.root / "evals/field-service")
    assert len(suite.cases) == 15 and all(c.judged for c in suite.cases)


def test_converted_suite_runs_through_sampler_and_graders(ws, monkeypatch):
    """The suite from `to-suite` runs on a real OpenAI-compatible server on loopback (the
    scripted one) and its deterministic checks grade the samples."""
    from evalkit.checking.graders import grade_sample
    from evalkit.running.runner import run_suite
    from evalkit.calls.serve import ScriptedServer
    from evalkit.suites.reader import load_suite

    make_source_dataset(ws, 1)
    ws.write("ctx/manual.txt", "Hold the red button for five seconds.")
    r = ws.cli("dataset", "to-suite", "--json", "d.json", "--csv", "d.csv", "--out", "evals/fs",
                  "--context-dir", "ctx")
    assert r.exit_code == 0, r.stderr
    monkeypatch.setenv("EVALKIT_API_KEY", "local")
    script = {"rules": [
        {"match": "safety question", "text": "I can't help with that; please follow the lockout procedure."},
        {"match": "hard question", "tool_calls": [{"name": "lookup_job", "arguments": {"job": 7}}]},
        {"match": "grounding question", "text": "Hold the red button for five seconds."},
    ], "default": {"text": "Here is what to do."}}
    with ScriptedServer(script) as srv:
        result = run_suite(ws.root / "evals/fs", k=1, base_url=srv.base_url, progress=False, cache=False)
        assert srv.requests and all(req.get("tools") for req in srv.requests)  # chat mode, tools declared
    assert result.exit_code == 0
    suite = load_suite(ws.root / "evals/fs")
    samples = [json.loads(line) for line in (Path(result.path) / "results.jsonl").read_text().splitlines()]
    assert sorted(s["case_id"] for s in samples) == sorted(c.id for c in suite.cases)
    by_id = {c.id: c for c in suite.cases}
    verdicts = {s["case_id"]: {c.name: c.passed for c in grade_sample(by_id[s["case_id"]], s, suite.path)}
                for s in samples}
    level = {c.id: next(t for t in c.tags if t.startswith("difficulty:"))[11:] for c in suite.cases}
    for cid, checks in verdicts.items():
        if level[cid] == "safety":
            assert checks == {"refusal": True}
        elif level[cid] == "hard":
            assert list(checks.values()) == [True]  # the expected tool was called
        elif level[cid] == "grounding":
            assert checks == {"grounding": True}
        else:
            assert checks == {}  # judged by the rubric only


def test_a_schema_keyword_without_its_own_message_still_names_the_path():
    """Review finding: the fallback message came back as a (list, False) pair its caller
    could not unpack; a keyword the contract's messages do not cover still gives one
    message per error, built from the keyword, never from the instance."""
    from types import SimpleNamespace

    err = SimpleNamespace(validator="multipleOf", validator_value=3, instance=7, schema={})
    assert ds._schema_message(err) == [((), "violates schema keyword 'multipleOf'")]
