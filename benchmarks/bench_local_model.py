"""The embedded model (Gemma 3 270M, Q4_K_M, llama.cpp) behind `LocalModelServer`.

Measures the time to start the server (the model is assembled beforehand, once), then
30 sequential completions of 8 tokens at temperature 0.8 per arm of the example suite
(`data/factual`, capital-city cases, cycled), through the official `openai` client, and
how many answers contain the expected capital. Run from the repository root:
`python benchmarks/bench_local_model.py [--threads N]`.
"""
from __future__ import annotations

import argparse
import json
import string
import time
from pathlib import Path

import _smoke  # --smoke (benchmarks/_smoke.py; this folder is on sys.path)
from openai import OpenAI

from evalkit.calls.serve import LocalModelServer, default_model_path

SUITE = Path(__file__).resolve().parent.parent / "data" / "factual"


def prompts(arm_guidance: str) -> list[tuple[str, str]]:
    """(prompt, expected) for the suite's capital cases, rendered as the runner would."""
    template = string.Template((SUITE / "prompt.txt").read_text())
    out = []
    for line in (SUITE / "cases.jsonl").read_text().splitlines():
        case = json.loads(line)
        if "capital" in case["tags"] and isinstance(case["input"], str) and isinstance(case["expected"], str):
            out.append((template.safe_substitute(input=case["input"], guidance=arm_guidance), case["expected"]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: the server's)")
    ap.add_argument("--calls", type=int, default=30)
    _smoke.add(ap)
    args = ap.parse_args()
    _smoke.apply(args, Path("local_model.txt"), calls=1)  # prints its figures, writes none
    default_model_path()  # assemble once, outside the timing
    arms = {"baseline": "", "skilled": (SUITE / "guidance" / "skilled.md").read_text().rstrip() + "\n\n"}
    t0 = time.perf_counter()
    with LocalModelServer(n_threads=args.threads) as srv:
        started = time.perf_counter() - t0
        print(f"server up in {started:.2f} s ({srv.base_url}, threads={args.threads or 'default'})")
        client = OpenAI(base_url=srv.base_url, api_key="local", max_retries=0, timeout=120)
        for arm, guidance in arms.items():
            items = prompts(guidance)
            correct, t1 = 0, time.perf_counter()
            for i in range(args.calls):
                prompt, expected = items[i % len(items)]
                r = client.completions.create(model=srv.model_name, prompt=prompt, max_tokens=8,
                                              temperature=0.8, seed=i, stop=["\n"])
                correct += expected.lower() in r.choices[0].text.lower()
            wall = time.perf_counter() - t1
            print(f"{arm:9s}: {args.calls} completions of <= 8 tokens in {wall:.2f} s "
                  f"({wall / args.calls * 1000:.0f} ms each); {correct}/{args.calls} name the capital")


if __name__ == "__main__":
    main()
