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

The parts live beside this module, each one concern: `privacy_detect` (the kinds, the
detectors' rule table, decoded forms, `Scanner`), `privacy_policy` (JSON walked, the
allow-list, `PrivacyFinding`), `privacy_gate` (the scans of a suite, a dataset and a run's
outputs; the run gate) and `privacy_redact` (`Redactor` and what it redacts). This module
re-exports their names and holds the command line's helpers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalkit.foundations._io import json_line_index, line_of, loads_bounded, read_text_file
from evalkit.foundations.layout import (
    PRIVACY_FILE as POLICY_FILE,  # a suite's allow-list and scan settings, beside config.json
)
from evalkit.foundations.layout import (
    REDACTED_RUN as REDACTED_RUN,  # in a report folder: the run copy a redacted report reads
)
from evalkit.foundations.layout import REDACTION_LOG as REDACTION_LOG
from evalkit.pii.privacy_detect import (
    CASE_ALLOW_KEY,
    DEFAULT_PHONE_REGIONS,
    KINDS,
    Detection,
    Kind,
    Scanner,
    decoded_forms,
    scanner,
    value_hash,
)
from evalkit.pii.privacy_gate import (
    ALLOW_FLAG,
    DATASET_LOG_SUFFIX,
    DATASET_TEXT_FIELDS,
    MAX_LISTED_SAMPLES,
    OutputScan,
    SuiteScan,
    case_values,
    count_by_kind,
    output_detections,
    run_gate,
    scan_dataset,
    scan_jsonl,
    scan_outputs,
    scan_suite,
    scan_suite_source,
    suite_policy,
)
from evalkit.pii.privacy_policy import (
    POLICY_KEYS,
    RULE_KEYS,
    AllowRule,
    Policy,
    PrivacyFinding,
    Problems,
    iter_strings,
    key_segment,
    load_policy_file,
    parse_policy,
    parse_rules,
    scan_object,
    scan_text,
    walk_strings,
)
from evalkit.pii.privacy_redact import (
    MIN_KNOWN_CHARS,
    RedactedRun,
    Redactor,
    leaking_files,
    redact_cases,
    redact_dataset,
    redact_imported,
    redact_run,
    redact_shown,
    redaction_summary,
    verify_redacted,
)

__all__ = [  # re-exported: the names this module held before it was split
    "ALLOW_FLAG",
    "AllowRule",
    "CASE_ALLOW_KEY",
    "DATASET_LOG_SUFFIX",
    "DATASET_TEXT_FIELDS",
    "DEFAULT_PHONE_REGIONS",
    "Detection",
    "KINDS",
    "Kind",
    "MAX_LISTED_SAMPLES",
    "MIN_KNOWN_CHARS",
    "OutputScan",
    "POLICY_FILE",
    "POLICY_KEYS",
    "Policy",
    "PrivacyFinding",
    "Problems",
    "RULE_KEYS",
    "RedactedRun",
    "Redactor",
    "Scanner",
    "SuiteScan",
    "case_values",
    "count_by_kind",
    "decoded_forms",
    "iter_strings",
    "key_segment",
    "leaking_files",
    "load_policy_file",
    "output_detections",
    "parse_policy",
    "parse_rules",
    "redact_cases",
    "redact_dataset",
    "redact_imported",
    "redact_run",
    "redact_shown",
    "redaction_summary",
    "run_gate",
    "scan_dataset",
    "scan_jsonl",
    "scan_object",
    "scan_outputs",
    "scan_suite",
    "scan_suite_source",
    "scan_text",
    "scanner",
    "suite_policy",
    "value_hash",
    "verify_redacted",
    "walk_strings",
]

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
            doc = loads_bounded(text, p)
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
