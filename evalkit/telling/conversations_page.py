"""The conversations page: endings, turns, blame, the simulator's spend beside the agent's, the flakiest conversations.

`conversations.html`, written by `evalkit report` for a conversation run beside the
explorer, from the run folder alone: `conversations.json` (written by `evalkit grade`;
computed here without reviews when absent), `results.jsonl` (each conversation's turns
and ending) and `conversation-review.jsonl` (each failed conversation's blame and the
judge's reason). Every text from the run (case ids, arm names, the judge's reasons) is
escaped.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalkit.conclusions.conversations import REVIEW_FILE, SUMMARY_FILE, conversation_summary
from evalkit.conclusions.grading import read_samples
from evalkit.foundations import fmt
from evalkit.foundations._io import iter_jsonl
from evalkit.foundations._text import visible
from evalkit.foundations.layout import GRADES
from evalkit.runfolder.runs import RunFolder, write_atomic

PAGE = "conversations.html"
STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:70em}"
    "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left}"
)


def _e(value: Any) -> str:
    """A value of the run as HTML text: control and bidi characters as escapes, then escaped."""
    return html.escape(visible("" if value is None else str(value)))


def _table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """An HTML table of escaped cells."""
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def load_summary(run: Path) -> dict[str, Any]:
    """The run's `conversations.json`, or the same figures without reviews when grading wrote none."""
    path = run / SUMMARY_FILE
    if path.exists():
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return data
    grades = list(iter_jsonl(run / GRADES)) if (run / GRADES).exists() else []
    k = int(RunFolder(run).read_meta().get("k") or 1)
    return conversation_summary(run, read_samples(run), grades, {}, k)


def _money(summary: Mapping[str, Any]) -> str:
    """The spend table: the simulator's beside the agent's, its share, the reviews'."""
    sim, agent = float(summary["simulator_spend_usd"]), float(summary["agent_spend_usd"])
    share = fmt.pct(sim / (sim + agent)) if sim + agent > 0 else fmt.NO_DATA
    reviews = summary.get("reviews") or {}
    blame = ", ".join(f"{k}: {v}" for k, v in sorted((reviews.get("blame") or {}).items())) or fmt.NO_DATA
    return _table(
        ["simulator spend", "agent spend", "simulator share", "reviews", "review cost", "blame"],
        [
            [
                fmt.usd(sim),
                fmt.usd(agent),
                share,
                reviews.get("failed_conversations_reviewed", 0),
                fmt.usd(float(reviews.get("cost_usd") or 0.0)),
                blame,
            ]
        ],
    )


def _arms(summary: Mapping[str, Any]) -> str:
    """Each arm's rates with and without the simulator-blamed conversations, pass^k, endings."""
    rows = []
    for arm, f in summary["per_arm"].items():
        ks = sorted(f["pass_hat_k"], key=int)
        rows.append(
            [
                arm,
                f["conversations"],
                _pct(f["pass_rate"]),
                _pct(f["pass_rate_without_simulator_blamed"]),
                f["simulator_blamed"],
                _pct(f["simulator_blamed_share_of_failures"]),
                " ".join(f"^{j} {_pct(f['pass_hat_k'][j])}" for j in ks),
                " ".join(f"^{j} {_pct(f['pass_hat_k_without_simulator_blamed'][j])}" for j in ks),
                ", ".join(f"{k}: {v}" for k, v in sorted(f["endings"].items())),
                "-" if f["mean_turns"] is None else f"{f['mean_turns']:.1f}",
                ", ".join(f["flakiest"]) or fmt.NO_DATA,
            ]
        )
    return _table(
        [
            "arm",
            "conversations",
            "pass rate",
            "without simulator-blamed",
            "simulator-blamed",
            "their share of those not passed",
            "pass^k",
            "pass^k without them",
            "endings",
            "mean turns",
            "flakiest cases",
        ],
        rows,
    )


def _pct(v: float | None) -> str:
    return fmt.NO_DATA if v is None else fmt.pct(v)


