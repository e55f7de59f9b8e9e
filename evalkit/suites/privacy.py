"""Personal data and secrets: find them in suites, datasets and model outputs, redact
them, and never repeat them.

Both practices evalkit serves forbid real customer data, credentials and personal
information in an evaluation set. This module finds them (`Scanner`), tells where they
are without saying what they are (`PrivacyFinding`: file, line, JSON path and kind,
never the value), lets a suite keep the synthetic look-alikes it needs on purpose
(`Policy`: `privacy.json` and a case's `privacy_allow`), and replaces what it found with
typed placeholders (`Redactor`: `<EMAIL_1>`, the same value the same placeholder within
a scope).

What is found, and by what:

* emails: a practical address regex (local part, dot-separated labels, an alphabetic
  TLD); the reserved documentation domains (RFC 2606 and 6761: example.com/.net/.org,
  .example, .test, .invalid, .localhost) are nobody's address and are not reported;
* phone numbers: Google's libphonenumber (`phonenumbers`) at leniency STRICT_GROUPING
  (a valid number whose digits are grouped as its country writes them: "37.7749" is not
  a German number), in international form (+CC) for every country and in national form
  for `Policy.phone_regions` (default US, GB, DE, FR, IN). A bare run of digits without
  "+" or any separator is a phone number only after a word such as "phone" or "call":
  otherwise it cannot be told from an order or account number;
* payment card numbers: 13 to 19 digits with an issuer prefix (Visa, Mastercard, Amex,
  Discover, Diners, JCB, UnionPay, Maestro, Mir) that pass the Luhn check
  (`stdnum.luhn`): an invalid Luhn is not a card;
* IBANs: `stdnum.iban` (country format and ISO 7064 mod 97-10);
* national identifiers that `python-stdnum` validates and whose written form is
  distinctive: US SSN, CA SIN, ES DNI and NIE, IT codice fiscale, FR NIR, BR CPF, IN
  Aadhaar, CN resident identity number, KR RRN;
* public IP addresses: candidates checked with the standard library's `ipaddress`
  (`is_global`, and for IPv6 the global unicast range 2000::/3: private, loopback,
  link-local and documentation ranges are not reported; a dotted quad after "v",
  "version", "section" and the like is a version or section number);
* secrets: the denylist patterns of Yelp's `detect-secrets` plugins that name a
  specific format (AWS, Azure storage, Discord, GitHub, GitLab, JWT with its formal
  validity check, Mailchimp, npm, OpenAI, private key blocks, PyPI, SendGrid, Slack,
  Square, Stripe, Telegram, Twilio, URLs with a password), plus the formats
  detect-secrets 1.5 lacks (OpenAI project/service/admin keys, Anthropic, Google API,
  GitHub fine-grained, Hugging Face tokens, `Password=` in a connection string).
  detect-secrets' own scan (`scan_line`) is not used: in-process with its default
  settings it takes about 135 ms per 16 KiB case (over two minutes for 1,000 cases)
  and its entropy and keyword plugins flag some 43,000 strings of ordinary prose in 20
  such cases; its regex plugins called on whole texts still take 4.8 ms per case
  (benchmarks/results/privacy.json). Its patterns run here behind literal
  triggers instead (a pattern runs only on a text that holds its prefix, e.g. "AKIA"
  or "ghp_"), and no plugin's network verification is ever called. Values that look
  made up (containing EXAMPLE, xxxx, "your", "dummy", "fake", "test", or fewer than 8
  distinct characters) are look-alikes, not keys.

Cheap prefilters run before every validator: a text with no "@" is not scanned for
emails; one pass finds the runs of seven or more digits and separators, and the card,
identifier, IBAN, IP and phone detectors search only a window around each; phonenumbers
and stdnum see only those candidates.
"""

from __future__ import annotations

import hashlib
import html
import ipaddress
import json
import os
import re
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from evalkit.foundations._io import MAX_CONFIG_BYTES, json_line_index, line_of, parse_json_object, read_text_file
from evalkit.foundations._text import storable_json
from evalkit.foundations.errors import InputError, InputErrors, RedactionIncomplete
from evalkit.foundations.layout import (
    PRIVACY_FILE as POLICY_FILE,  # a suite's allow-list and scan settings, beside config.json
)
from evalkit.foundations.layout import (
    REDACTED_RUN as REDACTED_RUN,  # in a report folder: the run copy a redacted report reads
)
from evalkit.foundations.layout import REDACTION_LOG as REDACTION_LOG
from evalkit.foundations.layout import TRAJECTORIES
from evalkit.suites.formats import suite_source
from evalkit.suites.runs import CONFIG, RunFolder, find_suite_dir, iter_jsonl, write_atomic
from evalkit.suites.suite import SuiteSource

CASE_ALLOW_KEY = "privacy_allow"  # a case's own allow-list


@dataclass(frozen=True)
class Kind:
    """A kind of sensitive value: its name in messages and allow-lists, the word of its
    placeholder, and whether it is a secret (a HIGH finding in an output) or personal data."""

    name: str
    label: str
    placeholder: str
    secret: bool


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("email", "email address", "EMAIL", False),
        Kind("phone", "phone number", "PHONE", False),
        Kind("card", "payment card number", "CARD", False),
        Kind("iban", "IBAN", "IBAN", False),
        Kind("national_id", "national identifier", "NATIONAL_ID", False),
        Kind("ip_address", "public IP address", "IP_ADDRESS", False),
        Kind("api_key", "API key or token", "API_KEY", True),
        Kind("private_key", "private key", "PRIVATE_KEY", True),
        Kind("jwt", "JSON Web Token", "JWT", True),
        Kind("password", "password in a URL or connection string", "PASSWORD", True),
    )
}
# When two detections overlap, the one whose kind comes first here wins (a card number
# is also a digit run that phonenumbers might read, a JWT holds base64 that looks like
# anything).
_PRIORITY = {
    name: i
    for i, name in enumerate(
        ("private_key", "jwt", "api_key", "password", "card", "iban", "national_id", "ip_address", "email", "phone")
    )
}
DEFAULT_PHONE_REGIONS = ("US", "GB", "DE", "FR", "IN")


@dataclass(frozen=True)
class Detection:
    """One sensitive value in a text: its kind, its span, what detected it (`detail`: a
    region, an issuer, a key format) and its normalized form (`norm`: what allow-list
    hashes and placeholders key on; the value itself, so never printed)."""

    kind: str
    start: int
    end: int
    detail: str = ""
    norm: str = field(default="", repr=False)


# --- the scanner ----------------------------------------------------------------------
_DIGIT = re.compile(r"[0-9]")

# emails: a local part, "@", dot-separated labels and an alphabetic TLD. Matched only
# from each "@" outwards, so a text is never walked letter by letter.
_EMAIL_LOCAL_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._%+-")
_EMAIL_AT = re.compile(
    r"[A-Za-z0-9_%+-](?:[A-Za-z0-9._%+-]{0,62}[A-Za-z0-9_%+-])?"
    r"@((?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24})(?![\w-])"
)
_RESERVED_DOMAINS = ("example.com", "example.net", "example.org")
_RESERVED_TLDS = ("example", "test", "invalid", "localhost")

# Numbers. One pass finds the runs of at least seven digits and separators (a year, a
# price or "67,000,000" is none); the number detectors then search only a window around
# each run. Their patterns start with a digit, a letter or "+"/"(", and boundaries are
# checked after a match (`_matches`), so the regex engine skips ahead quickly.
_NUMERIC_RUN = re.compile(r"[0-9][0-9 \t\u00a0().\-/]{5,}[0-9]")
_WINDOW_BEFORE, _WINDOW_AFTER = 36, 40  # an IBAN's letters before its digits; a bot token's tail
_PHONE_CANDIDATE = re.compile(r"(?:\+|\(\+?)?[0-9][0-9 \t\u00a0().\-/]{5,40}[0-9]")
_PHONE_KEYWORD = re.compile(
    r"(?i)\b(?:phone|tel|telephone|mobile|cell|call|fax|sms|whatsapp|contact|"
    r"ph|mob)\b[^\w\n]{0,4}(?:\w+[^\w\n]{1,3}){0,2}$"
)
_CARD_CANDIDATE = re.compile(r"[0-9](?:[ -]?[0-9]){12,18}")
_IPV4 = re.compile(r"[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}")
_IPV6 = re.compile(r"[0-9A-Fa-f]{0,4}:[0-9A-Fa-f]{0,4}:[0-9A-Fa-f:.]{1,37}")
_IPV6_HINT = re.compile(r"::|:[0-9A-Fa-f]{1,4}:[0-9A-Fa-f]{1,4}:")  # starts with ":": a quick pass
# a dotted quad after one of these is a version or a section number, not an address
_VERSION_BEFORE = re.compile(
    r"(?i)(?:\bv|(?:\b(?:version|ver|release|build|section|sect|chapter|ch|clause|"
    r"article|art|paragraph|para|step|rule|item|no)|§)\.?\s*)$"
)
_IPV6_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")  # where every routed address is (IANA)
_IBAN_CANDIDATE = re.compile(r"[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){11,34}")

