"""Evaluation datasets for conversational systems: the v1 contract, its validator, and
authoring helpers (`new`, `sample`, `to_suite`).

A dataset is a JSON file (metadata plus evaluation pairs) and a CSV companion holding
the same pairs. The contract is `schemas/dataset-v1.json` plus the rules below, checked
in three stages so that hostile files fail fast:

1. a structural guard (`LIMITS`): file size before reading, nesting depth and node count
   of the raw JSON text before `json.loads`, then every container, string and name of
   the parsed JSON and every CSV record as it is read;
2. the JSON Schema (Draft 2020-12, `date` formats checked) and strict CSV parsing;
3. the rules, in this order: unique pair ids; `total_pairs` equals the number of pairs;
   `distribution` equals the count per difficulty; `population_coverage` has exactly
   one key per confirmed population (zeros included), each equal to the number of pairs
   naming it; no pair names an unknown population; a grounding pair has a
   `source_reference` or `needs_sme_review: true`; every CSV row equals its JSON pair
   (matched by id) field by field.

Contract failures are diagnostics (`ValidationResult.errors`, at most 50, the 50th
replaced by an omission line); they name stable fields, JSON paths and CSV lines, never
pair content, and dynamic property names (population keys) appear as `[key #n]`.
Invocation, read, decode, parse, schema-setup and path problems raise `InputError`.

CSV encoding: header exactly `CSV_HEADER`; list fields joined by `;` (items trimmed on
reading, empty cell = empty list, empty or repeated items invalid); `needs_sme_review`
is `true` or `false`; an empty `source_reference` is null; line breaks inside quoted
fields are part of the field (compared with CRLF read as LF). A cell that a spreadsheet
would run as a formula (starting with `=`, `+`, `-` or `@`) is written with a leading
`'`; so that the escape is reversible, a cell starting with `'` followed by one of
`=+-@'` is also written with one more `'`. On reading, exactly that one leading `'` is
removed, and any other cell, including an unescaped `=...`, is plain text.
"""

from __future__ import annotations

import csv
import io
import json
import os
import random
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

from evalkit.datasets.scope import apply_scope, require_confirmed
from evalkit.foundations._io import read_file_bytes, write_atomic_all
from evalkit.foundations._jsonschema import jsonschema
from evalkit.foundations.errors import FileTooLarge, InputError, InputErrors, PrivateDataFound
from evalkit.foundations.records import Json
from evalkit.pii import privacy as _privacy

if TYPE_CHECKING:  # imported lazily: importing jsonschema costs about a second
    from jsonschema import Draft202012Validator

SCHEMA_RESOURCE = "schemas/dataset-v1.json"
DIFFICULTIES = ("easy", "grounding", "hard", "negative", "safety")
REVIEW_STATES = ("draft", "sampled", "confirmed")
CSV_HEADER = (
    "id",
    "query",
    "expected_response",
    "category",
    "difficulty",
    "populations",
    "tools_expected",
    "source_reference",
    "needs_sme_review",
    "notes",
)
LIST_FIELDS = ("populations", "tools_expected")
PAIR_FIELDS = CSV_HEADER
METADATA_FIELDS = (
    "system_name",
    "created_date",
    "version",
    "total_pairs",
    "distribution",
    "user_populations",
    "population_coverage",
    "approach",
    "evaluation_mode",
    "recommended_tooling",
    "review_state",
    "validation_status",
    "generation_method",
)
OMITTED = "diagnostics truncated; additional errors omitted"  # the contract's wording


@dataclass(frozen=True)
class Limits:
    """Resource ceilings of the contract (issue 7, item 4)."""

    file_bytes: int = 5 * 1024 * 1024
    pairs: int = 1000  # evaluation pairs, and CSV data rows
    array_entries: int = 1000  # any other array
    list_entries: int = 64  # populations, tools_expected, user_populations
    properties: int = 64  # any object, population_coverage included
    evaluation_modes: int = 2
    content_chars: int = 16_384  # any string that is not an id or a name
    name_chars: int = 256  # ids, population and tool names, property names
    depth: int = 8  # containers, the root at 1
    nodes: int = 100_000  # JSON containers and scalars plus CSV root, records and fields
    diagnostics: int = 50

    @property
    def csv_field_chars(self) -> int:
        """The longest raw CSV field: a full list field (64 names of 256 characters and 63
        separators, 16,447 characters) plus one spreadsheet escape character."""
        return self.list_entries * self.name_chars + (self.list_entries - 1) + 1


LIMITS = Limits()


@dataclass(frozen=True)
class Shape:
    """The dataset's shape (seed 004: "a minimum dataset size and category balance"):
    the size floor, and the default share of each difficulty. The seed's contract gives
    the thirty-pair dataset as its example (easy 6, grounding 3, hard 12, negative 6,
    safety 3); its interview reference, which holds the exact rules, is not public, so
    these are that example's numbers.

    Failures (contract errors): fewer pairs than `min_pairs`; no pair of a difficulty in
    `required` (negative and safety are what the system must refuse or withstand, easy
    and hard what it must do). Warnings (the seed: "derive the difficulty distribution
    from the confirmed scope, adjusting the defaults when the risk profile warrants
    it"): a difficulty's share more than `tolerance` from its default, and no grounding
    pair (a system without grounding sources has none)."""

    min_pairs: int = 30
    shares: tuple[tuple[str, float], ...] = (
        ("easy", 0.2),
        ("grounding", 0.1),
        ("hard", 0.4),
        ("negative", 0.2),
        ("safety", 0.1),
    )
    tolerance: float = 0.10
    required: tuple[str, ...] = ("easy", "hard", "negative", "safety")


SHAPE = Shape()


def shape_findings(doc: dict[str, Any], shape: Shape = SHAPE) -> tuple[list[str], list[str]]:
    """(errors, warnings) of a dataset's shape (`Shape`), as `where: message` lines
    naming stable fields and categories, never pair content."""
    pairs = doc["evaluation_pairs"]
    n = len(pairs)
    errors: list[str] = []
    warnings: list[str] = []
    if n < shape.min_pairs:
        errors.append(f"json $.evaluation_pairs: {n} pairs, under the size floor of {shape.min_pairs}")
    actual = Counter(p["difficulty"] for p in pairs)
    for level, share in shape.shares:
        where = f"json $.metadata.distribution.{level}"
        if actual[level] == 0:
            if level in shape.required:
                errors.append(f"{where}: no {level} pair: the category balance needs every difficulty but grounding")
            else:
                warnings.append(f"{where}: no {level} pair (expected when the system has no grounding sources)")
            continue
        got = actual[level] / n if n else 0.0
        if abs(got - share) > shape.tolerance + 1e-12:
            warnings.append(
                f"{where}: {actual[level]} of {n} pairs ({got:.0%}), the default is {share:.0%} "
                f"+/- {shape.tolerance * 100:.0f} points: record why the confirmed scope warrants it"
            )
    return errors, warnings


