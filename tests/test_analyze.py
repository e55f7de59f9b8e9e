"""`evalkit analyze` (issue 32, item 2): the deterministic findings on real skill, agent
and prompt files through the CLI, each with file:line:col, severity and a suggested
rewrite, as text a problem matcher reads, JSON and SARIF 2.1.0; and `lint` running them
on a suite's prompt and guidance files."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from evalkit._cli.main import main
from evalkit.intake.lint import lint_suite

SKILL = """\
---
name: pdf
description: Convert PDF files to Markdown.
allowed-tools: Read, Bash
---
# PDF to Markdown

You are a concise assistant. Read [the style guide](style.md), [the API](https://example.com/api) and [notes](notes.md#top).

You MUST cite the page number for every quote.
If the file is scanned, when OCR is available, unless the user opted out, run OCR first.

- If the PDF has tables:
  - If a table spans pages:
    - If the header repeats: drop the repeated header.

Give detailed explanations of every step.
You MUST NOT cite the page number when the user asks for plain text.

When Read fails, say which file could not be opened.

```
If a, if b, if c, if d: an example in a code block is not an instruction. Never cite the page.
```
"""
CLEAN = """\
---
name: tidy
description: Tidy a changelog.
tools: [read_file]
---
Be concise. You MUST keep every version heading. You MUST NOT invent release dates.
If read_file fails, say the changelog could not be read and stop.
See [the format](format.md).
"""
# a GitHub problem matcher's pattern for `file:line:col: severity: message`
MATCHER = re.compile(r"^(.+):(\d+):(\d+): (error|warning|note): (.*)$")


def write(root: Path) -> Path:
    (root / "skills" / "pdf").mkdir(parents=True)
    (root / "skills" / "pdf" / "SKILL.md").write_text(SKILL)
    (root / "skills" / "pdf" / "notes.md").write_text("# notes\n")
    (root / "agents").mkdir()
    (root / "agents" / "tidy.agent.md").write_text(CLEAN)
    (root / "agents" / "format.md").write_text("# format\n")
    (root / "agents" / "README.md").write_text("If a, if b, if c: not a prompt file, not read.\n")
    return root


def test_text_findings_name_file_line_col_severity_and_a_rewrite(tmp_path, monkeypatch):
    monkeypatch.chdir(write(tmp_path))
    out = CliRunner().invoke(main, ["analyze", "skills", "agents"])
    assert out.exit_code == 1  # error-level findings
    lines = out.stdout.splitlines()
    findings = [ln for ln in lines if MATCHER.match(ln)]
    assert findings == [
        "skills/pdf/SKILL.md:4:22: warning: tool 'Bash' is declared but no instruction says what to do when it "
        "fails [tool-no-error-path]",
        "skills/pdf/SKILL.md:8:53: error: linked file 'style.md' does not exist (relative to pdf/) [link-missing]",
        "skills/pdf/SKILL.md:11:1: warning: 3 conditions in one sentence (if, when, unless), more than 2 "
        "[nested-conditions]",
        "skills/pdf/SKILL.md:15:5: warning: a condition nested 3 deep in a list, more than 2 [nested-conditions]",
        "skills/pdf/SKILL.md:17:6: warning: 'detailed' conflicts with 'concise' at line 8:11 (length) "
        "[persona-conflict]",
        "skills/pdf/SKILL.md:18:5: error: MUST NOT 'cite page' here, MUST 'cite page' at line 10:5 [must-conflict]",
    ]
    # every finding is followed by its suggested rewrite, which no problem matcher mistakes for a finding
    rewrites = [ln for ln in lines if not MATCHER.match(ln)]
    assert len(rewrites) == len(findings) and all(r.startswith("    suggested rewrite: ") for r in rewrites)
    assert 'MUST cite page unless <condition>' in out.stdout
    assert "analyzed 2 file(s): 2 error(s), 4 warning(s)" in out.stderr  # README.md is not a prompt file


def test_a_clean_agent_file_has_no_findings_and_exits_0(tmp_path, monkeypatch):
    monkeypatch.chdir(write(tmp_path))
    out = CliRunner().invoke(main, ["analyze", "agents/tidy.agent.md", "--format", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc == {"files": ["agents/tidy.agent.md"], "findings": [], "counts": {"error": 0, "warning": 0, "note": 0}}


def test_json_and_sarif_carry_the_same_findings(tmp_path, monkeypatch):
    monkeypatch.chdir(write(tmp_path))
    doc = json.loads(CliRunner().invoke(main, ["analyze", "skills", "--format", "json"]).stdout)
    assert doc["counts"] == {"error": 2, "warning": 4, "note": 0}
    first = doc["findings"][0]
    assert set(first) == {"file", "line", "col", "severity", "rule", "message", "suggestion", "source"}
    assert {f["source"] for f in doc["findings"]} == {"rule"}  # no judge asked: every finding is a rule's
    out = CliRunner().invoke(main, ["analyze", "skills", "--format", "sarif", "--output", "a.sarif"])
    assert out.exit_code == 1 and out.stdout == ""
    sarif = json.loads(Path("a.sarif").read_text())
    assert sarif["version"] == "2.1.0" and sarif["$schema"].endswith("sarif-2.1.0.json")
    [run] = sarif["runs"]
    rules = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert set(rules) == {"link-missing", "nested-conditions", "must-conflict", "tool-no-error-path",
                          "persona-conflict"}
    got = [(r["ruleId"], r["level"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
            r["locations"][0]["physicalLocation"]["region"]["startLine"],
            r["locations"][0]["physicalLocation"]["region"]["startColumn"], r["properties"]["suggestion"])
           for r in run["results"]]
    assert got == [(f["rule"], f["severity"], f["file"], f["line"], f["col"], f["suggestion"])
                   for f in doc["findings"]]
    assert all(rules[r["ruleIndex"]] == r["ruleId"] for r in run["results"])


def test_a_missing_path_is_exit_2_naming_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(main, ["analyze", "nope.md"])
    assert out.exit_code == 2 and "nope.md" in out.output and "no such file" in out.output


def test_lint_and_analyze_of_a_suite_read_its_prompt_and_guidance_files(tmp_path):
    suite = tmp_path / "s"
    suite.mkdir()
    (suite / "prompt.txt").write_text("${guidance}\n${input}\n")
    (suite / "guidance.md").write_text("Always answer in French.\nNever answer in French.\n")
    cfg = {"mode": "completion", "template": "prompt.txt", "generator": {"model": "m"}, "judge": {"model": "j"},
           "k": 1, "cost_cap_usd": 1.0, "max_tokens_in": 100, "max_tokens_out": 10,
           "price": {"in_per_mtok": 1, "out_per_mtok": 1}, "judge_price": {"in_per_mtok": 1, "out_per_mtok": 1},
           "arms": [{"name": "baseline"}, {"name": "guided", "guidance": "guidance.md"}]}
    (suite / "config.json").write_text(json.dumps(cfg))
    (suite / "cases.jsonl").write_text(json.dumps({"id": "a", "input": "hi", "tags": ["golden"],
                                                   "expected": "bonjour"}) + "\n")
    report = lint_suite(suite)
    [w] = [w for w in report.warnings if "must-conflict" in w.message]
    assert w.path == str(suite / "guidance.md") and w.line == 2 and w.message.startswith("col 1: analyze error: ")
    assert lint_suite(suite, strict=True).errors  # under --strict, an error
    out = CliRunner().invoke(main, ["analyze", str(suite)])
    assert out.exit_code == 1
    assert f"{suite / 'guidance.md'}:2:1: error: Never 'answer french' here, Always 'answer french' at line 1:1" \
        in out.stdout
    # run says the same before its plan (and --plan-only spends nothing)
    out = CliRunner().invoke(main, ["run", str(suite), "--plan-only"])
    assert out.exit_code == 0, out.output
    assert f"warning: {suite / 'guidance.md'}:2:1: analyze error: Never 'answer french' here" in out.stderr