# Payment card issuer prefixes and lengths (ISO/IEC 7812 IIN ranges as the issuers
# publish them). Why hand-written: python-stdnum has the Luhn check but no card module.
_CARD_BRANDS: tuple[tuple[str, int, int, tuple[int, ...]], ...] = (
    ("Visa", 4, 4, (13, 16, 19)),
    ("Mastercard", 51, 55, (16,)),
    ("Mastercard", 2221, 2720, (16,)),
    ("American Express", 34, 34, (15,)),
    ("American Express", 37, 37, (15,)),
    ("Discover", 6011, 6011, (16, 17, 18, 19)),
    ("Discover", 644, 649, (16, 17, 18, 19)),
    ("Discover", 65, 65, (16, 17, 18, 19)),
    ("Diners Club", 300, 305, (14, 15, 16, 17, 18, 19)),
    ("Diners Club", 36, 36, (14, 15, 16, 17, 18, 19)),
    ("Diners Club", 38, 39, (16, 17, 18, 19)),
    ("JCB", 3528, 3589, (16, 17, 18, 19)),
    ("UnionPay", 62, 62, (16, 17, 18, 19)),
    ("Maestro", 5018, 5018, tuple(range(12, 20))),
    ("Maestro", 5020, 5020, tuple(range(12, 20))),
    ("Maestro", 5038, 5038, tuple(range(12, 20))),
    ("Maestro", 5893, 5893, tuple(range(12, 20))),
    ("Maestro", 6304, 6304, tuple(range(12, 20))),
    ("Maestro", 6759, 6759, tuple(range(12, 20))),
    ("Maestro", 6761, 6763, tuple(range(12, 20))),
    ("Mir", 2200, 2204, (16, 17, 18, 19)),
)

# National identifiers: (detail, written form, python-stdnum module). Only forms that a
# person writes distinctively (dashes, dots, a check letter): a bare run of nine or ten
# digits is also an order number, and the checksums alone pass one random number in ten.
_NATIONAL_IDS: tuple[tuple[str, str, str], ...] = (
    ("US SSN", r"[0-9]{3}-[0-9]{2}-[0-9]{4}", "stdnum.us.ssn"),
    ("CA SIN", r"[0-9]{3}[ -][0-9]{3}[ -][0-9]{3}", "stdnum.ca.sin"),
    ("ES DNI", r"[0-9]{8}-?[A-HJ-NP-TV-Z]", "stdnum.es.dni"),
    ("ES NIE", r"[XYZ]-?[0-9]{7}-?[A-HJ-NP-TV-Z]", "stdnum.es.nie"),
    ("FR NIR", r"[12] ?[0-9]{2} ?[0-9]{2} ?(?:[0-9]{2}|2[AB]) ?[0-9]{3} ?[0-9]{3} ?[0-9]{2}", "stdnum.fr.nir"),
    ("BR CPF", r"[0-9]{3}\.[0-9]{3}\.[0-9]{3}-[0-9]{2}", "stdnum.br.cpf"),
    ("IN Aadhaar", r"[2-9][0-9]{3}[ -][0-9]{4}[ -][0-9]{4}", "stdnum.in_.aadhaar"),
    ("CN resident ID", r"[0-9]{17}[0-9X]", "stdnum.cn.ric"),
    ("KR RRN", r"[0-9]{6}-[0-9]{7}", "stdnum.kr.rrn"),
)
_ID_PATTERNS = tuple((detail, re.compile(rx), module) for detail, rx, module in _NATIONAL_IDS)
# the codice fiscale has no long digit run (its digits come in twos and threes): its own pass
_CODICE_FISCALE = (
    "IT codice fiscale",
    re.compile(r"[A-Z]{6}[0-9LMNP-V]{2}[A-EHLMPR-T][0-9LMNP-V]{2}[A-Z][0-9LMNP-V]{3}[A-Z]"),
    "stdnum.it.codicefiscale",
)


def _wordish(c: str) -> bool:
    return c.isalnum() or c == "_"


def _bounded(text: str, start: int, end: int) -> bool:
    """The span is not part of a longer word or number."""
    return not ((start > 0 and _wordish(text[start - 1])) or (end < len(text) and _wordish(text[end])))


def _matches(
    rx: re.Pattern[str], text: str, left: str = "", pos: int = 0, endpos: int | None = None
) -> Iterator[re.Match[str]]:
    """The matches of `rx` in `text[pos:endpos]` that are not part of a longer word or
    number (nor preceded by a character of `left`). A match that starts inside a word is
    not the end of the search: the next one may start one character later (as in
    "ID12 415 555 2671")."""
    n = len(text)
    end = n if endpos is None else endpos
    while pos < end:
        m = rx.search(text, pos, end)
        if m is None:
            return
        s, e = m.span()
        if (s > 0 and (_wordish(text[s - 1]) or text[s - 1] in left)) or (e < n and _wordish(text[e])):
            pos = s + 1
            continue
        yield m
        pos = max(e, s + 1)


@cache
def _stdnum(module: str) -> Any:
    import importlib

    return importlib.import_module(module)


def _card_brand(digits: str) -> str | None:
    for brand, lo, hi, lengths in _CARD_BRANDS:
        if len(digits) in lengths and lo <= int(digits[: len(str(lo))]) <= hi:
            return brand
    return None


# --- secrets --------------------------------------------------------------------------
@dataclass(frozen=True)
class _SecretRule:
    """Patterns of one secret format, searched only in a text that holds one of its
    literal `triggers` (or matches its `hint`); `numeric` ones only in the windows around
    digit runs. The value is the match, or its group `group` (the password of a URL, not
    the URL)."""

    kind: str
    detail: str
    triggers: tuple[str, ...]
    patterns: tuple[re.Pattern[str], ...]
    check: Callable[[str], bool] | None = None
    lookalike_check: bool = True
    group: int = 0
    hint: re.Pattern[str] | None = None
    numeric: bool = False
    gate: str = field(init=False, default="")

    def __post_init__(self) -> None:
        # A character every trigger holds, checked first: one that ordinary prose rarely
        # has, so most texts are cleared by a single character search.
        gate = next((c for c in "_=/:-." if self.triggers and all(c in t for t in self.triggers)), "")
        object.__setattr__(self, "gate", gate)


_LOOKALIKE_WORDS = ("example", "xxxx", "your", "dummy", "fake", "test", "sample", "placeholder", "redacted")
_PASSWORD_PLACEHOLDERS = {
    "password",
    "passwd",
    "pass",
    "pwd",
    "secret",
    "changeme",
    "yourpassword",
    "your_password",
    "mypassword",
    "xxx",
    "xxxx",
}


def _lookalike_key(value: str) -> bool:
    """A key-shaped value that is made up: a documentation marker, or too few distinct
    characters to be random."""
    low = value.lower()
    return any(w in low for w in _LOOKALIKE_WORDS) or len(set(value)) < 8


def _real_password(value: str) -> bool:
    """Not a password slot that holds no password (a template variable, a mask, a
    documentation word)."""
    v = value.strip()
    return not (
        not v
        or v[0] in "$%{<[*"
        or v.endswith(("}", ">", "]"))
        or len(set(v)) == 1
        or v.lower() in _PASSWORD_PLACEHOLDERS
    )


def _cased(*words: str) -> tuple[str, ...]:
    """Literal triggers for a case-insensitive pattern: each word lower, Title and UPPER
    (cheaper than lower-casing every text)."""
    return tuple(v for w in words for v in dict.fromkeys((w.lower(), w.title(), w.upper())))


