"""The simulator's agreement with people: human-played conversations against a run's simulated ones.

Simulated users are more cooperative than people (a 2026 study of 451 humans), so an
agent looks better against them than it is. A person's plays of a case
(`simulator/human-played.jsonl`, `evalkit converse`) are held against the run's
simulated conversations of the same case and arm: each play is graded as a run's
conversation is (`human.graded_pass`: the case's checks re-run on its transcript, the
person's outcome standing for the judge), and compared with the simulated
conversations' majority outcome (pass rate above or below one half; exactly one half is
a tie, counted apart), their most common ending, their mean turns and pass rate.

A play is compared only with a run whose arm had the same model and inputs it was
played against (the prompt and system templates, guidance, skill, program: the run's
`inputs` hashes) and whose case is unchanged in the suite (`case_sha256`); the others are
stale, counted. References: Wilson, E. B. (1927), "Probable inference, the law of
succession, and statistical inference", JASA 22(158) (the agreement's interval,
`stats.proportion_interval`).
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evalkit.conversations.human import HumanPlayed, case_sha256, graded_pass, suite_human_played
from evalkit.foundations.layout import HUMAN_PLAYED_FILE
from evalkit.foundations.records import Case, Sample, Suite
from evalkit.numbers.stats import proportion_interval

Key = tuple[str, str, int]


@dataclass(frozen=True)
class _Simulated:
    """A case and arm's graded simulated conversations: outcomes, turns, endings."""

    passed: tuple[bool, ...]
    turns: tuple[int, ...]
    endings: tuple[str, ...]

    @property
    def rate(self) -> float:
        return sum(self.passed) / len(self.passed)

    @property
    def modal_endings(self) -> set[str]:
        counts = collections.Counter(self.endings)
        top = max(counts.values())
        return {e for e, n in counts.items() if n == top}


def simulated_by_case(
    samples: Mapping[Key, Sample], grades: Sequence[Mapping[str, Any]]
) -> dict[tuple[str, str], _Simulated]:
    """Each (case, arm)'s graded simulated conversations (`passed` true or false; one
    ended by the simulator's error, graded neither, is left out)."""
    passed = {(str(g["case_id"]), str(g["arm"]), int(g["index"])): g.get("passed") for g in grades}
    rows: dict[tuple[str, str], list[tuple[bool, int, str]]] = collections.defaultdict(list)
    for key, s in sorted(samples.items()):
        if s.termination is not None and isinstance(passed.get(key), bool):
            rows[(key[0], key[1])].append((bool(passed[key]), s.turns or 0, s.termination))
    return {
        k: _Simulated(tuple(p for p, _, _ in v), tuple(t for _, t, _ in v), tuple(e for _, _, e in v))
        for k, v in rows.items()
    }


def stale_reason(play: HumanPlayed, case: Case | None, meta: Mapping[str, Any]) -> str | None:
    """Why a play cannot be held against this run (None: it can)."""
    if case is None:
        return "case not in the suite"
    if play.case_sha256 is not None and play.case_sha256 != case_sha256(case):
        return "case changed since it was played"
    if play.arm not in (meta.get("arms") or ()):
        return "arm not in the run"
    arm = (meta.get("arm_settings") or {}).get(play.arm)
    if isinstance(arm, Mapping) and arm.get("model") not in (None, play.agent_model):
        return "another model"
    inputs = meta.get("inputs") or {}
    if any(k in inputs and inputs[k] != v for k, v in play.inputs.items()):
        return "the arm's inputs differ from the run's"
    return None


def _compared(play: HumanPlayed, human: bool, sim: _Simulated) -> dict[str, Any]:
    """One play held against its case and arm's simulated conversations."""
    majority = None if sim.rate == 0.5 else sim.rate > 0.5
    return {
        "play": play.play,
        "case_id": play.case_id,
        "arm": play.arm,
        "player": play.player,
        "human_passed": human,
        "human_turns": play.turns,
        "human_ending": play.termination,
        "simulated": len(sim.passed),
        "simulated_pass_rate": sim.rate,
        "simulated_mean_turns": sum(sim.turns) / len(sim.turns),
        "simulated_endings": dict(collections.Counter(sim.endings)),
        "agrees": None if majority is None else majority == human,
        "ending_agrees": play.termination in sim.modal_endings,
    }


def _leaning(diff: float | None) -> str:
    if diff is None:
        return "no comparison"
    if diff > 0:
        return "simulated conversations pass more often than people's: the simulator is more cooperative"
    if diff < 0:
        return "simulated conversations pass less often than people's: the simulator is harder than people"
    return "simulated and people's conversations pass equally often"


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def agreement_figures(rows: Sequence[Mapping[str, Any]], counts: Mapping[str, int]) -> dict[str, Any]:
    """`human_agreement` from the compared plays (`_compared`) and the counts of those left out."""
    decided = [r for r in rows if r["agrees"] is not None]
    agree = sum(1 for r in decided if r["agrees"])
    ci = proportion_interval(agree, len(decided), "wilson") if decided else None
    pass_diff = _mean([r["simulated_pass_rate"] - float(r["human_passed"]) for r in rows])
    return {
        "file": HUMAN_PLAYED_FILE,
        **counts,
        "compared": len(rows),
        "n": len(decided),
        "ties": len(rows) - len(decided),
        "agree": agree,
        "agreement": agree / len(decided) if decided else None,
        "agreement_ci95": [ci.low, ci.high] if ci is not None else None,
        "ending_agreement": _mean([float(r["ending_agrees"]) for r in rows]),
        "mean_pass_rate_difference": pass_diff,
        "mean_turns_difference": _mean([r["simulated_mean_turns"] - r["human_turns"] for r in rows]),
        "leans": _leaning(pass_diff),
        "plays": list(rows),
    }


def human_agreement(
    suite: Suite, meta: Mapping[str, Any], samples: Mapping[Key, Sample], grades: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """The run's `human_agreement` (see the module docstring; differences are simulated
    minus human), or None when the suite has no human-played conversations."""
    plays = suite_human_played(suite.path)
    if not plays:
        return None
    cases = {c.id: c for c in suite.cases}
    simulated = simulated_by_case(samples, grades)
    rows: list[dict[str, Any]] = []
    counts = collections.Counter({"played": len(plays), "stale": 0, "ungraded": 0, "no_simulated": 0})
    stale: collections.Counter[str] = collections.Counter()
    for play in plays:
        why = stale_reason(play, cases.get(play.case_id), meta)
        if why is not None:
            counts["stale"] += 1
            stale[why] += 1
            continue
        human = graded_pass(cases[play.case_id], play, suite.path)
        sim = simulated.get((play.case_id, play.arm))
        if human is None or sim is None:
            counts["ungraded" if human is None else "no_simulated"] += 1
            continue
        rows.append(_compared(play, human, sim))
    return {**agreement_figures(rows, dict(counts)), "stale_reasons": dict(stale)}
