"""Personal data and secrets (evalkit.pii.privacy): planted values of every kind found, their
look-alikes left alone, the allow-list, and the hooks: lint, dataset validate and new,
import, run, grade and report --redact. Every diagnostic names where and what kind, and
never the value: each test checks the planted values are absent from what was printed
and from every file written.

Key-shaped values are built at run time from a seeded generator (no real-looking key is
committed); the cards, IBANs and identifiers are the published test and example values.
"""
from __future__ import annotations

import base64
import json
import random
import shutil
import string
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.pii import privacy, privacy_redact
from evalkit._cli.main import main
from evalkit.foundations.errors import InputError, RedactionIncomplete
from evalkit.calls.serve import ScriptedServer
from evalkit.intake.lint import lint_suite

ROOT = Path(__file__).resolve().parents[1]
FACTUAL = ROOT / "data" / "factual"
PANDALM = ROOT.parent / "shared" / "data" / "pandalm"
RNG = random.Random(20)
ALNUM = string.ascii_letters + string.digits


def rand(n: int, alphabet: str = ALNUM) -> str:
    return "".join(RNG.choice(alphabet) for _ in range(n))


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


AWS_ID = "AKIA" + rand(16, string.ascii_uppercase + "234567")
GITHUB = "ghp_" + rand(36)
SLACK = f"xoxb-{rand(12, string.digits)}-{rand(12, string.digits)}-{rand(24)}"
OPENAI_LEGACY = "sk-" + rand(20) + "T3BlbkFJ" + rand(20)
OPENAI_PROJECT = "sk-proj-" + rand(40, ALNUM + "_-")
ANTHROPIC = "sk-ant-api03-" + rand(60, ALNUM + "_-")
GOOGLE = "AIza" + rand(35, ALNUM + "_-")
JWT = ".".join([b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode()),
                b64(json.dumps({"sub": "1234567890", "name": "Pat", "iat": 1516239022}).encode()),
                b64(bytes(RNG.randrange(256) for _ in range(32)))])
PRIVATE_KEY = ("-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(rand(64, ALNUM + "+/") for _ in range(3))
               + "\n-----END RSA PRIVATE KEY-----")
PASSWORD = rand(14)

# the four values of the "done when"
EMAIL = "jane.doe@acme-mail.com"
PHONE = "(415) 555-2671"
CARD = "4111 1111 1111 1111"
API_KEY = OPENAI_PROJECT
PLANTED = (EMAIL, PHONE, CARD, API_KEY)


def kinds(text: str, regions: tuple[str, ...] = privacy.DEFAULT_PHONE_REGIONS) -> list[tuple[str, str]]:
    """(kind, matched text) of every detection."""
    return [(d.kind, text[d.start:d.end]) for d in privacy.scanner(regions).scan(text)]


def assert_absent(text: str, values=PLANTED) -> None:
    for v in values:
        assert v not in text, "a diagnostic repeated a value it found"


def assert_absent_from_files(root: Path, values=PLANTED) -> None:
    assert not privacy.leaking_files([root], values), "a written file holds a planted value"


# --- the scanner: planted values of every kind, and their look-alikes -------------------------
@pytest.mark.parametrize("text, found", [
    (f"write to {EMAIL} today", [("email", EMAIL)]),
    ("ask Ops.Team+eval@mail.acme-corp.co.uk now", [("email", "Ops.Team+eval@mail.acme-corp.co.uk")]),
    ("jane@example.com, ops@mail.example.org, a@b.test, me@host.invalid, root@localhost", []),
    ("not..an@acme-mail.com and @handle and a@b", []),
])
def test_emails(text, found):
    assert kinds(text) == found


@pytest.mark.parametrize("text, number", [
    ("call (415) 555-2671 now", "(415) 555-2671"),          # US, national
    ("ring +44 20 7946 0958", "+44 20 7946 0958"),          # GB, international
    ("London 020 7946 0958", "020 7946 0958"),              # GB, national
    ("Tel. 030 901820", "030 901820"),                      # DE, national
    ("appelez le 01 42 68 53 00", "01 42 68 53 00"),        # FR, national
    ("+91 98765 43210", "+91 98765 43210"),                 # IN
    ("Tokyo office +81 3-1234-5678", "+81 3-1234-5678"),    # JP, international
    ("Sydney +61 2 9876 5432", "+61 2 9876 5432"),          # AU
    ("São Paulo +55 11 91234-5678", "+55 11 91234-5678"),   # BR
    ("Phone: 4155552671", "4155552671"),                    # a bare run after a phone word
])
def test_phone_numbers_in_several_countries(text, number):
    assert kinds(text) == [("phone", number)]


@pytest.mark.parametrize("text", [
    "In 1999 the population was 67,000,000; by 2020 it was 8 336 817, GDP 21,433,226 million.",
    "on 2023-01-15 at 12:30:45, coordinates 37.7749, -122.4194",
    "ISBN 978-3-16-148410-0, zip 94105-1234, 3.14159265358979",
    "order 4155552671 shipped",       # a bare digit run with no phone word: an order number
    "Yokohama 045-123-4567",          # a national format of a region not scanned
    "ID12 and 1234567",
    "at 2026-11-30T03:10:21.069020+00:00, score 0.8765432",  # a timestamp's microseconds, a decimal
    "epoch 1701417600.123, uuid 123e4567-e89b-12d3-a456-426614174000, SKU 100-200-3000",
])
def test_numbers_that_are_not_phone_numbers(text):
    assert kinds(text) == []


def test_phone_regions_are_chosen_by_the_policy():
    text = "Yokohama office 045-123-4567"
    assert kinds(text) == []
    assert kinds(text, ("JP",)) == [("phone", "045-123-4567")]


@pytest.mark.parametrize("card", ["4111 1111 1111 1111", "5555-5555-5555-4444", "378282246310005",
                                  "6011 1111 1111 1117", "3530 1113 3330 0000"])
