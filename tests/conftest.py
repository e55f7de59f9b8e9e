"""Shared test helpers."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ENGINE_CONFIG: dict[str, Any] = {
    "mode": "completion", "template": "prompt.txt",
    "generator": {"model": "scripted", "api_key_env": "EVALKIT_TEST_KEY"},
    "temperature": 0.8, "seed": 1234, "k": 3, "concurrency": 4, "cost_cap_usd": 1.0,
    "max_tokens_in": 64, "max_tokens_out": 8,
    "price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0}, "judge_price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0},
    "max_attempts": 2, "arms": [{"name": "base"}, {"name": "guided", "guidance": "guided.md"}],
}


def write_engine_suite(root: Path, cases: list[dict], **config: Any) -> Path:
    """A completion-mode suite with arms `base` and `guided` for the sampling-engine
    tests (run against the scripted server); `config` overrides keys."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps({**ENGINE_CONFIG, **config}))
    (root / "prompt.txt").write_text("${guidance}Q: ${input}\nA:")
    (root / "guided.md").write_text("Answer in one word. ")
    (root / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    return root
