"""What each arm of a run was given, and the box at the top of its summary page.

A reader who shares a run summary wants the conclusion first and what was compared
beside it: `summary_box` puts the verdict, the gate, the change in cost and the HIGH
findings in one box; `arm_texts` recovers each arm's prompt, system and guidance text
from the suite, checked against the sha256 the run recorded of each (`config.json` ->
`inputs`), so a page never shows a text that was edited after the run as the one it
ran with; `arms_html` shows them with a diff against the baseline arm.

Why hand-written: the diff is `difflib`'s; what is shown and how it is checked is
evalkit's own.
"""

from __future__ import annotations

import difflib
import hashlib
import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.foundations import fmt
from evalkit.foundations.errors import EvalkitError
from evalkit.foundations.layout import CONFIG_FILE
from evalkit.foundations.records import Config, GradesSummary, RunVerdicts
from evalkit.suites.reader import load_suite
from evalkit.suites.suite import load_config

BASELINE_NAMES = ("baseline", "control")  # the arm another is held against, when present
_PARTS = (("prompt", "prompt template"), ("system", "system template"), ("guidance", "guidance"))


@dataclass(frozen=True)
class ArmText:
    """One text an arm was rendered from: `part` (prompt, system or guidance), the file
    it came from, the text, and whether it is the one the run used (its sha256 equals
    the run's record; None when the run recorded none)."""

    arm: str
    part: str
    file: str
    text: str
    as_run: bool | None


def baseline_arm(arms: Sequence[str]) -> str | None:
    """The arm the others are held against: the one named baseline or control, else the first."""
    return next((a for a in arms if a in BASELINE_NAMES), arms[0] if arms else None)


def _recorded(inputs: Mapping[str, Any], arm: str, part: str) -> str | None:
    """The sha256 the run recorded of an arm's part (`runner.input_hashes` keys: "guidance
    of arm 'x' (file)", "prompt template of arm 'x' (file)", else the suite's "prompt
    template (file)" and "system template (file)")."""
    label = dict(_PARTS)[part]
    for key, value in inputs.items():
        if key.startswith(f"{label} of arm {arm!r} ("):
            return str(value)
    if part != "guidance":
        for key, value in inputs.items():
            if key.startswith(f"{label} (") and " of arm " not in key:
                return str(value)
    return None


def _suite_config(path: Path) -> Config:
    """The suite's config: a native folder's `config.json` alone (the arms' texts are
    there; loading the suite validated every case too: 0.6 s for 5,000 cases, on two
    report pages), else the whole suite's (another format's spec)."""
    if path.is_dir() and (path / CONFIG_FILE).is_file():
        try:
            return load_config(path / CONFIG_FILE, path)
        except EvalkitError:
            pass  # what only the whole suite can read (a judge's settings checked against its cases): read so
    return load_suite(path).config


def arm_texts(meta: Mapping[str, Any], root: str | Path | None = None) -> list[ArmText]:
    """Each arm's prompt, system and guidance texts as the suite now holds them, each
    marked whether it is the text the run used (sha256 against the run's record). Empty
    when the suite cannot be read (moved, or another tool's run)."""
    suite_path = meta.get("suite")
    if not isinstance(suite_path, str) or not suite_path:
        return []
    path = Path(suite_path)
    if not path.is_absolute() and root is not None:
        path = Path(root) / path
    try:
        config = _suite_config(path)
    except (OSError, EvalkitError, ValueError):
        return []
    inputs = meta.get("inputs") if isinstance(meta.get("inputs"), Mapping) else {}
    names = [a for a in (meta.get("arms") or []) if isinstance(a, str)]
    out = []
    for arm in config.arms:
        if names and arm.name not in names:
            continue
        files = {
            "prompt": arm.template_file or config.raw.get("template") or "prompt.txt",
            "system": arm.system_file or config.raw.get("system") or "system.txt",
            "guidance": arm.guidance_file or "",
        }
        own = config.for_arm(arm)  # the suite's template and system unless the arm sets its own
        texts = {"prompt": own.template, "system": own.system, "guidance": arm.guidance}
        for part, _label in _PARTS:
            text = texts[part]
            if text is None or (part == "guidance" and not files["guidance"]):
                continue
            want = _recorded(inputs or {}, arm.name, part)
            got = hashlib.sha256(text.encode("utf-8")).hexdigest()
            out.append(ArmText(arm.name, part, str(files[part]), text, None if want is None else want == got))
    return out


def _diff(base: str, other: str, base_name: str, other_name: str) -> str:
    lines = difflib.unified_diff(base.splitlines(), other.splitlines(), base_name, other_name, lineterm="", n=2)
    return "\n".join(lines)


def arms_html(texts: Sequence[ArmText]) -> str:
    """The Arms section's body: for each arm its texts (escaped), then each text that
    differs from the baseline arm's as a unified diff; a text edited since the run is
    said to be so, never shown as the run's."""
    if not texts:
        return "<p>The suite's files could not be read, so the arms' texts are not shown.</p>"
    e = html.escape
    arms = list(dict.fromkeys(t.arm for t in texts))
    base = baseline_arm(arms)
    parts = []
    for arm in arms:
        mine = [t for t in texts if t.arm == arm]
        parts.append(f"<h3>arm {e(arm)}{' (the baseline arm)' if arm == base else ''}</h3>")
        for t in mine:
            state = {True: "as run", False: "EDITED SINCE THE RUN: not the text it ran with", None: "not recorded"}
            parts.append(
                f"<details><summary>{e(t.part)} <code>{e(t.file)}</code> ({state[t.as_run]}, "
                f"{len(t.text)} characters)</summary><pre>{e(t.text)}</pre></details>"
            )
        if arm == base:
            continue
        for part, _label in _PARTS:
            a = next((t for t in texts if t.arm == base and t.part == part), None)
            b = next((t for t in mine if t.part == part), None)
            if b is None and a is None:
                continue
            diff = _diff(a.text if a else "", b.text if b else "", f"{base}/{part}", f"{arm}/{part}")
            if diff:
                parts.append(f"<p>{e(part)} against arm {e(str(base))}:</p><pre class='ek-diff'>{e(diff)}</pre>")
            else:
                parts.append(f"<p>{e(part)}: the same as arm {e(str(base))}.</p>")
    return "".join(parts)