@dataclass(frozen=True)
class ValidationResult:
    """What `evalkit dataset validate` prints: exactly the contract's
    `{"valid": ..., "errors": [...]}`. `warnings` (the shape's warnings and the privacy
    scan's findings) are never in that object: the command prints them on stderr."""

    valid: bool
    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Json]:
        return {"valid": self.valid, "errors": list(self.errors)}


@dataclass(frozen=True)
class CsvRow:
    """One CSV data row, decoded: `line` is where the record starts (1-based)."""

    line: int
    values: dict[str, Json]


# --- diagnostics -------------------------------------------------------------------------
class _Truncated(Exception):
    """Raised when the 51st diagnostic arrives: validation stops collecting."""


class _Diagnostics:
    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.items: list[str] = []

    def add(self, where: str, message: str) -> None:
        if len(self.items) >= self.cap:
            self.items[self.cap - 1] = OMITTED
            raise _Truncated
        self.items.append(f"{where}: {message}")

    def __len__(self) -> int:
        return len(self.items)


def _j(path: Iterable[Any]) -> str:
    """`json $.a[1].b` from path parts: ints are indices, `_Key` a redacted property."""
    out = "$"
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, _Key):
            out += f"[key #{part.n}]"
        else:
            out += f".{part}"
    return "json " + out


@dataclass(frozen=True)
class _Key:
    """A property name that is data (a population key, an unknown key): shown by its
    1-based position in its object, never by its text."""

    n: int


_STABLE_KEYS = frozenset({"metadata", "evaluation_pairs", *METADATA_FIELDS, *PAIR_FIELDS, *DIFFICULTIES})


def _part(parent: Any, key: str, parent_path: tuple[Any, ...]) -> Any:
    """The path part for `key` inside `parent`: its name when it is a contract field,
    else its position."""
    dynamic = parent_path[-1:] == ("population_coverage",)
    if not dynamic and key in _STABLE_KEYS:
        return key
    n = 1
    if isinstance(parent, dict):
        for i, k in enumerate(parent):
            if k == key:
                n = i + 1
                break
    return _Key(n)


# --- paths and reading ---------------------------------------------------------------------
def resolve_input(path: str | os.PathLike[str], *, cwd: str | os.PathLike[str] | None = None) -> Path:
    """The resolved `path`, which must not contain `..` and must resolve (symlinks
    followed) inside the working directory `cwd`; `InputError` otherwise."""
    raw = os.fspath(path)
    if raw == "":
        raise InputError("empty path")
    if "\x00" in raw:
        raise InputError("path contains a NUL character")
    if ".." in Path(raw).parts or ".." in raw.replace("\\", "/").split("/"):
        raise InputError("path must not contain '..'", raw)
    base = Path(cwd if cwd is not None else os.getcwd()).resolve()
    resolved = (base / raw).resolve()
    if not resolved.is_relative_to(base):
        raise InputError("path resolves outside the working directory", raw)
    return resolved


def _read_limited(path: Path, shown: str, what: str, limits: Limits, diags: _Diagnostics) -> bytes | None:
    """The file's bytes (`_io.read_file_bytes`: a regular file, never a FIFO or a
    device, at most limit+1 bytes ever read), or None (with a diagnostic) when it is
    over the size limit."""
    try:
        return read_file_bytes(path, limit=limits.file_bytes)
    except FileTooLarge as exc:
        size = f"{exc.size:,} bytes, " if exc.size is not None else ""
        diags.add(what, f"file is {size}over the {limits.file_bytes:,}-byte (5 MiB) limit")
        return None
    except InputError as exc:
        raise InputError(exc.message, shown) from None


def decode_utf8(data: bytes, shown: str) -> str:
    """Strict UTF-8 without a byte order mark and without NUL bytes; `InputError` (naming
    the line) otherwise."""
    if data.startswith(b"\xef\xbb\xbf"):
        raise InputError("starts with a UTF-8 byte order mark (BOM); save it as UTF-8 without BOM", shown, 1)
    nul = data.find(b"\x00")
    if nul >= 0:
        raise InputError("contains a NUL byte (not a text file?)", shown, data.count(b"\n", 0, nul) + 1)
    try:
        return data.decode("utf-8", errors="strict")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(f"not valid UTF-8 (byte offset {exc.start})", shown, line) from None


# --- stage 1: structural guard ---------------------------------------------------------------
# Why by hand: no library bounds depth and size before a JSON document is materialised.
# The raw-text scan strips strings with one possessive regex, then counts brackets,
# commas and empty containers with C-level string methods and numpy, so a 5 MiB nesting
# bomb costs milliseconds and never reaches the recursive parser.
_JSON_STRING = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+"', re.DOTALL)
_BRACKET_STEP = np.zeros(256, dtype=np.int8)
_BRACKET_STEP[[ord("["), ord("{")]] = 1
_BRACKET_STEP[[ord("]"), ord("}")]] = -1


def scan_json_text(text: str) -> tuple[int, int]:
    """(maximum nesting depth, node count) of a JSON text without parsing it.

    Nodes are containers and scalar values, the root included, property names not: for
    valid JSON, 1 + commas + non-empty containers (each comma starts one more value, and
    a non-empty container holds one more value than it has commas). Depth counts each
    object or array, the root at 1. Exact for valid JSON (anything else the parser rejects).
    """
    skeleton = "".join(_JSON_STRING.sub("0", text).split())  # strings out, then white space
    if not skeleton:
        return 0, 0
    opens = skeleton.count("[") + skeleton.count("{")
    empties = skeleton.count("[]") + skeleton.count("{}")
    nodes = 1 + skeleton.count(",") + opens - empties
    steps = _BRACKET_STEP[np.frombuffer(skeleton.encode("utf-8"), dtype=np.uint8)]
    depth = int(np.cumsum(steps, dtype=np.int32).max())
    return max(depth, 0), nodes


def _role_limits(role: str, limits: Limits) -> tuple[int, str]:
    if role == "pairs":
        return limits.pairs, "pairs"
    if role == "names":
        return limits.list_entries, "entries"
    if role == "modes":
        return limits.evaluation_modes, "evaluation modes"
    return limits.array_entries, "entries"


def _child_role(role: str, key: Any) -> str:
    """The role of a child in the contract's layout, used to pick its limit: `pairs`,
    `pair`, `names` (a list of names), `name`, `id`, `modes`, `coverage` or `any`."""
    if role == "root":
        return {"evaluation_pairs": "pairs", "metadata": "metadata"}.get(key, "any")
    if role == "metadata":
        return {"user_populations": "names", "evaluation_mode": "modes", "population_coverage": "coverage"}.get(
            key, "any"
        )
    if role == "pairs":
        return "pair"
    if role == "pair":
        if key == "id":
            return "id"
        return "names" if key in LIST_FIELDS else "any"
    if role == "names":
        return "name"
    return "any"