def test_valid_card_numbers(card):
    assert kinds(f"card {card} exp 12/29") == [("card", card)]


@pytest.mark.parametrize("text", [
    "card 4111 1111 1111 1112",            # the Luhn check fails: not a card
    "card 5555 5555 5555 4445",
    "0000 0000 0000 0000",                 # passes Luhn, but no issuer uses that prefix
    "ref 941111111111111111111",           # a card-length window inside a longer number
    "id a4111111111111111b",
])
def test_invalid_card_numbers_are_not_flagged(text):
    assert [k for k, _ in kinds(text)] == []


@pytest.mark.parametrize("text, found", [
    ("IBAN DE89 3704 0044 0532 0130 00 please", "DE89 3704 0044 0532 0130 00"),
    ("GB82WEST12345698765432", "GB82WEST12345698765432"),
    ("pay FR14 2004 1010 0505 0001 3M02 606 today", "FR14 2004 1010 0505 0001 3M02 606"),
])
def test_valid_ibans(text, found):
    assert kinds(text) == [("iban", found)]


@pytest.mark.parametrize("text", ["IBAN DE89 3704 0044 0532 0130 01", "GB82WEST12345698765433",
                                  "product code AB12CDEFGHIJKLMNO"])
def test_invalid_ibans_are_not_flagged(text):
    assert kinds(text) == []


@pytest.mark.parametrize("text, detail", [
    ("SSN 536-90-4399", "US SSN"), ("DNI 12345678Z", "ES DNI"), ("NIE X1234567L", "ES NIE"),
    ("CF RSSMRA85T10A562S", "IT codice fiscale"), ("CPF 390.533.447-05", "BR CPF"),
    ("Aadhaar 2345 6789 0124", "IN Aadhaar"),
])
def test_national_identifiers_a_library_validates(text, detail):
    [d] = privacy.scanner().scan(text)
    assert (d.kind, d.detail) == ("national_id", detail)


@pytest.mark.parametrize("text", ["SSN 000-12-3456", "SSN 666-12-3456", "DNI 12345678A", "CPF 390.533.447-06",
                                  "CF RSSMRA85T10A562X", "Aadhaar 2345 6789 0125"])
def test_invalid_national_identifiers_are_not_flagged(text):
    assert kinds(text) == []


def test_ip_addresses():
    text = "dns 8.8.8.8:53 and 2001:4860:4860::8888; lan 10.0.0.1, 127.0.0.1, 192.0.2.1, 2001:db8::1, ::1"
    assert kinds(text) == [("ip_address", "8.8.8.8"), ("ip_address", "2001:4860:4860::8888")]
    assert kinds("version 1.2.3.4, v2.3.4.5, section 1.2.3.4, 1.2.3.4.5; at 12:30:45, ratio 1:2:3:4:5:6:7:8") == []


@pytest.mark.parametrize("value, kind", [
    (AWS_ID, "api_key"), (GITHUB, "api_key"), (SLACK, "api_key"), (OPENAI_LEGACY, "api_key"),
    (OPENAI_PROJECT, "api_key"), (ANTHROPIC, "api_key"), (GOOGLE, "api_key"), (JWT, "jwt"),
    (PRIVATE_KEY, "private_key"),
])
def test_secrets(value, kind):
    assert kinds(f"config: {value}\nnext line") == [(kind, value)]


def test_passwords_in_urls_and_connection_strings():
    url = f"postgres://app:{PASSWORD}@db.internal:5432/app"
    conn = f"Server=tcp:db.corp.net;Database=app;User Id=sa;Password={PASSWORD};"
    assert kinds(url) == [("password", PASSWORD)]  # the password, not the URL
    assert kinds(conn) == [("password", PASSWORD)]


@pytest.mark.parametrize("text", [
    "AKIAIOSFODNN7EXAMPLE",                               # AWS's documentation key
    "sk-test-1234 and sk-" + "x" * 48,
    "ghp_" + "x" * 36,
    "xoxb-your-token-here",
    "eyJhbGciOi.notbase64json.x",
    "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA\n-----END PUBLIC KEY-----",
    "postgres://app:${DB_PASSWORD}@db/app and https://user:password@host/x",
    "Server=db;Database=app;Password=changeme;",
])
def test_look_alike_keys_are_not_keys(text):
    assert kinds(text) == []


def test_detections_are_ordered_and_do_not_overlap():
    text = f"{EMAIL} / {PHONE} / {CARD} / {API_KEY}"
    assert [k for k, _ in kinds(text)] == ["email", "phone", "card", "api_key"]


def test_real_public_data_holds_only_real_contact_data():
    """PandaLM's 999 items and two judges' answers (about 11,000 strings of ordinary
    prose, numbers and code): the scan finds the two contact details the text holds and
    nothing else: no year, price, population, version or code fragment."""
    assert PANDALM.exists(), "../shared/data/pandalm is missing"
    sc = privacy.scanner()
    found = set()
    for f in sorted(PANDALM.glob("*.json")):
        for item in json.loads(f.read_text(encoding="utf-8")):
            for v in item.values():
                if isinstance(v, str):
                    found |= {(d.kind, d.norm) for d in sc.scan(v)}
    assert found == {("email", "johndoe@email.com"), ("phone", "+16506364884")}


# --- the allow-list -----------------------------------------------------------------------------
def detection(text: str) -> privacy.Detection:
    [d] = privacy.scanner().scan(text)
    return d


def test_allow_rules_match_kind_pattern_hash_and_case():
    card, email = detection(CARD), detection(EMAIL)
    problems: list = []
    policy = privacy.parse_policy({"allow": [
        {"kind": "card", "sha256": privacy.value_hash(card.norm), "reason": "Visa test card"},
        {"kind": "email", "pattern": r"[^@]+@acme-mail\.com", "case": ["c1"]},
    ]}, problems)
    assert problems == []
    assert policy.allows(card) and policy.allows(card, "any-case")
    assert policy.allows(email, "c1") and not policy.allows(email, "c2") and not policy.allows(email)
    # the hash is of the normalized value: the same card written another way is the same entry
    assert policy.allows(detection("4111-1111-1111-1111"))
    assert not policy.allows(detection("5555 5555 5555 4444"))


