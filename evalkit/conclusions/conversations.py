"""The simulated user checked: a judged blame review of failed conversations, and a run's conversation figures.

A simulated user makes mistakes that a pass rate would score as the agent's (tau2-bench
#392: up to 30% of failed retail runs; #182: premature stops). After grading, each
failed conversation is reviewed by the suite's judge (one call each, role `judge` on
the run's ledger under its cap, cached): did the user reveal its `unknown_info`, invent
facts beyond its `known_info`, stop before its task was done, or break its persona,
and did that cause the failure? The answer is `BLAME: user` or `BLAME: agent`, with a
reason (`conversation-review.jsonl`). A conversation blamed on the user, like one that
ended `simulator_error`, is counted apart: `conversations.json` gives each arm's rates
and pass^k with and without them (as tau2-bench leaves infrastructure errors out of
pass^k) and their share, beside the endings, turns, and the simulator's spend.
"""

from __future__ import annotations

import collections
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.calls.ledger import role_spend
from evalkit.conclusions.grading import (
    _judge_session,
    _run_sync,
    judge_endpoint,
    read_samples,
    resolve_suite,
)
from evalkit.conclusions.human_agreement import human_agreement
from evalkit.conversations.transcript import judged_text
from evalkit.foundations._io import iter_jsonl
from evalkit.foundations.layout import GRADES, LEDGER
from evalkit.foundations.records import Case, Sample, Suite
from evalkit.numbers.stats import suite_pass_hat_k
from evalkit.runfolder.runs import RunFolder, write_atomic

Key = tuple[str, str, int]
REVIEW_FILE = "conversation-review.jsonl"
SUMMARY_FILE = "conversations.json"
SCHEMA = "evalkit.conversations/1"
# the choice copied from the prompt ("BLAME: user|agent", as a small judge writes it) names neither
_BLAME = re.compile(r"\s*BLAME:\s*(user|agent)\b(?!\s*\|)\s*(?:REASON:)?\s*(.*)", re.I | re.S)
REVIEW_PROMPT = """You review a conversation between a SIMULATED USER (played by a model) and an AGENT
under test. The conversation failed its checks. Decide who is to blame.

The simulated user was told:
{scenario}

Blame the user when it broke these instructions and that caused the failure: it revealed
what it was told it does not know, invented facts beyond what it knows, stopped before its
task was done, or broke its persona. Otherwise blame the agent.

The conversation ended: {ending}. Failed checks: {failed}.

<conversation>
{transcript}
</conversation>

Answer with one line: BLAME: user|agent REASON: <one sentence>"""


@dataclass(frozen=True)
class Blame:
    """The review of one failed conversation: `user` or `agent` (None when the judge
    call failed or its answer could not be read: `error`), and the judge's reason."""

    blame: str | None
    reason: str
    cost_usd: float = 0.0
    error: str | None = None

    def to_json(self, key: Key) -> dict[str, Any]:
        c, a, i = key
        return {
            "case_id": c,
            "arm": a,
            "index": i,
            "blame": self.blame,
            "reason": self.reason,
            "cost_usd": self.cost_usd,
            "error": self.error,
        }


def parse_blame(text: str) -> tuple[str, str]:
    """("user" | "agent", reason) from a review answer; ValueError when it has no BLAME line
    or its line copies the prompt's choice (`BLAME: user|agent`) instead of making one."""
    m = _BLAME.match(text or "")
    if m is None:
        raise ValueError(f"no BLAME: user|agent in the review answer: {(text or '')[:200]!r}")
    return m.group(1).lower(), m.group(2).strip()


def review_prompt(case: Case, sample: Sample, failed: Sequence[str]) -> str:
    """The review request of one failed conversation: the user's scenario, the ending,
    the failed checks and the transcript (the model's texts as data)."""
    user = case.input.get("user") if isinstance(case.input, dict) else None
    scenario = "\n".join(f"- {k}: {v}" for k, v in (user or {}).items()) or "- (nothing)"
    return REVIEW_PROMPT.format(
        scenario=scenario,
        ending=sample.termination or "unknown",
        failed=", ".join(failed) or "none named",
        transcript=judged_text(sample),
    )