@lru_cache(maxsize=1)
def _secret_rules() -> tuple[_SecretRule, ...]:
    """The secret formats: detect-secrets' specific plugins (their own patterns), then
    the well-known formats it lacks. Built on first use (detect-secrets imports requests)."""
    from detect_secrets.plugins import (
        aws,
        azure_storage_key,
        basic_auth,
        discord,
        github_token,
        gitlab_token,
        jwt,
        mailchimp,
        npm,
        openai,
        private_key,
        pypi_token,
        sendgrid,
        slack,
        square_oauth,
        stripe,
        telegram_token,
        twilio,
    )

    def ds(
        plugin: Any,
        kind: str,
        triggers: tuple[str, ...],
        *,
        patterns: Sequence[re.Pattern[str]] | None = None,
        **kw: Any,
    ) -> _SecretRule:
        return _SecretRule(kind, plugin.secret_type, triggers, tuple(patterns or plugin.denylist), **kw)

    aws_id, aws_secret = aws.AWSKeyDetector.denylist
    return (
        ds(aws.AWSKeyDetector, "api_key", ("AKIA", "ASIA", "ABIA", "ACCA", "A3T"), patterns=[aws_id]),
        ds(aws.AWSKeyDetector, "api_key", _cased("aws"), patterns=[aws_secret], group=1),
        ds(azure_storage_key.AzureStorageKeyDetector, "api_key", ("AccountKey=",)),
        ds(discord.DiscordBotTokenDetector, "api_key", (), hint=re.compile(r"\.[A-Za-z0-9_-]{6}\.")),
        ds(github_token.GitHubTokenDetector, "api_key", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
        ds(
            gitlab_token.GitLabTokenDetector,
            "api_key",
            (
                "glpat-",
                "gldt-",
                "glft-",
                "glsoat-",
                "glrt-",
                "GR1348941",
                "glcbt-",
                "glimt-",
                "glptt-",
                "glagent-",
                "gloas-",
            ),
        ),
        ds(jwt.JwtTokenDetector, "jwt", ("eyJ",), check=jwt.JwtTokenDetector.is_formally_valid, lookalike_check=False),
        ds(mailchimp.MailchimpDetector, "api_key", ("-us",)),
        ds(npm.NpmDetector, "api_key", ("_authToken",)),
        ds(openai.OpenAIDetector, "api_key", ("T3BlbkFJ",)),
        ds(
            private_key.PrivateKeyDetector,
            "private_key",
            ("PRIVATE KEY", "PuTTY-User-Key-File", "SSH2 ENCRYPTED"),
            lookalike_check=False,
        ),
        ds(pypi_token.PypiTokenDetector, "api_key", ("pypi-Ag",)),
        ds(sendgrid.SendGridDetector, "api_key", ("SG.",)),
        ds(slack.SlackDetector, "api_key", _cased("xox") + ("hooks.slack.com",)),
        ds(square_oauth.SquareOAuthDetector, "api_key", ("sq0csp-",)),
        ds(stripe.StripeDetector, "api_key", ("k_live_",)),
        ds(telegram_token.TelegramBotTokenDetector, "api_key", (), numeric=True),
        ds(twilio.TwilioKeyDetector, "api_key", ("AC", "SK")),
        ds(basic_auth.BasicAuthDetector, "password", ("://",), check=_real_password, lookalike_check=False, group=1),
        # formats detect-secrets 1.5 does not know (each provider's documented prefix)
        _SecretRule(
            "api_key",
            "OpenAI API Key",
            ("sk-proj-", "sk-svcacct-", "sk-admin-"),
            (re.compile(r"sk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}"),),
        ),
        _SecretRule(
            "api_key", "Anthropic API Key", ("sk-ant-",), (re.compile(r"sk-ant-[a-z]+[0-9]{2}-[A-Za-z0-9_-]{32,}"),)
        ),
        _SecretRule("api_key", "Google API Key", ("AIza",), (re.compile(r"AIza[0-9A-Za-z_-]{35}"),)),
        _SecretRule("api_key", "GitHub Token", ("github_pat_",), (re.compile(r"github_pat_[A-Za-z0-9_]{22,}"),)),
        _SecretRule(
            "api_key",
            "Hugging Face Token",
            ("hf_",),
            (re.compile(r"(?<![A-Za-z0-9_])hf_[A-Za-z]{34}(?![A-Za-z0-9_])"),),
        ),
        _SecretRule(
            "password",
            "Connection String Password",
            _cased("password", "pwd"),
            (re.compile(r"(?i)(?:^|[;\s\"'{])(?:password|pwd)\s*=\s*([^;\s\"'}]{3,})"),),
            check=_real_password,
            lookalike_check=False,
            group=1,
            hint=re.compile(
                r"(?i)\b(?:server|host|data source|uid|user id|username|database|"
                r"initial catalog|dsn)\s*="
            ),
        ),
    )


_KEY_BLOCK_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_JWT_TAIL = re.compile(r"[A-Za-z0-9_\-+/=]*")


def _key_block(text: str, s: int, e: int) -> tuple[int, int]:
    """The whole private key around its header match: from the header's dashes to the
    END line when there is one (within 20,000 characters), else to the end of the line."""
    dash = text.find("-----", text.rfind("\n", 0, s) + 1, s)
    start = dash if dash >= 0 else s
    end = _KEY_BLOCK_END.search(text, e, e + 20_000)
    if end is not None:
        return start, end.end()
    nl = text.find("\n", e)
    return start, (nl if nl >= 0 else len(text))


def _secret_matches(rule: _SecretRule, text: str, pos: int = 0, endpos: int | None = None) -> Iterator[Detection]:
    for rx in rule.patterns:
        for m in rx.finditer(text, pos, len(text) if endpos is None else endpos):
            s, e = m.span(rule.group)
            if rule.kind == "jwt":  # detect-secrets' pattern stops before the signature
                tail = _JWT_TAIL.match(text, e)
                e = tail.end() if tail is not None else e
                while e > s and text[e - 1] == ".":
                    e -= 1
            elif rule.kind == "private_key":
                s, e = _key_block(text, s, e)
            value = text[s:e]
            if rule.check is not None and not rule.check(value):
                continue
            if rule.lookalike_check and _lookalike_key(value):
                continue
            yield Detection(rule.kind, s, e, rule.detail, value)


class Scanner:
    """Finds sensitive values in text (see the module docstring for what and how).

    `phone_regions`: the countries whose national phone format is recognised (numbers in
    international +CC form are recognised for every country)."""

    def __init__(self, phone_regions: Sequence[str] = DEFAULT_PHONE_REGIONS) -> None:
        import phonenumbers

        self._pn = phonenumbers
        self.phone_regions = tuple(phone_regions)
        rules = _secret_rules()
        self._text_rules = tuple(r for r in rules if not r.numeric)
        self._numeric_rules = tuple(r for r in rules if r.numeric)
        self._keys: dict[str, bool] = {}

    # -- public ----------------------------------------------------------------------
    def holds(self, key: str) -> bool:
        """Whether `key` (a property name: short, and the same few over and over) holds
        any sensitive value. Cached."""
        hit = self._keys.get(key)
        if hit is None:
            if len(self._keys) > 4096:
                self._keys.clear()
            hit = self._keys[key] = bool(self.scan(key))
        return hit

    def scan(self, text: str) -> list[Detection]:
        """Every sensitive value in `text`, in order, overlaps resolved (one kind per
        span): in the text as written and in its decoded forms (`decoded_forms`: URL
        and JSON escapes, HTML entities, NFKC, zero-width characters and soft hyphens
        removed, a value split by a line break joined), each finding mapped back to
        the span of the original text its form came from, so a replacement covers the
        encoded value; and a Basic-auth credential's base64."""
        if len(text) < 6:
            return []
        found = self._scan_plain(text) + _basic_auth(text)
        plain = list(found)
        for form, spans, joined in decoded_forms(text):
            for d in self._scan_plain(form):
                start, end = spans.span(d.start, d.end)
                if joined and any(start < p.end and p.start < end for p in plain):
                    continue  # `KEY\nnext`: the value found as written ends at its line, not in the next
                found.append(Detection(d.kind, start, end, d.detail, d.norm))
        return _resolve(found) if len(found) > 1 else found

    def _scan_plain(self, text: str) -> list[Detection]:
        """`scan` of the text exactly as written."""
        if len(text) < 6:
            return []
        found: list[Detection] = []
        if "@" in text:
            found += self._emails(text)
        if _DIGIT.search(text) is not None:
            for a, b in self._windows(text):
                found += self._numbers(text, a, b)
            detail, rx, module = _CODICE_FISCALE
            found += [
                Detection("national_id", m.start(), m.end(), detail, m.group(0))
                for m in _matches(rx, text)
                if _stdnum(module).is_valid(m.group(0))
            ]
        if ":" in text and _IPV6_HINT.search(text) is not None:
            found += self._ipv6(text)
        for rule in self._text_rules:
            if (
                (not rule.gate or rule.gate in text)
                and (rule.hint is None or rule.hint.search(text) is not None)
                and (not rule.triggers or any(t in text for t in rule.triggers))
            ):
                found += _secret_matches(rule, text)
        return _resolve(found) if len(found) > 1 else found

    # -- emails ----------------------------------------------------------------------
    def _emails(self, text: str) -> Iterator[Detection]:
        at = text.find("@")
        while at >= 0:
            i = at
            while i > 0 and at - i < 64 and text[i - 1] in _EMAIL_LOCAL_CHARS:
                i -= 1
            while i < at and text[i] == ".":
                i += 1
            m = _EMAIL_AT.match(text, i, min(len(text), at + 256)) if i < at else None
            if m is not None and ".." not in m.group(0):
                domain = m.group(1).lower()
                if domain.rsplit(".", 1)[-1] not in _RESERVED_TLDS and not any(
                    domain == d or domain.endswith("." + d) for d in _RESERVED_DOMAINS
                ):
                    yield Detection("email", m.start(), m.end(), "", m.group(0).lower())
            at = text.find("@", at + 1)

    # -- numbers ---------------------------------------------------------------------
    @staticmethod
    def _windows(text: str) -> list[tuple[int, int]]:
        """The merged windows around the text's digit runs."""
        out: list[tuple[int, int]] = []
        n = len(text)
        for m in _NUMERIC_RUN.finditer(text):
            a, b = max(0, m.start() - _WINDOW_BEFORE), min(n, m.end() + _WINDOW_AFTER)
            if out and a <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], b))
            else:
                out.append((a, b))
        return out

    def _numbers(self, text: str, a: int, b: int) -> list[Detection]:
        out: list[Detection] = []
        luhn = _stdnum("stdnum.luhn")
        for m in _matches(_CARD_CANDIDATE, text, "", a, b):
            if m.start() >= 2 and text[m.start() - 1] in ".," and text[m.start() - 2].isdigit():
                continue  # the fraction of a decimal: 0.3888888888888889 is no Diners card
            digits = m.group(0).replace(" ", "").replace("-", "")
            brand = _card_brand(digits)
            if brand and luhn.is_valid(digits):
                out.append(Detection("card", m.start(), m.end(), brand, digits))
        for detail, rx, module in _ID_PATTERNS:
            for m in _matches(rx, text, ".", a, b):
                if _stdnum(module).is_valid(m.group(0)):
                    out.append(
                        Detection("national_id", m.start(), m.end(), detail, re.sub(r"[\s.\-]", "", m.group(0)).upper())
                    )
        out += self._ibans(text, a, b)
        out += self._ipv4(text, a, b)
        out += self._phones(text, a, b)
        for rule in self._numeric_rules:
            out += _secret_matches(rule, text, a, b)
        return out

    def _ibans(self, text: str, a: int, b: int) -> Iterator[Detection]:
        iban = _stdnum("stdnum.iban")
        for m in _IBAN_CANDIDATE.finditer(text, a, b):
            if m.start() > 0 and _wordish(text[m.start() - 1]):
                continue
            # the candidate may run into the next word ("... 0130 00 IBAN"): drop
            # trailing groups until what is left is valid, at a word boundary
            tokens = m.group(0).split(" ")
            for k in range(len(tokens), 0, -1):
                piece = " ".join(tokens[:k])
                end = m.start() + len(piece)
                compact = piece.replace(" ", "")
                if len(compact) >= 15 and _bounded(text, m.start(), end) and iban.is_valid(compact):
                    yield Detection("iban", m.start(), end, compact[:2], compact)
                    break

    def _ipv4(self, text: str, a: int, b: int) -> Iterator[Detection]:
        for m in _matches(_IPV4, text, ".", a, b):
            s, e = m.span()
            if text[e : e + 1] == "." and text[e + 1 : e + 2].isdigit():
                continue  # a fifth part: a version or section number
            if _VERSION_BEFORE.search(text, max(0, s - 10), s):
                continue
            try:
                addr = ipaddress.IPv4Address(m.group(0))
            except ValueError:
                continue
            if addr.is_global:
                yield Detection("ip_address", s, e, "IPv4", str(addr))

    def _ipv6(self, text: str) -> Iterator[Detection]:
        for m in _IPV6.finditer(text):
            s = m.start()
            if s > 0 and (_wordish(text[s - 1]) or text[s - 1] == ":"):
                continue
            cand = m.group(0).rstrip(".:")
            e = s + len(cand)
            if e < len(text) and _wordish(text[e]):
                continue
            try:
                addr = ipaddress.IPv6Address(cand)
            except ValueError:
                continue
            if addr.is_global and addr in _IPV6_GLOBAL_UNICAST:  # "1:2:3:4:5:6:7:8" is a ratio
                yield Detection("ip_address", s, e, "IPv6", str(addr))

    def _phones(self, text: str, a: int, b: int) -> Iterator[Detection]:
        pn = self._pn
        for m in _matches(_PHONE_CANDIDATE, text, "+", a, b):
            s, cand = m.start(), m.group(0)
            if sum(c.isdigit() for c in cand) < 7:
                continue
            international = cand.lstrip("(").startswith("+")
            if not international and cand.isdigit() and _PHONE_KEYWORD.search(text, max(0, s - 40), s) is None:
                continue  # a bare digit run: a phone number only where the text says so
            for region in (None,) if international else self.phone_regions:
                hits = [
                    h
                    for h in pn.PhoneNumberMatcher(cand, region, leniency=pn.Leniency.STRICT_GROUPING)
                    if _whole_number(text, s + h.start, s + h.end, h.raw_string)
                ]
                for h in hits:
                    yield Detection(
                        "phone",
                        s + h.start,
                        s + h.end,
                        pn.region_code_for_number(h.number) or "",
                        pn.format_number(h.number, pn.PhoneNumberFormat.E164),
                    )
                if hits:
                    break


