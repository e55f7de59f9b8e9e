"""Write small real inspect-ai logs (.eval and .json) with inspect-ai's mock model, and
one through inspect's openai provider against evalkit's scripted server.

Used by tests/test_ingest.py (fresh logs each run, when inspect-ai is installed) and to
make the committed fixtures beside this file:
    .venv/bin/python tests/data/ingest/make_inspect_logs.py tests/data/ingest
`make_logs`: three cases x 3 epochs; the mock answers so that `fr` passes 3/3, `pe`
2/3, `jp` 0/3. inspect-ai counts tokens with tiktoken, which downloads its encoding at
first use and fails offline, so the mock counts UTF-8 bytes instead.
`make_errored_log`: ten cases x 5 epochs (`Epochs(5, ["mean", "pass_at_2"])`) over HTTP
on the scripted server, whose one `malformed` answer makes one sample (the first
`cap-norway` request) error; with `fail_on_error=False` inspect finishes `success`
with 49 of 50 samples scored, as a real run with one provider hiccup does.
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


CAPITALS = {"France": "Paris", "Peru": "Lima", "Japan": "Tokyo", "Norway": "Oslo", "Kenya": "Nairobi",
            "Chile": "Santiago", "Egypt": "Cairo", "Canada": "Ottawa", "Spain": "Madrid", "Italy": "Rome"}
ERRORED_SCRIPT = {
    "seed": 1,
    "rules": [{"match": c, "texts": [f"The capital is {a}.", "I am not sure."], "weights": [0.8, 0.2]}
              for c, a in CAPITALS.items()],
    "faults": [{"kind": "malformed", "times": 1, "match": "Norway"}],
}


def make_errored_log(log_dir: str | Path) -> Path:
    """A real `.eval` log with one errored sample (see the module notes)."""
    from inspect_ai import Epochs, Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import includes
    from inspect_ai.solver import generate

    from evalkit.calls.serve import ScriptedServer

    with ScriptedServer(ERRORED_SCRIPT) as server:
        task = Task(dataset=[Sample(input=f"What is the capital of {c}?", target=a, id=f"cap-{c.lower()}")
                             for c, a in CAPITALS.items()],
                    solver=[generate()], scorer=includes(), epochs=Epochs(5, ["mean", "pass_at_2"]),
                    name="capitals-errored", fail_on_error=False)
        logs = eval(task, model="openai/scripted", model_base_url=server.base_url,
                    model_args={"api_key": "sk-local", "responses_api": False}, log_dir=str(log_dir),
                    log_format="eval", display="none", max_connections=1)
    assert logs[0].status == "success", logs[0].error
    return Path(logs[0].location)


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    for fmt, p in make_logs(out / "tmp-logs").items():
        dest = out / f"capitals.{fmt}"
        p.replace(dest)
        print(dest)
    errored = make_errored_log(out / "tmp-logs" / "errored")
    errored.replace(out / "capitals-errored.eval")
    print(out / "capitals-errored.eval")
    for d in sorted((out / "tmp-logs").rglob("*"), reverse=True):
        d.rmdir() if d.is_dir() else d.unlink()
    (out / "tmp-logs").rmdir()
