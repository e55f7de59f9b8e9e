"""What the privacy scan adds to `evalkit lint`, and why detect-secrets' own scan is not used.

1. A suite of 1,000 cases whose inputs are 16 KiB of real prose each (PandaLM's
   instructions and responses from ../shared/data, seeded draws; plain generated prose
   where that data is absent), one case in fifty with a planted email, phone number,
   card number or API key: `lint_suite` with the scan against the same validation
   without it (median of 3), the added seconds, and the findings.
2. The scanner alone on those texts (MB/s), and redacting every case (`import --redact`).
3. detect-secrets run in-process: `scan_line` under its default settings on a sample of
   the cases (ms per case, and how many strings its entropy and keyword plugins flag in
   prose), and its regex plugins' `analyze_string` on whole texts.

    .venv/bin/python benchmarks/bench_privacy.py [--cases 1000] [--kib 16]

Writes `benchmarks/results/privacy.json`.
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import _smoke  # --smoke (benchmarks/_smoke.py; this folder is on sys.path)
from evalkit.pii import privacy
from evalkit.intake.lint import lint_suite, load_suite

ROOT = Path(__file__).resolve().parents[1]
PANDALM = ROOT.parent / "shared" / "data" / "pandalm" / "testset-v1.json"
PLANTS = ["Write to jane.doe@acme-mail.com.", "Call (415) 555-2671.", "Card 4111 1111 1111 1111.",
          "Key sk-proj-" + "".join(random.Random(1).choice("abcdefghijkLMNOPQRS0123456789") for _ in range(40)) + "."]


def corpus() -> tuple[list[str], str]:
    if PANDALM.exists():
        items = json.loads(PANDALM.read_text(encoding="utf-8"))
        return [" ".join(str(it.get(k) or "") for k in ("instruction", "input", "response1", "response2"))
                for it in items], "PandaLM testset-v1 (../shared/data)"
    rng = random.Random(7)
    words = "the of a to in is was for on that by with as at from 1999 2024 42 3.5 million people city report".split()
    return [" ".join(rng.choice(words) for _ in range(200)) for _ in range(500)], "generated prose"


def case_texts(n: int, size: int, texts: list[str]) -> list[str]:
    rng = random.Random(20)
    out = []
    for i in range(n):
        parts, length = [], 0
        while length < size:
            t = rng.choice(texts)
            parts.append(t)
            length += len(t) + 1
        text = "\n".join(parts)[:size]
        if i % 50 == 0:
            plant = PLANTS[(i // 50) % len(PLANTS)]
            text = text[: size // 2] + " " + plant + " " + text[size // 2 + len(plant) + 2:]
        out.append(text)
    return out


def write_suite(dest: Path, texts: list[str]) -> None:
    shutil.copytree(ROOT / "data" / "factual", dest, ignore=shutil.ignore_patterns("runs", "cases.jsonl"))
    with open(dest / "cases.jsonl", "w", encoding="utf-8") as fh:
        for i, t in enumerate(texts):
            fh.write(json.dumps({"id": f"case-{i:04d}", "input": t, "expected": "unknown",
                                 "tags": ["golden", "bulk"], "set": "capability"}) + "\n")


def median_s(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def detect_secrets_figures(texts: list[str]) -> dict:
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.core.scan import scan_line
    from detect_secrets.settings import default_settings

    sample = texts[:20]
    hits = 0
    t0 = time.perf_counter()
    with default_settings():
        for text in sample:
            for line in text.split("\n"):
                hits += sum(1 for _ in scan_line(line))
    default_ms = (time.perf_counter() - t0) / len(sample) * 1000
    plugins = [c() for c in get_mapping_from_secret_type_to_class().values()
               if hasattr(c, "denylist") and c.__name__ not in ("KeywordDetector", "IPPublicDetector")]
    sample = texts[:100]
    t0 = time.perf_counter()
    regex_hits = sum(1 for text in sample for p in plugins for _ in p.analyze_string(text))
    regex_ms = (time.perf_counter() - t0) / len(sample) * 1000
    return {"default_settings_scan_line": {"cases": 20, "ms_per_case": round(default_ms, 1),
                                           "strings_flagged": hits,
                                           "projected_1000_cases_s": round(default_ms, 1)},
            "regex_plugins_analyze_string": {"cases": 100, "plugins": len(plugins),
                                             "ms_per_case": round(regex_ms, 2), "strings_flagged": regex_hits}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--kib", type=int, default=16)
    _smoke.add(ap)
    args = ap.parse_args()
    out = _smoke.apply(args, Path(__file__).parent / "results" / "privacy.json", cases=50, kib=1)
    texts, source = corpus()
    cases = case_texts(args.cases, args.kib * 1024, texts)
    sc = privacy.scanner()
    sc.scan(" ".join(PLANTS))  # imports and phone metadata loaded before timing

    with tempfile.TemporaryDirectory() as tmp:
        suite = Path(tmp) / "bulk"
        write_suite(suite, cases)
        size_mb = (suite / "cases.jsonl").stat().st_size / 1e6
        without = median_s(lambda: load_suite(suite))
        with_scan = median_s(lambda: lint_suite(suite))
        report = lint_suite(suite)
        found = [f for f in report.warnings if "privacy:" in f.message]
        by_kind: dict[str, int] = {}
        for f in found:
            kind = f.message.split("[")[1].split("]")[0]
            by_kind[kind] = by_kind.get(kind, 0) + 1
        planted_lines = {i + 1 for i in range(0, args.cases, 50)}
        planted_found = len({f.line for f in found if f.line in planted_lines
                             and f.message.split("[")[1].split("]")[0] in ("email", "phone", "card", "api_key")})

    t0 = time.perf_counter()
    detections = sum(len(sc.scan(t)) for t in cases)
    scan_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    privacy.redact_cases([{"id": f"c{i}", "input": t} for i, t in enumerate(cases)])
    redact_s = time.perf_counter() - t0

    result = {
        "python": platform.python_version(), "machine": platform.machine(), "text": source,
        "suite": {"cases": args.cases, "kib_per_case": args.kib, "cases_jsonl_mb": round(size_mb, 1),
                  "planted": len(cases[::50])},
        "lint": {"without_scan_s": round(without, 3), "with_scan_s": round(with_scan, 3),
                 "added_s": round(with_scan - without, 3), "privacy_findings": len(found),
                 "findings_by_kind": dict(sorted(by_kind.items())), "planted_cases_flagged": planted_found,
                 "note": "the findings outside the planted cases are the business phone number one PandaLM "
                         "item holds (650-636-4884), drawn into many cases"},
        "scanner": {"seconds": round(scan_s, 3), "mb_per_s": round(sum(map(len, cases)) / 1e6 / scan_s, 1),
                    "ms_per_case": round(scan_s / args.cases * 1000, 2), "detections": detections},
        "redact_cases": {"seconds": round(redact_s, 3)},
        "detect_secrets_1_5": detect_secrets_figures(cases),
    }
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