def _verdict_lines(verdicts: RunVerdicts) -> list[tuple[str, str]]:
    lines: list[tuple[str, str]] = []
    for v in verdicts.comparisons:
        test = "exact sign test" if v.test == "sign" else v.test
        tally = f"{v.wins}W/{v.ties}T/{v.losses}L, p = {fmt.pvalue(v.p_value)}"
        lines.append(
            (
                v.kind,
                f"{v.treatment_arm} vs {v.baseline_arm}: {v.kind} ({tally}, {test}, "
                f"one vote per {v.unit.split(' (')[0]})",
            )
        )
    if verdicts.conformance is not None:
        c = verdicts.conformance
        lines.append((c.kind, f"conformance {c.kind}: {c.reason}"))
    return lines or [("no-improvement", "no verdict recorded (`evalkit compare` or `evalkit report` records it)")]


def _cost_line(verdicts: RunVerdicts, summary: GradesSummary | None) -> str:
    g = verdicts.gate
    check = next((c for c in (g.checks if g else ()) if c.kind == "cost"), None)
    if check is not None:
        return (
            f"cost per case {fmt.usd(check.current)} against the baseline's {fmt.usd(check.baseline)} "
            f"({check.change:+.1f}%)"
        )
    per = {a: s.overall.cost_per_case_usd for a, s in (summary.per_arm.items() if summary else ())}
    base = baseline_arm(list(per))
    ref = per.get(base) if base is not None else None

    def one(arm: str, cost: float | None) -> str:
        if arm == base or cost is None or fmt.missing(cost) or ref is None or fmt.missing(ref) or not ref:
            return f"{arm} {fmt.usd(cost)}"
        return f"{arm} {fmt.usd(cost)} ({100 * (cost / ref - 1):+.1f}% vs {base})"

    return "cost per case: " + (", ".join(one(a, c) for a, c in per.items()) or "-")


def summary_box(verdicts: RunVerdicts, summary: GradesSummary | None, answered_by: str = "") -> str:
    """The box at the top of a run summary: the verdicts, the gate, the cost change and
    the count of HIGH findings with the first three, escaped."""
    e = html.escape
    rows = [f"<div>verdict: <b class='ek-{e(kind)}'>{e(text)}</b></div>" for kind, text in _verdict_lines(verdicts)]
    g = verdicts.gate
    rows.append(f"<div>gate: <b>{e(g.status + ' (' + g.against() + ')' if g else 'not gated (no baseline)')}</b></div>")
    rows.append(f"<div>{e(_cost_line(verdicts, summary))}</div>")
    high = [f for f in (summary.findings if summary else ()) if f.get("level") == "HIGH"]
    rows.append(f"<div>HIGH findings: <b>{len(high)}</b></div>")
    rows += [f"<div>&middot; {e(str(f.get('message')))}</div>" for f in high[:3]]
    if len(high) > 3:
        rows.append(f"<div>&middot; and {len(high) - 3} more (Findings, below)</div>")
    if answered_by:
        rows.append(f"<div>answered by: <b>{e(answered_by)}</b></div>")
    style = "border:2px solid #555;padding:0.6em 1em;margin:0.6em 0;background:#fafafa"
    return f"<div class='ek-summary-box' style='{style}'>{''.join(rows)}</div>"


__all__ = ["ArmText", "arm_texts", "arms_html", "baseline_arm", "summary_box"]


def what_differs(meta: Mapping[str, Any], texts: Sequence[ArmText], baseline: str, treatment: str) -> str:
    """In words, what the two arms differ by: their texts (guidance: a skill comparison;
    prompt or system: a prompt A/B) and their settings (model, temperature, ...), from the
    run's record; the comparison page says it under its title."""
    settings = meta.get("arm_settings") if isinstance(meta.get("arm_settings"), Mapping) else {}
    a, b = (settings or {}).get(baseline) or {}, (settings or {}).get(treatment) or {}
    keys = ("model", "host", "temperature", "top_p", "seed", "max_tokens_out")
    differ = [k for k in keys if a.get(k) != b.get(k)]
    for part, label in _PARTS:
        x = next((t.text for t in texts if t.arm == baseline and t.part == part), "")
        y = next((t.text for t in texts if t.arm == treatment and t.part == part), "")
        if x != y:
            differ.append(label)
    if not differ:
        return f"Arms {treatment} and {baseline}: no difference in their recorded settings or texts."
    kind = (
        "a skill comparison"
        if differ == ["guidance"]
        else "a prompt A/B"
        if set(differ) <= {"prompt template", "system template", "guidance"}
        else "an arm comparison"
    )
    return f"{treatment} against {baseline} differ by: {', '.join(differ)} ({kind})."
