"""A suite's source and the reader that validates it: the limits and keys of `config.json` and
`cases.jsonl`, safe case ids, `SuiteSource` (a native folder or parts an importer made in
memory), and the typed getters (`_Reader`) that report a bad value with its place instead of
raising. Split out of `evalkit.suites.suite`, which re-exports every public name.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import string
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.foundations._io import (
    MAX_CASES_BYTES,
    MAX_CONFIG_BYTES,
    MAX_TEXT_BYTES,
    json_line_index,
    json_lines,
    parse_json_object,
    read_text_file,
)
from evalkit.foundations.errors import InputError
from evalkit.foundations.findings import Findings, Weight
from evalkit.foundations.layout import (
    CASES_FILE,
    CONFIG_FILE,
)
from evalkit.foundations.records import (
    Json,
)

# --- limits ---------------------------------------------------------------------------
MAX_ID_LENGTH = 128
# Bounds on what a suite asks for (docs/formats.md, "Limits"): far above any real suite,
# low enough that a typo (a cap of 1e308, max_tokens_out 10**9, k 10**6) is refused
# before a run plans, reserves or allocates anything for it.
MAX_CASES = 100_000
MAX_K = 1_000
MAX_SAMPLES_PER_RUN = 1_000_000  # cases x arms x k
MAX_CONCURRENCY = 256
MAX_COST_CAP_USD = 100_000.0
MAX_PRICE_PER_MTOK = 10_000.0  # USD per million tokens
MAX_TOKENS = 10_000_000  # max_tokens_in, max_tokens_out
MAX_TIMEOUT_S = 3_600.0
MAX_ATTEMPTS = 100
MAX_RATE_LIMIT_BUDGET_S = 86_400.0  # a day of waiting out 429s per key
MAX_CONNECTION_FAILURES = 1_000
MAX_SEED = 2**63 - 1  # the API's seed is a signed 64-bit integer

CASE_KEYS = {
    "id",
    "input",
    "expected",
    "tags",
    "set",
    "judge_threshold",
    "checks",
    "intent",
    "context",
    "privacy_allow",
}  # privacy_allow: checked by evalkit.pii.privacy
INTENTS = ("activation", "non-activation")
JUDGE_PLACEHOLDERS = {"rubric", "input", "expected", "output", "context"}
GOLDEN_TAG, ADVERSARIAL_TAG = "golden", "adversarial"
MIN_GOLDEN = 10

CONFIG_KEYS = {
    "name",
    "description",
    "mode",
    "template",
    "system",
    "generator",
    "judge",
    "temperature",
    "seed",
    "k",
    "concurrency",
    "cost_cap_usd",
    "max_tokens_in",
    "max_tokens_out",
    "price",
    "judge_price",
    "gate",
    "arms",
    "stop",
    "tools",
    "allow_same_judge_model",
    "allow_uncalibrated_judge",
    "verdict_judge",
    "verdict_unit",
    "judged_estimate",
    "timeout_s",
    "max_attempts",
    "ci",
    "rate_limit_budget_s",
    "max_connection_failures",
    "batch_price",
    "judge_batch_price",
    "unit",
    "top_p",
    "executor",
    "stopping",
    "simulator",
}
REQUIRED_CONFIG_KEYS = ("generator", "cost_cap_usd", "max_tokens_in", "max_tokens_out", "price", "judge_price")
ENDPOINT_KEYS = {"model", "base_url", "api_key_env", "cache_identity", "api"}
ENDPOINT_APIS = ("openai", "anthropic", "gemini")  # what an endpoint's `api` may say (`Endpoint.api`)
PRICE_KEYS = {"in_per_mtok", "out_per_mtok"}
GATE_KEYS = {
    "max_success_drop_points",
    "max_cost_increase_pct",
    "min_tag_cases",
    "alpha",
    "on_underpowered",
    "require_significance",
}
CI_KEYS = {"cost_cap_usd"}
# An arm's own settings over the suite's (`Config.for_arm`): a model upgrade, another
# endpoint, other sampling parameters, another prompt, another agent program.
ARM_OVERRIDE_KEYS = (
    "generator",
    "price",
    "batch_price",
    "temperature",
    "top_p",
    "seed",
    "max_tokens_out",
    "prompt",
    "system",
    "unit",
)
ARM_KEYS = {"name", "guidance", "skill_dir", *ARM_OVERRIDE_KEYS}
SKILL_FILE = "SKILL.md"  # in an arm's skill_dir: the skill an agent of that arm loads


def is_comment_key(key: str) -> bool:
    """Keys starting with `//` are comments in `config.json` (JSON has none of its own)."""
    return key.startswith("//")


# --- case ids -------------------------------------------------------------------------
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def case_id_problem(case_id: object) -> str | None:
    """Why `case_id` is not safe as a directory name, or None when it is.

    Ids become `samples/<id>/` folders, so anything that could escape or confuse a path
    is refused: `..`, `/`, `\\`, NUL and control characters, a leading dot, empty, or
    over 128 characters.
    """
    if not isinstance(case_id, str):
        return f"id must be a string, got {type(case_id).__name__}"
    if case_id == "":
        return "id is empty"
    if len(case_id) > MAX_ID_LENGTH:
        return f"id is {len(case_id)} characters, over {MAX_ID_LENGTH}"
    if "\x00" in case_id:
        return "id contains a NUL character"
    if _CONTROL.search(case_id):
        return "id contains a control character"
    if "/" in case_id or "\\" in case_id:
        return "id contains a path separator ('/' or '\\')"
    if ".." in case_id:
        return "id contains '..'"
    if case_id.startswith("."):
        return "id starts with a dot"
    if case_id != case_id.strip():
        return "id has leading or trailing whitespace"
    return None


def safe_case_id(case_id: object) -> str:
    """Return `case_id` when it is safe as a directory name; raise `InputError` otherwise."""
    problem = case_id_problem(case_id)
    if problem:
        raise InputError(f"unsafe case id {case_id!r}: {problem}")
    return case_id  # type: ignore[return-value]


# --- the suite source: a folder on disk, or parts made in memory by an importer ---------
@dataclass
class SuiteSource:
    """What a validation pass reads: the config object and the case objects, each with the
    place it came from, and the suite's text files (relative path -> reader).

    A native folder reads files from disk; an importer fills `files` in memory and points
    every place at the foreign file it read.
    """

    root: Path
    name: str
    config: dict[str, Json]
    config_path: str
    config_lines: dict[str, int]
    cases: list[tuple[str, int | None, str, Json]]  # (file, line, json path prefix, object)
    files: dict[str, str] | None = None  # in-memory files; None: read from `root`
    is_native: bool = True
    # skill folders outside `root` an importer resolved (a SKRAFT spec's
    # plugins/<plugin>/skills/<skill>/): an arm's skill_dir may name these, and only these
    skill_folders: tuple[Path, ...] = ()
    # the config names its models flat, as seed 001's reader writes it (`FLAT_MODEL_KEYS`):
    # a string `expected` with no checks is then graded as that seed grades it, exact after
    # whitespace and case normalisation (evalkit's own default is `contains`)
    seed001_flat: bool = False
    # scorer file -> the functions it defines, or its SyntaxError (or the InputError of a
    # file the reader refused): parsed once per pass, however many checks use it
    scorer_functions: dict[str, frozenset[str] | SyntaxError | InputError] = field(default_factory=dict, repr=False)

    def exists(self, rel: str) -> bool:
        """Whether the suite has an entry `rel` (of any kind: a FIFO or a symlink that
        leaves the suite is there, and `read` says what is wrong with it)."""
        if self.files is not None:
            return rel in self.files
        return os.path.lexists(self.root / rel)

    def read(self, rel: str, *, limit: int = MAX_TEXT_BYTES) -> str:
        """A suite file's text, read inside the suite folder (`read_text_file`)."""
        if self.files is not None:
            if rel not in self.files:
                raise InputError("file not found", self.display(rel))
            return self.files[rel]
        return read_text_file(self.root / rel, limit=limit, allow_empty=True, root=self.root)

    def display(self, rel: str) -> str:
        return str(self.root / rel)

    def listdir(self, rel: str) -> list[str]:
        if self.files is not None:
            prefix = rel.rstrip("/") + "/"
            return sorted(k[len(prefix) :] for k in self.files if k.startswith(prefix) and "/" not in k[len(prefix) :])
        d = self.root / rel
        return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def parse_cases_jsonl(text: str, path: str, fx: Findings) -> list[tuple[str, int | None, str, Json]]:
    """Split `cases.jsonl` into JSON objects with their line numbers (`_io.json_lines`);
    every malformed line is reported. Blank lines are skipped."""
    out: list[tuple[str, int | None, str, Json]] = []
    for item in json_lines(text):
        if item.error is not None:
            fx.error(item.error, path, item.line)
        elif not isinstance(item.value, dict):
            fx.error(f"a case must be a JSON object, got {type(item.value).__name__}", path, item.line, "$")
        else:
            out.append((path, item.line, "$", item.value))
    if not out and not fx.errors:
        fx.error("no cases in file", path)
    return out