async def _review_one(
    client: Any, case: Case, sample: Sample, failed: Sequence[str], should_stop: Callable[[], str | None]
) -> Blame:
    """One review call; a failed call or an unreadable answer is a `Blame` with `error`."""
    try:
        c = await client.complete(
            messages=[{"role": "user", "content": review_prompt(case, sample, failed)}],
            temperature=0.0,
            key=f"review/{sample.case_id}/{sample.arm}/{sample.index}",
            should_stop=should_stop,
        )
    except Exception as exc:  # noqa: BLE001 - a review that failed is recorded, never a crash of the grade
        return Blame(None, "", 0.0, f"{type(exc).__name__}: {exc}")
    try:
        blame, reason = parse_blame(c.text)
    except ValueError as exc:
        return Blame(None, "", c.cost_usd, str(exc))
    return Blame(blame, reason, c.cost_usd)


def failed_conversations(grades: Sequence[dict[str, Any]], samples: Mapping[Key, Sample]) -> dict[Key, list[str]]:
    """Each failed conversation (a sample with a transcript graded `passed: false`) and
    the names of its failed checks."""
    out: dict[Key, list[str]] = {}
    for g in grades:
        key = (str(g["case_id"]), str(g["arm"]), int(g["index"]))
        s = samples.get(key)
        if g.get("passed") is False and s is not None and s.termination is not None:
            out[key] = [str(c["name"]) for c in g.get("checks") or () if not c.get("passed")]
    return out


