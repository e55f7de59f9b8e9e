"""Shared test helpers."""
from __future__ import annotations

import contextlib
import json
import os
import resource
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

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


@contextlib.contextmanager
def fifo_watchdog(*fifos: Path, after: float = 5.0) -> Iterator[list[str]]:
    """Yield a list that names each FIFO some reader hung on. After `after` seconds a
    thread opens each FIFO's write end (non-blocking: it succeeds only while a reader is
    blocked opening it) and closes it at once, so the hung reader sees end-of-file and
    the test goes on to fail instead of hanging forever."""
    released: list[str] = []
    stop = threading.Event()

    def watch() -> None:
        if stop.wait(after):
            return
        while not stop.is_set():
            for f in fifos:
                try:
                    fd = os.open(f, os.O_WRONLY | os.O_NONBLOCK)
                except OSError:  # ENXIO: nobody is reading it
                    continue
                os.close(fd)
                released.append(str(f))
            stop.wait(0.2)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        yield released
    finally:
        stop.set()
        t.join()


def run_evalkit_limited(*args: str | Path, timeout: float = 60, memory_bytes: int = 3 << 30,
                        cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`evalkit ARGS` in a child process under an address-space limit and a timeout: for
    inputs such as /dev/zero that would, if read, eat memory until the machine swaps."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    return subprocess.run([sys.executable, "-c", "from evalkit.cli import main; main()", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, preexec_fn=limit, cwd=cwd)