def check_structure(
    doc: Json, *, limits: Limits = LIMITS, diags: _Diagnostics | None = None, nodes_before: int = 0
) -> int:
    """Walk `doc` (parsed JSON, or any Python object given to the API) without recursion
    and report every resource-limit violation; returns the number of nodes visited.

    Repeated references count on each visit, and a cyclic object fails the depth limit.
    With no `diags`, raises `InputErrors` listing the violations.
    """
    own = diags is None
    d = diags if diags is not None else _Diagnostics(limits.diagnostics)
    nodes = nodes_before
    stack: list[tuple[Any, int, tuple[Any, ...], str]] = [(doc, 1, (), "root")]
    try:
        while stack:
            node, depth, path, role = stack.pop()
            nodes += 1
            if nodes > limits.nodes:
                d.add(_j(path), f"more than {limits.nodes:,} JSON and CSV nodes")
                break
            if isinstance(node, dict):
                if depth > limits.depth:
                    d.add(_j(path), f"nested deeper than {limits.depth} levels")
                    continue
                cap = limits.properties
                if len(node) > cap:
                    d.add(_j(path), f"{len(node):,} properties, over the {cap} limit")
                    continue
                children = []
                for i, (k, v) in enumerate(node.items()):
                    if not isinstance(k, str):
                        d.add(_j(path), "has a property name that is not a string")
                        continue
                    part = k if (k in _STABLE_KEYS and role != "coverage") else _Key(i + 1)
                    if len(k) > limits.name_chars:
                        d.add(
                            _j(path + (_Key(i + 1),)),
                            f"property name of {len(k):,} characters, over the {limits.name_chars} limit",
                        )
                        continue
                    children.append((v, depth + 1, path + (part,), _child_role(role, k)))
                stack.extend(reversed(children))
            elif isinstance(node, (list, tuple)):
                if depth > limits.depth:
                    d.add(_j(path), f"nested deeper than {limits.depth} levels")
                    continue
                cap, what = _role_limits(role, limits)
                if len(node) > cap:
                    d.add(_j(path), f"{len(node):,} {what}, over the {cap:,} limit")
                    continue
                stack.extend(reversed([(v, depth + 1, path + (i,), _child_role(role, i)) for i, v in enumerate(node)]))
            elif isinstance(node, str):
                if role in ("id", "name"):
                    cap, what = limits.name_chars, "an id or name"
                else:
                    cap, what = limits.content_chars, "a content string"
                if len(node) > cap:
                    d.add(_j(path), f"{len(node):,} characters, over the {cap:,} limit for {what}")
            elif node is None or isinstance(node, (bool, int, float)):
                pass
            else:
                d.add(_j(path), f"is not a JSON value ({type(node).__name__})")
    except _Truncated:
        if not own:
            raise
    if own and d.items:
        raise InputErrors([InputError(m) for m in d.items])
    return nodes


def _field_too_long(exc: csv.Error) -> bool:
    return "field larger than field limit" in str(exc)


def parse_csv(
    text: str,
    shown: str,
    *,
    limits: Limits = LIMITS,
    node_budget: int | None = None,
    limit_diags: _Diagnostics | None = None,
    format_diags: _Diagnostics | None = None,
) -> list[CsvRow]:
    """Parse the CSV companion strictly and decode its rows.

    Resource limits (field size before the field is built, data rows, nodes: the root,
    each record and each field) go to `limit_diags` and stop parsing; format problems
    (header, field count, list items, booleans) go to `format_diags`. Malformed quoting
    raises `InputError` naming the line. With no diagnostics objects given, problems
    raise `InputErrors`.
    """
    own = limit_diags is None and format_diags is None
    ld = limit_diags if limit_diags is not None else _Diagnostics(limits.diagnostics)
    fd = format_diags if format_diags is not None else ld
    budget = limits.nodes if node_budget is None else node_budget
    rows: list[CsvRow] = []
    previous = csv.field_size_limit()
    # csv's limit is process-wide; set for this parse and restored after.
    csv.field_size_limit(limits.csv_field_chars)
    try:
        reader = csv.reader(io.StringIO(text, newline=""), strict=True)
        nodes = 1
        start = 1
        data_rows = 0
        first = True
        while True:
            try:
                record = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:
                line = reader.line_num or 1
                if _field_too_long(exc):
                    ld.add(f"csv line {start}", f"a field is longer than {limits.csv_field_chars:,} characters")
                    break
                raise InputError(f"not valid CSV: {exc}", shown, line) from None
            line, start = start, reader.line_num + 1
            nodes += 1 + len(record)
            if nodes > budget:
                ld.add(f"csv line {line}", f"more than {limits.nodes:,} JSON and CSV nodes")
                break
            if first:
                first = False
                if tuple(record) != CSV_HEADER:
                    fd.add("csv line 1", "header must be exactly " + ",".join(CSV_HEADER))
                    break  # no row is read under a wrong header
                continue
            data_rows += 1
            if data_rows > limits.pairs:
                ld.add(f"csv line {line}", f"more than {limits.pairs:,} data rows")
                break
            if len(record) != len(CSV_HEADER):
                fd.add(f"csv line {line}", f"has {len(record)} fields, expected {len(CSV_HEADER)}")
                continue
            values = _decode_row(record, line, limits, ld, fd)
            if values is not None:
                rows.append(CsvRow(line, values))
        if first:
            fd.add("csv line 1", "empty file: the header " + ",".join(CSV_HEADER) + " is missing")
    except _Truncated:
        if not own:
            raise
    finally:
        csv.field_size_limit(previous)
    if own and ld.items:
        raise InputErrors([InputError(m, shown) for m in ld.items])
    return rows


def unescape_cell(cell: str) -> str:
    """Undo the spreadsheet escape: one leading `'` before `=`, `+`, `-`, `@` or `'`."""
    if cell[:1] == "'" and cell[1:2] in ("=", "+", "-", "@", "'"):
        return cell[1:]
    return cell


def escape_cell(cell: str) -> str:
    """A leading `'` on cells a spreadsheet would run as a formula (and on cells that
    would otherwise lose a `'` to `unescape_cell`), so the CSV opens as text."""
    if cell[:1] in ("=", "+", "-", "@") or (cell[:1] == "'" and cell[1:2] in ("=", "+", "-", "@", "'")):
        return "'" + cell
    return cell