def _whole_number(text: str, start: int, end: int, raw: str) -> bool:
    """A phone number phonenumbers found inside a candidate is one only when it has seven
    digits or more, is not a decimal ("0.8765432") and is not the tail or head of one
    ("21.069020" in a timestamp is no Frankfurt number)."""
    if sum(c.isdigit() for c in raw) < 7:
        return False
    if raw.count(".") == 1 and raw.replace(".", "").isdigit():
        return False  # "0.8765432" is a decimal
    before = text[start - 2 : start] if start >= 2 else ""
    after = text[end : end + 2]
    return not (
        (len(before) == 2 and before[1] in ".," and before[0].isdigit())
        or (len(after) == 2 and after[0] in ".," and after[1].isdigit())
    )


# --- decoded forms ---------------------------------------------------------------------
# Real leaks are rarely written plainly: a URL-encoded email (`jane.doe%40acme.io`), a
# JSON-escaped key (`\u0067hp_...`), an HTML entity (`&#64;`), full-width digits, a key
# split by U+200B or a soft hyphen (invisible on a page) or by a line break. The scanner
# reads each text twice more in decoded form. Why by hand: no library decodes these
# forms while keeping, for each decoded character, the span of the original it came
# from, which the redactor needs to replace the encoded value itself.
_INVISIBLE_CHARS = "\u00ad\u180e\u200b\u200c\u200d\u2060\ufeff"
_ENCODED = re.compile(
    r"(?P<url>(?:%[0-9A-Fa-f]{2})+)"
    r"|(?P<entity>&(?:#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});)"
    r"|(?P<uesc>\\u[0-9A-Fa-f]{4}(?:\\u[dD][c-fC-F][0-9A-Fa-f]{2})?)"
    r"|(?P<esc>\\[nrt])"
    rf"|(?P<invisible>[{_INVISIBLE_CHARS}]+)"
    r"|(?P<wide>[^\x00-\x7f])"
    r"|(?P<brk>[ \t]*(?:\r\n|\r|\n)[ \t]*)"
)
_ENCODED_HINT = re.compile(r"[%&\\\n\r]|[^\x00-\x7f]")
_VALUE_CHAR = re.compile(r"[A-Za-z0-9@._+\-/=]")


class _Spans:
    """Where each character of a decoded form came from in the original text: pieces
    (form start, original start, original end, identity), an identity piece mapping
    character by character, any other piece mapping each of its characters to its whole
    original span."""

    def __init__(self) -> None:
        self.pieces: list[tuple[int, int, int, bool]] = []
        self._starts: list[int] = []

    def add(self, at: int, start: int, end: int, identity: bool) -> None:
        self.pieces.append((at, start, end, identity))
        self._starts.append(at)

    def _orig(self, i: int) -> tuple[int, int]:
        import bisect

        k = bisect.bisect_right(self._starts, i) - 1
        at, start, end, identity = self.pieces[k]
        return (start + (i - at), start + (i - at) + 1) if identity else (start, end)

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The original span of the form's characters `start` to `end`."""
        return self._orig(start)[0], self._orig(end - 1)[1]


def _decode_token(m: re.Match[str], text: str, join: bool) -> str | None:
    """What one encoded token reads as (None: keep it as written)."""
    kind = m.lastgroup
    tok = m.group()
    if kind == "url":
        from urllib.parse import unquote_to_bytes

        try:
            return unquote_to_bytes(tok).decode("utf-8")
        except UnicodeDecodeError:
            return None
    if kind == "entity":
        out = html.unescape(tok)
        return out if out != tok else None
    if kind == "uesc":
        try:
            return json.loads(f'"{tok}"')  # type: ignore[no-any-return]
        except ValueError:
            return None
    if kind == "invisible":
        return ""
    if kind == "wide":
        import unicodedata

        out = unicodedata.normalize("NFKC", tok)
        return out if out != tok else None
    # a line break, written (`brk`) or JSON-escaped (`esc`): joined when `join` and it
    # stands between two characters of one value (digits: by a space, as a card's groups)
    if kind == "esc" and tok == "\\t":
        return "\t"
    before = text[m.start() - 1] if m.start() > 0 else ""
    after = text[m.end()] if m.end() < len(text) else ""
    if join and _VALUE_CHAR.match(before) and _VALUE_CHAR.match(after):
        return " " if before.isdigit() and after.isdigit() else ""
    return "\n" if kind == "esc" else None


def decoded_forms(text: str) -> list[tuple[str, _Spans, bool]]:
    """`text` decoded (see above), without and with line breaks inside values joined,
    each with the spans mapping it back and whether it is the joined one; only the forms
    that differ from `text`."""
    if _ENCODED_HINT.search(text) is None:
        return []
    out: list[tuple[str, _Spans, bool]] = []
    seen = {text}
    for join in (False, True):
        parts: list[str] = []
        spans = _Spans()
        at = pos = 0
        for m in _ENCODED.finditer(text):
            decoded = _decode_token(m, text, join)
            if decoded is None:
                continue
            if m.start() > pos:
                spans.add(at, pos, m.start(), True)
                parts.append(text[pos : m.start()])
                at += m.start() - pos
            if decoded:
                spans.add(at, m.start(), m.end(), False)
                parts.append(decoded)
                at += len(decoded)
            pos = m.end()
        if pos < len(text):
            spans.add(at, pos, len(text), True)
            parts.append(text[pos:])
        form = "".join(parts)
        if form not in seen and form:
            seen.add(form)
            out.append((form, spans, join))
    return out


_BASIC_AUTH = re.compile(r"\bBasic\s+([A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])")


