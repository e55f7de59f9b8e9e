"""A conversation's transcript as the judge and the pages read it (no heavy import).

A conversation sample's `results.jsonl` line holds every turn in `agent.conversation`
(`evalkit.conversations.loop`); the judge reads the whole transcript of it (one call per
conversation), a prompt's or an agent's sample its output as before.
"""

from __future__ import annotations

from typing import Any

from evalkit.foundations.records import Sample

SPEAKERS = {"user": "User", "assistant": "Agent"}


def turns_of(sample: Sample | dict[str, Any]) -> list[dict[str, Any]] | None:
    """A sample's conversation turns (`role`, `content`), or None for a sample that is no conversation."""
    agent = sample.agent if isinstance(sample, Sample) else sample.get("agent")
    turns = agent.get("conversation") if isinstance(agent, dict) else None
    return [t for t in turns if isinstance(t, dict)] if isinstance(turns, list) else None


def judged_text(sample: Sample) -> str:
    """What the judge reads of a sample: a conversation's transcript, one "User: ..." or
    "Agent: ..." paragraph a turn; any other sample's output."""
    turns = turns_of(sample)
    if turns is None:
        return sample.output
    return "\n\n".join(f"{SPEAKERS.get(str(t.get('role')), 'User')}: {t.get('content') or ''}" for t in turns)
