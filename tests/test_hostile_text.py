"""Reports take any text, and redaction reads the forms real leaks take (issue 31).

A real two-arm run on the scripted server whose outputs and judge reasons hold a lone
surrogate, ESC and NUL, and a secret in every encoded form (URL-encoded, JSON-escaped,
HTML entities, full-width digits, split by U+200B, a soft hyphen or a line break,
Basic-auth base64); graded, then `report`, `report --redact` and `compare --junit
--markdown` through the CLI. Every page renders (no UnicodeEncodeError, control
characters shown as escapes), and no file the redacted report or the CI outputs write
holds a secret in any form (checked with independent decodings, not the scanner)."""

from __future__ import annotations

import html
import json
import os
import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest
from click.testing import CliRunner

from evalkit._cli.main import main
from evalkit.conclusions.grading import grade_run
from evalkit.running.runner import run_suite
from evalkit.calls.serve import ScriptedServer

EMAIL = "jane.doe@acmecorp.io"
TOKEN = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5C"  # GitHub's format: ghp_ and 36 alphanumerics
CARD = "4111111111111111"
PASSWORD = "s3cr3t-Pa55w0rd!"
import base64  # noqa: E402

BASIC = base64.b64encode(f"deploy:{PASSWORD}".encode()).decode()
FORMS = [
    "mail jane.doe%40acmecorp.io today",
    "mail jane.doe\\u0040acmecorp.io today",
    "key \\u0067hp_" + TOKEN[4:] + " end",
    "mail jane.doe&#64;acmecorp.io now",
    "card \uff14\uff11\uff11\uff11 \uff11\uff11\uff11\uff11 \uff11\uff11\uff11\uff11 \uff11\uff11\uff11\uff11 ok",
    "key " + TOKEN[:14] + "\u200b" + TOKEN[14:] + " end",
    "key " + TOKEN[:20] + "\u00ad" + TOKEN[20:] + " end",
    "card 4111 1111\n1111 1111 ok",
    "key " + TOKEN[:18] + "\n" + TOKEN[18:] + " end",
    "Authorization: Basic " + BASIC,
]
HOSTILE = "lone \ud800 surrogate, ESC \x1b[31m red, NUL \x00 here"


def _suite(root: Path, url: str) -> Path:
    suite = root / "evals" / "leaky"
    (suite / "judge").mkdir(parents=True)
    cases = [{"id": f"leak-{i}", "input": f"Leak number {i}", "expected": {"rubric": "Says nothing private."},
              "tags": ["leak"]} for i in range(len(FORMS))]
    cases.append({"id": "tools", "input": "Call the tool", "expected": "x", "tags": ["tools"],
                  "checks": [{"kind": "contains", "value": "x"}]})
    cases.append({"id": "hostile", "input": "Say the hostile thing", "expected": "x", "tags": ["text"],
                  "checks": [{"kind": "contains", "value": "x"}]})
    (suite / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    (suite / "prompt.txt").write_text("${input}")
    (suite / "system.txt").write_text("${guidance}You answer questions.")
    (suite / "guided.md").write_text("GUIDED ")
    (suite / "judge" / "rubric-v1.md").write_text("5: private. 1: leaks.\n")
    (suite / "judge" / "prompt-v1.md").write_text("Rubric: ${rubric}\nAnswer: ${output}\nGive a score.\n")
    cfg = {"mode": "chat", "template": "prompt.txt", "system": "system.txt",
           "generator": {"model": "gen-model", "base_url": url, "api_key_env": "EVALKIT_TEST_KEY"},
           "judge": {"model": "judge-model", "base_url": url, "api_key_env": "EVALKIT_TEST_KEY"},
           "k": 2, "cost_cap_usd": 5.0, "max_tokens_in": 512, "max_tokens_out": 64, "temperature": 0.8, "seed": 7,
           "price": {"in_per_mtok": 0.1, "out_per_mtok": 0.4}, "judge_price": {"in_per_mtok": 0.1, "out_per_mtok": 0.4},
           "concurrency": 4, "allow_uncalibrated_judge": True,
           "arms": [{"name": "baseline"}, {"name": "guided", "guidance": "guided.md"}]}
    (suite / "config.json").write_text(json.dumps(cfg))
    return suite


def _script() -> dict:
    rules = [{"match": ["Give a score", f"Leak number {i}"], "text": f"SCORE: 2 REASON: it said {form}"}
             for i, form in enumerate(FORMS)]
    rules += [{"match": f"Leak number {i}", "text": form} for i, form in enumerate(FORMS)]
    rules.append({"match": "hostile", "texts": [HOSTILE, HOSTILE + " x"]})
    rules.append({"match": "Call the tool", "tool_calls": [{"name": "send", "arguments": {
        "to": "jane.doe%40acmecorp.io", "auth": "Basic " + BASIC, "token": "\\u0067hp_" + TOKEN[4:],
        "card": "4111 1111\n1111 1111", "split": TOKEN[:14] + "\u200b" + TOKEN[14:]}}]})
    return {"rules": rules, "default": {"text": "unknown"}}


def _readable(text: str) -> str:
    """What any reader of a file could decode from it (independently of evalkit's scanner)."""
    t = html.unescape(html.unescape(text))
    t = re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), t)
    t = unquote(t)
    t = unicodedata.normalize("NFKC", t)
    t = re.sub("[\u200b\u200c\u200d\u2060\ufeff\u00ad]", "", t)
    return t