def _basic_auth(text: str) -> list[Detection]:
    """A Basic-auth credential (`Authorization: Basic dXNlcjpwYXNz`): the base64 of
    `user:password`, a password as any other."""
    if "Basic" not in text:
        return []
    import base64
    import binascii

    found = []
    for m in _BASIC_AUTH.finditer(text):
        try:
            plain = base64.b64decode(m.group(1), validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            continue
        user, sep, password = plain.partition(":")
        if sep and password and plain.isprintable():
            found.append(Detection("password", m.start(1), m.end(1), "Basic auth", m.group(1)))
    return found


def _resolve(found: list[Detection]) -> list[Detection]:
    """Keep one detection per span: the higher-priority kind, then the longer span."""
    ranked = sorted(found, key=lambda d: (_PRIORITY[d.kind], -(d.end - d.start), d.start))
    kept: list[Detection] = []
    for d in ranked:
        if all(d.end <= k.start or d.start >= k.end for k in kept):
            kept.append(d)
    return sorted(kept, key=lambda d: d.start)


@lru_cache(maxsize=8)
def scanner(phone_regions: tuple[str, ...] = DEFAULT_PHONE_REGIONS) -> Scanner:
    """A shared `Scanner` for these phone regions."""
    return Scanner(phone_regions)


def value_hash(norm: str) -> str:
    """The allow-list hash of a detected value: sha256 of its normalized form (emails
    lower-cased, phone numbers in E.164, card, IBAN and identifier digits without
    separators, IP addresses compressed, keys as written)."""
    return hashlib.sha256(norm.encode("utf-8")).hexdigest()


# --- walking JSON ---------------------------------------------------------------------
def key_segment(path: str, key: str, n: int, sc: Scanner | None) -> str:
    """`path` extended by property `key` (the `n`th of its object, from 1): `path.key`,
    or `path[key n]` when `sc` finds a sensitive value in the key itself, so that no
    JSON path a diagnostic prints repeats what it found."""
    return f"{path}[key {n}]" if sc is not None and sc.holds(key) else f"{path}.{key}"


def walk_strings(
    obj: Any, path: str = "$", skip: frozenset[str] = frozenset(), sc: Scanner | None = None, shown: str | None = None
) -> Iterator[tuple[str, str, str]]:
    """(JSON path, path to show, text) of every string under `obj`, property names
    included (a key is at the path of its value; personal data in a key is still
    personal data). The path to show has each key that holds a finding of `sc`
    replaced by its place (`key_segment`); keys named in `skip` are not entered (at any
    depth)."""
    shown = path if shown is None else shown
    if isinstance(obj, str):
        yield path, shown, obj
    elif isinstance(obj, dict):
        for n, (k, v) in enumerate(obj.items(), start=1):
            if k in skip:
                continue
            kp, ks = f"{path}.{k}", key_segment(shown, k, n, sc)
            yield kp, ks, k
            if isinstance(v, str):  # the common case, without a call
                yield kp, ks, v
            elif isinstance(v, (dict, list)):
                yield from walk_strings(v, kp, skip, sc, ks)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            if isinstance(v, (str, dict, list)):
                yield from walk_strings(v, f"{path}[{i}]", skip, sc, f"{shown}[{i}]")


def iter_strings(
    obj: Any, path: str = "$", skip: frozenset[str] = frozenset(), sc: Scanner | None = None
) -> Iterator[tuple[str, str]]:
    """Every string under `obj`, property names included, with the JSON path to show
    (`$.a.b[2]`; a key holding a finding of `sc` shown as `[key n]`, see
    `walk_strings`); keys named in `skip` are not entered (at any depth)."""
    for _, shown, text in walk_strings(obj, path, skip, sc):
        yield shown, text


# --- the allow-list -------------------------------------------------------------------
@dataclass(frozen=True)
class AllowRule:
    """One allow-list entry: a detected value is let through when every condition given
    holds (its kind, its normalized value fully matching `pattern`, its `value_hash`, the
    case it is in)."""

    kind: str | None = None
    pattern: re.Pattern[str] | None = None
    sha256: str | None = None
    cases: frozenset[str] | None = None

    def allows(self, d: Detection, case_id: str | None) -> bool:
        return (
            (self.kind is None or self.kind == d.kind)
            and (self.cases is None or case_id in self.cases)
            and (self.pattern is None or self.pattern.fullmatch(d.norm) is not None)
            and (self.sha256 is None or self.sha256 == value_hash(d.norm))
        )


@dataclass(frozen=True)
class Policy:
    """What a suite (or dataset) lets through, and how it scans: the allow-list of
    `privacy.json`, each case's own `privacy_allow` entries, and the phone regions."""

    rules: tuple[AllowRule, ...] = ()
    case_rules: Mapping[str, tuple[AllowRule, ...]] = field(default_factory=dict)
    phone_regions: tuple[str, ...] = DEFAULT_PHONE_REGIONS

    def allows(self, d: Detection, case_id: str | None = None) -> bool:
        rules = self.rules + (self.case_rules.get(case_id, ()) if case_id is not None else ())
        return any(r.allows(d, case_id) for r in rules)

    @property
    def scanner(self) -> Scanner:
        return scanner(self.phone_regions)


POLICY_KEYS = {"allow", "phone_regions"}
RULE_KEYS = {"kind", "pattern", "sha256", "case", "reason"}
Problems = list[tuple[str, str]]  # (JSON path, message)


def parse_rules(items: Any, jp: str, problems: Problems, *, allow_case: bool) -> tuple[AllowRule, ...]:
    """Allow-list entries: a kind name (that kind is allowed), or an object with `kind`,
    `pattern` (a regex the normalized value must fully match), `sha256` (`value_hash`),
    `case` (a case id or a list of them; not inside a case) and `reason`. Problems are
    appended with their JSON path."""
    if not isinstance(items, list):
        problems.append(
            (jp, 'must be a list of allow-list entries (a kind, or {"kind", "pattern", "sha256", "case", "reason"})')
        )
        return ()
    rules: list[AllowRule] = []
    kinds = ", ".join(KINDS)
    for i, item in enumerate(items):
        ip = f"{jp}[{i}]"
        if isinstance(item, str):
            if item not in KINDS:
                problems.append((ip, f"unknown kind {item!r}; known: {kinds}"))
                continue
            rules.append(AllowRule(kind=item))
            continue
        if not isinstance(item, dict):
            problems.append((ip, "an entry must be a kind name or an object"))
            continue
        keys = RULE_KEYS if allow_case else RULE_KEYS - {"case"}
        bad = [k for k in item if k not in keys and not str(k).startswith("//")]
        for k in bad:
            problems.append(
                (f"{ip}.{k}", f"unknown key {k!r} in an allow-list entry; known: {', '.join(sorted(keys))}")
            )
        kind, pattern, digest, cases = item.get("kind"), item.get("pattern"), item.get("sha256"), item.get("case")
        ok = not bad
        if kind is not None and kind not in KINDS:
            problems.append((f"{ip}.kind", f"unknown kind {kind!r}; known: {kinds}"))
            ok = False
        compiled = None
        if pattern is not None:
            try:
                compiled = re.compile(pattern) if isinstance(pattern, str) and pattern else None
            except re.error as exc:
                problems.append((f"{ip}.pattern", f"pattern does not compile: {exc}"))
                ok = False
            else:
                if compiled is None:
                    problems.append((f"{ip}.pattern", "pattern must be a non-empty regex string"))
                    ok = False
        if digest is not None and not (isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest)):
            problems.append((f"{ip}.sha256", "sha256 must be 64 lower-case hex digits (`evalkit privacy hash`)"))
            ok = False
        case_set = None
        if cases is not None:
            case_list = [cases] if isinstance(cases, str) else cases
            if not isinstance(case_list, list) or not case_list or not all(isinstance(c, str) and c for c in case_list):
                problems.append((f"{ip}.case", "case must be a case id or a non-empty list of them"))
                ok = False
            else:
                case_set = frozenset(case_list)
        if "reason" in item and not isinstance(item["reason"], str):
            problems.append((f"{ip}.reason", "reason must be a string"))
            ok = False
        if kind is None and pattern is None and digest is None:
            problems.append(
                (ip, "an entry needs a kind, a pattern or a sha256 (a case alone would allow everything in it)")
            )
            ok = False
        if ok:
            rules.append(AllowRule(kind=kind, pattern=compiled, sha256=digest, cases=case_set))
    return tuple(rules)


def parse_policy(doc: Any, problems: Problems) -> Policy:
    """`privacy.json`'s object as a `Policy` (problems appended with their JSON path)."""
    if not isinstance(doc, dict):
        problems.append(("$", 'privacy.json must be a JSON object {"allow": [...], "phone_regions": [...]}'))
        return Policy()
    for k in doc:
        if k not in POLICY_KEYS and not str(k).startswith("//"):
            problems.append((f"$.{k}", f"unknown key {k!r}; known: {', '.join(sorted(POLICY_KEYS))}"))
    rules = parse_rules(doc.get("allow", []), "$.allow", problems, allow_case=True)
    regions = DEFAULT_PHONE_REGIONS
    if "phone_regions" in doc:
        import phonenumbers

        raw = doc["phone_regions"]
        if not isinstance(raw, list) or not all(isinstance(r, str) for r in raw):
            problems.append(("$.phone_regions", 'phone_regions must be a list of ISO 3166 region codes ("US", "GB")'))
        else:
            unknown = [r for r in raw if r.upper() not in phonenumbers.SUPPORTED_REGIONS]
            for r in unknown:
                problems.append(("$.phone_regions", f'unknown phone region {r!r} (ISO 3166 alpha-2, e.g. "US")'))
            regions = tuple(dict.fromkeys(r.upper() for r in raw if r not in unknown))
    return Policy(rules=rules, phone_regions=regions)


def load_policy_file(path: str | Any) -> Policy:
    """Read a `privacy.json` file (a dataset's `--privacy`): `InputErrors` naming the
    file, line and JSON path of every problem."""

    text = read_text_file(path, limit=MAX_CONFIG_BYTES)
    doc = parse_json_object(text, path, POLICY_FILE)
    problems: Problems = []
    policy = parse_policy(doc, problems)
    if problems:
        lines = json_line_index(text)
        raise InputErrors([InputError(msg, path, line_of(lines, jp), jp) for jp, msg in problems])
    return policy


# --- findings -------------------------------------------------------------------------
@dataclass(frozen=True)
class PrivacyFinding:
    """A sensitive value in a file: where (file, line, JSON path, the case it belongs to)
    and what kind, how many of that kind at that place; never the value."""

    kind: str
    path: str
    line: int | None = None
    json_path: str | None = None
    detail: str = ""
    count: int = 1
    case_id: str | None = None

    @property
    def message(self) -> str:
        k = KINDS[self.kind]
        what = k.label + (f" ({self.detail})" if self.detail else "")
        times = f" x{self.count}" if self.count > 1 else ""
        return (
            f"privacy: {what}{times} [{self.kind}]: replace it with a placeholder, or allow-list a synthetic "
            f"value ({POLICY_FILE})"
        )


def _group(items: Iterable[tuple[str, int | None, str | None, str | None, Detection]]) -> list[PrivacyFinding]:
    """One finding per (file, line, JSON path, kind), counting the values there; in the
    order first seen."""
    out: dict[tuple[Any, ...], PrivacyFinding] = {}
    for path, line, jp, case_id, d in items:
        key = (path, line, jp, d.kind)
        f = out.get(key)
        if f is None:
            out[key] = PrivacyFinding(d.kind, path, line, jp, d.detail, 1, case_id)
        else:
            detail = f.detail if f.detail == d.detail else ""
            out[key] = PrivacyFinding(f.kind, f.path, f.line, f.json_path, detail, f.count + 1, case_id)
    return list(out.values())


def _text_line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def scan_text(text: str, path: str, policy: Policy, *, case_id: str | None = None) -> list[PrivacyFinding]:
    """The findings in a plain text file (a template, guidance, a judge file), by line."""
    sc = policy.scanner
    return _group(
        (path, _text_line(text, d.start), None, case_id, d) for d in sc.scan(text) if not policy.allows(d, case_id)
    )


def scan_object(
    obj: Any,
    path: str,
    policy: Policy,
    *,
    line: int | None = None,
    prefix: str = "$",
    line_for: Callable[[str], int | None] | None = None,
    case_id: str | None = None,
    skip: frozenset[str] = frozenset(),
) -> list[PrivacyFinding]:
    """The findings in the strings of a JSON value, property names included, each at its
    JSON path (and `line`, or the line `line_for` gives the path); a key that holds a
    finding is shown by its place (`[key 3]`), never its text."""
    sc = policy.scanner
    items = []
    for jp, shown, s in walk_strings(obj, prefix, skip, sc):
        for d in sc.scan(s):
            if not policy.allows(d, case_id):
                items.append((path, line if line_for is None else line_for(jp), shown, case_id, d))
    return _group(items)