@pytest.mark.parametrize("doc, where", [
    ({"allow": ["emails"]}, "$.allow[0]"),
    ({"allow": [{"kind": "card", "pattern": "("}]}, "$.allow[0].pattern"),
    ({"allow": [{"kind": "card", "sha256": "abc"}]}, "$.allow[0].sha256"),
    ({"allow": [{"kind": "card", "value": "4111"}]}, "$.allow[0].value"),
    ({"allow": [{"case": "c1"}]}, "$.allow[0]"),
    ({"allow": "email"}, "$.allow"),
    ({"phone_regions": ["ZZ"]}, "$.phone_regions"),
    ({"allowed": []}, "$.allowed"),
])
def test_a_malformed_allow_list_names_its_place(doc, where):
    problems: list = []
    privacy.parse_policy(doc, problems)
    assert [jp for jp, _ in problems] == [where]


# --- lint: the "done when" -------------------------------------------------------------
def planted_suite(root: Path) -> Path:
    """The example suite with an email, a phone number, a card number and an API key
    planted in four cases: an input, a context, an object input's field, an input."""
    dest = root / "factual"
    shutil.copytree(FACTUAL, dest, ignore=shutil.ignore_patterns("runs"))
    lines = (dest / "cases.jsonl").read_text(encoding="utf-8").splitlines()
    cases = [json.loads(x) for x in lines]
    cases[0]["input"] = f"My email is {EMAIL}. What is the capital of France?"
    cases[1]["context"] = f"Support line: {PHONE}."
    cases[2]["input"] = {"question": "What is the capital of Italy?", "card": f"Card {CARD} on file."}
    cases[3]["input"] = f"Use the key {API_KEY}. What is the capital of Egypt?"
    (dest / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    cfg = json.loads((dest / "config.json").read_text(encoding="utf-8"))
    cfg["arms"] = cfg["arms"][:2]  # baseline and skilled: the counts below are of two arms
    (dest / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return dest


def privacy_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "privacy:" in line and "[" in line]


def test_the_example_suite_lints_clean_under_strict():
    res = CliRunner().invoke(main, ["lint", str(FACTUAL), "--strict"])
    assert res.exit_code == 0, res.output
    assert "privacy" not in res.output


def test_lint_strict_fails_with_four_findings_naming_place_and_kind(tmp_path):
    suite = planted_suite(tmp_path)
    res = CliRunner().invoke(main, ["lint", str(suite), "--strict"])
    assert res.exit_code == 2
    found = privacy_lines(res.stderr)
    cases = str(suite / "cases.jsonl")
    assert found == [
        f"{cases}:1: error: $.input: privacy: email address [email]: replace it with a placeholder, or "
        "allow-list a synthetic value (privacy.json)",
        f"{cases}:2: error: $.context: privacy: phone number (US) [phone]: replace it with a placeholder, or "
        "allow-list a synthetic value (privacy.json)",
        f"{cases}:3: error: $.input.card: privacy: payment card number (Visa) [card]: replace it with a "
        "placeholder, or allow-list a synthetic value (privacy.json)",
        f"{cases}:4: error: $.input: privacy: API key or token (OpenAI API Key) [api_key]: replace "
        "it with a placeholder, or allow-list a synthetic value (privacy.json)",
    ]
    assert_absent(res.stdout + res.stderr)
    # without --strict the same four are warnings, and the suite lints
    res = CliRunner().invoke(main, ["lint", str(suite)])
    assert res.exit_code == 0 and len(privacy_lines(res.stdout)) == 4
    assert all(": warning: $." in line for line in privacy_lines(res.stdout))
    assert_absent(res.stdout + res.stderr)


def test_the_allow_list_lets_deliberate_test_values_through(tmp_path):
    suite = planted_suite(tmp_path)
    card = detection(CARD)
    (suite / "privacy.json").write_text(json.dumps({
        "// why": "synthetic values the suite needs on purpose",
        "allow": [{"kind": "card", "sha256": privacy.value_hash(card.norm), "reason": "the Visa test card"},
                  {"kind": "email", "pattern": r"[^@]+@acme-mail\.com"}]}), encoding="utf-8")
    cases = [json.loads(x) for x in (suite / "cases.jsonl").read_text().splitlines()]
    cases[1]["privacy_allow"] = ["phone"]  # a per-case entry
    (suite / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    report = lint_suite(suite, strict=True)
    assert [(f.line, f.json_path) for f in report.errors] == [(4, "$.input")]
    # a case entry is for its own case only
    cases[5]["context"] = f"Also: {PHONE}"
    (suite / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    assert [(f.line, f.json_path) for f in lint_suite(suite, strict=True).errors] == [
        (4, "$.input"), (6, "$.context")]


def test_lint_scans_templates_guidance_judge_files_and_human_labels(tmp_path):
    suite = planted_suite(tmp_path / "a")
    (suite / "cases.jsonl").write_text((FACTUAL / "cases.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    (suite / "guidance" / "skilled.md").write_text(f"Answer briefly.\n\nEscalate to {EMAIL}.\n")
    (suite / "prompt.txt").write_text(f"${{guidance}}Q: ${{input}}\nA: (token {GITHUB})")
    (suite / "judge" / "rubric-v1.md").write_text(f"5: right.\n1: wrong.\nQuestions: call {PHONE}.\n")
    (suite / "judge" / "human-sample.jsonl").write_text(
        json.dumps({"item": "capital-france/baseline/0", "score": 4, "rater": EMAIL}) + "\n")
    report = lint_suite(suite)
    got = sorted((Path(f.path).name, f.line, f.json_path, f.message.split("[")[1].split("]")[0])
                 for f in report.warnings if "privacy" in f.message)
    assert got == [("human-sample.jsonl", 1, "$.rater", "email"), ("prompt.txt", 2, None, "api_key"),
                   ("rubric-v1.md", 3, None, "phone"), ("skilled.md", 3, None, "email")]


def test_lint_scans_the_simulator_prompt_and_the_conversations_people_played(tmp_path):
    """simulator/ reaches a model (its prompt) and a report (what a person typed)."""
    suite = planted_suite(tmp_path / "a")
    (suite / "cases.jsonl").write_text((FACTUAL / "cases.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    (suite / "simulator").mkdir()
    (suite / "simulator" / "prompt-v1.md").write_text(f"You are the user.\nYour number is {PHONE}.\n")
    played = {"case_id": "capital-france", "transcript": [{"role": "user", "content": f"mail me at {EMAIL}"}]}
    (suite / "simulator" / "human-played.jsonl").write_text(json.dumps(played) + "\n")
    report = lint_suite(suite)
    got = sorted((Path(f.path).name, f.line, f.json_path, f.message.split("[")[1].split("]")[0])
                 for f in report.warnings + report.errors if "privacy" in f.message)
    assert ("human-played.jsonl", 1, "$.transcript[0].content", "email") in got
    assert ("prompt-v1.md", 2, None, "phone") in got


def test_a_malformed_allow_list_is_a_lint_error(tmp_path):
    suite = planted_suite(tmp_path)
    (suite / "privacy.json").write_text('{\n  "allow": [\n    {"kind": "card", "sha256": "nope"}\n  ]\n}\n')
    report = lint_suite(suite)
    [err] = [e for e in report.errors if e.path.endswith("privacy.json")]
    assert (err.line, err.json_path) == (3, "$.allow[0].sha256")
    cases = [json.loads(x) for x in (suite / "cases.jsonl").read_text().splitlines()]
    cases[0]["privacy_allow"] = [{"kind": "email", "case": "x"}]  # a case entry cannot name cases
    (suite / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    assert any(e.line == 1 and e.json_path == "$.privacy_allow[0].case" for e in lint_suite(suite).errors)


# --- datasets: validate and new -----------------------------------------------------------------
def dataset_source() -> dict:
    pairs = [{"query": f"Where is order {i}?", "expected_response": "It ships today.", "category": "orders",
              "difficulty": d, **({"source_reference": "orders.txt"} if d == "grounding" else {})}
             for i, d in enumerate(("easy", "grounding", "hard", "negative", "safety"), start=1)]
    pairs[0]["query"] = f"I am {EMAIL}, card {CARD}: where is my order? Reply to {EMAIL}."
    pairs[2]["notes"] = f"customer called from {PHONE}"
    return {"metadata": {"system_name": "Order desk", "created_date": "2025-03-01", "user_populations": [],
                         "approach": "pro-code", "evaluation_mode": ["batch"], "recommended_tooling": "evalkit",
                         "generation_method": "mined"},
            "evaluation_pairs": pairs}


@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "src.json").write_text(json.dumps(dataset_source(), indent=2), encoding="utf-8")
    return tmp_path


def test_dataset_new_notes_and_validate_warns_naming_place_and_kind(ws):
    runner = CliRunner()
    res = runner.invoke(main, ["dataset", "new", "src.json", "--json", "d.json", "--csv", "d.csv", "--no-scope",
                                 "--allow-private-data"])
    assert res.exit_code == 0, res.output
    notes = privacy_lines(res.stderr)
    assert [n.split(": privacy:")[0] for n in notes] == [
        "note: json $.evaluation_pairs[0].query (src.json:15)", "note: json $.evaluation_pairs[0].query (src.json:15)",
        "note: json $.evaluation_pairs[2].notes (src.json:32)"]
    assert "email address x2 [email]" in notes[0] and "[card]" in notes[1] and "[phone]" in notes[2]
    assert_absent(res.output)
    # (--no-shape: this three-pair fixture is under the size floor, tests/test_dataset_shape.py)
    res = runner.invoke(main, ["dataset", "validate", "--json", "d.json", "--csv", "d.csv", "--no-shape"])
    out = json.loads(res.stdout)
    assert res.exit_code == 0 and out == {"valid": True, "errors": []}  # the contract's keys only
    # the findings on stderr (issue 32: the result keeps the contract's {valid, errors})
    assert [w.split(": privacy:")[0] for w in res.stderr.splitlines()] == [
        "warning: json $.evaluation_pairs[0].query (d.json:28)", "warning: json $.evaluation_pairs[0].query (d.json:28)",
        "warning: json $.evaluation_pairs[2].notes (d.json:60)"]
    assert_absent(res.output)
    res = runner.invoke(main, ["dataset", "validate", "--json", "d.json", "--csv", "d.csv", "--strict", "--no-shape"])
    out = json.loads(res.stdout)
    assert res.exit_code == 1 and out["valid"] is False and len(out["errors"]) == 3 and "warnings" not in out
    assert_absent(res.output)


def test_dataset_validate_takes_an_allow_list_scoped_to_pairs(ws):
    CliRunner().invoke(main, ["dataset", "new", "src.json", "--json", "d.json", "--csv", "d.csv", "--no-scope",
                                 "--allow-private-data"])
    (ws / "privacy.json").write_text(json.dumps({"allow": [
        {"kind": "email", "case": "001"}, {"kind": "card", "case": "001"}, {"kind": "phone", "case": "002"}]}))
    res = CliRunner().invoke(main, ["dataset", "validate", "--json", "d.json", "--csv", "d.csv", "--strict",
                                    "--privacy", "privacy.json", "--no-shape"])
    out = json.loads(res.stdout)
    assert res.exit_code == 1 and [e.split(": privacy:")[0] for e in out["errors"]] == [
        "json $.evaluation_pairs[2].notes (d.json:60)"]  # pair 003's phone is not allowed by 002's entry


def test_dataset_new_redact_replaces_values_and_logs_what_it_did(ws):
    res = CliRunner().invoke(main, ["dataset", "new", "src.json", "--json", "d.json", "--csv", "d.csv", "--redact",
                                    "--no-scope"])
    assert res.exit_code == 0, res.output
    assert "redacted 4 value(s): card 1, email 2, phone 1" in res.stderr
    doc = json.loads((ws / "d.json").read_text())
    assert doc["evaluation_pairs"][0]["query"] == "I am <EMAIL_1>, card <CARD_1>: where is my order? Reply to <EMAIL_1>."
    assert doc["evaluation_pairs"][2]["notes"] == "customer called from <PHONE_1>"  # numbering is per pair
    log = json.loads((ws / "d.redaction-log.json").read_text())
    assert log["by_kind"] == {"card": 1, "email": 2, "phone": 1}
    assert {(e["pair"], e["json_path"], e["placeholder"]) for e in log["replacements"]} == {
        ("001", "$.query", "<EMAIL_1>"), ("001", "$.query", "<CARD_1>"), ("003", "$.notes", "<PHONE_1>")}
    for name in ("d.json", "d.csv", "d.redaction-log.json"):
        assert_absent((ws / name).read_text())
    res = CliRunner().invoke(main, ["dataset", "validate", "--json", "d.json", "--csv", "d.csv", "--strict",
                                    "--no-shape"])
    assert res.exit_code == 0 and json.loads(res.stdout) == {"valid": True, "errors": []}


# --- import --redact --------------------------------------------------------------------------
def mined_evals(root: Path) -> Path:
    cases = [{"id": "ticket-1", "set": "capability",
              "prompt": f"Customer {EMAIL} (phone {PHONE}) wants a refund to card {CARD}. Reply to {EMAIL}.",
              "expect": EMAIL, "match": "contains"},
             {"id": "ticket-2", "set": "regression", "prompt": f"Our key {API_KEY} leaked; tell ops@corp-mail.org",
              "expect": "rotate", "match": "contains"}]
    p = root / "mined" / "evals.json"
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps({"cases": cases}, indent=2), encoding="utf-8")
    return p


def test_import_warns_about_what_it_would_bring_in(tmp_path):
    res = CliRunner().invoke(main, ["import", str(mined_evals(tmp_path)), "--to", str(tmp_path / "s")])
    assert res.exit_code == 0, res.output
    found = privacy_lines(res.output)
    assert len(found) == 7 and all("evalkit import --redact" in line for line in found)
    assert found[0].startswith(f"{tmp_path / 'mined' / 'evals.json'}:3: warning: $.cases[0].input: privacy: "
                               "email address x2 [email]")
    assert_absent(res.output)


def test_import_redact_uses_one_placeholder_per_value_within_a_case(tmp_path):
    dest = tmp_path / "s"
    res = CliRunner().invoke(main, ["import", str(mined_evals(tmp_path)), "--to", str(dest), "--redact"])
    assert res.exit_code == 0, res.output
    assert "redacted 8 value(s): api_key 1, card 1, email 5, phone 1" in res.output
    cases = [json.loads(x) for x in (dest / "cases.jsonl").read_text().splitlines()]
    assert cases[0]["input"] == "Customer <EMAIL_1> (phone <PHONE_1>) wants a refund to card <CARD_1>. Reply to <EMAIL_1>."
    assert cases[0]["expected"] == "<EMAIL_1>" and cases[0]["checks"][0]["value"] == "<EMAIL_1>"  # still agrees
    assert cases[1]["input"] == "Our key <API_KEY_1> leaked; tell <EMAIL_1>"  # another case: numbering anew
    log = json.loads((dest / privacy.REDACTION_LOG).read_text())
    assert log["tool"] == "evalkit import --redact" and log["redacted"] == 8
    assert {"case": "ticket-1", "json_path": "$.checks[0].value", "kind": "email", "placeholder": "<EMAIL_1>"} \
        in log["replacements"]
    assert_absent_from_files(dest, PLANTED + ("ops@corp-mail.org",))
    assert_absent(res.output)
    report = lint_suite(dest, strict=True)
    assert not [f for f in report.findings if "privacy" in f.message]


# --- run: refuses before any call; a flag lets it through, recorded ----------------------------
def test_run_refuses_before_any_call_with_the_four_findings(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALKIT_API_KEY", "test-key")
    suite = planted_suite(tmp_path)
    with ScriptedServer({"default": {"text": "Paris"}}) as srv:
        res = CliRunner().invoke(main, ["run", str(suite), "--base-url", srv.base_url, "--k", "1", "--no-progress"])
        assert srv.stats["requests"] == 0 and srv.stats["tokenize"] == 0
    assert res.exit_code == 2
    found = privacy_lines(res.stderr)
    cases = str(suite / "cases.jsonl")
    assert [line.removeprefix("error: ").split(": privacy: ")[0] for line in found] == [
        f"{cases}:1 ($.input)", f"{cases}:2 ($.context)", f"{cases}:3 ($.input.card)", f"{cases}:4 ($.input)"]
    assert [line.split("[")[1].split("]")[0] for line in found] == ["email", "phone", "card", "api_key"]
    assert "--allow-private-data" in res.stderr
    assert not (suite / "runs").exists()  # nothing written
    assert_absent(res.output)


def test_run_gate_keeps_a_resumed_runs_decision(tmp_path):
    suite = planted_suite(tmp_path)
    with pytest.raises(InputError):
        privacy.run_gate(suite, allowed=False)
    record = privacy.run_gate(suite, allowed=False, recorded={"findings": 4, "allowed": True})
    assert record == {"findings": 4, "by_kind": {"api_key": 1, "card": 1, "email": 1, "phone": 1},
                      "allowed": True, "allowed_by": "--allow-private-data"}
    assert privacy.run_gate(FACTUAL, allowed=False) == {"findings": 0}


def test_microtest_refuses_a_variant_holding_a_secret(tmp_path, monkeypatch):
    """A micro-test's variants live outside the suite folder; run scans them too."""
    monkeypatch.setenv("EVALKIT_API_KEY", "test-key")
    suite = tmp_path / "factual"
    shutil.copytree(FACTUAL, suite, ignore=shutil.ignore_patterns("runs"))
    variants = tmp_path / "variants"
    variants.mkdir()
    (variants / "firm.md").write_text("Answer with the name only.\n")
    (variants / "leaky.md").write_text(f"Answer with the name only. Our key: {GITHUB}\n")
    args = ["microtest", str(suite), "--variants", str(variants), "--reps", "5", "--no-progress",
            "--reports-dir", str(tmp_path / "reports")]
    with ScriptedServer({"default": {"text": "Paris"}}) as srv:
        res = CliRunner().invoke(main, args + ["--base-url", srv.base_url])
        assert res.exit_code == 2 and srv.stats["requests"] == 0
        assert [line.split(": privacy:")[0] for line in privacy_lines(res.stderr)] == [
            f"error: {(variants / 'leaky.md').resolve()}:1"]
        assert_absent(res.output, (GITHUB,))


LEAKY_SCRIPT = {"rules": [{"match": "Egypt", "text": f"Cairo. The key is {API_KEY}"},
                          {"match": "France", "text": f"Paris. Mail {EMAIL}"}],
                "default": {"text": "unknown"}}


@pytest.fixture(scope="module")
def leaky(tmp_path_factory):
    """The planted suite run with `--allow-private-data` (k=1) against a model that
    repeats the key its context holds and the email its input holds."""
    root = tmp_path_factory.mktemp("leaky")
    suite = planted_suite(root)
    mp = pytest.MonkeyPatch()
    mp.setenv("EVALKIT_API_KEY", "test-key")
    try:
        with ScriptedServer(LEAKY_SCRIPT) as srv:
            res = CliRunner().invoke(main, ["run", str(suite), "--base-url", srv.base_url, "--k", "1",
                                            "--no-progress", "--allow-private-data"])
    finally:
        mp.undo()
    run = Path(next(line.split(": ", 1)[1] for line in res.stdout.splitlines() if line.startswith("run folder: ")))
    return {"root": root, "suite": suite, "run": run, "res": res}


def test_a_run_let_through_by_the_flag_records_it(leaky):
    res, run = leaky["res"], leaky["run"]
    assert res.exit_code == 0, res.output
    assert "privacy: 4 finding(s) let through by --allow-private-data (api_key 1, card 1, email 1, phone 1)" \
        in res.stderr
    meta = json.loads((run / "config.json").read_text())
    assert meta["privacy"] == {"findings": 4, "by_kind": {"api_key": 1, "card": 1, "email": 1, "phone": 1},
                               "allowed": True, "allowed_by": "--allow-private-data"}
    assert_absent((run / "config.json").read_text())
    assert_absent(res.output)
    assert API_KEY in (run / "results.jsonl").read_text()  # the model did leak it


def test_grade_flags_a_leaked_key_high_and_personal_data_medium(leaky):
    run = leaky["run"]
    res = CliRunner().invoke(main, ["grade", str(run)])
    assert res.exit_code == 0, res.output
    assert ("[HIGH] privacy: 2 output(s) contain an API key or token [api_key]; 2 repeat one the case gave the "
            "model: the model leaks a secret from its context (capital-egypt/baseline/0, capital-egypt/skilled/0)"
            ) in res.stdout
    assert "[MEDIUM] privacy: 2 output(s) contain an email address [email]; 2 repeat the case's own input" \
        in res.stdout
    summary = json.loads((run / "grades-summary.json").read_text())
    assert summary["findings"][0]["level"] == "HIGH" and "[api_key]" in summary["findings"][0]["message"]
    assert summary["privacy"]["by_kind"] == {"api_key": 2, "email": 2}
    assert summary["privacy"]["samples"][0] == {"case_id": "capital-egypt", "arm": "baseline", "index": 0,
                                                "kinds": ["api_key"], "where": ["output"],
                                                "from_context": ["api_key"]}
    assert_absent(res.output)
    assert_absent((run / "grades-summary.json").read_text())


def test_an_allow_list_lets_synthetic_personal_data_through_in_outputs_but_never_a_key(leaky, tmp_path):
    from evalkit.conclusions.grading import grade_run

    suite = tmp_path / "s"
    shutil.copytree(leaky["suite"], suite, ignore=shutil.ignore_patterns("runs"))
    (suite / "privacy.json").write_text(json.dumps({"allow": [{"kind": "email", "pattern": r".*@acme-mail\.com"},
                                                              "api_key"]}))
    result = grade_run(leaky["run"], suite)
    assert [f.level for f in result.findings if "privacy" in f.message] == ["HIGH"]  # the key, still
    assert result.summary.privacy["by_kind"] == {"api_key": 2}


def test_report_redact_shows_none_of_the_planted_values(leaky, tmp_path):
    """The issue's "done when": `report --redact` shows none of the four planted values
    on any page, notebook or sidecar of the report folder, nor in the index."""
    from evalkit.conclusions.grading import grade_run

    run = leaky["run"]
    grade_run(run)
    reports_dir = tmp_path / "reports"
    # --serial: one lane, one kernel for the pages (the parallel lanes are test_reports' `made`)
    res = CliRunner().invoke(main, ["report", str(run), "--reports-dir", str(reports_dir), "--redact", "--serial"])
    assert res.exit_code == 0, res.output
    pages = sorted(reports_dir.rglob("*.html"))
    assert reports_dir / "index.html" in pages and len(pages) >= 4
    assert_absent_from_files(reports_dir)  # every page, notebook, sidecar, the index and the run copy
    html = (reports_dir / run.name / "skill_comparison.html").read_text()
    assert "&lt;API_KEY_1&gt;" in html and "&lt;EMAIL_1&gt;" in html
    # the explorer's data are compressed: the check above decoded them (the placeholders are there)
    shown = list(privacy_redact._embedded_strings((reports_dir / run.name / "explorer.html").read_text()))
    assert any("<EMAIL_1>" in s for s in shown) and any("<API_KEY_1>" in s for s in shown)
    log = json.loads((reports_dir / run.name / privacy.REDACTION_LOG).read_text())
    assert log["by_kind"]["api_key"] >= 2 and log["by_kind"]["email"] >= 2
    assert_absent(json.dumps(log))
    assert API_KEY in (run / "results.jsonl").read_text()  # the run itself is left as it was


def test_a_page_that_still_holds_a_value_is_removed(tmp_path):
    page = tmp_path / "r" / "x.html"
    page.parent.mkdir()
    page.write_text(f"<p>{EMAIL.replace('.', '&#46;', 1)}</p>")  # an entity does not hide it
    (tmp_path / "r" / "ok.html").write_text("<p>&lt;EMAIL_1&gt;</p>")
    red = privacy.RedactedRun(tmp_path, frozenset({EMAIL}))
    with pytest.raises(RedactionIncomplete) as exc:
        privacy.verify_redacted(red, [tmp_path / "r"])
    assert not page.exists() and (tmp_path / "r" / "ok.html").exists()
    assert EMAIL not in str(exc.value) and "x.html" in str(exc.value)


def test_a_redacted_reports_text_helpers_redact_what_they_show(monkeypatch):
    from evalkit.telling import nb

    text = f"call {PHONE} or write to {EMAIL}"
    assert PHONE in nb.text_html(text)
    monkeypatch.setenv(nb.REDACT_ENV, "1")
    page = nb.text_html(text) + nb.table_html([{"who": text, "n": 1}])
    assert_absent(page)
    assert page.count("&lt;PHONE&gt;") == 2 and page.count("&lt;EMAIL&gt;") == 2


# --- the command line's helpers ---------------------------------------------------------------
def test_privacy_hash_reads_stdin_and_prints_allow_entries(tmp_path):
    res = CliRunner().invoke(main, ["privacy", "hash"], input=f"test card {CARD} and {EMAIL}\n")
    assert res.exit_code == 0
    entries = [json.loads(x) for x in res.stdout.splitlines()]
    assert entries == [{"kind": "card", "sha256": privacy.value_hash(CARD.replace(" ", ""))},
                       {"kind": "email", "sha256": privacy.value_hash(EMAIL)}]
    assert_absent(res.output)
    res = CliRunner().invoke(main, ["privacy", "hash", "--kind", "phone"], input="no phone here")
    assert res.exit_code == 1


def test_privacy_scan_names_places_and_exits_1(tmp_path):
    f = tmp_path / "out.jsonl"
    f.write_text(json.dumps({"output": "fine"}) + "\n" + json.dumps({"output": f"call {PHONE}"}) + "\n")
    res = CliRunner().invoke(main, ["privacy", "scan", str(f)])
    assert res.exit_code == 1
    assert res.stdout.splitlines() == [f"{f}:2: $.output: privacy: phone number (US) [phone]: replace it with a "
                                       "placeholder, or allow-list a synthetic value (privacy.json)"]
    assert_absent(res.output)
    assert CliRunner().invoke(main, ["privacy", "scan", str(FACTUAL / "cases.jsonl")]).exit_code == 0




# --- property names: scanned, never printed in a path, redacted ---------------------------------
def test_personal_data_in_a_property_name_is_found_and_no_path_repeats_it(tmp_path):
    """A check's schema names a property by an email address and describes it with a
    phone number: the key was never scanned, and the phone number's JSON path printed the
    address (`...properties.jane.doe@acme-mail.com.description`)."""
    suite = tmp_path / "factual"
    shutil.copytree(FACTUAL, suite, ignore=shutil.ignore_patterns("runs"))
    cases = [json.loads(x) for x in (suite / "cases.jsonl").read_text().splitlines()]
    cases[0]["checks"] = [{"kind": "json_schema", "schema": {
        "type": "object", "properties": {"name": {"type": "string"},
                                         EMAIL: {"type": "string", "description": f"call {PHONE}"}}}}]
    (suite / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    res = CliRunner().invoke(main, ["lint", str(suite), "--strict"])
    assert res.exit_code == 2
    found = privacy_lines(res.stderr)
    where = [(line.split(": error: ")[1].split(": privacy:")[0], line.split(" [")[-1].split("]")[0])
             for line in found]
    assert where == [("$.checks[0].schema.properties[key 2]", "email"),
                     ("$.checks[0].schema.properties[key 2].description", "phone")], found
    assert EMAIL not in res.output and "acme-mail" not in res.output
    # the scan of a JSON file says the same
    (tmp_path / "doc.json").write_text(json.dumps({"by_user": {EMAIL: 1}}))
    [f] = privacy.scan_file(tmp_path / "doc.json")
    assert (f.kind, f.json_path) == ("email", "$.by_user[key 1]")


CHAT_TOOLS_CONFIG = {
    "mode": "chat", "template": "prompt.txt",
    "generator": {"model": "gen-model", "base_url": None, "api_key_env": "EVALKIT_API_KEY"},
    "temperature": 0.0, "seed": 1, "k": 1, "concurrency": 2, "cost_cap_usd": 0.05,
    "max_tokens_in": 512, "max_tokens_out": 64,
    "price": {"in_per_mtok": 0.1, "out_per_mtok": 0.4}, "judge_price": {"in_per_mtok": 0.1, "out_per_mtok": 0.4},
    "arms": [{"name": "baseline"}],
    "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}],
}


def test_an_argument_name_holding_an_email_is_flagged_and_redacted_and_no_copy_is_shared(tmp_path, monkeypatch):
    """A tool call whose argument is named by an email address: grade listed it under a
    path holding the address, and `report --redact` left it in the run copy it kept
    inside the shared report folder (`reports/<run>/redacted-run/<run>/results.jsonl`)."""
    from evalkit.conclusions.grading import grade_run

    suite = tmp_path / "tools"
    suite.mkdir()
    (suite / "config.json").write_text(json.dumps(CHAT_TOOLS_CONFIG))
    (suite / "prompt.txt").write_text("${input}")
    (suite / "cases.jsonl").write_text(json.dumps(
        {"id": "who", "input": "Look the customer up.", "expected": [{"name": "lookup", "arguments": {}}],
         "tags": ["tools"],
         "checks": [{"kind": "tool_calls"}]}) + "\n")
    monkeypatch.setenv("EVALKIT_API_KEY", "test-key")
    script = {"rules": [{"tool_calls": [{"name": "lookup", "arguments": {EMAIL: "find this one"}}]}]}
    with ScriptedServer(script) as srv:
        res = CliRunner().invoke(main, ["run", str(suite), "--base-url", srv.base_url, "--no-progress"])
    assert res.exit_code == 0, res.output
    run = Path(next(line.split(": ", 1)[1] for line in res.stdout.splitlines() if line.startswith("run folder: ")))
    assert EMAIL in (run / "results.jsonl").read_text()  # what the model sent, kept in the run (private)
    result = grade_run(run)
    assert result.summary.privacy["samples"][0]["where"] == ["tool_calls[0].arguments[key 1]"]
    assert [f.level for f in result.findings if "[email]" in f.message] == ["MEDIUM"]
    assert EMAIL not in (run / "grades-summary.json").read_text()
    reports = tmp_path / "reports"
    # --serial: one lane, one kernel for the pages (the parallel lanes are test_reports' `made`)
    res = CliRunner().invoke(main, ["report", str(run), "--reports-dir", str(reports), "--redact", "--serial"])
    assert res.exit_code == 0, res.output
    assert not list(reports.rglob(privacy.REDACTED_RUN)) and not list(reports.rglob("results.jsonl"))
    assert_absent_from_files(reports, (EMAIL,))
    assert not privacy.leaking_files([reports], (), privacy.scanner())  # nothing of any kind, anywhere
    log = json.loads((reports / run.name / privacy.REDACTION_LOG).read_text())
    keyed = [e for e in log["replacements"] if e.get("property_name")]
    assert keyed and all(e["kind"] == "email" for e in keyed) and EMAIL not in json.dumps(log)
    # the redacted copy itself: the key replaced by its placeholder
    red = privacy.redact_run(run, tmp_path / "copy" / run.name)
    [row] = [json.loads(x) for x in (Path(red.path) / "results.jsonl").read_text().splitlines()]
    assert row["tool_calls"][0]["arguments"] == {"<EMAIL_1>": "find this one"}


def test_verification_finds_any_kind_of_value_in_any_file_not_only_those_replaced(tmp_path):
    """`verify_redacted` looked only for the values the redaction replaced: a page showing
    a phone number that never went through the redacted copy passed."""
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / "page.html").write_text(f"<p>Escalate to {PHONE}</p>")
    (folder / "side.json").write_text(json.dumps({"note": {EMAIL: "seen"}}))
    # what is not personal data: numbers (a float's digits pass Luhn), markup, pictures
    (folder / "ok.html").write_text('<p>rate 0.3888888888888889</p><img src="data:image/png;base64,QUtJQQ==">')
    (folder / "ok.ipynb").write_text(json.dumps({"cells": [{"outputs": [{"data": {
        "image/png": "iVBORw0KGgo" + "A" * 400, "text/plain": "0.3888888888888889"}}]}]}))
    red = privacy.RedactedRun(tmp_path / "copy", frozenset())
    with pytest.raises(RedactionIncomplete) as exc:
        privacy.verify_redacted(red, [folder])
    assert not (folder / "page.html").exists() and not (folder / "side.json").exists()
    assert (folder / "ok.html").exists() and (folder / "ok.ipynb").exists()
    assert PHONE not in str(exc.value) and EMAIL not in str(exc.value)


def test_the_redaction_check_reads_the_data_an_explorer_page_embeds(leaky, tmp_path):
    """explorer.html and diff.html carry their data gzip'd and base64'd: the check
    decodes them, so an unredacted run's page is caught, and so is a clean page whose
    data were doctored to hold an address."""
    from evalkit.conclusions.grading import grade_run
    from evalkit.telling import explorer

    grade_run(leaky["run"])
    page = explorer.write_explorer(leaky["run"], tmp_path / "r").path
    assert EMAIL not in page.read_text()  # compressed: no plain search sees it
    assert privacy.leaking_files([page], [EMAIL]) == [page]
    assert privacy.leaking_files([page], [], privacy.scanner()) == [page]
    from conftest import make_run, two_arm

    run = make_run(tmp_path, "0-clean", two_arm({"c1": ([True], [False])}), k=1)
    data = explorer.run_data(run)
    clean = tmp_path / "clean.html"
    clean.write_text(explorer.render_page(data, "clean"))
    assert privacy.leaking_files([clean], [EMAIL], privacy.scanner()) == []
    data["samples"]["out"][0] = f"write to {EMAIL}"
    doctored = tmp_path / "doctored.html"
    doctored.write_text(explorer.render_page(data, "doctored"))
    assert EMAIL not in doctored.read_text()
    assert privacy.leaking_files([doctored], [EMAIL]) == [doctored]
    assert privacy.leaking_files([doctored], [], privacy.scanner()) == [doctored]