def _decode_row(
    record: list[str], line: int, limits: Limits, ld: _Diagnostics, fd: _Diagnostics
) -> dict[str, Json] | None:
    values: dict[str, Json] = {}
    ok = True
    for name, raw in zip(CSV_HEADER, record, strict=False):  # a short record: its missing cells stay empty
        cell = unescape_cell(raw)
        where = f"csv line {line}, field {name}"
        if name in LIST_FIELDS:
            items = [] if cell.strip() == "" else [x.strip() for x in cell.split(";")]
            if len(items) > limits.list_entries:
                ld.add(where, f"{len(items)} items, over the {limits.list_entries} limit")
                ok = False
                continue
            long = [x for x in items if len(x) > limits.name_chars]
            if long:
                ld.add(where, f"an item of {len(long[0]):,} characters, over the {limits.name_chars} limit for a name")
                ok = False
                continue
            if any(x == "" for x in items):
                fd.add(where, "has an empty item (two ';' in a row, or a ';' at an end)")
                ok = False
            elif len(set(items)) != len(items):
                fd.add(where, "names the same item twice")
                ok = False
            values[name] = items
            continue
        cap = limits.name_chars if name == "id" else limits.content_chars
        if len(cell) > cap:
            ld.add(where, f"{len(cell):,} characters, over the {cap:,} limit")
            ok = False
            continue
        if name == "needs_sme_review":
            if cell not in ("true", "false"):
                fd.add(where, "must be true or false")
                ok = False
            values[name] = cell == "true"
        elif name == "source_reference":
            values[name] = cell if cell != "" else None
        else:
            values[name] = cell
    return values if ok else None


# --- stage 2: schema -------------------------------------------------------------------------
def _inline_refs(node: Json, defs: dict[str, Json], depth: int = 0) -> Json:
    """Replace local `#/$defs/x` references by their targets (the schema is not
    recursive): jsonschema then skips reference resolution, 2-3x faster per pair."""
    if depth > 32:
        raise InputError("dataset schema: references nest too deep (a cycle?)")
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            target = defs.get(ref[len("#/$defs/") :])
            if target is None:
                raise InputError(f"dataset schema: unresolved reference {ref}")
            rest = {k: v for k, v in node.items() if k != "$ref"}
            inlined = _inline_refs(target, defs, depth + 1)
            return {"allOf": [inlined, _inline_refs(rest, defs, depth + 1)]} if rest else inlined
        return {k: _inline_refs(v, defs, depth + 1) for k, v in node.items() if k != "$defs"}
    if isinstance(node, list):
        return [_inline_refs(v, defs, depth + 1) for v in node]
    return node


_VALIDATORS: dict[str, Draft202012Validator] = {}


def load_schema(path: str | os.PathLike[str] | None = None) -> Json:
    """The contract's JSON Schema (the packaged `schemas/dataset-v1.json` by default),
    checked against the Draft 2020-12 meta-schema. `InputError` when it cannot be set up."""
    Draft202012Validator, SchemaError = jsonschema().Draft202012Validator, jsonschema().SchemaError
    where = os.fspath(path) if path is not None else SCHEMA_RESOURCE
    try:
        if path is None:
            text = resources.files("evalkit").joinpath(SCHEMA_RESOURCE).read_text(encoding="utf-8")
        else:
            text = Path(path).read_text(encoding="utf-8")
        schema = json.loads(text)
        Draft202012Validator.check_schema(schema)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"dataset schema cannot be loaded: {exc.__class__.__name__}", where) from None
    except SchemaError as exc:
        raise InputError(f"dataset schema is not a valid Draft 2020-12 schema: {exc.message}", where) from None
    return schema


def _validator(schema_path: str | os.PathLike[str] | None) -> Draft202012Validator:
    key = os.fspath(schema_path) if schema_path is not None else ""
    v = _VALIDATORS.get(key)
    if v is None:
        Draft202012Validator = jsonschema().Draft202012Validator

        schema = load_schema(schema_path)
        fast = _inline_refs(schema, schema.get("$defs", {}))
        fast["$schema"] = schema.get("$schema")
        # The format checker is what makes `"format": "date"` an assertion (it is only an
        # annotation in Draft 2020-12 otherwise); jsonschema checks `date` with no extra package.
        v = Draft202012Validator(fast, format_checker=Draft202012Validator.FORMAT_CHECKER)
        probe = Draft202012Validator({"format": "date"}, format_checker=Draft202012Validator.FORMAT_CHECKER)
        if probe.is_valid("2024-02-30") or not probe.is_valid("2024-02-29"):
            raise InputError("dataset schema setup: this jsonschema does not check the date format")
        _VALIDATORS[key] = v
    return v


_PATTERN_MESSAGES = {
    "^[A-Za-z0-9][A-Za-z0-9._-]*$": "must start with a letter or digit and use only letters, digits, '.', '_' and '-'",
    "^[0-9]+\\.[0-9]+\\.[0-9]+$": "must be a version MAJOR.MINOR.PATCH",
    "^[^\\u0000]*$": "must not contain a NUL character",
    "^[^;\\s](?:[^;\\r\\n\\u0000]*[^;\\s])?$": (
        "must not contain ';' or a line break, nor start or end with white space"
    ),
}


def _schema_message(err: Any) -> list[tuple[tuple[Any, ...], str]]:
    """Messages for one jsonschema error, built from the schema keyword and the schema's
    own values, never from the instance (which may be pair content)."""
    kw, val, inst = err.validator, err.validator_value, err.instance
    if kw == "required":
        missing = [p for p in val if isinstance(inst, dict) and p not in inst]
        return [((p,), "missing required field") for p in missing]
    if kw == "type":
        types = val if isinstance(val, list) else [val]
        return [((), "must be of type " + " or ".join(types))]
    if kw == "enum":
        return [((), "must be one of: " + ", ".join(json.dumps(v) for v in val))]
    if kw == "const":
        return [((), f"must be {json.dumps(val)}")]
    if kw == "format":
        return [((), "must be a calendar date YYYY-MM-DD" if val == "date" else f"must be a valid {val}")]
    if kw == "pattern":
        return [((), _PATTERN_MESSAGES.get(val, "does not match the required pattern"))]
    if kw == "additionalProperties":
        n = len([k for k in inst if k not in (err.schema.get("properties") or {})]) if isinstance(inst, dict) else 0
        return [((), f"has {n} propert{'y' if n == 1 else 'ies'} the contract does not define")]
    if kw == "propertyNames":
        return [((), "has a property name that is not a valid population name")]
    if kw == "oneOf" and isinstance(err.schema.get("oneOf"), list):
        return [((), "must be null or a non-empty string")]
    limits = {
        "minLength": "must not be empty" if val == 1 else f"must have at least {val} characters",
        "maxLength": f"must have at most {val:,} characters" if isinstance(val, int) else "",
        "minItems": f"must have at least {val} item{'s' if val != 1 else ''}",
        "maxItems": f"must have at most {val} items",
        "uniqueItems": "must not repeat an item",
        "minimum": f"must be at least {val}",
        "maximum": f"must be at most {val}",
        "maxProperties": f"must have at most {val} properties",
    }
    if kw in limits:
        return [((), limits[kw])]
    return [((), f"violates schema keyword {kw!r}")]


