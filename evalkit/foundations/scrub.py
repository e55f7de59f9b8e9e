"""The secret values evalkit holds, taken out of what a program under test returns: each
value in every encoded form a program could send it back in (as is, hex, URL-encoded,
base64 at each offset), replaced before anything is written. A leaf of foundations: the
sandbox builds a `Redactor`, the run folder's trajectory writer applies it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

MIN_SECRET_CHARS = 8  # shorter values are not taken for secrets (nor looked for)
REDACTED = "[redacted by evalkit]"


def _encodings(secret: str) -> dict[str, str]:
    """`secret` as a program could return it: as is, hex, URL-encoded, and base64 (standard
    and URL-safe) at each of the three offsets it may sit at inside a longer encoding
    (the characters that depend on the secret alone)."""
    import base64  # the encodings of secrets only
    from urllib.parse import quote, quote_plus

    raw = secret.encode("utf-8", "surrogatepass")
    forms: dict[str, str] = {}
    for form, how in ((secret, "as is"), (raw.hex(), "hex"), (raw.hex().upper(), "hex")):
        forms.setdefault(form, how)
    for form in (quote(secret, safe=""), quote_plus(secret)):
        forms.setdefault(form, "URL-encoded")
    for k in range(3):
        for name, enc in (("base64", base64.b64encode), ("base64", base64.urlsafe_b64encode)):
            text = enc(b"\0" * k + raw).decode("ascii")
            forms.setdefault(text[-(-k * 4 // 3) : (k + len(raw)) * 4 // 3], name)
    return {form: how for form, how in forms.items() if len(form) >= MIN_SECRET_CHARS}


class Redactor:
    """Takes every secret evalkit holds (`secrets`: what it is -> its value) out of what a
    sandboxed program returns, in its encoded forms too (`_encodings`), before it is
    written; `hits` says which were found and how ("OPENAI_API_KEY (base64)")."""

    def __init__(self, secrets: Mapping[str, str]) -> None:
        self._forms: dict[str, str] = {}
        self.hits: set[str] = set()
        for what, value in secrets.items():
            self.add(what, value)

    def add(self, what: str, value: str) -> None:
        if len(value) < MIN_SECRET_CHARS:
            return
        for form, how in _encodings(value).items():
            self._forms.setdefault(form, f"{what} ({how})")
        alternatives = sorted(self._forms, key=len, reverse=True)
        self._re = re.compile("|".join(map(re.escape, alternatives)))

    def text(self, text: str) -> str:
        """`text` with every secret's form replaced by `REDACTED`."""
        if not self._forms or not text:
            return text

        def hit(m: re.Match[str]) -> str:
            self.hits.add(self._forms[m.group(0)])
            return REDACTED

        return self._re.sub(hit, text)

    def fields(self, value: Any) -> Any:
        """A JSON value (a trajectory line, a tool call) with every secret redacted."""
        import json  # a round trip: every string of it, keys too

        try:
            return json.loads(self.text(json.dumps(value, ensure_ascii=False)))
        except ValueError:  # a form that met a JSON escape: each string on its own
            if isinstance(value, dict):
                return {self.text(str(k)): self.fields(v) for k, v in value.items()}
            if isinstance(value, (list, tuple)):
                return [self.fields(v) for v in value]
            return self.text(value) if isinstance(value, str) else value