# --- suites ---------------------------------------------------------------------------
@dataclass(frozen=True)
class SuiteScan:
    """A suite's privacy scan: the findings, and the problems of its allow-list
    (`(path, line, json_path, message)`: errors, the list cannot be applied)."""

    findings: tuple[PrivacyFinding, ...] = ()
    problems: tuple[tuple[str, int | None, str | None, str], ...] = ()
    policy: Policy = field(default_factory=Policy)


def suite_policy(src: SuiteSource) -> tuple[Policy, list[tuple[str, int | None, str | None, str]]]:
    """A suite's `Policy` (its `privacy.json` and each case's `privacy_allow`), and the
    problems found reading them."""
    problems: list[tuple[str, int | None, str | None, str]] = []
    policy = Policy()
    if src.exists(POLICY_FILE):
        shown = src.display(POLICY_FILE)
        try:
            text = src.read(POLICY_FILE)
            doc = parse_json_object(text, shown, POLICY_FILE)
        except InputError as exc:
            problems.append((exc.path or shown, exc.line, exc.json_path, exc.message))
        else:
            found: Problems = []
            policy = parse_policy(doc, found)
            if found:
                lines = json_line_index(text)
                problems += [(shown, line_of(lines, jp), jp, msg) for jp, msg in found]
    case_rules: dict[str, tuple[AllowRule, ...]] = {}
    for file, line, prefix, obj in src.cases:
        if isinstance(obj, dict) and CASE_ALLOW_KEY in obj:
            found = []
            rules = parse_rules(obj[CASE_ALLOW_KEY], f"{prefix}.{CASE_ALLOW_KEY}", found, allow_case=False)
            problems += [(file, line, jp, msg) for jp, msg in found]
            if isinstance(obj.get("id"), str):
                case_rules[obj["id"]] = case_rules.get(obj["id"], ()) + rules
    return Policy(policy.rules, case_rules, policy.phone_regions), problems


def _suite_text_files(src: SuiteSource) -> list[str]:
    """The suite's text files a unit or a judge reads: templates, guidance, the arms'
    skill files (`<skill_dir>/SKILL.md`), judge files, scorers (relative paths, each
    once, only those that exist inside the folder)."""
    cfg = src.config if isinstance(src.config, dict) else {}
    names: list[str] = []
    for key in ("template", "system"):
        if isinstance(cfg.get(key), str):
            names.append(cfg[key])
    if cfg.get("template") is None:
        names.append("prompt.txt")
    names.append("system.txt")
    for arm in cfg.get("arms") or []:
        if isinstance(arm, dict) and isinstance(arm.get("guidance"), str):
            names.append(arm["guidance"])
        if isinstance(arm, dict) and isinstance(arm.get("skill_dir"), str):  # an agent's skill (evalkit.running.agents)
            names.append(arm["skill_dir"].rstrip("/") + "/SKILL.md")
        for key in ("prompt", "system"):  # an arm's own prompt and system templates (issue 28)
            if isinstance(arm, dict) and isinstance(arm.get(key), str):
                names.append(arm[key])
    for folder in ("guidance", "judge", "scorers"):
        names += [f"{folder}/{n}" for n in src.listdir(folder) if not n.startswith(".")]
    if src.files is not None:
        names += list(src.files)
    out = []
    for rel in dict.fromkeys(names):
        if rel.startswith("/") or ".." in rel.replace("\\", "/").split("/") or not src.exists(rel):
            continue
        out.append(rel)
    return out


def scan_suite_source(src: SuiteSource) -> SuiteScan:
    """Scan everything of a suite that reaches a model, a judge or a report: each case
    (every string but its `privacy_allow`), the config, the templates, guidance, judge
    files, scorers and the human labels (`judge/human-sample.jsonl`, line by line)."""
    policy, problems = suite_policy(src)
    findings: list[PrivacyFinding] = []
    skip = frozenset({CASE_ALLOW_KEY})
    for file, line, prefix, obj in src.cases:
        cid = obj.get("id") if isinstance(obj, dict) and isinstance(obj.get("id"), str) else None
        findings += scan_object(obj, file, policy, line=line, prefix=prefix, case_id=cid, skip=skip)
    if src.config:
        findings += scan_object(
            src.config,
            src.config_path,
            policy,
            line_for=lambda jp: line_of(src.config_lines, jp) if src.config_lines else None,
        )
    for rel in _suite_text_files(src):
        try:
            text = src.read(rel)
        except InputError:
            continue  # unreadable: the suite's own validation says so
        shown = src.display(rel)
        if rel.endswith(".jsonl"):
            findings += scan_jsonl(text, shown, policy)
        else:
            findings += scan_text(text, shown, policy)
    return SuiteScan(tuple(findings), tuple(problems), policy)


def scan_jsonl(text: str, path: str, policy: Policy) -> list[PrivacyFinding]:
    """A JSON-lines file: each line's strings at their JSON paths; a line that does not
    parse is scanned as text."""
    out: list[PrivacyFinding] = []
    for n, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError:
            out += [PrivacyFinding(f.kind, path, n, None, f.detail, f.count) for f in scan_text(raw, path, policy)]
            continue
        out += scan_object(obj, path, policy, line=n)
    return out


# --- suites, as a run sees them -------------------------------------------------------
ALLOW_FLAG = "--allow-private-data"


def scan_suite(suite: Any) -> SuiteScan:
    """The privacy scan of a suite (a `Suite` record or its path): its source, as lint
    scans it, plus the guidance of any arm kept outside the suite folder (a micro-test's
    variants)."""
    scan = scan_suite_source(suite_source(getattr(suite, "path", suite)))
    extra: list[PrivacyFinding] = []
    config = getattr(suite, "config", None)
    for arm in getattr(config, "arms", ()):
        if arm.guidance and arm.guidance_file and os.path.isabs(arm.guidance_file):
            extra += scan_text(arm.guidance, arm.guidance_file, scan.policy)
    return SuiteScan(scan.findings + tuple(extra), scan.problems, scan.policy)


def count_by_kind(findings: Iterable[PrivacyFinding]) -> dict[str, int]:
    out: dict[str, int] = {}
    for f in findings:
        out[f.kind] = out.get(f.kind, 0) + f.count
    return dict(sorted(out.items()))


