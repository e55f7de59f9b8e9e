"""`evalkit tokens SKILL_DIR` (issue 32, item 3's context cost): each stage of a skill's
loading counted offline through the CLI, on a real skill folder."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from evalkit._cli.main import main

SKILL = "---\nname: pdf\ndescription: Convert PDF files to Markdown, keeping headings.\n---\n# PDF\n\nRead references/tables.md for tables. Grüße.\n"


def skill(root: Path) -> Path:
    (root / "pdf" / "references").mkdir(parents=True)
    (root / "pdf" / "SKILL.md").write_text(SKILL, encoding="utf-8")
    (root / "pdf" / "references" / "tables.md").write_text("# Tables\nKeep the header row.\n")
    (root / "pdf" / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")  # not text: left out
    return root / "pdf"


def test_the_byte_bound_per_stage_when_no_tokenizer_is_cached(tmp_path):
    folder = skill(tmp_path)
    out = CliRunner().invoke(main, ["tokens", str(folder), "--model", "no-such-model", "--json"])
    assert out.exit_code == 0, out.output
    [doc] = json.loads(out.stdout)
    # independent of the code: UTF-8 bytes + 2 (BOS and a dummy prefix) bound any byte-level BPE count
    bound = lambda s: len(s.encode("utf-8")) + 2  # noqa: E731
    assert doc["method"] == "utf-8 byte bound" and doc["exact"] is False
    assert doc["catalogue"] == bound("pdf\nConvert PDF files to Markdown, keeping headings.")
    assert doc["activation"] == bound(SKILL)
    assert doc["on_demand"] == {"references/tables.md": bound("# Tables\nKeep the header row.\n")}
    assert doc["total"] == doc["activation"] + doc["on_demand"]["references/tables.md"]
    text = CliRunner().invoke(main, ["tokens", str(folder), "--model", "no-such-model"]).stdout
    assert text.startswith(f"pdf ({folder}): tokens, at most (utf-8 byte bound)")


def test_a_folder_without_skill_md_is_exit_2(tmp_path):
    out = CliRunner().invoke(main, ["tokens", str(tmp_path)])
    assert out.exit_code == 2 and "not a skill folder: no SKILL.md" in out.output
