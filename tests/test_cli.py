"""The CLI's wiring: every subcommand resolves lazily, and every defined command is reachable."""
from __future__ import annotations

import importlib
import subprocess
import sys

from click.testing import CliRunner

from evalkit._cli import main as cli


def test_every_command_module_is_mapped_and_resolves() -> None:
    modules = set(cli._COMMANDS.values())
    defined = {c.name: m for m in modules for c in importlib.import_module(f"evalkit._cli.{m}").COMMANDS}
    assert defined == cli._COMMANDS
    for name in cli._COMMANDS:
        res = CliRunner().invoke(cli.main, [name, "--help"])
        assert res.exit_code == 0, (name, res.output)


def test_a_quick_command_does_not_import_the_notebook_stack() -> None:
    code = ("import sys; from evalkit._cli.main import main\n"
            "try:\n    main(['ingest', '--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('scipy', 'papermill', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_unknown_command_is_a_usage_error() -> None:
    res = CliRunner().invoke(cli.main, ["frobnicate"])
    assert res.exit_code == 2 and "No such command" in res.output


def test_an_error_message_quoting_a_control_sequence_is_printed_inert(tmp_path) -> None:
    """Error messages quote what a user's file or an endpoint said (here an arm name
    from the command line): the terminal sees escapes, never the sequence itself."""
    from conftest import write_engine_suite

    suite = write_engine_suite(tmp_path / "s", [{"id": "c1", "input": "France?", "expected": "Paris",
                                                 "tags": ["t"]}])
    res = CliRunner().invoke(cli.main, ["run", str(suite), "--arms", "base,\x1b]0;PWNED\x07", "--base-url",
                                        "http://127.0.0.1:9/v1"])
    assert res.exit_code == 2 and "unknown arm" in res.stderr
    assert "\x1b" not in res.stderr and "\\x1b]0;PWNED\\x07" in res.stderr
