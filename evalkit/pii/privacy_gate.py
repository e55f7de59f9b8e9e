"""The scans over a suite, a dataset and a run's model outputs, and the gate a run passes
before it sends a suite's text to a model. Split out of `evalkit.pii.privacy`, which
re-exports every public name.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.foundations._io import json_line_index, line_of, loads_bounded, parse_json_object
from evalkit.foundations.errors import InputError, InputErrors
from evalkit.foundations.layout import (
    PRIVACY_FILE as POLICY_FILE,  # a suite's allow-list and scan settings, beside config.json
)
from evalkit.pii.privacy_detect import CASE_ALLOW_KEY, KINDS, Detection, Scanner
from evalkit.pii.privacy_policy import (
    AllowRule,
    Policy,
    PrivacyFinding,
    Problems,
    iter_strings,
    parse_policy,
    parse_rules,
    scan_object,
    scan_text,
)
from evalkit.suites.formats import suite_source
from evalkit.suites.suite import SuiteSource


# --- suites ---------------------------------------------------------------------------
@dataclass(frozen=True)
class SuiteScan:
    """A suite's privacy scan: the findings, and the problems of its allow-list
    (`(path, line, json_path, message)`: errors, the list cannot be applied)."""

    findings: tuple[PrivacyFinding, ...] = ()
    problems: tuple[tuple[str, int | None, str | None, str], ...] = ()
    policy: Policy = field(default_factory=Policy)


def suite_policy(src: SuiteSource) -> tuple[Policy, list[tuple[str, int | None, str | None, str]]]:
    """A suite's `Policy` (its `privacy.json` and each case's `privacy_allow`), and the
    problems found reading them."""
    problems: list[tuple[str, int | None, str | None, str]] = []
    policy = Policy()
    if src.exists(POLICY_FILE):
        shown = src.display(POLICY_FILE)
        try:
            text = src.read(POLICY_FILE)
            doc = parse_json_object(text, shown, POLICY_FILE)
        except InputError as exc:
            problems.append((exc.path or shown, exc.line, exc.json_path, exc.message))
        else:
            found: Problems = []
            policy = parse_policy(doc, found)
            if found:
                lines = json_line_index(text)
                problems += [(shown, line_of(lines, jp), jp, msg) for jp, msg in found]
    case_rules: dict[str, tuple[AllowRule, ...]] = {}
    for file, line, prefix, obj in src.cases:
        if isinstance(obj, dict) and CASE_ALLOW_KEY in obj:
            found = []
            rules = parse_rules(obj[CASE_ALLOW_KEY], f"{prefix}.{CASE_ALLOW_KEY}", found, allow_case=False)
            problems += [(file, line, jp, msg) for jp, msg in found]
            if isinstance(obj.get("id"), str):
                case_rules[obj["id"]] = case_rules.get(obj["id"], ()) + rules
    return Policy(policy.rules, case_rules, policy.phone_regions), problems


def _suite_text_files(src: SuiteSource) -> list[str]:
    """The suite's text files a unit or a judge reads: templates, guidance, the arms'
    skill files (`<skill_dir>/SKILL.md`), judge files, scorers (relative paths, each
    once, only those that exist inside the folder)."""
    cfg = src.config if isinstance(src.config, dict) else {}
    names: list[str] = []
    for key in ("template", "system"):
        if isinstance(cfg.get(key), str):
            names.append(cfg[key])
    if cfg.get("template") is None:
        names.append("prompt.txt")
    names.append("system.txt")
    for arm in cfg.get("arms") or []:
        if isinstance(arm, dict) and isinstance(arm.get("guidance"), str):
            names.append(arm["guidance"])
        if isinstance(arm, dict) and isinstance(arm.get("skill_dir"), str):  # an agent's skill (evalkit.running.agents)
            names.append(arm["skill_dir"].rstrip("/") + "/SKILL.md")
        for key in ("prompt", "system"):  # an arm's own prompt and system templates (issue 28)
            if isinstance(arm, dict) and isinstance(arm.get(key), str):
                names.append(arm[key])
    # simulator/: the simulated user's prompt, the conversations people played
    for folder in ("guidance", "judge", "scorers", "simulator"):
        names += [f"{folder}/{n}" for n in src.listdir(folder) if not n.startswith(".")]
    if src.files is not None:
        names += list(src.files)
    out = []
    for rel in dict.fromkeys(names):
        if rel.startswith("/") or ".." in rel.replace("\\", "/").split("/") or not src.exists(rel):
            continue
        out.append(rel)
    return out


def scan_suite_source(src: SuiteSource) -> SuiteScan:
    """Scan everything of a suite that reaches a model, a judge or a report: each case
    (every string but its `privacy_allow`), the config, the templates, guidance, judge
    files, scorers, the human labels (`judge/human-sample.jsonl`, line by line), the
    simulated user's prompt and the conversations people played (`simulator/`)."""
    policy, problems = suite_policy(src)
    findings: list[PrivacyFinding] = []
    skip = frozenset({CASE_ALLOW_KEY})
    for file, line, prefix, obj in src.cases:
        cid = obj.get("id") if isinstance(obj, dict) and isinstance(obj.get("id"), str) else None
        findings += scan_object(obj, file, policy, line=line, prefix=prefix, case_id=cid, skip=skip)
    if src.config:
        findings += scan_object(
            src.config,
            src.config_path,
            policy,
            line_for=lambda jp: line_of(src.config_lines, jp) if src.config_lines else None,
        )
    for rel in _suite_text_files(src):
        try:
            text = src.read(rel)
        except InputError:
            continue  # unreadable: the suite's own validation says so
        shown = src.display(rel)
        if rel.endswith(".jsonl"):
            findings += scan_jsonl(text, shown, policy)
        else:
            findings += scan_text(text, shown, policy)
    return SuiteScan(tuple(findings), tuple(problems), policy)