def review_conversations(
    run: str | Path, suite: Suite | str | Path | None = None, judge_base_url: str | None = None
) -> dict[str, Any]:
    """Review a graded conversation run's failed conversations with the suite's judge
    (none without a judge: blame unknown), write `conversation-review.jsonl` and
    `conversations.json`, and return the latter."""
    run = Path(run)
    meta = RunFolder(run).read_meta()
    s = resolve_suite(run, meta, suite)
    samples = read_samples(run)
    grades = list(iter_jsonl(run / GRADES))
    failed = failed_conversations(grades, samples)
    agreement = human_agreement(s, meta, samples, grades)  # a bad human-played line refused before any review is paid
    blames: dict[Key, Blame] = {}
    if failed and s.config.judge is not None:
        cap = float(meta.get("cost_cap_usd") or s.config.cost_cap_usd)  # the run's cap covers its reviews
        blames = _run_sync(_review_all(run, s, samples, failed, judge_base_url, cap))
    lines = "".join(json.dumps(b.to_json(k)) + "\n" for k, b in sorted(blames.items()))
    write_atomic(run / REVIEW_FILE, lines)
    summary = conversation_summary(run, samples, grades, blames, int(meta.get("k") or s.config.k), agreement)
    write_atomic(run / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
    return summary


async def _review_all(
    run: Path, suite: Suite, samples: Mapping[Key, Sample], failed: Mapping[Key, list[str]], url: str | None, cap: float
) -> dict[Key, Blame]:
    """The reviews, one judge call per failed conversation, on the run's ledger and judge cache."""
    cases = {c.id: c for c in suite.cases}
    endpoint = judge_endpoint(suite, url)
    out: dict[Key, Blame] = {}
    async with _judge_session(suite.config, endpoint, run, cap, "conversation-review", None) as session:
        for key, names in sorted(failed.items()):
            if key[0] in cases:
                out[key] = await _review_one(session.client, cases[key[0]], samples[key], names, session.should_stop)
    return out


def _arm_figures(
    keys: Sequence[Key],
    samples: Mapping[Key, Sample],
    passed: Mapping[Key, bool | None],
    blames: Mapping[Key, Blame],
    k: int,
) -> dict[str, Any]:
    """One arm's conversation figures: endings, turns, rates and pass^k with and without
    the conversations the simulator is to blame for (blamed on the user, or ended
    `simulator_error`), and their share of the failures."""
    apart = {
        key
        for key in keys
        if samples[key].termination == "simulator_error" or (blames.get(key) and blames[key].blame == "user")
    }
    n_pass = sum(1 for key in keys if passed.get(key))
    not_passed = [key for key in keys if not passed.get(key)]
    kept = [key for key in keys if key not in apart]
    by_case: dict[str, list[bool]] = collections.defaultdict(list)
    by_case_kept: dict[str, list[bool]] = collections.defaultdict(list)
    for key in keys:
        by_case[key[0]].append(bool(passed.get(key)))
        if key not in apart:
            by_case_kept[key[0]].append(bool(passed.get(key)))
    return {
        "conversations": len(keys),
        "endings": dict(collections.Counter(str(samples[key].termination) for key in keys)),
        "mean_turns": sum(samples[key].turns or 0 for key in keys) / len(keys) if keys else None,
        "passed": n_pass,
        "failed": sum(1 for key in keys if passed.get(key) is False),
        "simulator_blamed": len(apart),
        "simulator_blamed_share_of_failures": len(apart) / len(not_passed) if not_passed else 0.0,
        "pass_rate": n_pass / len(keys) if keys else None,
        "pass_rate_without_simulator_blamed": sum(1 for key in kept if passed.get(key)) / len(kept) if kept else None,
        "pass_hat_k": _pass_hat_k(by_case, k),
        "pass_hat_k_without_simulator_blamed": _pass_hat_k(by_case_kept, k),
        "flakiest": sorted(
            (c for c, v in by_case.items() if 0 < sum(v) < len(v)),
            key=lambda c: abs(sum(by_case[c]) / len(by_case[c]) - 0.5),
        )[:5],
    }


def _pass_hat_k(by_case: Mapping[str, list[bool]], k: int) -> dict[str, float | None]:
    """pass^j for j = 1..k over the cases with at least j conversations (`stats.suite_pass_hat_k`)."""
    out: dict[str, float | None] = {}
    for j in range(1, k + 1):
        counts = [(len(v), sum(v)) for v in by_case.values() if len(v) >= j]
        out[str(j)] = float(suite_pass_hat_k(counts, j).value) if counts else None
    return out


def conversation_summary(
    run: Path,
    samples: Mapping[Key, Sample],
    grades: Sequence[dict[str, Any]],
    blames: Mapping[Key, Blame],
    k: int,
    agreement: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`conversations.json`: each arm's figures (`_arm_figures`), the reviews' count,
    cost and blame shares, the simulator's spend beside the agent's, and its agreement
    with people (`human_agreement.human_agreement`: None without human-played conversations)."""
    passed = {(str(g["case_id"]), str(g["arm"]), int(g["index"])): g.get("passed") for g in grades}
    arms: dict[str, list[Key]] = collections.defaultdict(list)
    for key in sorted(samples):
        if samples[key].termination is not None:
            arms[key[1]].append(key)
    blamed = collections.Counter(b.blame or "unknown" for b in blames.values())
    return {
        "schema": SCHEMA,
        "simulator_spend_usd": role_spend(run / LEDGER, "simulator"),
        "agent_spend_usd": role_spend(run / LEDGER, "generator"),
        "reviews": {
            "failed_conversations_reviewed": len(blames),
            "blame": dict(blamed),
            "cost_usd": sum(b.cost_usd for b in blames.values()),
        },
        "per_arm": {arm: _arm_figures(keys, samples, passed, blames, k) for arm, keys in arms.items()},
        "human_agreement": agreement,
    }


def is_conversation_run(run: str | Path) -> bool:
    """Whether a run folder holds conversations (its `config.json` records a simulator)."""
    return "simulator" in RunFolder(Path(run)).read_meta()


def summary_lines(summary: Mapping[str, Any]) -> list[str]:
    """What `evalkit grade` says of a conversation run: per arm, the pass rate with and
    without the simulator-blamed conversations and their share; the simulator's spend."""
    lines = [
        f"conversations: simulator spend ${summary['simulator_spend_usd']:.6f}, agent ${summary['agent_spend_usd']:.6f}"
    ]
    for arm, f in summary["per_arm"].items():
        lines.append(
            f"  {arm}: {f['passed']}/{f['conversations']} passed; {f['simulator_blamed']} blamed on the simulator "
            f"({f['simulator_blamed_share_of_failures']:.0%} of those not passed); pass rate without them "
            f"{_pct(f['pass_rate_without_simulator_blamed'])}; endings {f['endings']}"
        )
    return lines + agreement_lines(summary.get("human_agreement"))


def agreement_lines(h: Mapping[str, Any] | None) -> list[str]:
    """What `evalkit grade` says of the simulator's agreement with people."""
    if not h:
        return ["  no human-played conversations (evalkit converse SUITE --case ID --arm NAME plays one)"]
    ci = h["agreement_ci95"]
    interval = f" (95% CI {ci[0]:.0%} to {ci[1]:.0%})" if ci else ""
    return [
        f"  agreement with people: {h['agree']}/{h['n']} human-played conversations pass or fail as the "
        f"simulated ones mostly do{interval}; {h['ties']} tied, {h['stale']} stale; {h['leans']}"
    ]


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"
