"""Tokens counted as the server counts them (issue 42 item 5): under `evalkit serve` the
input-length check counts with the embedded model's own tokenizer (its GGUF vocabulary,
in this process: the server's tokenizer queues behind every generation, and a count that
timed out fell back to UTF-8 bytes for the rest of the run); `InputTooLong` names the
setting to raise."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from evalkit.calls.client import served_tokenizer
from evalkit.foundations.tokens import TokenCounter, byte_bound

# a treatment arm's guidance as the newcomer wrote it: about 230 real tokens, 986 bytes of text
GUIDANCE = (
    "You answer questions about our returns policy. Be brief and exact. "
    "Quote the policy's own numbers (days, amounts, fees) and never invent one. "
    "If the order is older than thirty days, say that a refund is no longer possible, "
    "but that store credit may be. If the item is damaged, ask for a photo first. "
) * 3


def test_the_models_own_count_decides_and_the_endpoint_is_not_asked() -> None:
    asked: list[str] = []

    def tokenize(text: str) -> int:
        asked.append(text)
        return len(text.split()) + 1

    # a closed port: asking the endpoint would fail, and then the byte bound would decide
    counter = TokenCounter("gemma-3-270m", "http://127.0.0.1:9/v1", tokenize=tokenize)
    n, method = asyncio.run(counter.measure(prompt=GUIDANCE, limit=300))
    assert byte_bound(prompt=GUIDANCE) > 900 > 300 >= n == len(GUIDANCE.split()) + 1
    assert method == "model tokenizer" and asked == [GUIDANCE]
    asyncio.run(counter.measure(prompt=GUIDANCE, limit=300))
    assert len(asked) == 1  # remembered: the k samples of a (case, arm) send the same text


def test_served_tokenizer_is_the_served_models_and_only_at_its_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = "http://127.0.0.1:8765/v1"
    assert served_tokenizer(url) is None  # not under serve
    monkeypatch.setenv(
        "EVALKIT_SERVED",
        json.dumps(
            {
                "base_url": url,
                "model": "gemma-3-270m",
                "status_file": str(tmp_path / "s"),
                "pid": os.getpid(),
                "cache_identity": "llama.cpp:x",
                "model_path": str(tmp_path / "model.gguf"),
            }
        ),
    )
    assert served_tokenizer("http://127.0.0.1:9999/v1") is None  # another endpoint
    tokenize = served_tokenizer(url + "/")
    assert tokenize is not None and getattr(tokenize, "args", None) == (str(tmp_path / "model.gguf"),)


def test_input_too_long_names_the_setting_to_raise(tmp_path: Path) -> None:
    from test_client import call

    from evalkit.calls.serve import ScriptedServer
    from evalkit.foundations.errors import InputTooLong

    with ScriptedServer({"default": {"text": "x"}}) as srv:
        exc, _ = call(srv, tmp_path, prompt="word " * 70, max_tokens_in=64)
    assert isinstance(exc, InputTooLong)
    assert "raise max_tokens_in in config.json (or the arm's)" in str(exc)


def _gguf() -> Path | None:
    from evalkit.calls.serve import default_model_path

    try:
        p = default_model_path()
    except Exception:
        return None
    return p if p.is_file() else None


@pytest.mark.skipif(_gguf() is None, reason="the embedded model is not installed")
def test_the_embedded_models_count_of_the_newcomers_guidance() -> None:
    from evalkit.calls.serve import gguf_token_count

    path = _gguf()
    n = gguf_token_count(str(path), GUIDANCE)
    # Gemma's tokenizer: about a quarter of the byte bound, BOS included
    assert 150 < n < 320 < byte_bound(prompt=GUIDANCE)
    assert gguf_token_count(str(path), "") == 1  # BOS alone, as /extras/tokenize/count says


def _two_arm_suite(root: Path, model: str, max_tokens_in: int) -> Path:
    """The newcomer's shape: a baseline and a treatment arm whose guidance is GUIDANCE."""
    root.mkdir(parents=True)
    price = {"in_per_mtok": 0.0, "out_per_mtok": 0.0}
    (root / "config.json").write_text(
        json.dumps(
            {
                "mode": "completion",
                "template": "prompt.txt",
                "generator": {"model": model, "api_key_env": "EVALKIT_TEST_KEY"},
                "temperature": 0.0,
                "seed": 1,
                "k": 1,
                "concurrency": 1,
                "cost_cap_usd": 0.01,
                "max_tokens_in": max_tokens_in,
                "max_tokens_out": 16,
                "price": price,
                "judge_price": price,
                "arms": [{"name": "baseline"}, {"name": "treatment", "guidance": "guidance.md"}],
            }
        )
    )
    (root / "prompt.txt").write_text("${guidance}Q: ${input}\nA:")
    (root / "guidance.md").write_text(GUIDANCE)
    (root / "cases.jsonl").write_text(
        "".join(
            json.dumps(
                {
                    "id": f"c{i}",
                    "input": "Can I return shoes after 40 days?" + " Why?" * i,
                    "tags": ["golden"],
                    "checks": [{"kind": "contains", "value": "credit"}],
                }
            )
            + "\n"
            for i in range(3)
        )
    )
    return root


def test_lint_and_plan_only_say_which_arms_longest_prompt_is_over(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from evalkit._cli.main import main

    suite = _two_arm_suite(tmp_path / "s", "scripted", 400)
    plan = CliRunner().invoke(main, ["run", str(suite), "--plan-only", "--base-url", "http://127.0.0.1:9/v1"])
    assert plan.exit_code == 0, plan.output
    assert "Longest prompt: arm baseline: case c2, " in plan.output and "within max_tokens_in 400" in plan.output
    assert "arm treatment: case c2, 951 tokens (at most: UTF-8 bytes): OVER max_tokens_in 400" in plan.output
    lint = CliRunner().invoke(main, ["lint", str(suite)])
    assert lint.exit_code == 0 and "warning: $.max_tokens_in: longest prompt: arm treatment" in lint.output
    assert "raise max_tokens_in in config.json" in lint.output and "arm baseline" not in lint.output
    assert CliRunner().invoke(main, ["lint", str(suite), "--strict"]).exit_code == 2


@pytest.mark.skipif(_gguf() is None, reason="the embedded model is not installed")
def test_plan_only_counts_the_embedded_models_tokens(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from evalkit._cli.main import main

    suite = _two_arm_suite(tmp_path / "s", "gemma-3-270m", 400)
    plan = CliRunner().invoke(main, ["run", str(suite), "--plan-only", "--base-url", "http://127.0.0.1:9/v1"])
    assert plan.exit_code == 0, plan.output
    assert "arm treatment: case c2, " in plan.output and "(model tokenizer), within max_tokens_in 400" in plan.output
