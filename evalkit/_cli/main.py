"""The `evalkit` command line: one click group, one function per subcommand.

Subcommands live one command group to a module in this folder (`_cli/run.py`,
`_cli/stats.py`, ...) and are thin over the library; this file only assembles them
and maps evalkit errors to exit statuses (0 ok, 1 failed gate / INCOMPLETE run, 2 bad
input). A subcommand's module is imported only when that subcommand runs (or `--help`
lists them all), so a quick command does not pay for scipy, pandas and the notebook stack.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from evalkit.foundations.errors import EvalkitError

# command name -> the module whose COMMANDS list defines it
_COMMANDS = {
    "init": "suite",
    "lint": "suite",
    "import": "suite",
    "run": "run",
    "batch": "batch",
    "serve": "serve",
    "grade": "grade",
    "judge": "grade",
    "compare": "stats",
    "verdict": "stats",
    "power": "stats",
    "gate": "stats",
    "baseline": "stats",
    "noise": "stats",
    "dataset": "dataset",
    "ingest": "ingest",
    "privacy": "privacy",
    "report": "report",
    "microtest": "report",
    "replay": "replay",
}


class _Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        module = _COMMANDS.get(name)
        if module is None:
            return None
        commands: list[click.Command] = importlib.import_module(f".{module}", __package__).COMMANDS
        for cmd in commands:
            if cmd.name == name:
                return cmd
        raise RuntimeError(f"evalkit._cli.{module} defines no command {name!r}")  # a wiring bug

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except EvalkitError as exc:
            from evalkit._cli.options import echo_text  # lazy: as every command module

            echo_text(f"error: {exc}", err=True)  # a message may quote a file or an endpoint
            sys.exit(exc.exit_code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="evalkit")
def main() -> None:
    """evalkit: measure prompts, skills and agents with numbers you can defend."""


if __name__ == "__main__":  # pragma: no cover
    main()