def scan_jsonl(text: str, path: str, policy: Policy) -> list[PrivacyFinding]:
    """A JSON-lines file: each line's strings at their JSON paths; a line that does not
    parse is scanned as text."""
    out: list[PrivacyFinding] = []
    for n, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        try:
            obj = loads_bounded(raw, path, line=n)
        except (json.JSONDecodeError, InputError):
            out += [PrivacyFinding(f.kind, path, n, None, f.detail, f.count) for f in scan_text(raw, path, policy)]
            continue
        out += scan_object(obj, path, policy, line=n)
    return out


# --- suites, as a run sees them -------------------------------------------------------
ALLOW_FLAG = "--allow-private-data"


def scan_suite(suite: Any) -> SuiteScan:
    """The privacy scan of a suite (a `Suite` record or its path): its source, as lint
    scans it, plus the guidance of any arm kept outside the suite folder (a micro-test's
    variants)."""
    scan = scan_suite_source(suite_source(getattr(suite, "path", suite)))
    extra: list[PrivacyFinding] = []
    config = getattr(suite, "config", None)
    for arm in getattr(config, "arms", ()):
        if arm.guidance and arm.guidance_file and os.path.isabs(arm.guidance_file):
            extra += scan_text(arm.guidance, arm.guidance_file, scan.policy)
    return SuiteScan(scan.findings + tuple(extra), scan.problems, scan.policy)


def count_by_kind(findings: Iterable[PrivacyFinding]) -> dict[str, int]:
    out: dict[str, int] = {}
    for f in findings:
        out[f.kind] = out.get(f.kind, 0) + f.count
    return dict(sorted(out.items()))