def _render_path(doc: Json, parts: Iterable[Any]) -> tuple[Any, ...]:
    out: tuple[Any, ...] = ()
    node = doc
    for p in parts:
        if isinstance(p, int):
            out += (p,)
            node = node[p] if isinstance(node, list) and 0 <= p < len(node) else None
        else:
            out += (_part(node, p, out),)
            node = node.get(p) if isinstance(node, dict) else None
    return out


def _schema_diagnostics(doc: Json, validator: Draft202012Validator, d: _Diagnostics) -> None:
    errors = sorted(validator.iter_errors(doc), key=lambda e: [(str(type(x)), x) for x in e.absolute_path])
    for err in errors:
        base = _render_path(doc, err.absolute_path)
        for sub, msg in _schema_message(err):
            d.add(_j(base + sub), msg)


# --- stage 3: rules --------------------------------------------------------------------------
def _norm(value: Json) -> Json:
    if isinstance(value, str):
        return value.replace("\r\n", "\n")
    return value


def _rule_diagnostics(doc: dict[str, Any], rows: list[CsvRow], d: _Diagnostics) -> None:
    md = doc["metadata"]
    pairs = doc["evaluation_pairs"]
    # 1. unique pair ids
    first_index: dict[str, int] = {}
    for i, p in enumerate(pairs):
        if p["id"] in first_index:
            d.add(
                _j(("evaluation_pairs", i, "id")),
                f"duplicates the id of {_j(('evaluation_pairs', first_index[p['id']]))[5:]}",
            )
        else:
            first_index[p["id"]] = i
    # 2. total_pairs
    if md["total_pairs"] != len(pairs):
        d.add(_j(("metadata", "total_pairs")), f"records {md['total_pairs']} but the dataset has {len(pairs)} pairs")
    # 3. distribution
    actual = Counter(p["difficulty"] for p in pairs)
    for level in DIFFICULTIES:
        if md["distribution"][level] != actual[level]:
            d.add(
                _j(("metadata", "distribution", level)),
                f"records {md['distribution'][level]} but {actual[level]} pairs have difficulty {level}",
            )
    # 4. population coverage: one key per confirmed population, each the count of pairs naming it
    confirmed = md["user_populations"]
    coverage = md["population_coverage"]
    keys = list(coverage)
    naming = Counter(name for p in pairs for name in p["populations"])
    for k, name in enumerate(confirmed):
        where_pop = f"$.metadata.user_populations[{k}]"
        if name not in coverage:
            d.add(
                _j(("metadata", "population_coverage")),
                f"has no entry for {where_pop} (record 0 when no pair names it)",
            )
        elif coverage[name] != naming[name]:
            d.add(
                _j(("metadata", "population_coverage", _Key(keys.index(name) + 1))),
                f"records {coverage[name]} but {naming[name]} pairs name {where_pop}",
            )
    known = set(confirmed)
    for n, key in enumerate(keys):
        if key not in known:
            d.add(
                _j(("metadata", "population_coverage", _Key(n + 1))),
                "is not a confirmed population (not in $.metadata.user_populations)",
            )
    # 5. no unknown population on a pair
    for i, p in enumerate(pairs):
        for j, name in enumerate(p["populations"]):
            if name not in known:
                d.add(
                    _j(("evaluation_pairs", i, "populations", j)),
                    "names a population not in $.metadata.user_populations",
                )
    # 6. grounding pairs rest on a source or are flagged for review
    for i, p in enumerate(pairs):
        if p["difficulty"] == "grounding" and p["source_reference"] is None and not p["needs_sme_review"]:
            d.add(_j(("evaluation_pairs", i)), "a grounding pair needs a source_reference or needs_sme_review: true")
    # 7. every CSV row equals its JSON pair, field by field (matched by id)
    row_of: dict[str, CsvRow] = {}
    for row in rows:
        rid = row.values["id"]
        if rid in row_of:
            d.add(f"csv line {row.line}, field id", f"duplicates the id on csv line {row_of[rid].line}")
        elif rid not in first_index:
            d.add(f"csv line {row.line}, field id", "no JSON pair has this id")
            row_of[rid] = row
        else:
            row_of[rid] = row
    for rid, i in first_index.items():
        found = row_of.get(rid)
        if found is None:
            d.add(_j(("evaluation_pairs", i)), "has no CSV row")
            continue
        row = found
        for name in PAIR_FIELDS[1:]:
            if _norm(row.values[name]) != _norm(pairs[i][name]):
                d.add(f"csv line {row.line}, field {name}", f"differs from {_j(('evaluation_pairs', i, name))[5:]}")


