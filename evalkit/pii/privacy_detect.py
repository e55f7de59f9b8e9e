"""What personal data and secrets are found, and by what: the kinds, the detectors' rule
table (emails, phones, cards, IBANs, national ids, IPs, secrets), the decoded forms a value
may hide in, and `Scanner`. Split out of `evalkit.pii.privacy` (whose docstring says what
is found and why), which re-exports every public name.
"""

from __future__ import annotations

import hashlib
import html
import ipaddress
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any

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
        Kind("password", "password (in a URL, a connection string, a .netrc or a settings line)", "PASSWORD", True),
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


# `NAME=value` on a line of its own (an .env file, a shell script, settings): a name that
# says it holds a secret, and a value that looks random. Lengths bounded (no backtracking blow-up).
_SECRET_NAME_WORDS = ("SECRET", "TOKEN", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL")
_SECRET_ASSIGNMENT = re.compile(
    r"(?m)^[ \t]{0,16}(?:export[ \t]+)?[A-Z][A-Z0-9_]{0,48}?(?:SECRET|TOKEN|PASSWORD|PASSWD|KEY|CREDENTIALS?)"
    r"[A-Z0-9_]{0,48}[ \t]{0,8}=[ \t]{0,8}[\"']?([A-Za-z0-9_+/=.~!@%^&*-]{8,512})(?=[\"'\s#;]|$)"
)


def _secret_value(value: str) -> bool:
    """A value assigned to a secret's name that is one: letters and digits both (not a
    number, a word, a path or a template), not a placeholder."""
    return (
        any(c.isdigit() for c in value)
        and any(c.isalpha() for c in value)
        and value[0] not in "/.~"
        and _real_password(value)
    )


def _cased(*words: str) -> tuple[str, ...]:
    """Literal triggers for a case-insensitive pattern: each word lower, Title and UPPER
    (cheaper than lower-casing every text)."""
    return tuple(v for w in words for v in dict.fromkeys((w.lower(), w.title(), w.upper())))


_GITLAB_PREFIXES = (
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
)


def _ds_rule(
    plugin: Any, kind: str, triggers: tuple[str, ...], *, patterns: Sequence[re.Pattern[str]] | None = None, **kw: Any
) -> _SecretRule:
    """The rule of one detect-secrets plugin: its own patterns (or the ones named)."""
    return _SecretRule(kind, plugin.secret_type, triggers, tuple(patterns or plugin.denylist), **kw)


def _ds_rules() -> tuple[_SecretRule, ...]:
    """detect-secrets' specific plugins (their own patterns), each with the literal
    triggers a text must hold to be searched. Imported here: detect-secrets imports
    requests."""
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

    aws_id, aws_secret = aws.AWSKeyDetector.denylist
    jwt_valid = jwt.JwtTokenDetector.is_formally_valid
    key_files = ("PRIVATE KEY", "PuTTY-User-Key-File", "SSH2 ENCRYPTED")
    return (
        _ds_rule(aws.AWSKeyDetector, "api_key", ("AKIA", "ASIA", "ABIA", "ACCA", "A3T"), patterns=[aws_id]),
        _ds_rule(aws.AWSKeyDetector, "api_key", _cased("aws"), patterns=[aws_secret], group=1),
        _ds_rule(azure_storage_key.AzureStorageKeyDetector, "api_key", ("AccountKey=",)),
        _ds_rule(discord.DiscordBotTokenDetector, "api_key", (), hint=re.compile(r"\.[A-Za-z0-9_-]{6}\.")),
        _ds_rule(github_token.GitHubTokenDetector, "api_key", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
        _ds_rule(gitlab_token.GitLabTokenDetector, "api_key", _GITLAB_PREFIXES),
        _ds_rule(jwt.JwtTokenDetector, "jwt", ("eyJ",), check=jwt_valid, lookalike_check=False),
        _ds_rule(mailchimp.MailchimpDetector, "api_key", ("-us",)),
        _ds_rule(npm.NpmDetector, "api_key", ("_authToken",)),
        _ds_rule(openai.OpenAIDetector, "api_key", ("T3BlbkFJ",)),
        _ds_rule(private_key.PrivateKeyDetector, "private_key", key_files, lookalike_check=False),
        _ds_rule(pypi_token.PypiTokenDetector, "api_key", ("pypi-Ag",)),
        _ds_rule(sendgrid.SendGridDetector, "api_key", ("SG.",)),
        _ds_rule(slack.SlackDetector, "api_key", _cased("xox") + ("hooks.slack.com",)),
        _ds_rule(square_oauth.SquareOAuthDetector, "api_key", ("sq0csp-",)),
        _ds_rule(stripe.StripeDetector, "api_key", ("k_live_",)),
        _ds_rule(telegram_token.TelegramBotTokenDetector, "api_key", (), numeric=True),
        _ds_rule(twilio.TwilioKeyDetector, "api_key", ("AC", "SK")),
        _ds_rule(
            basic_auth.BasicAuthDetector, "password", ("://",), check=_real_password, lookalike_check=False, group=1
        ),
    )


# Key formats detect-secrets 1.5 does not know (each provider's documented prefix):
# (detail, triggers, pattern).
_OWN_KEY_FORMATS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("OpenAI API Key", ("sk-proj-", "sk-svcacct-", "sk-admin-"), r"sk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}"),
    ("Anthropic API Key", ("sk-ant-",), r"sk-ant-[a-z]+[0-9]{2}-[A-Za-z0-9_-]{32,}"),
    ("Google API Key", ("AIza",), r"AIza[0-9A-Za-z_-]{35}"),
    ("GitHub Token", ("github_pat_",), r"github_pat_[A-Za-z0-9_]{22,}"),
    ("Hugging Face Token", ("hf_",), r"(?<![A-Za-z0-9_])hf_[A-Za-z]{34}(?![A-Za-z0-9_])"),
)
# Password slots: (detail, trigger words, pattern whose group 1 is the password, hint
# that the text is such a slot). A connection string's `Password=`, and a .netrc entry's
# password (`machine HOST login USER password VALUE`).
_PASSWORD_FORMATS: tuple[tuple[str, tuple[str, ...], str, str], ...] = (
    (
        "Connection String Password",
        ("password", "pwd"),
        r"(?i)(?:^|[;\s\"'{])(?:password|pwd)\s*=\s*([^;\s\"'}]{3,})",
        r"(?i)\b(?:server|host|data source|uid|user id|username|database|initial catalog|dsn)\s*=",
    ),
    (
        "netrc password",
        ("password", "passwd"),
        r"(?i)\b(?:password|passwd)[ \t]+([^\s]+)",
        r"(?i)\b(?:machine[ \t]+\S+|default)\s+login[ \t]+\S",
    ),
)


def _own_rules() -> tuple[_SecretRule, ...]:
    """The well-known formats detect-secrets lacks: key prefixes, password slots, and an
    environment or settings line that assigns a secret by its name (`SECRET_KEY=...`)."""
    keys = tuple(
        _SecretRule("api_key", detail, triggers, (re.compile(pattern),))
        for detail, triggers, pattern in _OWN_KEY_FORMATS
    )
    passwords = tuple(
        _SecretRule(
            "password",
            detail,
            _cased(*words),
            (re.compile(pattern),),
            check=_real_password,
            lookalike_check=False,
            group=1,
            hint=re.compile(hint),
        )
        for detail, words, pattern, hint in _PASSWORD_FORMATS
    )
    assignment = _SecretRule(
        "password", "secret assignment", _SECRET_NAME_WORDS, (_SECRET_ASSIGNMENT,), check=_secret_value, group=1
    )
    return (*keys, *passwords, assignment)


@lru_cache(maxsize=1)
def _secret_rules() -> tuple[_SecretRule, ...]:
    """The secret formats: detect-secrets' specific plugins (their own patterns), then
    the well-known formats it lacks. Built on first use (detect-secrets imports requests)."""
    return _ds_rules() + _own_rules()


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


_BASIC_AUTH = re.compile(r"(?i)\bbasic\s+([A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])")


def _basic_auth(text: str) -> list[Detection]:
    """A Basic-auth credential (`Authorization: Basic dXNlcjpwYXNz`, in any case: git's
    `extraheader` writes `basic`): the base64 of `user:password`, a password as any other."""
    if "asic" not in text and "ASIC" not in text:  # Basic, basic, BASIC
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