# Seed 001's config.json names each role's model flat (`model`, `judge_model`, ...);
# evalkit's form nests them by role (`generator`, `judge`): (flat key, role, field).
FLAT_MODEL_KEYS = (
    ("model", "generator", "model"),
    ("base_url", "generator", "base_url"),
    ("api_key_env", "generator", "api_key_env"),
    ("judge_model", "judge", "model"),
    ("judge_base_url", "judge", "base_url"),
    ("judge_api_key_env", "judge", "api_key_env"),
)


def nest_flat_models(
    config: dict[str, Json], lines: dict[str, int], path: str
) -> tuple[dict[str, Json], dict[str, int]]:
    """The config with seed 001's flat model keys moved into the `generator` and `judge`
    objects (each moved value keeps its line), so every reader sees one form. A role
    named both ways is refused: which one is meant would be a guess."""
    flat = [(key, role, name) for key, role, name in FLAT_MODEL_KEYS if key in config]
    if not flat:
        return config, lines
    out = {k: v for k, v in config.items() if k not in {key for key, _, _ in flat}}
    lines = dict(lines)
    roles: dict[str, dict[str, Json]] = {}
    for key, role, name in flat:
        if role in config:
            raise InputError(
                f"{key!r} and {role!r} both set the {role}: keep the flat keys or the {role!r} object, not both",
                path,
                line=lines.get(f"$.{key}"),
                json_path=f"$.{key}",
            )
        roles.setdefault(role, {})[name] = config[key]
        if f"$.{key}" in lines:
            lines[f"$.{role}.{name}"] = lines[f"$.{key}"]
            lines.setdefault(f"$.{role}", lines[f"$.{key}"])
    out.update(roles)
    return out, lines