def run_gate(suite: Any, *, allowed: bool, recorded: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What `run` does with the suite's privacy scan before any call: refuse with every
    finding (file, line, JSON path, kind; never the value) as an `InputErrors`, unless
    `allowed` (`--allow-private-data`) or a resumed run recorded that it was. Returns
    the record for the run's `config.json` (`privacy`: counts per kind, and whether the
    flag let them through)."""
    scan = scan_suite(suite)
    if scan.problems:
        raise InputErrors([InputError(msg, path, line, jp) for path, line, jp, msg in scan.problems])
    by_kind = count_by_kind(scan.findings)
    n = sum(by_kind.values())
    if not n:
        return {"findings": 0}
    if not (allowed or (recorded or {}).get("allowed")):
        errs = [InputError(f.message, f.path, f.line, f.json_path) for f in scan.findings]
        errs.append(
            InputError(
                f"{n} privacy finding(s): the run refuses personal data and secrets before any "
                f"call; redact them, allow-list synthetic values in {POLICY_FILE}, or pass "
                f"{ALLOW_FLAG} (recorded in the run's config.json)",
                getattr(suite, "path", suite),
            )
        )
        raise InputErrors(errs)
    return {"findings": n, "by_kind": by_kind, "allowed": True, "allowed_by": ALLOW_FLAG}


# --- datasets -------------------------------------------------------------------------
DATASET_LOG_SUFFIX = ".redaction-log.json"
DATASET_TEXT_FIELDS = ("query", "expected_response", "notes", "source_reference")  # names and ids stay


def scan_dataset(doc: Mapping[str, Any], lines_from: Any, shown: str, policy: Policy | None) -> list[str]:
    """The privacy findings of an evaluation dataset (its metadata and every pair, a
    pair's id being its case for `case`-scoped allow-list entries), as dataset
    diagnostics: `json <JSON path> (<file>:<line>): privacy: ...`. Lines come from the
    file `lines_from` (read again only when there is a finding); none without it."""
    policy = policy or Policy()
    found = scan_object({k: v for k, v in doc.items() if k != "evaluation_pairs"}, shown, policy)
    pairs = doc.get("evaluation_pairs")
    for i, pair in enumerate(pairs if isinstance(pairs, list) else []):
        pid = pair.get("id") if isinstance(pair, dict) and isinstance(pair.get("id"), str) else None
        found += scan_object(pair, shown, policy, prefix=f"$.evaluation_pairs[{i}]", case_id=pid)
    if not found:
        return []
    lines = json_line_index(Path(lines_from).read_text(encoding="utf-8", errors="replace")) if lines_from else {}
    out = []
    for f in found:
        line = line_of(lines, f.json_path or "$") if lines else None
        out.append(f"json {f.json_path} ({shown}{f':{line}' if line else ''}): {f.message}")
    return out


# --- model outputs --------------------------------------------------------------------
def output_detections(output: str | None, tool_calls: Iterable[Any], sc: Scanner) -> list[tuple[str, Detection]]:
    """The detections in one sample's output and tool-call arguments, each with where it
    is (`output`, or the tool call's JSON path)."""
    found: list[tuple[str, Detection]] = []
    if output:
        found += [("output", d) for d in sc.scan(output)]
    for i, call in enumerate(tool_calls or ()):
        for jp, s in iter_strings(call, f"tool_calls[{i}]", frozenset({"id"}), sc):
            if jp.endswith((".arguments", ".function.arguments")) and s.strip().startswith(("{", "[")):
                try:
                    parsed = json.loads(s)
                except json.JSONDecodeError:
                    parsed = None
                if parsed is not None:
                    found += [(sub, d) for sub, t in iter_strings(parsed, jp, sc=sc) for d in sc.scan(t)]
                    continue
            found += [(jp, d) for d in sc.scan(s)]
    return found


def case_values(case: Any, sc: Scanner) -> set[tuple[str, str]]:
    """(kind, normalized value) of everything sensitive a case gives the unit: its
    input and context (what a model could leak from its context)."""
    out: set[tuple[str, str]] = set()
    for obj in (case.input, case.context):
        for _, s in iter_strings(obj):
            out |= {(d.kind, d.norm) for d in sc.scan(s)}
    return out


@dataclass(frozen=True)
class OutputScan:
    """What `grade` found in a run's outputs: findings as (level, message) and the
    `privacy` block of grades-summary.json; no value in either."""

    findings: tuple[tuple[str, str], ...]
    summary: dict[str, Any]


MAX_LISTED_SAMPLES = 1000  # grades-summary.json lists at most this many flagged samples


def scan_outputs(suite: Any, samples: Mapping[tuple[str, str, int], Any]) -> OutputScan:
    """Scan every sample's output and tool-call arguments. A secret in an output is a
    HIGH finding, always, allow-listed or not (a canary key planted on purpose is what a
    leak test looks for) and said to come from the context when the case gave it to the
    model; personal data is MEDIUM, and an allow-listed synthetic value is let through."""
    try:
        policy, _ = suite_policy(suite_source(suite.path))  # its problems are lint's and run's to report
    except InputError:
        policy = Policy()
    sc = policy.scanner
    cases = {c.id: c for c in suite.cases}
    given: dict[str, set[tuple[str, str]]] = {}
    rows: list[dict[str, Any]] = []
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for key in sorted(samples):
        cid, arm, index = key
        s = samples[key]
        dets = [
            (where, d)
            for where, d in output_detections(s.output, s.tool_calls, sc)
            if KINDS[d.kind].secret or not policy.allows(d, cid)
        ]
        if not dets:
            continue
        if cid not in given:
            given[cid] = case_values(cases[cid], sc) if cid in cases else set()
        kinds = sorted({d.kind for _, d in dets})
        row = {
            "case_id": cid,
            "arm": arm,
            "index": int(index),
            "kinds": kinds,
            "where": sorted({w for w, _ in dets}),
            "from_context": sorted({d.kind for _, d in dets if (d.kind, d.norm) in given[cid]}),
        }
        rows.append(row)
        for k in kinds:
            by_kind.setdefault(k, []).append(row)
    findings = []
    for kind in sorted(by_kind, key=lambda k: (not KINDS[k].secret, k)):
        hit = by_kind[kind]
        spec = KINDS[kind]
        leaked = sum(1 for r in hit if kind in r["from_context"])
        items = ", ".join(f"{r['case_id']}/{r['arm']}/{r['index']}" for r in hit[:5])
        more = f" and {len(hit) - 5} more" if len(hit) > 5 else ""
        context = ""
        if spec.secret and leaked:
            context = f"; {leaked} repeat one the case gave the model: the model leaks a secret from its context"
        elif leaked:
            context = f"; {leaked} repeat the case's own input"
        article = "an" if spec.label[0].lower() in "aeiou" else "a"
        findings.append(
            (
                "HIGH" if spec.secret else "MEDIUM",
                f"privacy: {len(hit)} output(s) contain {article} {spec.label} [{kind}]{context} "
                f"({items}{more}); "
                "results.jsonl holds them: keep the run folder private and share reports made with "
                "`evalkit report --redact`",
            )
        )
    summary = {
        "n_samples": len(rows),
        "by_kind": {k: len(v) for k, v in sorted(by_kind.items())},
        "samples": rows[:MAX_LISTED_SAMPLES],
        "samples_not_listed": max(0, len(rows) - MAX_LISTED_SAMPLES),
    }
    return OutputScan(tuple(findings), summary)


# --- redaction ------------------------------------------------------------------------
MIN_KNOWN_CHARS = 6  # a value learned elsewhere is replaced on sight only from this length


@dataclass
class Redactor:
    """Replaces sensitive values with typed placeholders (`<EMAIL_1>`, `<API_KEY_2>`):
    every detection, and every exact occurrence of a value `learn`ed in the same scope
    (an output may repeat a key the input held, in a form no detector reads). Within one
    scope (`begin`) the same value (by kind and normalized form) gets the same
    placeholder; `events` records each replacement's place, kind and placeholder, never
    the value; `values` keeps what was replaced, in memory, to check its absence."""

    scanner: Scanner = field(default_factory=lambda: scanner())
    numbers: dict[tuple[str, str], str] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    known: dict[str, tuple[str, str]] = field(default_factory=dict, repr=False)  # value -> (kind, norm)
    events: list[dict[str, Any]] = field(default_factory=list)
    values: set[str] = field(default_factory=set, repr=False)

    def begin(self) -> None:
        """A new scope: numbering starts again at 1 for every kind, nothing is known."""
        self.numbers, self.counters, self.known = {}, {}, {}

    def learn(self, obj: Any) -> None:
        """Remember the values detected in the strings of `obj` (text or JSON)."""
        for _, s in iter_strings(obj):
            for d in self.scanner.scan(s):
                self.known.setdefault(s[d.start : d.end], (d.kind, d.norm))

    def placeholder(self, d: Detection) -> str:
        key = (d.kind, d.norm)
        if key not in self.numbers:
            n = self.counters.get(d.kind, 0) + 1
            self.counters[d.kind] = n
            self.numbers[key] = f"<{KINDS[d.kind].placeholder}_{n}>"
        return self.numbers[key]

    def _found(self, text: str) -> list[Detection]:
        found = self.scanner.scan(text)
        for value, (kind, norm) in self.known.items():
            if len(value) < MIN_KNOWN_CHARS:
                continue
            at = text.find(value)
            while at >= 0:
                found.append(Detection(kind, at, at + len(value), "", norm))
                at = text.find(value, at + len(value))
        return _resolve(found) if len(found) > 1 else found

    def text(self, text: str, where: Mapping[str, Any] | None = None) -> str:
        """`text` with every sensitive value replaced; an event per replacement, tagged
        with `where`."""
        found = self._found(text)
        if not found:
            return text
        parts, pos = [], 0
        for d in found:
            ph = self.placeholder(d)
            self.values.add(text[d.start : d.end])
            parts += [text[pos : d.start], ph]
            pos = d.end
            self.events.append({**(where or {}), "kind": d.kind, "placeholder": ph})
        parts.append(text[pos:])
        return "".join(parts)

    def json(self, obj: Any, path: str = "$", where: Mapping[str, Any] | None = None) -> Any:
        """A copy of a JSON value with every string redacted, property names included (a
        tool call's argument may be named by an email address), each event carrying its
        JSON path as redacted, so no path in the log repeats a value. Field names, tags
        and case ids hold nothing to replace and stay as they are."""
        if isinstance(obj, str):
            return self.text(obj, {**(where or {}), "json_path": path})
        if isinstance(obj, dict):
            out: dict[str, Any] = {}
            for k, v in obj.items():
                key = self.text(k, {**(where or {}), "json_path": path, "property_name": True}) if len(k) >= 6 else k
                out[key] = self.json(v, f"{path}.{key}", where)
            return out
        if isinstance(obj, list):
            return [self.json(v, f"{path}[{i}]", where) for i, v in enumerate(obj)]
        return obj

    def log(self, tool: str) -> dict[str, Any]:
        """The redaction log: counts per kind, and each replacement's place and
        placeholder (no value)."""
        counts: dict[str, int] = {}
        for e in self.events:
            counts[e["kind"]] = counts.get(e["kind"], 0) + 1
        return {
            "tool": tool,
            "redacted": len(self.events),
            "by_kind": dict(sorted(counts.items())),
            "replacements": self.events,
        }


def redact_cases(
    cases: Sequence[dict[str, Any]],
    redactor: Redactor | None = None,
    where: Callable[[int, dict[str, Any]], dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Case (or pair) objects with their sensitive values replaced, one placeholder scope
    per case, so the same value in a case's input and in its check is the same
    placeholder. The id and the `privacy_allow` entries are kept; `where(i, case)` tags
    each event (default: the case id)."""
    r = redactor if redactor is not None else Redactor()
    out = []
    for i, c in enumerate(cases):
        r.begin()
        body = {k: v for k, v in c.items() if k not in ("id", CASE_ALLOW_KEY)}
        r.learn(body)
        tag = where(i, c) if where is not None else {"case": c.get("id")}
        out.append({k: (v if k in ("id", CASE_ALLOW_KEY) else r.json(v, f"$.{k}", tag)) for k, v in c.items()})
    return out


@dataclass(frozen=True)
class RedactedRun:
    """A redacted copy of a run folder (`path`), what was replaced (`values`, in memory
    only) and the log of it."""

    path: Any
    values: frozenset[str] = field(repr=False)
    log: dict[str, Any] = field(default_factory=dict)


def _suite_strings(src: SuiteSource) -> Iterator[Any]:
    """Everything of a suite that `scan_suite_source` reads, as plain values."""
    for _, _, _, obj in src.cases:
        yield obj
    yield src.config
    for rel in _suite_text_files(src):
        try:
            yield src.read(rel)
        except InputError:
            continue


def redact_run(run: Any, dest: Any, *, log: Any = None) -> RedactedRun:
    """Copy the run folder's own files (config.json, summary, results, grades, errors,
    ledger, pairwise, micro-test marker; not the caches, the lock or `samples/`) to
    `dest` with every sensitive value replaced: what the run's files hold, and every
    exact occurrence of a value its suite holds. One placeholder scope for the whole run,
    so `<EMAIL_1>` is the same address on every page. The copy's config.json names the
    suite by its absolute path, so a report from the copy still finds it. `log`: where to
    write the redaction log (counts per kind, each replacement's file, JSON path and
    placeholder)."""
    run, dest = Path(run), Path(dest)
    meta = RunFolder(run).read_meta()
    suite_dir = find_suite_dir(run, meta.get("suite"))
    r = Redactor()
    if suite_dir is not None:
        try:
            for obj in _suite_strings(suite_source(suite_dir)):
                r.learn(obj)
        except InputError:
            pass  # a suite that no longer reads: the run's own files are still redacted
    docs: dict[str, tuple[str, Any]] = {}
    for f in sorted(run.iterdir()):
        if not f.is_file() or f.suffix not in (".json", ".jsonl", ".md", ".txt"):
            continue
        if f.suffix == ".jsonl":
            docs[f.name] = ("jsonl", list(iter_jsonl(f)))  # a torn last line (a killed run) is dropped
        elif f.suffix == ".json":
            docs[f.name] = ("json", json.loads(f.read_text(encoding="utf-8")))
        else:
            docs[f.name] = ("text", f.read_text(encoding="utf-8", errors="replace"))
        r.learn(docs[f.name][1])
    # An agent unit's trajectories, redacted too: the replay page shows every message and
    # tool answer (`trajectories/<case>/<arm>/sample-<n>.jsonl`).
    traj = run / TRAJECTORIES
    if traj.is_dir():
        for f in sorted(traj.rglob("*.jsonl")):
            if f.is_file() and not f.is_symlink():
                name = f.relative_to(run).as_posix()
                docs[name] = ("jsonl", list(iter_jsonl(f)))
                r.learn(docs[name][1])
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name, (form, obj) in docs.items():
        where = {"file": name}
        if form == "jsonl":
            # storable_json: a lone surrogate in an output is written as an escape, not a crash
            body = "".join(
                storable_json(r.json(row, "$", {**where, "line": i})) + "\n" for i, row in enumerate(obj, start=1)
            )
        elif form == "json":
            doc = r.json(obj, "$", where)
            if name == CONFIG and suite_dir is not None:
                doc["suite"] = str(Path(suite_dir).resolve())
            body = storable_json(doc, indent=2) + "\n"
        else:
            body = r.text(obj, where)
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(dest / name, body)
    record = r.log("evalkit report --redact")
    if log is not None:
        write_atomic(Path(log), storable_json(record, indent=2) + "\n")
    return RedactedRun(dest, frozenset(r.values), record)


def _forms(value: str) -> set[str]:
    """How a value can appear in an HTML page, a notebook or a JSON file."""
    forms = {value, html.escape(value), html.escape(value, quote=False)}
    return forms | {json.dumps(f, ensure_ascii=a)[1:-1] for f in list(forms) for a in (True, False)}


_MARKUP = re.compile(r"(?is)<(script|style)\b.*?</\1\s*>|<!--.*?-->|<[^>]*>")
# notebook outputs that are pictures, not text: base64 or drawing data no reader sees as words
_PICTURES = frozenset({"image/png", "image/jpeg", "image/gif", "image/svg+xml", "application/pdf"})


def _written_texts(f: Path) -> Iterator[str]:
    """What a reader of file `f` can see, for the scanner: an HTML page's text (markup,
    scripts, styles and inline images dropped, entities decoded), a JSON or notebook
    file's strings and property names (not its numbers: 0.3888888888888889 is no card;
    not a notebook's pictures), a JSON-lines file's likewise, line by line, anything
    else as text."""
    text = f.read_text(encoding="utf-8", errors="replace")
    if f.suffix in (".html", ".htm"):
        yield html.unescape(_MARKUP.sub(" ", text))
        return
    if f.suffix in (".json", ".ipynb", ".jsonl"):
        docs: list[Any] = []
        for raw in text.splitlines() if f.suffix == ".jsonl" else [text]:
            try:
                docs.append(json.loads(raw))
            except json.JSONDecodeError:
                yield raw
        for doc in docs:
            for _, s in iter_strings(doc, skip=_PICTURES):
                yield s
        return
    yield text


def leaking_files(paths: Iterable[Any], values: Iterable[str], sc: Scanner | None = None) -> list[Any]:
    """The files under `paths` (files or folders, recursively) that still hold one of
    `values` in any of its written forms (raw, HTML-escaped, JSON-escaped), or, with
    `sc`, any value of any kind `sc` detects in what a reader of the file sees
    (`_written_texts`)."""
    forms = [f for v in values for f in _forms(v)]
    out = []
    files: list[Path] = []
    for p in map(Path, paths):
        files += sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else [p] if p.is_file() else []
    for f in files:
        text = f.read_text(encoding="utf-8", errors="replace")
        plain = html.unescape(text)
        if any(form in text or form in plain for form in forms):
            out.append(f)
        elif sc is not None and any(sc.scan(t) for t in _written_texts(f)):
            out.append(f)
    return out


def verify_redacted(redacted: RedactedRun, paths: Iterable[Any]) -> None:
    """Check every file under `paths`: none may hold a value the redaction replaced, nor
    any value of any kind the scanner detects (a page may show text that never went
    through the redacted copy). A file that does is removed (it must not be shared) and
    `RedactionIncomplete` names it (never the value)."""
    bad = leaking_files(paths, redacted.values, scanner())
    for f in bad:
        f.unlink()
    if bad:
        raise RedactionIncomplete(
            "redaction incomplete: removed "
            + ", ".join(str(f) for f in bad)
            + ", which still held personal data or a secret (a value the redaction replaced, or one it detects)"
        )


def redact_imported(
    config: dict[str, Any], cases: Sequence[dict[str, Any]], files: Mapping[str, str]
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, str]]:
    """An imported suite's parts with every detected value replaced (`evalkit import
    --redact`): each case its own placeholder scope, the config one scope, each text file
    one scope; `redaction-log.json` added to the files (counts per kind, each
    replacement's case, JSON path or file, and placeholder; no value)."""
    r = Redactor()
    new_cases = redact_cases(cases, r)
    r.begin()
    new_config = r.json(config, "$", {"file": "config.json"})
    new_files: dict[str, str] = {}
    for rel, text in files.items():
        r.begin()
        new_files[rel] = r.text(text, {"file": rel})
    new_files[REDACTION_LOG] = json.dumps(r.log("evalkit import --redact"), indent=2, ensure_ascii=False) + "\n"
    return new_config, new_cases, new_files


def redact_dataset(dataset: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """An evaluation dataset with the sensitive values of its free text replaced
    (`evalkit dataset new --redact`): each pair's query, expected response, notes and
    source reference (one placeholder scope per pair), and the metadata's text fields;
    ids, categories and population and tool names are kept, so the counts still hold.
    Returns the dataset and the redaction log."""
    r = Redactor()
    pairs = dataset.get("evaluation_pairs") or []
    texts = [{k: p[k] for k in DATASET_TEXT_FIELDS if k in p} for p in pairs]
    done = redact_cases(texts, r, where=lambda i, _: {"pair": pairs[i].get("id"), "index": i})
    new_pairs = [{**p, **d} for p, d in zip(pairs, done, strict=True)]
    r.begin()
    md = dict(dataset.get("metadata") or {})
    for k, v in md.items():
        if isinstance(v, str):
            md[k] = r.text(v, {"json_path": f"$.metadata.{k}"})
    return {**dataset, "metadata": md, "evaluation_pairs": new_pairs}, r.log("evalkit dataset new --redact")


def redact_shown(text: str) -> str:
    """`text` with each detected value replaced by its kind's placeholder, unnumbered
    (`<PHONE>`): what a redacted report's pages show of text that does not come from the
    redacted run copy, whose numbered placeholders it must not be mistaken for."""
    found = scanner().scan(text)
    for d in reversed(found):
        text = f"{text[: d.start]}<{KINDS[d.kind].placeholder}>{text[d.end :]}"
    return text


def redaction_summary(log: Mapping[str, Any] | Any) -> str:
    """The one line a command prints about a redaction (a log, or the path of one): how
    many values of which kind; no value."""
    if not isinstance(log, Mapping):
        log = json.loads(Path(log).read_text(encoding="utf-8"))
    counts = log.get("by_kind") or {}
    if not counts:
        return "redacted nothing: no personal data or secret found"
    return f"redacted {log['redacted']} value(s): " + ", ".join(f"{k} {n}" for k, n in counts.items())


MAX_SCAN_BYTES = 64 * 1024 * 1024  # `evalkit privacy scan`: a big run's results.jsonl


# --- the command line's helpers -------------------------------------------------------
def scan_file(path: Any, policy: Policy | None = None) -> list[PrivacyFinding]:
    """The findings in one file: a `.json` file by JSON path and line, a `.jsonl` file
    line by line, anything else as text (`evalkit privacy scan`)."""
    policy = policy or Policy()
    p = Path(path)
    text = read_text_file(p, limit=MAX_SCAN_BYTES, allow_empty=True)
    if p.suffix == ".jsonl":
        return scan_jsonl(text, str(p), policy)
    if p.suffix == ".json":
        try:
            doc = json.loads(text)
        except json.JSONDecodeError:
            return scan_text(text, str(p), policy)
        found = scan_object(doc, str(p), policy)
        if found:
            lines = json_line_index(text)
            found = [
                PrivacyFinding(f.kind, f.path, line_of(lines, f.json_path or "$"), f.json_path, f.detail, f.count)
                for f in found
            ]
        return found
    return scan_text(text, str(p), policy)


def allow_entries(text: str, policy: Policy | None = None, *, kind: str | None = None) -> list[dict[str, str]]:
    """An allow-list entry `{"kind", "sha256"}` for each distinct sensitive value in
    `text` (of `kind` only, when given): `evalkit privacy hash`."""
    policy = policy or Policy()
    out: dict[tuple[str, str], dict[str, str]] = {}
    for d in policy.scanner.scan(text):
        if kind is None or d.kind == kind:
            out.setdefault((d.kind, d.norm), {"kind": d.kind, "sha256": value_hash(d.norm)})
    return list(out.values())
