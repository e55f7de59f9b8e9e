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