# --- validation entry points ----------------------------------------------------------------
def _parse_json(text: str, shown: str) -> Json:
    def pairs_hook(items: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(items)
        if len(obj) != len(items):
            raise ValueError("an object repeats a property name")
        return obj

    def bad_constant(name: str) -> Any:
        raise ValueError(f"{name} is not valid JSON")

    try:
        return json.loads(text, object_pairs_hook=pairs_hook, parse_constant=bad_constant)
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON: {exc.msg} (column {exc.colno})", shown, exc.lineno) from None
    except RecursionError:
        raise InputError("not valid JSON: nested too deep for the parser", shown) from None
    except ValueError as exc:
        raise InputError(f"not valid JSON: {exc}", shown) from None


def validate_texts(
    json_text: str,
    csv_text: str,
    *,
    json_name: str = "dataset.json",
    csv_name: str = "dataset.csv",
    limits: Limits = LIMITS,
    schema_path: str | os.PathLike[str] | None = None,
) -> ValidationResult:
    """Validate decoded JSON and CSV texts against the contract (stages 1-3). Parse
    problems raise `InputError`; contract failures are in the result."""
    d = _Diagnostics(limits.diagnostics)
    validator = _validator(schema_path)
    try:
        _validate_into(json_text, csv_text, json_name, csv_name, limits, validator, d)
    except _Truncated:
        pass
    return ValidationResult(valid=not d.items, errors=tuple(d.items))


def _validate_into(
    json_text: str,
    csv_text: str,
    json_name: str,
    csv_name: str,
    limits: Limits,
    validator: Draft202012Validator,
    d: _Diagnostics,
) -> Json:
    """Add every diagnostic of the two texts to `d`; the parsed JSON document (None when
    the limits stopped the check before parsing it)."""
    depth, nodes = scan_json_text(json_text)
    if depth > limits.depth:
        d.add("json $", f"nested {depth:,} levels deep, over the {limits.depth} limit")
    if nodes > limits.nodes:
        d.add("json $", f"{nodes:,} nodes, over the {limits.nodes:,} limit for JSON and CSV together")
    if d.items:
        return None
    doc = _parse_json(json_text, json_name)
    json_nodes = check_structure(doc, limits=limits, diags=d)
    # Format problems wait until the limits are known to hold; they are bounded by the
    # row limit (at most three per row), so this collector needs no cap of its own.
    csv_format = _Diagnostics(3 * limits.pairs + 1)
    rows = parse_csv(
        csv_text, csv_name, limits=limits, node_budget=limits.nodes - json_nodes, limit_diags=d, format_diags=csv_format
    )
    if d.items:
        return doc
    _schema_diagnostics(doc, validator, d)
    for item in csv_format.items:
        where, _, msg = item.partition(": ")
        d.add(where, msg)
    if d.items:
        return doc
    _rule_diagnostics(doc, rows, d)
    return doc


def validate_files(
    json_path: str | os.PathLike[str],
    csv_path: str | os.PathLike[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    limits: Limits = LIMITS,
    schema_path: str | os.PathLike[str] | None = None,
    strict: bool = False,
    privacy: str | os.PathLike[str] | None = None,
    shape: Shape | None = SHAPE,
    strict_shape: bool = False,
) -> ValidationResult:
    """Validate a dataset's JSON file and CSV companion (what `evalkit dataset validate`
    runs). Paths must stay inside `cwd` (default: the working directory). Once the
    contract's rules hold, its `shape` (size floor and difficulty balance, `Shape`;
    None: not checked) adds warnings: the contract's own validator does not check the
    shape, so its exit status stays the validator's; under `strict_shape` the shape's
    failures are errors. The privacy scan (`evalkit.pii.privacy.scan_dataset`,
    allow-list from the `privacy` file) adds warnings; under `strict` they are errors
    and the dataset is not valid."""
    result, doc = _validate_paths(json_path, csv_path, cwd, limits, schema_path)
    if not isinstance(doc, dict):
        return result
    if shape is not None and result.valid:
        result = _with_shape(doc, shape, strict_shape, limits)
    policy = _privacy.load_policy_file(resolve_input(privacy, cwd=cwd)) if privacy is not None else None
    found = _privacy.scan_dataset(doc, resolve_input(json_path, cwd=cwd), os.fspath(json_path), policy)
    if not found:
        return result
    if strict:
        return ValidationResult(valid=False, errors=result.errors + tuple(found), warnings=result.warnings)
    return ValidationResult(valid=result.valid, errors=result.errors, warnings=result.warnings + tuple(found))


def _with_shape(doc: dict[str, Any], shape: Shape, strict: bool, limits: Limits) -> ValidationResult:
    """A contract-valid dataset's result with its shape's findings: the failures are
    errors only when `strict` (`--strict-shape`), warnings otherwise."""
    failures, warnings = shape_findings(doc, shape)
    if strict:
        return ValidationResult(not failures, tuple(failures[: limits.diagnostics]), tuple(warnings))
    return ValidationResult(True, (), tuple(failures + warnings))


def _validate_paths(
    json_path: str | os.PathLike[str],
    csv_path: str | os.PathLike[str],
    cwd: str | os.PathLike[str] | None,
    limits: Limits,
    schema_path: str | os.PathLike[str] | None,
) -> tuple[ValidationResult, Json]:
    """`validate_files`, and the JSON document it parsed (valid only when the result is):
    a caller that needs the document reads the file once, the one it validated."""
    jp, cp = resolve_input(json_path, cwd=cwd), resolve_input(csv_path, cwd=cwd)
    shown_j, shown_c = os.fspath(json_path), os.fspath(csv_path)
    validator = _validator(schema_path)  # schema-setup problems: exit 2 before any reading
    d = _Diagnostics(limits.diagnostics)
    doc: Json = None
    try:
        jraw = _read_limited(jp, shown_j, "json", limits, d)
        craw = _read_limited(cp, shown_c, "csv", limits, d)
        if jraw is not None and craw is not None and not d.items:
            jtext, ctext = decode_utf8(jraw, shown_j), decode_utf8(craw, shown_c)
            del jraw, craw
            doc = _validate_into(jtext, ctext, shown_j, shown_c, limits, validator, d)
    except _Truncated:
        pass
    return ValidationResult(valid=not d.items, errors=tuple(d.items)), doc


# --- writing ----------------------------------------------------------------------------------
def csv_text(pairs: Iterable[dict[str, Json]], *, extra_columns: tuple[str, ...] = ()) -> str:
    """The CSV companion of `pairs`: the contract's header, `;`-joined lists, `true`/
    `false`, empty cells for null, and spreadsheet formula cells escaped (`escape_cell`)."""
    buf = io.StringIO(newline="")
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_HEADER + extra_columns)
    for p in pairs:
        cells = []
        for name in CSV_HEADER:
            v = p[name]
            if name in LIST_FIELDS:
                cell = ";".join(v)
            elif isinstance(v, bool):
                cell = "true" if v else "false"
            elif v is None:
                cell = ""
            else:
                cell = str(v)
            cells.append(escape_cell(cell))
        writer.writerow(cells + [""] * len(extra_columns))
    return buf.getvalue()


def json_text(dataset: dict[str, Json]) -> str:
    return json.dumps(dataset, indent=2, ensure_ascii=False) + "\n"


# --- authoring: new ---------------------------------------------------------------------------
class _SourceLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no type stubs
    """YAML without aliases (no billion-laughs expansion) and without implicit dates
    (a date stays the string the author wrote)."""

    def compose_node(self, parent: Any, index: Any) -> Any:  # noqa: D401 - PyYAML hook
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, "aliases are not allowed", event.start_mark)
        return super().compose_node(parent, index)


_SourceLoader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:timestamp"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}

PAIR_DEFAULTS: dict[str, Json] = {
    "populations": [],
    "tools_expected": [],
    "source_reference": None,
    "needs_sme_review": False,
    "notes": "",
}
DERIVED_METADATA = ("total_pairs", "distribution", "population_coverage")