def parse_config_json(text: str, path: str) -> tuple[dict[str, Json], dict[str, int]]:
    """Parse `config.json` into an object and its JSON-path -> line map; seed 001's flat
    model keys are read as the nested form (`nest_flat_models`)."""
    return nest_flat_models(parse_json_object(text, path, "config"), json_line_index(text), path)


def native_source(root: Path, fx: Findings) -> SuiteSource | None:
    """The parts of a native suite folder: `config.json` and `cases.jsonl`, each place
    with its line (None, with the problems in `fx`, when the config cannot be read)."""
    cases_path, config_path = root / CASES_FILE, root / CONFIG_FILE
    cases: list[tuple[str, int | None, str, Json]] = []
    config: dict[str, Json] = {}
    lines: dict[str, int] = {}
    try:
        cases = parse_cases_jsonl(read_text_file(cases_path, limit=MAX_CASES_BYTES, root=root), str(cases_path), fx)
    except InputError as exc:
        fx.add(exc)
    try:
        text = read_text_file(config_path, limit=MAX_CONFIG_BYTES, root=root)
        raw = parse_json_object(text, str(config_path), "config")
        config, lines = nest_flat_models(raw, json_line_index(text), str(config_path))
    except InputError as exc:
        fx.add(exc)
        return None
    given = config.get("name")
    name = given if isinstance(given, str) and given else root.name
    flat = any(key in raw for key, _, _ in FLAT_MODEL_KEYS)
    return SuiteSource(root, name, config, str(config_path), lines, cases, seed001_flat=flat)


# --- small typed getters that report instead of raising --------------------------------
_ABSENT = object()  # a key that is not in the object (None is a value)


