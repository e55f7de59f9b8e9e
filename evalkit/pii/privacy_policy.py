"""Where a detection is reported and what a suite allows: JSON walked string by string, the
allow-list (`Policy`, `privacy.json` and a case's `privacy_allow`), and `PrivacyFinding`
(file, line, JSON path and kind, never the value). Split out of `evalkit.pii.privacy`,
which re-exports every public name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from evalkit.foundations._io import MAX_CONFIG_BYTES, json_line_index, line_of, parse_json_object, read_text_file
from evalkit.foundations.errors import InputError, InputErrors
from evalkit.foundations.layout import (
    PRIVACY_FILE as POLICY_FILE,  # a suite's allow-list and scan settings, beside config.json
)
from evalkit.pii.privacy_detect import DEFAULT_PHONE_REGIONS, KINDS, Detection, Scanner, scanner, value_hash


# --- walking JSON ---------------------------------------------------------------------
def key_segment(path: str, key: str, n: int, sc: Scanner | None) -> str:
    """`path` extended by property `key` (the `n`th of its object, from 1): `path.key`,
    or `path[key n]` when `sc` finds a sensitive value in the key itself, so that no
    JSON path a diagnostic prints repeats what it found."""
    return f"{path}[key {n}]" if sc is not None and sc.holds(key) else f"{path}.{key}"


def walk_strings(
    obj: Any, path: str = "$", skip: frozenset[str] = frozenset(), sc: Scanner | None = None, shown: str | None = None
) -> Iterator[tuple[str, str, str]]:
    """(JSON path, path to show, text) of every string under `obj`, property names
    included (a key is at the path of its value; personal data in a key is still
    personal data). The path to show has each key that holds a finding of `sc`
    replaced by its place (`key_segment`); keys named in `skip` are not entered (at any
    depth)."""
    shown = path if shown is None else shown
    if isinstance(obj, str):
        yield path, shown, obj
    elif isinstance(obj, dict):
        for n, (k, v) in enumerate(obj.items(), start=1):
            if k in skip:
                continue
            kp, ks = f"{path}.{k}", key_segment(shown, k, n, sc)
            yield kp, ks, k
            if isinstance(v, str):  # the common case, without a call
                yield kp, ks, v
            elif isinstance(v, (dict, list)):
                yield from walk_strings(v, kp, skip, sc, ks)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            if isinstance(v, (str, dict, list)):
                yield from walk_strings(v, f"{path}[{i}]", skip, sc, f"{shown}[{i}]")


def iter_strings(
    obj: Any, path: str = "$", skip: frozenset[str] = frozenset(), sc: Scanner | None = None
) -> Iterator[tuple[str, str]]:
    """Every string under `obj`, property names included, with the JSON path to show
    (`$.a.b[2]`; a key holding a finding of `sc` shown as `[key n]`, see
    `walk_strings`); keys named in `skip` are not entered (at any depth)."""
    for _, shown, text in walk_strings(obj, path, skip, sc):
        yield shown, text


# --- the allow-list -------------------------------------------------------------------
@dataclass(frozen=True)
class AllowRule:
    """One allow-list entry: a detected value is let through when every condition given
    holds (its kind, its normalized value fully matching `pattern`, its `value_hash`, the
    case it is in)."""

    kind: str | None = None
    pattern: re.Pattern[str] | None = None
    sha256: str | None = None
    cases: frozenset[str] | None = None

    def allows(self, d: Detection, case_id: str | None) -> bool:
        return (
            (self.kind is None or self.kind == d.kind)
            and (self.cases is None or case_id in self.cases)
            and (self.pattern is None or self.pattern.fullmatch(d.norm) is not None)
            and (self.sha256 is None or self.sha256 == value_hash(d.norm))
        )


@dataclass(frozen=True)
class Policy:
    """What a suite (or dataset) lets through, and how it scans: the allow-list of
    `privacy.json`, each case's own `privacy_allow` entries, and the phone regions."""

    rules: tuple[AllowRule, ...] = ()
    case_rules: Mapping[str, tuple[AllowRule, ...]] = field(default_factory=dict)
    phone_regions: tuple[str, ...] = DEFAULT_PHONE_REGIONS

    def allows(self, d: Detection, case_id: str | None = None) -> bool:
        rules = self.rules + (self.case_rules.get(case_id, ()) if case_id is not None else ())
        return any(r.allows(d, case_id) for r in rules)

    @property
    def scanner(self) -> Scanner:
        return scanner(self.phone_regions)