def run_gate(suite: Any, *, allowed: bool, recorded: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What `run` does with the suite's privacy scan before any call: refuse with every
    finding (file, line, JSON path, kind; never the value) as an `InputErrors`, unless
    `allowed` (`--allow-private-data`) or a resumed run recorded that it was. Returns
    the record for the run's `config.json` (`privacy`: counts per kind, and whether the
    flag let them through)."""
    scan = scan_suite(suite)
    if scan.problems:
        raise InputErrors([InputError(msg, path, line, jp) for path, line, jp, msg in scan.problems])
    by_kind = count_by_kind(scan.findings)
    n = sum(by_kind.values())
    if not n:
        return {"findings": 0}
    if not (allowed or (recorded or {}).get("allowed")):
        errs = [InputError(f.message, f.path, f.line, f.json_path) for f in scan.findings]
        errs.append(
            InputError(
                f"{n} privacy finding(s): the run refuses personal data and secrets before any "
                f"call; redact them, allow-list synthetic values in {POLICY_FILE}, or pass "
                f"{ALLOW_FLAG} (recorded in the run's config.json)",
                getattr(suite, "path", suite),
            )
        )
        raise InputErrors(errs)
    return {"findings": n, "by_kind": by_kind, "allowed": True, "allowed_by": ALLOW_FLAG}


# --- datasets -------------------------------------------------------------------------
DATASET_LOG_SUFFIX = ".redaction-log.json"
DATASET_TEXT_FIELDS = ("query", "expected_response", "notes", "source_reference")  # names and ids stay


def scan_dataset(doc: Mapping[str, Any], lines_from: Any, shown: str, policy: Policy | None) -> list[str]:
    """The privacy findings of an evaluation dataset (its metadata and every pair, a
    pair's id being its case for `case`-scoped allow-list entries), as dataset
    diagnostics: `json <JSON path> (<file>:<line>): privacy: ...`. Lines come from the
    file `lines_from` (read again only when there is a finding); none without it."""
    policy = policy or Policy()
    found = scan_object({k: v for k, v in doc.items() if k != "evaluation_pairs"}, shown, policy)
    pairs = doc.get("evaluation_pairs")
    for i, pair in enumerate(pairs if isinstance(pairs, list) else []):
        pid = pair.get("id") if isinstance(pair, dict) and isinstance(pair.get("id"), str) else None
        found += scan_object(pair, shown, policy, prefix=f"$.evaluation_pairs[{i}]", case_id=pid)
    if not found:
        return []
    lines = json_line_index(Path(lines_from).read_text(encoding="utf-8", errors="replace")) if lines_from else {}
    out = []
    for f in found:
        line = line_of(lines, f.json_path or "$") if lines else None
        out.append(f"json {f.json_path} ({shown}{f':{line}' if line else ''}): {f.message}")
    return out


# --- model outputs --------------------------------------------------------------------
def output_detections(output: str | None, tool_calls: Iterable[Any], sc: Scanner) -> list[tuple[str, Detection]]:
    """The detections in one sample's output and tool-call arguments, each with where it
    is (`output`, or the tool call's JSON path)."""
    found: list[tuple[str, Detection]] = []
    if output:
        found += [("output", d) for d in sc.scan(output)]
    for i, call in enumerate(tool_calls or ()):
        for jp, s in iter_strings(call, f"tool_calls[{i}]", frozenset({"id"}), sc):
            if jp.endswith((".arguments", ".function.arguments")) and s.strip().startswith(("{", "[")):
                try:
                    parsed = loads_bounded(s, jp)
                except (json.JSONDecodeError, InputError):  # not JSON, or nested too deep: scanned as text
                    parsed = None
                if parsed is not None:
                    found += [(sub, d) for sub, t in iter_strings(parsed, jp, sc=sc) for d in sc.scan(t)]
                    continue
            found += [(jp, d) for d in sc.scan(s)]
    return found


def case_values(case: Any, sc: Scanner) -> set[tuple[str, str]]:
    """(kind, normalized value) of everything sensitive a case gives the unit: its
    input and context (what a model could leak from its context)."""
    out: set[tuple[str, str]] = set()
    for obj in (case.input, case.context):
        for _, s in iter_strings(obj):
            out |= {(d.kind, d.norm) for d in sc.scan(s)}
    return out


@dataclass(frozen=True)
class OutputScan:
    """What `grade` found in a run's outputs: findings as (level, message) and the
    `privacy` block of grades-summary.json; no value in either."""

    findings: tuple[tuple[str, str], ...]
    summary: dict[str, Any]


MAX_LISTED_SAMPLES = 1000  # grades-summary.json lists at most this many flagged samples


def scan_outputs(suite: Any, samples: Mapping[tuple[str, str, int], Any]) -> OutputScan:
    """Scan every sample's output and tool-call arguments. A secret in an output is a
    HIGH finding, always, allow-listed or not (a canary key planted on purpose is what a
    leak test looks for) and said to come from the context when the case gave it to the
    model; personal data is MEDIUM, and an allow-listed synthetic value is let through."""
    try:
        policy, _ = suite_policy(suite_source(suite.path))  # its problems are lint's and run's to report
    except InputError:
        policy = Policy()
    sc = policy.scanner
    cases = {c.id: c for c in suite.cases}
    given: dict[str, set[tuple[str, str]]] = {}
    rows: list[dict[str, Any]] = []
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for key in sorted(samples):
        cid, arm, index = key
        s = samples[key]
        dets = [
            (where, d)
            for where, d in output_detections(s.output, s.tool_calls, sc)
            if KINDS[d.kind].secret or not policy.allows(d, cid)
        ]
        if not dets:
            continue
        if cid not in given:
            given[cid] = case_values(cases[cid], sc) if cid in cases else set()
        kinds = sorted({d.kind for _, d in dets})
        row = {
            "case_id": cid,
            "arm": arm,
            "index": int(index),
            "kinds": kinds,
            "where": sorted({w for w, _ in dets}),
            "from_context": sorted({d.kind for _, d in dets if (d.kind, d.norm) in given[cid]}),
        }
        rows.append(row)
        for k in kinds:
            by_kind.setdefault(k, []).append(row)
    findings = []
    for kind in sorted(by_kind, key=lambda k: (not KINDS[k].secret, k)):
        hit = by_kind[kind]
        spec = KINDS[kind]
        leaked = sum(1 for r in hit if kind in r["from_context"])
        items = ", ".join(f"{r['case_id']}/{r['arm']}/{r['index']}" for r in hit[:5])
        more = f" and {len(hit) - 5} more" if len(hit) > 5 else ""
        context = ""
        if spec.secret and leaked:
            context = f"; {leaked} repeat one the case gave the model: the model leaks a secret from its context"
        elif leaked:
            context = f"; {leaked} repeat the case's own input"
        article = "an" if spec.label[0].lower() in "aeiou" else "a"
        findings.append(
            (
                "HIGH" if spec.secret else "MEDIUM",
                f"privacy: {len(hit)} output(s) contain {article} {spec.label} [{kind}]{context} "
                f"({items}{more}); "
                "results.jsonl holds them: keep the run folder private and share reports made with "
                "`evalkit report --redact`",
            )
        )
    summary = {
        "n_samples": len(rows),
        "by_kind": {k: len(v) for k, v in sorted(by_kind.items())},
        "samples": rows[:MAX_LISTED_SAMPLES],
        "samples_not_listed": max(0, len(rows) - MAX_LISTED_SAMPLES),
    }
    return OutputScan(tuple(findings), summary)