def _leaks(text: str) -> list[str]:
    t = _readable(text)
    joined = re.sub(r"[ \t]*(\\n|\n)[ \t]*", "", t)
    digits = re.sub(r"[^0-9]", "", t)
    found = [s for s in (EMAIL, TOKEN, PASSWORD, BASIC) if s in t or s in joined]
    if CARD in digits:
        found.append("card")
    try:
        found += [PASSWORD for m in re.finditer(r"[A-Za-z0-9+/]{16,}={0,2}", t)
                  if PASSWORD in base64.b64decode(m.group() + "==", validate=False).decode("utf-8", "replace")]
    except ValueError:
        pass
    return found


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    os.environ.setdefault("EVALKIT_TEST_KEY", "test-key")
    root = tmp_path_factory.mktemp("hostile")
    with ScriptedServer(_script()) as srv:
        suite = _suite(root, srv.base_url)
        res = run_suite(suite, progress=False)
        grade_run(res.path)
    return root, Path(res.path)


def test_every_form_is_in_the_run_as_planted(graded):
    _, run = graded
    text = (run / "results.jsonl").read_text() + (run / "grades.jsonl").read_text()
    assert "\\ud800" in text and "%40acmecorp" in text and "&#64;" in text
    tools = [r for r in map(json.loads, (run / "results.jsonl").read_text().splitlines()) if r["case_id"] == "tools"]
    assert tools and all(r["tool_calls"][0]["arguments"]["to"] == "jane.doe%40acmecorp.io" for r in tools)


def test_a_plain_report_renders_any_text(graded):
    root, run = graded
    # --serial: one lane, one kernel for the pages (the parallel lanes are test_reports' `made`)
    res = CliRunner().invoke(main, ["report", str(run), "--reports-dir", str(root / "plain"), "--serial"])
    assert res.exit_code == 0, res.output
    pages = list((root / "plain" / run.name).glob("*.html"))
    assert {"run_summary.html", "skill_comparison.html"} <= {p.name for p in pages}
    for p in pages:
        page = p.read_text(encoding="utf-8")  # UTF-8 throughout: no lone surrogate reached the file
        assert "\x1b" not in page and "\x00" not in page, p.name
    assert "\\x1b" in (root / "plain" / run.name / "skill_comparison.html").read_text()


def test_report_redact_leaves_no_secret_in_any_form(graded):
    root, run = graded
    out = root / "redacted"
    # --serial: one lane, one kernel for the pages (the parallel lanes are test_reports' `made`)
    res = CliRunner().invoke(main, ["report", str(run), "--reports-dir", str(out), "--redact", "--serial"])
    assert res.exit_code == 0, res.output
    files = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.name == "skill_comparison.html" for p in files)
    leaking = {str(p.relative_to(out)): _leaks(p.read_text(encoding="utf-8", errors="replace")) for p in files}
    assert not {k: v for k, v in leaking.items() if v}, leaking


def test_compare_ci_outputs_leave_no_secret_in_any_form(graded):
    root, run = graded
    junit, md = root / "ci" / "compare.xml", root / "ci" / "compare.md"
    res = CliRunner().invoke(main, ["compare", str(run), "--baseline", "baseline", "--treatment", "guided",
                                       "--junit", str(junit), "--markdown", str(md)])
    assert "Traceback" not in res.output
    for f in (junit, md):
        if f.exists():
            assert not _leaks(f.read_text(encoding="utf-8")), f.name
    assert junit.exists() and md.exists(), res.output


def test_report_redact_keeps_the_replay_page_of_an_agent_run(tmp_path):
    import browser_run

    run = browser_run.make_agent_run(tmp_path / "agent")
    out = tmp_path / "reports"
    res = CliRunner().invoke(main, ["report", str(run), "--reports-dir", str(out), "--redact",
                                    "--only", "replay"])
    assert res.exit_code == 0, res.output
    page = (out / run.name / "replay.html").read_text(encoding="utf-8")
    assert page.count("ek-replay") >= 2 and "tool lookup" in page
    assert "<script>alert" not in page


@pytest.mark.parametrize("form", FORMS)
def test_each_form_is_replaced_where_it_stands(form: str) -> None:
    from evalkit.pii.privacy import Redactor

    out = Redactor().text(form)
    assert re.search(r"<[A-Z_]+_1>", out) and not _leaks(out), out
    # what the form said around the value stays as written
    assert out.split("<")[0] == form.split(" ")[0] + " " or out.startswith("Authorization: Basic <")
