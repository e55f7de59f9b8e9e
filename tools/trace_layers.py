"""Count where a run's calls go back up the layers: call sites where a function of an
evalkit module of one layer calls a function of a module of a higher layer
(docs/architecture.md numbers the layers; imports point to lower numbers, so a call to
a higher number is made through a callback, an object or a generator handed down).

    PYTHONPATH=. python tools/trace_layers.py [--list]

Why: issue 40 asks that a run's options, followed from `run_suite_async`, go back up a
layer fewer times than 10. This runs a small suite (two arms, two cases, k=2, the prompt
unit; then the same suite with a command unit: the agent path) against the scripted
server (`evalkit.calls.serve.ScriptedServer`) under `sys.setprofile`, in this thread
only (the server's own thread is not the run's), and counts each distinct (caller
function, line, callee function) whose callee's layer is above its caller's; the caller
is the nearest evalkit frame, so a call made through a library's plumbing (contextlib's
wrappers, functools.partial) counts as its evalkit caller's; the import machinery's
calls (a finder, a module's body) are not the run's and are left out. It prints
the count, and each site with `--list`. Figures depend on the paths the runs take,
not on timing: each site is counted once however often it is called.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "evalkit"
LAYER_HEADING = re.compile(r"^### Layer (\d+): .*\(`evalkit/(?:(\w+)/|__init__\.py)`\)$")


def layer_folders(text: str) -> dict[str | None, int]:
    """Each layer folder's number (`### Layer N: ... (`evalkit/<folder>/`)`); None is the
    top-level `evalkit/__init__.py`."""
    return {m.group(2): int(m.group(1)) for line in text.splitlines() if (m := LAYER_HEADING.match(line))}


@dataclass(frozen=True)
class Site:
    """One call site that goes up: where it is and whom it calls."""

    caller: str  # module:function
    line: int
    caller_layer: int
    callee: str  # module:function
    callee_layer: int

    def __str__(self) -> str:
        return f"{self.caller}:{self.line} (L{self.caller_layer}) -> {self.callee} (L{self.callee_layer})"


class Tracer:
    """A `sys.setprofile` function that notes each evalkit-to-evalkit call that goes up."""

    def __init__(self, layers: dict[str | None, int]) -> None:
        self.layers = layers
        self.sites: set[Site] = set()
        self._where: dict[str, tuple[str, int] | None] = {}

    def module(self, filename: str) -> tuple[str, int] | None:
        """The evalkit module a code file is, and its layer; None outside the package."""
        if filename not in self._where:
            self._where[filename] = self._module(filename)
        return self._where[filename]

    def _module(self, filename: str) -> tuple[str, int] | None:
        try:
            rel = Path(filename).resolve().relative_to(PKG)
        except ValueError:
            return None
        folder = rel.parts[0] if len(rel.parts) > 1 else None
        if folder not in self.layers:
            return None
        name = ".".join(("evalkit", *rel.with_suffix("").parts)).removesuffix(".__init__")
        return name, self.layers[folder]

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or frame.f_back is None:
            return
        callee = self.module(frame.f_code.co_filename)
        if callee is None:
            return
        # the nearest evalkit frame below: a call made through a library's plumbing
        # (contextlib's wrappers, functools.partial, a client's hooks) is its caller's
        back: FrameType | None = frame.f_back
        caller = None
        while back is not None and (caller := self.module(back.f_code.co_filename)) is None:
            if back.f_code.co_filename.startswith("<frozen importlib"):
                return  # an import's finders and module bodies: not a call of the run
            back = back.f_back
        if back is None or caller is None or caller[1] >= callee[1]:
            return
        self.sites.add(
            Site(
                f"{caller[0]}:{back.f_code.co_qualname}",
                back.f_lineno,
                caller[1],
                f"{callee[0]}:{frame.f_code.co_qualname}",
                callee[1],
            )
        )


CONFIG: dict[str, Any] = {
    "name": "trace",
    "mode": "completion",
    "template": "prompt.txt",
    "generator": {"model": "scripted", "api_key_env": "EVALKIT_TRACE_KEY"},
    "temperature": 0.8,
    "seed": 1,
    "k": 2,
    "concurrency": 2,
    "cost_cap_usd": 1.0,
    "max_tokens_in": 64,
    "max_tokens_out": 8,
    "price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0},
    "batch_price": {"in_per_mtok": 0.5, "out_per_mtok": 1.0},
    "judge_price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0},
    "max_attempts": 2,
    # `copy` sends base's very requests: its answers are shared (`runner.seed_names`)
    "arms": [{"name": "base"}, {"name": "guided", "guidance": "guided.md"}, {"name": "copy"}],
}
# A program under test that asks the model once, through the run's proxy, and prints the answer.
UNIT = """import json, os, sys, urllib.request
case = json.load(sys.stdin)
body = {"model": case["model"], "prompt": str(case["input"]), "seed": case["seed"], "max_tokens": 4}
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/completions", data=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json",
                                      "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