def load_source(
    path: str | os.PathLike[str], *, cwd: str | os.PathLike[str] | None = None, limits: Limits = LIMITS
) -> dict[str, Json]:
    """Read an authoring source (`.json`, or `.yaml`/`.yml`), bounded like a dataset."""
    shown = os.fspath(path)
    p = resolve_input(path, cwd=cwd)
    d = _Diagnostics(limits.diagnostics)
    data = _read_limited(p, shown, "source", limits, d)
    if data is None:
        raise InputError(d.items[0].partition(": ")[2], shown)
    text = decode_utf8(data, shown)
    if p.suffix.lower() in (".yaml", ".yml"):
        try:
            doc = yaml.load(text, Loader=_SourceLoader)  # noqa: S506 - a SafeLoader subclass
        except yaml.MarkedYAMLError as exc:
            line = exc.problem_mark.line + 1 if exc.problem_mark else None
            raise InputError(f"not valid YAML: {exc.problem or exc.context}", shown, line) from None
        except (yaml.YAMLError, RecursionError) as exc:
            raise InputError(f"not valid YAML: {exc.__class__.__name__}", shown) from None
    else:
        depth, nodes = scan_json_text(text)
        if depth > limits.depth or nodes > limits.nodes:
            raise InputError(
                f"nested {depth} levels deep with {nodes:,} nodes: over the limits "
                f"({limits.depth} levels, {limits.nodes:,} nodes)",
                shown,
            )
        doc = _parse_json(text, shown)
    try:
        check_structure(doc, limits=limits)
    except InputErrors as exc:
        raise InputErrors([InputError(e.message, shown) for e in exc.errors]) from None
    if not isinstance(doc, dict):
        raise InputError("the source must be an object with metadata and evaluation_pairs", shown)
    return doc


def build_dataset(source: dict[str, Json], *, today: date | None = None) -> tuple[dict[str, Json], list[str]]:
    """The dataset (contract order, derived counts computed from the pairs) for an
    authoring source, and notes about derived values the source gave differently.

    The source holds `metadata` (without the derived `total_pairs`, `distribution`,
    `population_coverage`; `created_date` defaults to today (UTC), `version` to 1.0.0,
    `review_state` to draft, `validation_status` to ai-generated) and `evaluation_pairs`
    (`id` defaults to the 1-based position as 001, 002, ...; `populations` and
    `tools_expected` to [], `source_reference` to null, `needs_sme_review` to false,
    `notes` to ""). Validity is checked by `validate_texts` afterwards.
    """
    md_in = source.get("metadata")
    pairs_in = source.get("evaluation_pairs")
    if not isinstance(md_in, dict):
        raise InputError("source: metadata must be an object", json_path="$.metadata")
    if not isinstance(pairs_in, list):
        raise InputError("source: evaluation_pairs must be a list", json_path="$.evaluation_pairs")
    pairs: list[dict[str, Json]] = []
    for i, p in enumerate(pairs_in):
        if not isinstance(p, dict):
            raise InputError("source: a pair must be an object", json_path=f"$.evaluation_pairs[{i}]")
        pair = {"id": f"{i + 1:03d}"}
        pair.update({k: v for k, v in p.items() if k not in PAIR_FIELDS})  # unknown keys: schema names them
        for name in PAIR_FIELDS:
            if name in p:
                pair[name] = p[name]
            elif name in PAIR_DEFAULTS:
                pair[name] = json.loads(json.dumps(PAIR_DEFAULTS[name]))
        pairs.append({k: pair[k] for k in [*PAIR_FIELDS, *[k for k in pair if k not in PAIR_FIELDS]] if k in pair})
    confirmed = md_in.get("user_populations", [])
    naming = Counter(
        n for p in pairs if isinstance(p.get("populations"), list) for n in p["populations"] if isinstance(n, str)
    )
    derived = {
        "total_pairs": len(pairs),
        "distribution": {lvl: sum(1 for p in pairs if p.get("difficulty") == lvl) for lvl in DIFFICULTIES},
        "population_coverage": (
            {n: naming[n] for n in confirmed if isinstance(n, str)} if isinstance(confirmed, list) else {}
        ),
    }
    notes = [
        f"metadata.{k}: the source's value differs from the pairs; recomputed"
        for k in DERIVED_METADATA
        if k in md_in and md_in[k] != derived[k]
    ]
    defaults = {
        "created_date": (today or datetime.now(UTC).date()).isoformat(),
        "version": "1.0.0",
        "review_state": "draft",
        "validation_status": "ai-generated",
    }
    md: dict[str, Json] = {}
    for name in METADATA_FIELDS:
        if name in derived:
            md[name] = derived[name]
        elif name in md_in:
            md[name] = md_in[name]
        elif name in defaults:
            md[name] = defaults[name]
    md.update({k: v for k, v in md_in.items() if k not in METADATA_FIELDS})
    return {"metadata": md, "evaluation_pairs": pairs}, notes


def _errors_as_input(result: ValidationResult, shown: str) -> InputErrors:
    return InputErrors([InputError(e, shown) for e in result.errors])


def _scan_gate(found: list[str], allowed: bool) -> None:
    """Stop the write when the privacy scan found anything, unless the caller allowed it."""
    if found and not allowed:
        lines = "\n".join(f"  {f}" for f in found)
        raise PrivateDataFound(
            f"scan gate: personal data or a secret in the source, nothing written:\n{lines}\n"
            "replace it with synthetic content, or use --redact (typed placeholders), "
            "or --allow-private-data to write it anyway"
        )


def new_dataset(
    source_path: str | os.PathLike[str],
    json_out: str | os.PathLike[str],
    csv_out: str | os.PathLike[str],
    *,
    force: bool = False,
    today: date | None = None,
    cwd: str | os.PathLike[str] | None = None,
    redact: bool = False,
    scope: str | os.PathLike[str] | None = None,
    allow_private_data: bool = False,
) -> tuple[dict[str, Json], list[str]]:
    """Write both forms of a dataset from one authoring source, so they cannot disagree.
    With `scope` (a scope file, `evalkit.datasets.scope`), nothing is generated unless that
    scope is confirmed, and the source's metadata is filled from it (a contradiction is
    refused).
    The result is validated exactly as `validate` would before anything is written;
    problems raise `InputErrors` (exit 2) and leave no file behind. Personal data and
    secrets in the source are the scan gate's failure (seed 004: "stop the durable
    write"): `PrivateDataFound` (exit 1), nothing written, unless `allow_private_data`
    (then notes); `redact` replaces them with typed placeholders (each pair its own
    scope) and writes `<json_out stem>.redaction-log.json` beside the JSON."""
    scope_notes: list[str] = []
    if scope is not None:
        confirmed = require_confirmed(scope)  # before the source is even read: no scope, no generation
    source = load_source(source_path, cwd=cwd)
    if scope is not None and isinstance(source.get("metadata"), dict):
        scope_notes = apply_scope(source["metadata"], confirmed, os.fspath(source_path))
    dataset, notes = build_dataset(source, today=today)
    notes = scope_notes + notes
    log_file: tuple[Path, str] | None = None
    if redact:
        dataset, log = _privacy.redact_dataset(dataset)
        log_file = (
            resolve_input(json_out, cwd=cwd).with_suffix(_privacy.DATASET_LOG_SUFFIX),
            json.dumps(log, indent=2, ensure_ascii=False) + "\n",
        )
        notes.append(f"{_privacy.redaction_summary(log)}; log: {log_file[0]}")
    else:
        found = _privacy.scan_dataset(dataset, resolve_input(source_path, cwd=cwd), os.fspath(source_path), None)
        _scan_gate(found, allow_private_data)
        notes += found
    jtext, ctext = json_text(dataset), csv_text(dataset["evaluation_pairs"])
    result = validate_texts(jtext, ctext)
    if not result.valid:
        raise _errors_as_input(result, os.fspath(source_path))
    targets = [(resolve_input(json_out, cwd=cwd), jtext), (resolve_input(csv_out, cwd=cwd), ctext)]
    if log_file is not None:
        targets.append(log_file)
    if targets[0][0] == targets[1][0]:
        raise InputError("--json and --csv name the same file")
    for target, _ in targets:
        if target.exists() and not force:
            raise InputError("refusing to overwrite an existing file (use --force)", target)
    write_atomic_all(targets)
    return dataset, notes


