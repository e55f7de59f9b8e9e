"""Raw throughput of the scripted server: a bare asyncio loop of `AsyncOpenAI` calls.

2,000 completion calls at concurrency 32 against `ScriptedServer` with zero latency, the
same shape as the engine benchmark's bare loop. Run: `python benchmarks/bench_server.py`
(`--calls`, `--concurrency`, `--chat` to change it). Prints calls/s.
"""
from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

import _smoke  # --smoke (benchmarks/_smoke.py; this folder is on sys.path)
from openai import AsyncOpenAI

from evalkit.calls.serve import ScriptedServer

SCRIPT = {
    "rules": [{"match": "capital of France", "texts": ["Paris", "Lyon", "Paris, France"], "weights": [6, 1, 3]}],
    "default": {"text": "I do not know"},
    "latency_s": 0.0,
}


async def bare_loop(base_url: str, calls: int, concurrency: int, chat: bool) -> float:
    """Wall time of `calls` calls through one AsyncOpenAI client under a semaphore."""
    client = AsyncOpenAI(base_url=base_url, api_key="scripted", max_retries=0)
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> str:
        async with sem:
            if chat:
                r = await client.chat.completions.create(
                    model="scripted", messages=[{"role": "user", "content": f"What is the capital of France? ({i})"}],
                    max_tokens=16, seed=i, temperature=0.8)
                return r.choices[0].message.content or ""
            r = await client.completions.create(
                model="scripted", prompt=f"Q{i}: What is the capital of France?\nA:", max_tokens=16, seed=i,
                temperature=0.8)
            return r.choices[0].text

    start = time.perf_counter()
    outs = await asyncio.gather(*(one(i) for i in range(calls)))
    wall = time.perf_counter() - start
    await client.close()
    assert len(outs) == calls and all(outs)
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--chat", action="store_true", help="use the chat endpoint instead of completions")
    _smoke.add(ap)
    args = ap.parse_args()
    _smoke.apply(args, Path("server.txt"), calls=50)  # prints its figures, writes none
    with ScriptedServer(SCRIPT) as srv:
        wall = asyncio.run(bare_loop(srv.base_url, args.calls, args.concurrency, args.chat))
        served = srv.stats["requests"]
    print(f"scripted server, bare AsyncOpenAI loop: {args.calls} calls at concurrency {args.concurrency} "
          f"({'chat' if args.chat else 'completions'}) in {wall:.2f} s = {args.calls / wall:.0f} calls/s "
          f"(server saw {served})")


if __name__ == "__main__":
    main()