with urllib.request.urlopen(req, timeout=60) as resp:
    print(json.load(resp)["choices"][0]["text"])
"""
COMMAND = {"kind": "command", "argv": ["{python}", "unit.py"], "isolation": "none", "timeout_s": 60}
AGENT = {"kind": "agent", "max_turns": 2}
# Each run: its name, the config's keys it replaces, and `run_suite`'s options.
SCENARIOS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("prompt", {}, {}),
    ("batch", {}, {"batch": "poll"}),
    ("command", {"unit": COMMAND}, {}),
    ("agent", {"unit": AGENT, "mode": "chat"}, {}),
]


def write_suite(root: Path, **config: Any) -> Path:
    """A two-case suite of `CONFIG` with `config`'s keys replaced."""
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({**CONFIG, **config}))
    (root / "prompt.txt").write_text("${guidance}Q: ${input}\nA:")
    (root / "guided.md").write_text("Answer in one word. ")
    (root / "unit.py").write_text(UNIT)
    cases = [
        {"id": f"c{i}", "input": f"capital of country {i}?", "expected": "Paris", "tags": ["golden"]} for i in range(2)
    ]
    (root / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    return root


def trace(layers: dict[str | None, int], tmp: Path, names: list[str]) -> set[Site]:
    """Run each scenario named (`run_suite_async`, each in a runs folder of its own) on
    the scripted server under the tracer."""
    from evalkit.calls.serve import ScriptedServer
    from evalkit.running.batch import BatchOptions
    from evalkit.running.runner import run_suite_async

    tracer = Tracer(layers)

    async def traced(suite: Path, base_url: str, options: dict[str, Any]) -> None:
        if options.get("batch"):
            options = {**options, "batch": BatchOptions(poll_s=0.02)}
        sys.setprofile(tracer)
        try:
            res = await run_suite_async(
                suite, runs_dir=suite.parent / f"{suite.name}-runs", base_url=base_url, progress=False, **options
            )
        finally:
            sys.setprofile(None)
        if not res.complete:
            raise SystemExit(f"trace_layers: the {suite.name} run did not complete: {res.reason}")

    with ScriptedServer({"rules": [{"match": "country", "texts": ["Paris"]}]}) as srv:
        for name, config, options in SCENARIOS:
            if name in names:
                asyncio.run(traced(write_suite(tmp / name, **config), srv.base_url, options))
    return tracer.sites


def main(argv: list[str]) -> int:
    """Print how many call sites go up a layer during the runs (each with `--list`)."""
    every = [name for name, _, _ in SCENARIOS]
    names = [a for a in argv if a != "--list"] or every
    if any(n not in every for n in names):
        print(__doc__, file=sys.stderr)
        return 2
    layers = layer_folders((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    os.environ.setdefault("EVALKIT_TRACE_KEY", "trace")
    with tempfile.TemporaryDirectory() as tmp:
        sites = trace(layers, Path(tmp), names)
    print(f"{len(sites)} call site(s) go up a layer ({', '.join(names)})")
    if "--list" in argv:
        for site in sorted(sites, key=str):
            print(f"  {site}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
