"""The worker process of a python unit (`evalkit.running.agents`): the suite's function, out of
evalkit's process.

Run as ``python -I _pyworker.py [--check] CALLABLE SUITE [PATH...]`` with the sandbox's
allow-listed environment (`evalkit.calls.sandbox.environment`), inside the sandbox where there
is one: the suite folder, then each PATH, first on `sys.path`; ``pkg.module:function``
imported; the case read as JSON from stdin; the function called with it and an
`openai.OpenAI` client (an `AsyncOpenAI` one for an ``async def``) bound to the metering
proxy from ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``: the only client, and the only
key, this process ever holds. What the function prints goes to stderr (a log); the
one JSON line on stdout is evalkit's: ``{"output": str}``, ``{"returned": type}``,
``{"raised": type, "message", "traceback"}``, or with ``--check`` (the run's start:
can it be imported?) ``{"ok": true}`` or ``{"import_error": message}``.
Imports nothing of evalkit (the worker may run where evalkit's own folder is hidden).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import os
import sys
import traceback
from typing import Any

TAIL = 4096


def _load(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    module = importlib.import_module(module_name)
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise LookupError(f"{module_name} has no function {attr!r}")
    return fn


def main(args: list[str]) -> int:
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    try:
        return _main(args, out)
    finally:
        out.flush()


def _main(args: list[str], out: Any) -> int:
    check = bool(args) and args[0] == "--check"
    if check:
        args = args[1:]
    spec, root, *extra = args
    os.dup2(2, 1)  # the function's own prints: a log on stderr, never the output
    sys.path[:0] = [root, *extra]
    try:
        fn = _load(spec)
    except LookupError as exc:
        out.write(json.dumps({"import_error": str(exc), "missing": True}) + "\n")
        return 0
    except BaseException as exc:  # the suite author's module failed to import
        out.write(json.dumps({"import_error": f"cannot import {spec.partition(':')[0]!r}: {exc!r}"}) + "\n")
        return 0
    if check:
        out.write(json.dumps({"ok": True}) + "\n")
        return 0
    case = json.loads(sys.stdin.buffer.read().decode("utf-8", "surrogatepass"))
    import openai  # lazy: an import check (--check) never loads the SDK

    kw: dict[str, Any] = {
        "base_url": os.environ["OPENAI_BASE_URL"],
        "api_key": os.environ["OPENAI_API_KEY"],
        "max_retries": 0,
        "timeout": float(os.environ.get("EVALKIT_TIMEOUT_S") or 300),
    }
    try:
        if inspect.iscoroutinefunction(fn):

            async def run() -> Any:
                async with openai.AsyncOpenAI(**kw) as oc:
                    return await fn(case, oc)

            value = asyncio.run(run())
        else:
            with openai.OpenAI(**kw) as oc:
                value = fn(case, oc)
    except BaseException as exc:  # reported to evalkit: the sample is errored with it
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-TAIL:]
        out.write(json.dumps({"raised": type(exc).__name__, "message": str(exc), "traceback": tb}) + "\n")
        return 0
    if isinstance(value, str):
        out.write(json.dumps({"output": value}) + "\n")  # ASCII: a lone surrogate travels escaped
    else:
        out.write(json.dumps({"returned": type(value).__name__}) + "\n")
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