# --- reading a valid dataset --------------------------------------------------------------------
def load_dataset(
    json_path: str | os.PathLike[str], csv_path: str | os.PathLike[str], *, cwd: str | os.PathLike[str] | None = None
) -> dict[str, Json]:
    """The JSON dataset after a full validation of both files; `InputErrors` (exit 2)
    listing the diagnostics when it is not valid."""
    result, doc = _validate_paths(json_path, csv_path, cwd, LIMITS, None)
    if not result.valid:
        raise InputErrors(
            [
                InputError(
                    "dataset is not valid (see `evalkit dataset validate`): " + result.errors[0], os.fspath(json_path)
                )
            ]
            + [InputError(e, os.fspath(json_path)) for e in result.errors[1:]]
        )
    return doc  # type: ignore[no-any-return]  # a valid dataset is an object


# --- authoring: sample --------------------------------------------------------------------------
def sample_pairs(pairs: list[dict[str, Json]], size: int, seed: int) -> list[dict[str, Json]]:
    """A seeded review sample stratified by difficulty and population.

    Sizes per difficulty are proportional to the stratum (largest remainder), with one
    pair for every non-empty difficulty when `size` allows. Within a difficulty, pairs
    that name a population the sample does not cover yet come first (the most new
    populations first), the rest in seeded random order. Returned in dataset order.
    Why by hand: no library stratifies over one partition (difficulty) and one
    overlapping label set (populations) at once.
    """
    if size < 1:
        raise InputError("sample size must be at least 1")
    size = min(size, len(pairs))
    rng = random.Random(seed)
    strata: dict[str, list[int]] = {lvl: [] for lvl in DIFFICULTIES}
    for i, p in enumerate(pairs):
        strata[p["difficulty"]].append(i)
    nonempty = [lvl for lvl in DIFFICULTIES if strata[lvl]]
    alloc = {lvl: 0 for lvl in nonempty}
    if size < len(nonempty):
        for lvl in rng.sample(nonempty, size):
            alloc[lvl] = 1
    else:
        # one per difficulty, the rest by largest remainder over what each stratum has left
        for lvl in nonempty:
            alloc[lvl] = 1
        remaining = size - len(nonempty)
        room = {lvl: len(strata[lvl]) - 1 for lvl in nonempty}
        total_room = sum(room.values())
        if remaining and total_room:
            quotas = {lvl: remaining * room[lvl] / total_room for lvl in nonempty}
            for lvl in nonempty:
                alloc[lvl] += int(quotas[lvl])
            left = size - sum(alloc.values())
            order = sorted(nonempty, key=lambda lvl: (-(quotas[lvl] - int(quotas[lvl])), rng.random()))
            for lvl in order:
                if left and alloc[lvl] < len(strata[lvl]):
                    alloc[lvl] += 1
                    left -= 1
    covered: set[str] = set()
    chosen: list[int] = []
    for lvl in nonempty:
        candidates = strata[lvl][:]
        rng.shuffle(candidates)
        for _ in range(alloc[lvl]):
            best = max(
                range(len(candidates)), key=lambda k: (len(set(pairs[candidates[k]]["populations"]) - covered), -k)
            )
            pick = candidates.pop(best)
            covered.update(pairs[pick]["populations"])
            chosen.append(pick)
    return [pairs[i] for i in sorted(chosen)]


def sample_dataset(
    json_path: str | os.PathLike[str],
    csv_path: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    *,
    size: int,
    seed: int,
    force: bool = False,
    cwd: str | os.PathLike[str] | None = None,
) -> tuple[list[dict[str, Json]], str]:
    """Draw a review sample into `out_path` (the dataset's CSV columns plus an empty
    `review_feedback` column, spreadsheet-escaped) and move `review_state` from draft to
    sampled (a sampled dataset may be sampled again). Returns the sample and the state."""
    dataset = load_dataset(json_path, csv_path, cwd=cwd)
    state = dataset["metadata"]["review_state"]
    if state == "confirmed":
        raise InputError("review_state is already confirmed: nothing to sample", json_path="$.metadata.review_state")
    chosen = sample_pairs(dataset["evaluation_pairs"], size, seed)
    out = resolve_input(out_path, cwd=cwd)
    jp = resolve_input(json_path, cwd=cwd)
    if out in (jp, resolve_input(csv_path, cwd=cwd)):
        raise InputError("--out must not be the dataset's own file", os.fspath(out_path))
    if out.exists() and not force:
        raise InputError("refusing to overwrite an existing file (use --force)", os.fspath(out_path))
    dataset["metadata"]["review_state"] = "sampled"
    write_atomic_all([(out, csv_text(chosen, extra_columns=("review_feedback",))), (jp, json_text(dataset))])
    return chosen, "sampled"


def confirm_dataset(
    json_path: str | os.PathLike[str], csv_path: str | os.PathLike[str], *, cwd: str | os.PathLike[str] | None = None
) -> str:
    """Move `review_state` from sampled to confirmed, after the review's feedback is in."""
    dataset = load_dataset(json_path, csv_path, cwd=cwd)
    state = dataset["metadata"]["review_state"]
    if state != "sampled":
        raise InputError(
            f"review_state is {state}: only a sampled dataset can be confirmed (draw a sample for review first)",
            os.fspath(json_path),
            json_path="$.metadata.review_state",
        )
    dataset["metadata"]["review_state"] = "confirmed"
    write_atomic_all([(resolve_input(json_path, cwd=cwd), json_text(dataset))])
    return "confirmed"
