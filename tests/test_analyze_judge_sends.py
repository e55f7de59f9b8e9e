"""What `evalkit analyze --judge` may send (issue 44, item 3): only files inside the
analysed file's folder (resolved), never `/proc`, `/dev` or `/sys`, and never the
judge's own key. Each test fails on the code before the fix."""

from __future__ import annotations

import json

# --- what `analyze --judge` may send (item 3) --------------------------------------------
LINKS = """\
# A skill

Read [the notes](notes.md), [the environment](/proc/self/environ), [the sibling](../secret/config.md),
[the netrc](NETRC), [the link out](out.md) and [the device](/dev/zero).
"""


def test_analyze_judge_sends_only_files_inside_the_analysed_files_folder(tmp_path, monkeypatch):
    """Absolute, `../` and symlinked links out of the analysed file's folder, and
    `/proc` or `/dev`, are never read for the judge; a file inside is sent."""
    from click.testing import CliRunner
    from test_analyze_judge import write

    from evalkit._cli.main import main
    from evalkit.calls.serve import ScriptedServer

    monkeypatch.chdir(tmp_path)
    write(tmp_path)
    skill = tmp_path / "skills" / "pdf"
    (tmp_path / "skills" / "secret").mkdir()
    (tmp_path / "skills" / "secret" / "config.md").write_text("MARK-SIBLING-7Q\n")
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / ".netrc").write_text("machine x login u password MARK-NETRC-7Q\n")
    (skill / "out.md").symlink_to(tmp_path / "home" / ".netrc")
    (skill / "SKILL.md").write_text(LINKS.replace("NETRC", str(tmp_path / "home" / ".netrc")))
    with ScriptedServer({"rules": [{"text": '{"findings": []}'}]}) as srv:
        out = CliRunner().invoke(main, ["analyze", "skills/pdf/SKILL.md", "--judge", "--suite", "suite",
                                        "--judge-base-url", srv.base_url, "--max-cost-usd", "1"])
        sent = json.dumps(srv.requests)
    assert len(srv.requests) == 1, out.output
    assert "Always answer in French" in sent  # notes.md, inside the folder
    assert not any(mark in sent for mark in ("PATH=", "MARK-SIBLING", "MARK-NETRC")), sent  # PATH=: environ


def test_analyze_judge_never_sends_the_judges_own_key(tmp_path, monkeypatch):
    """A file holding the judge's API key value (a shape no scanner rule knows) is not
    sent, even with --allow-private-data."""
    from click.testing import CliRunner
    from test_analyze_judge import write

    from evalkit._cli.main import main
    from evalkit.calls.serve import ScriptedServer

    monkeypatch.chdir(tmp_path)
    write(tmp_path)
    key = "zq81-judge-key-value-0042"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    (tmp_path / "skills" / "pdf" / "notes.md").write_text(f"The key is {key}.\n")
    with ScriptedServer({"rules": [{"text": '{"findings": []}'}]}) as srv:
        out = CliRunner().invoke(main, ["analyze", "skills/pdf/SKILL.md", "--judge", "--suite", "suite",
                                        "--judge-base-url", srv.base_url, "--max-cost-usd", "1",
                                        "--allow-private-data"])
        assert srv.stats["requests"] == 0, out.output
    assert "holds the value of $OPENAI_API_KEY" in out.stderr and key not in out.output


# --- secret files by name, and what the scan must catch (review of item 3) -------------------
SECRET_LINKS = """\
# A skill

See [n](.netrc), [e](.env), [cfg](.git/config), [k](deploy.key), [alias](alias.md) and [notes](notes.md).
"""


def _judge(tmp_path, monkeypatch, skill_text: str, files: dict[str, str], *extra: str, links: dict | None = None):
    """`analyze skills/pdf/SKILL.md --judge` with `files` (and symlinks `links`) beside
    it; the CLI result and every request the scripted judge received, as one JSON text."""
    from click.testing import CliRunner
    from test_analyze_judge import write

    from evalkit._cli.main import main
    from evalkit.calls.serve import ScriptedServer

    monkeypatch.chdir(tmp_path)
    write(tmp_path)
    skill = tmp_path / "skills" / "pdf"
    for name, text in files.items():
        (skill / name).parent.mkdir(parents=True, exist_ok=True)
        (skill / name).write_text(text)
    for name, target in (links or {}).items():
        (skill / name).symlink_to(target)
    (skill / "SKILL.md").write_text(skill_text)
    with ScriptedServer({"rules": [{"text": '{"findings": []}'}]}) as srv:
        out = CliRunner().invoke(main, ["analyze", "skills/pdf/SKILL.md", "--judge", "--suite", "suite",
                                        "--judge-base-url", srv.base_url, "--max-cost-usd", "1", *extra])
        return out, json.dumps(srv.requests)


