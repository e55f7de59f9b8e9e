"""Write small real inspect-ai logs (.eval and .json) with inspect-ai's mock model.

Used by tests/test_ingest.py (fresh logs each run, when inspect-ai is installed) and to
make the committed fixtures beside this file:
    .venv/bin/python tests/data/ingest/make_inspect_logs.py tests/data/ingest
Three cases x 3 epochs; the mock answers so that `fr` passes 3/3, `pe` 2/3, `jp` 0/3.
inspect-ai counts tokens with tiktoken, which downloads its encoding at first use and
fails offline, so the mock counts UTF-8 bytes instead.
"""
from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

ANSWERS = {"France": ["Paris", "Paris", "Paris"], "Peru": ["Lima", "Lima", "Cusco"],
           "Japan": ["Kyoto", "Osaka", "Kyoto"]}
EXPECTED = {"fr": (3, 3), "pe": (3, 2), "jp": (3, 0)}  # case -> (samples, passes)


def make_logs(log_dir: str | Path) -> dict[str, Path]:
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ModelOutput, get_model, modelapi
    from inspect_ai.model._providers.mockllm import MockLLM
    from inspect_ai.scorer import includes
    from inspect_ai.solver import generate

    @modelapi(name="offlinemock")
    def offlinemock():  # noqa: ANN202 - inspect's registry signature
        class OfflineMock(MockLLM):
            async def count_text_tokens(self, text: str) -> int:
                return max(1, len(text.encode("utf-8")))

        return OfflineMock

    seen: Counter[str] = Counter()

    def answer(messages, tools, tool_choice, config):  # noqa: ANN001, ANN202
        text = messages[-1].text
        country = next(c for c in ANSWERS if c in text)
        out = ANSWERS[country][seen[country] % 3]
        seen[country] += 1
        return ModelOutput.from_content(model="offlinemock", content=f"The capital is {out}.")

    task = Task(
        dataset=[Sample(input="What is the capital of France?", target="Paris", id="fr"),
                 Sample(input="What is the capital of Peru?", target="Lima", id="pe"),
                 Sample(input="What is the capital of Japan?", target="Tokyo", id="jp")],
        solver=[generate()], scorer=includes(), epochs=3, name="capitals")
    paths = {}
    for fmt in ("eval", "json"):
        seen.clear()
        model = get_model("offlinemock/model", custom_outputs=answer)
        logs = eval(task, model=model, log_dir=str(Path(log_dir) / fmt), log_format=fmt, display="none",
                    max_connections=1)
        assert logs[0].status == "success", logs[0].error
        paths[fmt] = Path(logs[0].location)
    return paths


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    for fmt, p in make_logs(out / "tmp-logs").items():
        dest = out / f"capitals.{fmt}"
        p.replace(dest)
        print(dest)
    for d in sorted((out / "tmp-logs").rglob("*"), reverse=True):
        d.rmdir() if d.is_dir() else d.unlink()
    (out / "tmp-logs").rmdir()