def _agreement(h: Mapping[str, Any] | None) -> str:
    """The simulator's agreement with people (`conversations.json`'s `human_agreement`):
    the figures, then one row per compared human-played conversation."""
    if not h:
        return (
            "<p>no human-played conversations: <code>evalkit converse SUITE --case ID --arm NAME</code> "
            "(or the play_conversation notebook) records one in simulator/human-played.jsonl.</p>"
        )
    ci = h.get("agreement_ci95") or [None, None]
    figures = _table(
        [
            "played",
            "compared",
            "stale",
            "ties",
            "pass/fail agreement (95% CI)",
            "ending agreement",
            "pass rate: simulated minus people",
            "turns: simulated minus people",
            "leans",
        ],
        [
            [
                h["played"],
                h["compared"],
                h["stale"],
                h["ties"],
                f"{h['agree']}/{h['n']}: {fmt.pct_ci(h['agreement'], ci[0], ci[1])}",
                _pct(h["ending_agreement"]),
                fmt.points(h["mean_pass_rate_difference"]),
                fmt.NO_DATA if h["mean_turns_difference"] is None else f"{h['mean_turns_difference']:+.1f}",
                h["leans"],
            ]
        ],
    )
    return figures + _agreement_rows(h.get("plays") or ())


def _agreement_rows(plays: Sequence[Mapping[str, Any]]) -> str:
    """One row per compared human-played conversation, beside its simulated ones."""
    rows = [
        [
            p["case_id"],
            p["arm"],
            p["player"],
            "passed" if p["human_passed"] else "failed",
            p["human_turns"],
            p["human_ending"],
            p["simulated"],
            _pct(p["simulated_pass_rate"]),
            f"{p['simulated_mean_turns']:.1f}",
            ", ".join(f"{k}: {v}" for k, v in sorted(p["simulated_endings"].items())),
            {True: "yes", False: "no", None: "tie"}[p["agrees"]],
        ]
        for p in plays
    ]
    head = [
        "case",
        "arm",
        "played by",
        "person's conversation",
        "turns",
        "ending",
        "simulated",
        "simulated pass rate",
        "simulated mean turns",
        "simulated endings",
        "agrees",
    ]
    return _table(head, rows)


def _conversations(run: Path) -> str:
    """One row per conversation: its turns, ending, grade and (when reviewed) blame and reason."""
    grades = (
        {(g["case_id"], g["arm"], g["index"]): g.get("passed") for g in iter_jsonl(run / GRADES)}
        if (run / GRADES).exists()
        else {}
    )
    blames = (
        {(b["case_id"], b["arm"], b["index"]): b for b in iter_jsonl(run / REVIEW_FILE)}
        if (run / REVIEW_FILE).exists()
        else {}
    )
    rows = []
    for key, s in sorted(read_samples(run).items()):
        b = blames.get(key) or {}
        passed = grades.get(key)
        rows.append(
            [
                key[0],
                key[1],
                key[2] + 1,
                s.turns,
                s.termination,
                "passed" if passed else ("ungraded" if passed is None else "failed"),
                b.get("blame") or "",
                b.get("reason") or b.get("error") or "",
            ]
        )
    return _table(["case", "arm", "sample", "turns", "ending", "grade", "blame", "reason"], rows)


def write_conversations_page(run: str | Path, out_dir: str | Path) -> Path:
    """Write `out_dir/conversations.html` for a conversation run; return its path."""
    run, out = Path(run), Path(out_dir)
    summary = load_summary(run)
    body = (
        f"<h1>Conversations: {_e(run.name)}</h1>"
        "<h2>Spend</h2>"
        + _money(summary)
        + "<h2>Arms</h2><p>Conversations blamed on the simulated user (by the judge's review) or ended by its "
        "error are counted apart, as tau2-bench leaves infrastructure errors out of pass^k.</p>"
        + _arms(summary)
        + "<h2>Agreement with people</h2><p>Conversations a person played as the user, graded by the same checks, "
        "against the simulated conversations of the same case and arm (the majority outcome; simulated users "
        "tend to be more cooperative than people).</p>"
        + _agreement(summary.get("human_agreement"))
        + "<h2>Every conversation</h2>"
        + _conversations(run)
    )
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>Conversations</title><style>{STYLE}</style>"
        f"</head><body>{body}</body></html>\n"
    )
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / PAGE, page)
    return out / PAGE