POLICY_KEYS = {"allow", "phone_regions"}
RULE_KEYS = {"kind", "pattern", "sha256", "case", "reason"}
Problems = list[tuple[str, str]]  # (JSON path, message)


def parse_rules(items: Any, jp: str, problems: Problems, *, allow_case: bool) -> tuple[AllowRule, ...]:
    """Allow-list entries: a kind name (that kind is allowed), or an object with `kind`,
    `pattern` (a regex the normalized value must fully match), `sha256` (`value_hash`),
    `case` (a case id or a list of them; not inside a case) and `reason`. Problems are
    appended with their JSON path."""
    if not isinstance(items, list):
        problems.append(
            (jp, 'must be a list of allow-list entries (a kind, or {"kind", "pattern", "sha256", "case", "reason"})')
        )
        return ()
    rules: list[AllowRule] = []
    kinds = ", ".join(KINDS)
    for i, item in enumerate(items):
        ip = f"{jp}[{i}]"
        if isinstance(item, str):
            if item not in KINDS:
                problems.append((ip, f"unknown kind {item!r}; known: {kinds}"))
                continue
            rules.append(AllowRule(kind=item))
            continue
        if not isinstance(item, dict):
            problems.append((ip, "an entry must be a kind name or an object"))
            continue
        keys = RULE_KEYS if allow_case else RULE_KEYS - {"case"}
        bad = [k for k in item if k not in keys and not str(k).startswith("//")]
        for k in bad:
            problems.append(
                (f"{ip}.{k}", f"unknown key {k!r} in an allow-list entry; known: {', '.join(sorted(keys))}")
            )
        kind, pattern, digest, cases = item.get("kind"), item.get("pattern"), item.get("sha256"), item.get("case")
        ok = not bad
        if kind is not None and kind not in KINDS:
            problems.append((f"{ip}.kind", f"unknown kind {kind!r}; known: {kinds}"))
            ok = False
        compiled = None
        if pattern is not None:
            try:
                compiled = re.compile(pattern) if isinstance(pattern, str) and pattern else None
            except re.error as exc:
                problems.append((f"{ip}.pattern", f"pattern does not compile: {exc}"))
                ok = False
            else:
                if compiled is None:
                    problems.append((f"{ip}.pattern", "pattern must be a non-empty regex string"))
                    ok = False
        if digest is not None and not (isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest)):
            problems.append((f"{ip}.sha256", "sha256 must be 64 lower-case hex digits (`evalkit privacy hash`)"))
            ok = False
        case_set = None
        if cases is not None:
            case_list = [cases] if isinstance(cases, str) else cases
            if not isinstance(case_list, list) or not case_list or not all(isinstance(c, str) and c for c in case_list):
                problems.append((f"{ip}.case", "case must be a case id or a non-empty list of them"))
                ok = False
            else:
                case_set = frozenset(case_list)
        if "reason" in item and not isinstance(item["reason"], str):
            problems.append((f"{ip}.reason", "reason must be a string"))
            ok = False
        if kind is None and pattern is None and digest is None:
            problems.append(
                (ip, "an entry needs a kind, a pattern or a sha256 (a case alone would allow everything in it)")
            )
            ok = False
        if ok:
            rules.append(AllowRule(kind=kind, pattern=compiled, sha256=digest, cases=case_set))
    return tuple(rules)