class _Reader:
    """Reads typed values out of one JSON object and reports bad ones with their place."""

    def __init__(self, fx: Findings, path: str, line_for: Callable[[str], int | None]) -> None:
        self.fx, self.path, self.line_for = fx, path, line_for

    def err(self, jp: str, msg: str) -> None:
        self.fx.error(msg, self.path, self.line_for(jp), jp)

    def warn(self, jp: str, msg: str, strict_error: bool = False, weight: Weight | None = None) -> None:
        self.fx.warn(msg, self.path, self.line_for(jp), jp, strict_error=strict_error, weight=weight)

    def unknown_keys(self, obj: dict[str, Any], known: set[str], jp: str, what: str) -> None:
        for key in obj:
            if key not in known and not is_comment_key(str(key)):
                close = difflib.get_close_matches(str(key), sorted(known), n=1, cutoff=0.6)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                self.fx.unknown_key(
                    f"unknown key {key!r} in {what}{hint}", self.path, self.line_for(f"{jp}.{key}"), f"{jp}.{key}"
                )

    def objects(
        self, items: list[Any], jp: str, known: Collection[str], noun: str, shape: str
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Each item of the list at `jp` that is an object, with its JSON path: an item that
        is not one is an error (`a <noun> must be <shape>`), a key not in `known` a warning
        (not strict: the importers of other tools' files read their lists through this)."""
        for i, item in enumerate(items):
            at = f"{jp}[{i}]"
            if not isinstance(item, dict):
                self.err(at, f"a {noun} must be {shape}")
                continue
            for key in item:
                if key not in known:
                    self.warn(f"{at}.{key}", f"unknown key {key!r} in {noun} (ignored)")
            yield at, item

    def _present(
        self, obj: dict[str, Any], key: str, kp: str, *, required: bool, default: Any, nullable: bool
    ) -> tuple[bool, Any]:
        """(True, `obj[key]`) when there is a value to check; else (False, what to return):
        `default` when the key is absent (an error when it is required), None when it is
        null and null is allowed."""
        if key not in obj:
            if required:
                self.err(kp, f"missing required key {key!r}")
            return False, default
        if obj[key] is None and nullable:
            return False, None
        return True, obj[key]

    def number(
        self,
        obj: dict[str, Any],
        key: str,
        jp: str,
        *,
        required: bool = False,
        default: Any = None,
        positive: bool = False,
        minimum: float | None = None,
        maximum: float | None = None,
        integer: bool = False,
        nullable: bool = False,
    ) -> Any:
        kp = f"{jp}.{key}"
        given, v = self._present(obj, key, kp, required=required, default=default, nullable=nullable)
        if not given:
            return v
        kind = "an integer" if integer else "a number"
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int)):
            self.err(kp, f"{key} must be {kind}, got {json.dumps(v)}")
            return default
        if not math.isfinite(v):
            self.err(kp, f"{key} must be finite")
            return default
        if positive and v <= 0:
            self.err(kp, f"{key} must be greater than 0, got {v}")
            return default
        if minimum is not None and v < minimum:
            self.err(kp, f"{key} must be at least {minimum}, got {v}")
            return default
        if maximum is not None and v > maximum:
            self.err(kp, f"{key} must be at most {maximum}, got {v}")
            return default
        return v

    def text(
        self,
        obj: dict[str, Any],
        key: str,
        jp: str,
        *,
        required: bool = False,
        default: Any = None,
        nullable: bool = False,
        nonempty: bool = True,
    ) -> Any:
        kp = f"{jp}.{key}"
        given, v = self._present(obj, key, kp, required=required, default=default, nullable=nullable)
        if not given:
            return v
        if not isinstance(v, str):
            self.err(kp, f"{key} must be a string, got {json.dumps(v)}")
            return default
        if nonempty and not v.strip():
            self.err(kp, f"{key} must not be empty")
            return default
        return v

    def boolean(self, obj: dict[str, Any], key: str, jp: str, default: bool = False) -> bool:
        if key not in obj:
            return default
        v = obj[key]
        if not isinstance(v, bool):
            self.err(f"{jp}.{key}", f"{key} must be true or false, got {json.dumps(v)}")
            return default
        return v


class _ArmReader(_Reader):
    """A `_Reader` for one arm's settings: every message starts with the arm's name, so
    a problem of an arm's model or price says which arm it is."""

    def __init__(self, r: _Reader, arm: str) -> None:
        super().__init__(r.fx, r.path, r.line_for)
        self.arm = arm

    def err(self, jp: str, msg: str) -> None:
        super().err(jp, f"arm {self.arm!r}: {msg}")

    def warn(self, jp: str, msg: str, strict_error: bool = False, weight: Weight | None = None) -> None:
        super().warn(jp, f"arm {self.arm!r}: {msg}", strict_error, weight)


# --- the suite folder's files -----------------------------------------------------------
def _rel_file(src: SuiteSource, r: _Reader, rel: Any, jp: str, what: str) -> str | None:
    """Read a file named in the config, refusing paths that leave the suite folder."""
    if not isinstance(rel, str) or not rel.strip():
        r.err(jp, f"{what} must be a file name relative to the suite folder")
        return None
    if os.path.isabs(rel) or ".." in Path(rel).parts:
        r.err(jp, f"{what} {rel!r} must stay inside the suite folder (no absolute path, no '..')")
        return None
    if not src.exists(rel):
        r.err(jp, f"{what} file {rel!r} not found in {src.root}")
        return None
    try:
        return src.read(rel)
    except InputError as exc:
        r.fx.add(exc)
        return None


def _template_identifiers(t: str, r: _Reader, jp: str, what: str) -> set[str] | None:
    tpl = string.Template(t)
    if not tpl.is_valid():
        # find the offending `$` to name it
        bad = re.search(r"\$(?!\$|\{?[_a-zA-Z][_a-zA-Z0-9]*\}?)", t)
        near = f" near {t[bad.start() : bad.start() + 12]!r}" if bad else ""
        r.err(jp, f"{what} has an invalid placeholder{near}: use ${{name}}, and $$ for a literal $")
        return None
    return set(tpl.get_identifiers())
