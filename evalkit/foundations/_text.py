"""Any text an endpoint can send, made storable and printable.

A model's output, a tool call's arguments or a judge's reason is whatever JSON string
the endpoint sent, and JSON can carry what UTF-8 cannot: a lone surrogate (the valid
JSON string ``"lone \\ud800 surrogate"`` decodes to a Python str that no strict UTF-8
encoder accepts). NUL and other control characters are valid text but must never reach
a terminal as they are. This module holds the three rules evalkit applies everywhere:

* `storable_json`: JSON for UTF-8 files and SQLite. Non-ASCII text is kept readable
  (`ensure_ascii=False`) unless the value holds a lone surrogate; then every non-ASCII
  character is escaped (``\\ud800``), which `json.loads` reads back equal. Control
  characters are always escaped by JSON itself.
* `wtf8`: the bytes of a plain text file (a sample file): UTF-8, with a lone surrogate
  written as its three-byte form (WTF-8, Python's ``surrogatepass``), so the file holds
  the text losslessly and `from_wtf8` reads it back equal. Text without lone surrogates
  is plain UTF-8, byte for byte.
* `sendable`: a request's strings with each lone surrogate replaced by U+FFFD, since
  UTF-8, and so HTTP, cannot carry one (the judge is shown a model's output this way;
  the stored output keeps it).
* `printable`: text for a terminal line or a Markdown summary: control characters (C0,
  DEL, C1 such as the one-byte CSI U+009B), bidirectional overrides and lone surrogates
  shown as escapes (``\\x1b``, ``\\u202e``), so untrusted text can neither move the
  cursor, recolour, retitle or clear a terminal, nor reorder what is shown.
  `visible` applies the same rule to a block of text (an HTML ``<pre>``), keeping its
  newlines and tabs.
"""

from __future__ import annotations

import json
import re
from typing import Any

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_INVISIBLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)  # less \n \t


def storable_json(obj: Any, **kwargs: Any) -> str:
    """`obj` as JSON text that any UTF-8 file or SQLite TEXT column takes (see the module
    docstring); `kwargs` go to `json.dumps`."""
    text = json.dumps(obj, ensure_ascii=False, **kwargs)
    if not text.isascii() and _LONE_SURROGATE.search(text):
        text = json.dumps(obj, ensure_ascii=True, **kwargs)
    return text


def has_lone_surrogate(text: str) -> bool:
    return not text.isascii() and _LONE_SURROGATE.search(text) is not None


def wtf8(text: str) -> bytes:
    """`text` as file bytes: UTF-8, a lone surrogate in its three-byte (WTF-8) form."""
    return text.encode("utf-8", "surrogatepass")


def from_wtf8(data: bytes) -> str:
    """The text `wtf8` wrote, read back equal."""
    return data.decode("utf-8", "surrogatepass")


def sendable(obj: Any) -> Any:
    """`obj` (a str, or lists and dicts of them, as in chat messages) with every lone
    surrogate replaced by U+FFFD; `obj` itself (not a copy) when it has none."""
    if isinstance(obj, str):
        return _LONE_SURROGATE.sub("\ufffd", obj) if has_lone_surrogate(obj) else obj
    if isinstance(obj, list):
        out = [sendable(x) for x in obj]
        return obj if all(a is b for a, b in zip(out, obj, strict=True)) else out
    if isinstance(obj, dict):
        new = {k: sendable(v) for k, v in obj.items()}
        return obj if all(new[k] is v for k, v in obj.items()) else new
    return obj


def _escape(m: re.Match[str]) -> str:
    n = ord(m.group())
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


def printable(text: str) -> str:
    """`text` safe for one terminal (or Markdown) line: see the module docstring. Newlines
    and tabs are escaped too, so a message stays on its line."""
    text = str(text)
    if text.isascii() and text.isprintable():
        return text
    return _UNPRINTABLE.sub(_escape, text)


def visible(text: str) -> str:
    """`text` for a block on a page (see the module docstring): as `printable`, but its
    newlines and tabs kept."""
    text = str(text)
    if text.isascii() and text.isprintable():
        return text
    return _INVISIBLE.sub(_escape, text)
