"""Redaction: what was found replaced with typed placeholders (`Redactor`), over cases, a run
copied for a report, an imported suite and a dataset, and the check that nothing leaked.
Split out of `evalkit.pii.privacy`, which re-exports every public name.
"""

from __future__ import annotations

import base64
import gzip
import html
import json
import re
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.foundations._io import loads_bounded
from evalkit.foundations._text import storable_json
from evalkit.foundations.errors import InputError, RedactionIncomplete
from evalkit.foundations.layout import REDACTION_LOG as REDACTION_LOG
from evalkit.foundations.layout import TRAJECTORIES
from evalkit.pii.privacy_detect import CASE_ALLOW_KEY, KINDS, Detection, Scanner, _resolve, scanner
from evalkit.pii.privacy_gate import DATASET_TEXT_FIELDS, _suite_text_files
from evalkit.pii.privacy_policy import iter_strings
from evalkit.runfolder.runs import CONFIG, RunFolder, find_suite_dir, iter_jsonl, write_atomic
from evalkit.suites.formats import suite_source
from evalkit.suites.suite import SuiteSource

# --- redaction ------------------------------------------------------------------------
MIN_KNOWN_CHARS = 6  # a value learned elsewhere is replaced on sight only from this length


@dataclass
class Redactor:
    """Replaces sensitive values with typed placeholders (`<EMAIL_1>`, `<API_KEY_2>`):
    every detection, and every exact occurrence of a value `learn`ed in the same scope
    (an output may repeat a key the input held, in a form no detector reads). Within one
    scope (`begin`) the same value (by kind and normalized form) gets the same
    placeholder; `events` records each replacement's place, kind and placeholder, never
    the value; `values` keeps what was replaced, in memory, to check its absence."""

    scanner: Scanner = field(default_factory=lambda: scanner())
    numbers: dict[tuple[str, str], str] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    known: dict[str, tuple[str, str]] = field(default_factory=dict, repr=False)  # value -> (kind, norm)
    events: list[dict[str, Any]] = field(default_factory=list)
    values: set[str] = field(default_factory=set, repr=False)

    def begin(self) -> None:
        """A new scope: numbering starts again at 1 for every kind, nothing is known."""
        self.numbers, self.counters, self.known = {}, {}, {}

    def learn(self, obj: Any) -> None:
        """Remember the values detected in the strings of `obj` (text or JSON)."""
        for _, s in iter_strings(obj):
            for d in self.scanner.scan(s):
                self.known.setdefault(s[d.start : d.end], (d.kind, d.norm))

    def placeholder(self, d: Detection) -> str:
        key = (d.kind, d.norm)
        if key not in self.numbers:
            n = self.counters.get(d.kind, 0) + 1
            self.counters[d.kind] = n
            self.numbers[key] = f"<{KINDS[d.kind].placeholder}_{n}>"
        return self.numbers[key]

    def _found(self, text: str) -> list[Detection]:
        found = self.scanner.scan(text)
        for value, (kind, norm) in self.known.items():
            if len(value) < MIN_KNOWN_CHARS:
                continue
            at = text.find(value)
            while at >= 0:
                found.append(Detection(kind, at, at + len(value), "", norm))
                at = text.find(value, at + len(value))
        return _resolve(found) if len(found) > 1 else found

    def text(self, text: str, where: Mapping[str, Any] | None = None) -> str:
        """`text` with every sensitive value replaced; an event per replacement, tagged
        with `where`."""
        found = self._found(text)
        if not found:
            return text
        parts, pos = [], 0
        for d in found:
            ph = self.placeholder(d)
            self.values.add(text[d.start : d.end])
            parts += [text[pos : d.start], ph]
            pos = d.end
            self.events.append({**(where or {}), "kind": d.kind, "placeholder": ph})
        parts.append(text[pos:])
        return "".join(parts)

    def json(self, obj: Any, path: str = "$", where: Mapping[str, Any] | None = None) -> Any:
        """A copy of a JSON value with every string redacted, property names included (a
        tool call's argument may be named by an email address), each event carrying its
        JSON path as redacted, so no path in the log repeats a value. Field names, tags
        and case ids hold nothing to replace and stay as they are."""
        if isinstance(obj, str):
            return self.text(obj, {**(where or {}), "json_path": path})
        if isinstance(obj, dict):
            out: dict[str, Any] = {}
            for k, v in obj.items():
                key = self.text(k, {**(where or {}), "json_path": path, "property_name": True}) if len(k) >= 6 else k
                out[key] = self.json(v, f"{path}.{key}", where)
            return out
        if isinstance(obj, list):
            return [self.json(v, f"{path}[{i}]", where) for i, v in enumerate(obj)]
        return obj

    def log(self, tool: str) -> dict[str, Any]:
        """The redaction log: counts per kind, and each replacement's place and
        placeholder (no value)."""
        counts: dict[str, int] = {}
        for e in self.events:
            counts[e["kind"]] = counts.get(e["kind"], 0) + 1
        return {
            "tool": tool,
            "redacted": len(self.events),
            "by_kind": dict(sorted(counts.items())),
            "replacements": self.events,
        }