def test_analyze_judge_never_sends_linked_files_that_hold_secrets_by_name(tmp_path, monkeypatch):
    """`.netrc`, `.env`, `.git/config`, `*.key`, and a symlink to `.env`, linked from
    inside the file's folder, are left out (a note each), even with
    --allow-private-data; the file and its other links are still judged."""
    files = {".netrc": "machine h login u password MARKNETRC42\n", ".env": "X=MARKENV42\n",
             ".git/config": "[core]\n\tMARKGIT42 = 1\n", "deploy.key": "MARKKEY42\n"}
    out, sent = _judge(tmp_path, monkeypatch, SECRET_LINKS, files, "--allow-private-data", links={"alias.md": ".env"})
    assert "Always answer in French" in sent, out.output  # notes.md was sent
    assert not any(m in sent for m in ("MARKNETRC", "MARKENV", "MARKGIT", "MARKKEY")), sent
    assert out.stderr.count("a file that holds secrets by its name") == 5, out.stderr


def test_analyze_judge_scan_refuses_netrc_env_lines_and_basic_auth_in_any_file(tmp_path, monkeypatch):
    """A linked file with an ordinary name holding a `.netrc` password, a `SECRET_KEY=`
    line or git's `extraheader = AUTHORIZATION: basic <base64>` is refused by the scan."""
    import base64

    header = base64.b64encode(b"x-access-token:Zq8x3mK9vL2pR7tYw4").decode()
    texts = ("machine api.example.com login alice password Tr0ub4dor&3\n", "SECRET_KEY=q8Zx3mK9vL2pR7tY\n",
             f'[http "https://github.com/"]\n\textraheader = AUTHORIZATION: basic {header}\n')
    for i, text in enumerate(texts):
        (tmp_path / str(i)).mkdir()
        out, sent = _judge(tmp_path / str(i), monkeypatch, "# A skill\n\nSee [the notes](notes.md).\n", {"notes.md": text})
        assert sent == "[]" and "privacy: password" in out.stderr, (text, out.stderr)


def test_analyze_judge_never_sends_a_held_secret_encoded(tmp_path, monkeypatch):
    """A secret evalkit holds (GITHUB_TOKEN), base64-encoded inside a longer value in a
    linked file, is refused, even with --allow-private-data."""
    import base64

    tok = "qq81-not-a-known-shape-4471"
    monkeypatch.setenv("GITHUB_TOKEN", tok)
    encoded = base64.b64encode(f"user:{tok}".encode()).decode()
    out, sent = _judge(tmp_path, monkeypatch, "# A skill\n\nSee [the notes](notes.md).\n",
                       {"notes.md": f"header {encoded}\n"}, "--allow-private-data")
    assert sent == "[]" and "holds the value of $GITHUB_TOKEN (base64)" in out.stderr, out.stderr


def test_the_scanner_finds_netrc_passwords_secret_lines_and_lowercase_basic_auth():
    """What the review showed the scanner missed, found; ordinary settings lines are not."""
    import base64

    from evalkit.pii.privacy import Policy, scan_text

    b = base64.b64encode(b"x-access-token:ghs_notreal0123").decode()
    found = ("machine h\n  login bob\n  password s3cretPW\n", "export DB_PASSWORD=hunter2horse\n",
             "SECRET_KEY = 'django-insecure-8z@x4!k2m'\n", f"extraheader = AUTHORIZATION: basic {b}\n")
    for text in found:
        assert scan_text(text, "f", Policy()), text
    for text in ("MAX_TOKENS=4096\n", "TOKEN_URL=https://oauth2.googleapis.com/token\n", "KEY_FILE=/etc/k.pem\n",
                 'SECRET_KEY = os.environ["X"]\n', "API_KEY=your-api-key-here\n", "OPENAI_API_KEY=${OPENAI_API_KEY}\n",
                 "a basic features list\n", "set the password in the settings\n", "KEY" * 30000 + "=\n"):
        assert not scan_text(text, "f", Policy()), text