def parse_policy(doc: Any, problems: Problems) -> Policy:
    """`privacy.json`'s object as a `Policy` (problems appended with their JSON path)."""
    if not isinstance(doc, dict):
        problems.append(("$", 'privacy.json must be a JSON object {"allow": [...], "phone_regions": [...]}'))
        return Policy()
    for k in doc:
        if k not in POLICY_KEYS and not str(k).startswith("//"):
            problems.append((f"$.{k}", f"unknown key {k!r}; known: {', '.join(sorted(POLICY_KEYS))}"))
    rules = parse_rules(doc.get("allow", []), "$.allow", problems, allow_case=True)
    regions = DEFAULT_PHONE_REGIONS
    if "phone_regions" in doc:
        import phonenumbers

        raw = doc["phone_regions"]
        if not isinstance(raw, list) or not all(isinstance(r, str) for r in raw):
            problems.append(("$.phone_regions", 'phone_regions must be a list of ISO 3166 region codes ("US", "GB")'))
        else:
            unknown = [r for r in raw if r.upper() not in phonenumbers.SUPPORTED_REGIONS]
            for r in unknown:
                problems.append(("$.phone_regions", f'unknown phone region {r!r} (ISO 3166 alpha-2, e.g. "US")'))
            regions = tuple(dict.fromkeys(r.upper() for r in raw if r not in unknown))
    return Policy(rules=rules, phone_regions=regions)


def load_policy_file(path: str | Any) -> Policy:
    """Read a `privacy.json` file (a dataset's `--privacy`): `InputErrors` naming the
    file, line and JSON path of every problem."""

    text = read_text_file(path, limit=MAX_CONFIG_BYTES)
    doc = parse_json_object(text, path, POLICY_FILE)
    problems: Problems = []
    policy = parse_policy(doc, problems)
    if problems:
        lines = json_line_index(text)
        raise InputErrors([InputError(msg, path, line_of(lines, jp), jp) for jp, msg in problems])
    return policy


# --- findings -------------------------------------------------------------------------
@dataclass(frozen=True)
class PrivacyFinding:
    """A sensitive value in a file: where (file, line, JSON path, the case it belongs to)
    and what kind, how many of that kind at that place; never the value."""

    kind: str
    path: str
    line: int | None = None
    json_path: str | None = None
    detail: str = ""
    count: int = 1
    case_id: str | None = None

    @property
    def message(self) -> str:
        k = KINDS[self.kind]
        what = k.label + (f" ({self.detail})" if self.detail else "")
        times = f" x{self.count}" if self.count > 1 else ""
        return (
            f"privacy: {what}{times} [{self.kind}]: replace it with a placeholder, or allow-list a synthetic "
            f"value ({POLICY_FILE})"
        )


def _group(items: Iterable[tuple[str, int | None, str | None, str | None, Detection]]) -> list[PrivacyFinding]:
    """One finding per (file, line, JSON path, kind), counting the values there; in the
    order first seen."""
    out: dict[tuple[Any, ...], PrivacyFinding] = {}
    for path, line, jp, case_id, d in items:
        key = (path, line, jp, d.kind)
        f = out.get(key)
        if f is None:
            out[key] = PrivacyFinding(d.kind, path, line, jp, d.detail, 1, case_id)
        else:
            detail = f.detail if f.detail == d.detail else ""
            out[key] = PrivacyFinding(f.kind, f.path, f.line, f.json_path, detail, f.count + 1, case_id)
    return list(out.values())


def _text_line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def scan_text(text: str, path: str, policy: Policy, *, case_id: str | None = None) -> list[PrivacyFinding]:
    """The findings in a plain text file (a template, guidance, a judge file), by line."""
    sc = policy.scanner
    return _group(
        (path, _text_line(text, d.start), None, case_id, d) for d in sc.scan(text) if not policy.allows(d, case_id)
    )


def scan_object(
    obj: Any,
    path: str,
    policy: Policy,
    *,
    line: int | None = None,
    prefix: str = "$",
    line_for: Callable[[str], int | None] | None = None,
    case_id: str | None = None,
    skip: frozenset[str] = frozenset(),
) -> list[PrivacyFinding]:
    """The findings in the strings of a JSON value, property names included, each at its
    JSON path (and `line`, or the line `line_for` gives the path); a key that holds a
    finding is shown by its place (`[key 3]`), never its text."""
    sc = policy.scanner
    items = []
    for jp, shown, s in walk_strings(obj, prefix, skip, sc):
        for d in sc.scan(s):
            if not policy.allows(d, case_id):
                items.append((path, line if line_for is None else line_for(jp), shown, case_id, d))
    return _group(items)
