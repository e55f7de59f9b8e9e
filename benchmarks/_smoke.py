"""`--smoke`: a benchmark at its smallest size, to prove it still runs (`make bench-smoke`,
part of `make test`). A smoke run's figures are no figures: they go to a temporary
folder (or `$EVALKIT_BENCH_SMOKE_DIR`), never to benchmarks/results/."""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

SMOKE_DIR_ENV = "EVALKIT_BENCH_SMOKE_DIR"


def add(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--smoke", action="store_true",
                    help="the smallest size, results to a temporary folder (make bench-smoke)")


def apply(args: argparse.Namespace, results: Path, **smallest: Any) -> Path:
    """The file this benchmark writes its figures to: `results`, or with `--smoke` a file
    of that name in the smoke folder, the arguments set to `smallest` first (and `out`
    too, when the benchmark takes one)."""
    if not args.smoke:
        return Path(getattr(args, "out", None) or results)
    for name, value in smallest.items():
        setattr(args, name, value)
    folder = Path(os.environ.get(SMOKE_DIR_ENV) or tempfile.mkdtemp(prefix="evalkit-bench-smoke-"))
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / Path(results).name
    if hasattr(args, "out"):
        args.out = str(out)
    return out
