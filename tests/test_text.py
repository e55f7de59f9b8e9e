"""evalkit.foundations._text: any text an endpoint can send, stored losslessly and shown safely."""
from __future__ import annotations

import json
import sqlite3

from evalkit.foundations._text import from_wtf8, printable, sendable, storable_json, wtf8

NASTY = ["lone \ud800 surrogate", "\udfff first", "NUL \x00 and \x07 bell", "\x1b[2J\x1b]0;title\x07",
         "C1 CSI \x9b31m", "\u202e reversed \u2066", "東京 naïve 🇫🇷", "", "plain ascii"]


def test_storable_json_reads_back_equal_and_fits_utf8_files_and_sqlite(tmp_path):
    db = sqlite3.connect(tmp_path / "t.sqlite")
    db.execute("CREATE TABLE t (v TEXT)")
    for text in NASTY:
        obj = {"output": text, "tool_calls": [{"arguments": {"q": text}}]}
        line = storable_json(obj)
        line.encode("utf-8")  # strict UTF-8 takes it
        assert json.loads(line) == obj
        db.execute("INSERT INTO t VALUES (?)", (line,))
        (tmp_path / "f.jsonl").write_text(line + "\n", encoding="utf-8")
        assert json.loads((tmp_path / "f.jsonl").read_text(encoding="utf-8")) == obj
    assert [json.loads(v)["output"] for (v,) in db.execute("SELECT v FROM t")] == NASTY
    assert storable_json({"a": "東京"}) == '{"a": "東京"}'  # readable unless it cannot be


def test_wtf8_is_lossless_and_plain_utf8_without_lone_surrogates():
    for text in NASTY:
        assert from_wtf8(wtf8(text)) == text
    assert wtf8("東京 🇫🇷") == "東京 🇫🇷".encode("utf-8")
    assert wtf8("a\ud800b") == b"a\xed\xa0\x80b"


def test_printable_escapes_every_control_sequence_and_leaves_text_alone():
    shown = [printable(t) for t in NASTY]
    for s in shown:
        assert all(c.isprintable() for c in s), s
    assert printable("\x1b[2J") == "\\x1b[2J" and printable("\x9b31m") == "\\x9b31m"
    assert printable("lone \ud800") == "lone \\ud800" and printable("a\nb") == "a\\x0ab"
    assert printable("東京 naïve 🇫🇷") == "東京 naïve 🇫🇷" and printable("plain") == "plain"


def test_sendable_replaces_lone_surrogates_only():
    msgs = [{"role": "user", "content": "x \ud800 y"}, {"role": "user", "content": [{"type": "text", "text": "\udc00"}]}]
    assert sendable(msgs) == [{"role": "user", "content": "x \ufffd y"},
                              {"role": "user", "content": [{"type": "text", "text": "\ufffd"}]}]
    s = "東京"
    assert sendable(s) is s and sendable(None) is None