def redact_cases(
    cases: Sequence[dict[str, Any]],
    redactor: Redactor | None = None,
    where: Callable[[int, dict[str, Any]], dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Case (or pair) objects with their sensitive values replaced, one placeholder scope
    per case, so the same value in a case's input and in its check is the same
    placeholder. The id and the `privacy_allow` entries are kept; `where(i, case)` tags
    each event (default: the case id)."""
    r = redactor if redactor is not None else Redactor()
    out = []
    for i, c in enumerate(cases):
        r.begin()
        body = {k: v for k, v in c.items() if k not in ("id", CASE_ALLOW_KEY)}
        r.learn(body)
        tag = where(i, c) if where is not None else {"case": c.get("id")}
        out.append({k: (v if k in ("id", CASE_ALLOW_KEY) else r.json(v, f"$.{k}", tag)) for k, v in c.items()})
    return out


@dataclass(frozen=True)
class RedactedRun:
    """A redacted copy of a run folder (`path`), what was replaced (`values`, in memory
    only) and the log of it."""

    path: Any
    values: frozenset[str] = field(repr=False)
    log: dict[str, Any] = field(default_factory=dict)


def _suite_strings(src: SuiteSource) -> Iterator[Any]:
    """Everything of a suite that `scan_suite_source` reads, as plain values."""
    for _, _, _, obj in src.cases:
        yield obj
    yield src.config
    for rel in _suite_text_files(src):
        try:
            yield src.read(rel)
        except InputError:
            continue


def redact_run(run: Any, dest: Any, *, log: Any = None) -> RedactedRun:
    """Copy the run folder's own files (config.json, summary, results, grades, errors,
    ledger, pairwise, micro-test marker; not the caches, the lock or `samples/`) to
    `dest` with every sensitive value replaced: what the run's files hold, and every
    exact occurrence of a value its suite holds. One placeholder scope for the whole run,
    so `<EMAIL_1>` is the same address on every page. The copy's config.json names the
    suite by its absolute path, so a report from the copy still finds it. `log`: where to
    write the redaction log (counts per kind, each replacement's file, JSON path and
    placeholder)."""
    run, dest = Path(run), Path(dest)
    meta = RunFolder(run).read_meta()
    suite_dir = find_suite_dir(run, meta.get("suite"))
    r = Redactor()
    if suite_dir is not None:
        try:
            for obj in _suite_strings(suite_source(suite_dir)):
                r.learn(obj)
        except InputError:
            pass  # a suite that no longer reads: the run's own files are still redacted
    docs: dict[str, tuple[str, Any]] = {}
    for f in sorted(run.iterdir()):
        if not f.is_file() or f.suffix not in (".json", ".jsonl", ".md", ".txt"):
            continue
        if f.suffix == ".jsonl":
            docs[f.name] = ("jsonl", list(iter_jsonl(f)))  # a torn last line (a killed run) is dropped
        elif f.suffix == ".json":
            docs[f.name] = ("json", loads_bounded(f.read_text(encoding="utf-8"), f))
        else:
            docs[f.name] = ("text", f.read_text(encoding="utf-8", errors="replace"))
        r.learn(docs[f.name][1])
    # An agent unit's trajectories, redacted too: the replay page shows every message and
    # tool answer (`trajectories/<case>/<arm>/sample-<n>.jsonl`).
    traj = run / TRAJECTORIES
    if traj.is_dir():
        for f in sorted(traj.rglob("*.jsonl")):
            if f.is_file() and not f.is_symlink():
                name = f.relative_to(run).as_posix()
                docs[name] = ("jsonl", list(iter_jsonl(f)))
                r.learn(docs[name][1])
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name, (form, obj) in docs.items():
        where = {"file": name}
        if form == "jsonl":
            # storable_json: a lone surrogate in an output is written as an escape, not a crash
            body = "".join(
                storable_json(r.json(row, "$", {**where, "line": i})) + "\n" for i, row in enumerate(obj, start=1)
            )
        elif form == "json":
            doc = r.json(obj, "$", where)
            if name == CONFIG and suite_dir is not None:
                doc["suite"] = str(Path(suite_dir).resolve())
            body = storable_json(doc, indent=2) + "\n"
        else:
            body = r.text(obj, where)
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(dest / name, body)
    record = r.log("evalkit report --redact")
    if log is not None:
        write_atomic(Path(log), storable_json(record, indent=2) + "\n")
    return RedactedRun(dest, frozenset(r.values), record)


def _forms(value: str) -> set[str]:
    """How a value can appear in an HTML page, a notebook or a JSON file."""
    forms = {value, html.escape(value), html.escape(value, quote=False)}
    return forms | {json.dumps(f, ensure_ascii=a)[1:-1] for f in list(forms) for a in (True, False)}


_MARKUP = re.compile(r"(?is)<(script|style)\b.*?</\1\s*>|<!--.*?-->|<[^>]*>")
# notebook outputs that are pictures, not text: base64 or drawing data no reader sees as words
_PICTURES = frozenset({"image/png", "image/jpeg", "image/gif", "image/svg+xml", "application/pdf"})


def _written_texts(f: Path) -> Iterator[str]:
    """What a reader of file `f` can see, for the scanner: an HTML page's text (markup,
    scripts, styles and inline images dropped, entities decoded), a JSON or notebook
    file's strings and property names (not its numbers: 0.3888888888888889 is no card;
    not a notebook's pictures), a JSON-lines file's likewise, line by line, anything
    else as text."""
    text = f.read_text(encoding="utf-8", errors="replace")
    if f.suffix in (".html", ".htm"):
        yield html.unescape(_MARKUP.sub(" ", text))
        return
    if f.suffix in (".json", ".ipynb", ".jsonl"):
        docs: list[Any] = []
        for raw in text.splitlines() if f.suffix == ".jsonl" else [text]:
            try:
                docs.append(loads_bounded(raw, f))
            except (json.JSONDecodeError, InputError):  # not JSON, or nested past the depth guard: text
                yield raw
        for doc in docs:
            for _, s in iter_strings(doc, skip=_PICTURES):
                yield s
        return
    yield text


def leaking_files(paths: Iterable[Any], values: Iterable[str], sc: Scanner | None = None) -> list[Any]:
    """The files under `paths` (files or folders, recursively) that still hold one of
    `values` in any of its written forms (raw, HTML-escaped, JSON-escaped), or, with
    `sc`, any value of any kind `sc` detects in what a reader of the file sees
    (`_written_texts`)."""
    forms = [f for v in values for f in _forms(v)]
    out = []
    files: list[Path] = []
    for p in map(Path, paths):
        files += sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else [p] if p.is_file() else []
    for f in files:
        text = f.read_text(encoding="utf-8", errors="replace")
        hidden = list(_embedded_strings(text)) if f.suffix in (".html", ".htm") else []
        if any(form in t for t in (text, html.unescape(text), *hidden) for form in forms):
            out.append(f)
        elif sc is not None and any(sc.scan(t) for t in (*_written_texts(f), *hidden)):
            out.append(f)
    return out


# the data an explorer page carries: JSON, gzip, base64 (`evalkit.telling.explorer.embed`)
_EMBEDDED = re.compile(r'<script id="evalkit-[a-z]+" type="application/octet-stream">([A-Za-z0-9+/=]*)</script>')


def _embedded_strings(text: str) -> Iterator[str]:
    """The strings of the data a page embeds compressed (the explorer's and the diff's
    `application/octet-stream` elements), which neither the page's text nor a value's
    written forms show; an element that does not decode is yielded as it is."""
    for m in _EMBEDDED.finditer(text):
        try:
            doc = json.loads(gzip.decompress(base64.b64decode(m.group(1), validate=True)))
        except (ValueError, OSError, EOFError):  # not base64 (binascii.Error), not gzip, not JSON
            yield m.group(1)
            continue
        for _, s in iter_strings(doc):
            yield s


def verify_redacted(redacted: RedactedRun, paths: Iterable[Any]) -> None:
    """Check every file under `paths`: none may hold a value the redaction replaced, nor
    any value of any kind the scanner detects (a page may show text that never went
    through the redacted copy). A file that does is removed (it must not be shared) and
    `RedactionIncomplete` names it (never the value)."""
    bad = leaking_files(paths, redacted.values, scanner())
    for f in bad:
        f.unlink()
    if bad:
        raise RedactionIncomplete(
            "redaction incomplete: removed "
            + ", ".join(str(f) for f in bad)
            + ", which still held personal data or a secret (a value the redaction replaced, or one it detects)"
        )


def redact_imported(
    config: dict[str, Any], cases: Sequence[dict[str, Any]], files: Mapping[str, str]
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, str]]:
    """An imported suite's parts with every detected value replaced (`evalkit import
    --redact`): each case its own placeholder scope, the config one scope, each text file
    one scope; `redaction-log.json` added to the files (counts per kind, each
    replacement's case, JSON path or file, and placeholder; no value)."""
    r = Redactor()
    new_cases = redact_cases(cases, r)
    r.begin()
    new_config = r.json(config, "$", {"file": "config.json"})
    new_files: dict[str, str] = {}
    for rel, text in files.items():
        r.begin()
        new_files[rel] = r.text(text, {"file": rel})
    new_files[REDACTION_LOG] = json.dumps(r.log("evalkit import --redact"), indent=2, ensure_ascii=False) + "\n"
    return new_config, new_cases, new_files


def redact_dataset(dataset: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """An evaluation dataset with the sensitive values of its free text replaced
    (`evalkit dataset new --redact`): each pair's query, expected response, notes and
    source reference (one placeholder scope per pair), and the metadata's text fields;
    ids, categories and population and tool names are kept, so the counts still hold.
    Returns the dataset and the redaction log."""
    r = Redactor()
    pairs = dataset.get("evaluation_pairs") or []
    texts = [{k: p[k] for k in DATASET_TEXT_FIELDS if k in p} for p in pairs]
    done = redact_cases(texts, r, where=lambda i, _: {"pair": pairs[i].get("id"), "index": i})
    new_pairs = [{**p, **d} for p, d in zip(pairs, done, strict=True)]
    r.begin()
    md = dict(dataset.get("metadata") or {})
    for k, v in md.items():
        if isinstance(v, str):
            md[k] = r.text(v, {"json_path": f"$.metadata.{k}"})
    return {**dataset, "metadata": md, "evaluation_pairs": new_pairs}, r.log("evalkit dataset new --redact")


def redact_shown(text: str) -> str:
    """`text` with each detected value replaced by its kind's placeholder, unnumbered
    (`<PHONE>`): what a redacted report's pages show of text that does not come from the
    redacted run copy, whose numbered placeholders it must not be mistaken for."""
    found = scanner().scan(text)
    for d in reversed(found):
        text = f"{text[: d.start]}<{KINDS[d.kind].placeholder}>{text[d.end :]}"
    return text


def redaction_summary(log: Mapping[str, Any] | Any) -> str:
    """The one line a command prints about a redaction (a log, or the path of one): how
    many values of which kind; no value."""
    if not isinstance(log, Mapping):
        log = json.loads(Path(log).read_text(encoding="utf-8"))
    counts = log.get("by_kind") or {}
    if not counts:
        return "redacted nothing: no personal data or secret found"
    return f"redacted {log['redacted']} value(s): " + ", ".join(f"{k} {n}" for k, n in counts.items())
