"""The `evalkit` command line: one click group, one function per subcommand.

Subcommands live one command group to a module in this folder (`_cli/run.py`,
`_cli/stats.py`, ...) and are thin over the library; this file only assembles them
and maps evalkit errors to exit statuses (0 ok, 1 failed gate / INCOMPLETE run, 2 bad
input). A subcommand's module is imported only when that subcommand runs (or `--help`
lists them all), so a quick command does not pay for scipy, pandas and the notebook stack.
"""

from __future__ import annotations

import errno
import importlib
import os
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
    "explore": "explore",
    "microtest": "report",
    "replay": "replay",
    "converse": "converse",
    "analyze": "analyze",
    "tokens": "analyze",
    "dashboard": "dashboard",
    "ci": "ci",
}


class _Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        module = _COMMANDS.get(name)
        if module is None:
            return None
        commands: list[click.Command] = importlib.import_module(f"evalkit._cli.{module}").COMMANDS
        for cmd in commands:
            if cmd.name == name:
                return cmd
        raise RuntimeError(f"evalkit._cli.{module} defines no command {name!r}")  # a wiring bug

    def invoke(self, ctx: click.Context) -> Any:
        try:
            # click 8.2 keeps the subcommand's name and arguments in `_protected_args`
            protected = ctx._protected_args if hasattr(ctx, "_protected_args") else ctx.protected_args
            _check_arguments([*protected, *ctx.args])
            return super().invoke(ctx)
        except EvalkitError as exc:
            from evalkit._cli.options import echo_text  # lazy: as every command module

            echo_text(f"error: {exc}", err=True)  # a message may quote a file or an endpoint
            sys.exit(exc.exit_code)
        except OSError as exc:
            # A path the system cannot use as given (too long, a file where a folder must
            # be, ...): a sentence naming it, exit 2, not a traceback. Anything else is a bug.
            if exc.errno not in _PATH_ERRNOS:
                raise
            from evalkit._cli.options import echo_text  # lazy: as every command module

            echo_text(f"error: {exc.filename}: {exc.strerror}", err=True)
            sys.exit(2)


# The errors a user's path argument alone can cause.
_PATH_ERRNOS = frozenset(
    {errno.ENAMETOOLONG, errno.ENOTDIR, errno.EISDIR, errno.ELOOP, errno.ENOENT, errno.EACCES, errno.EROFS}
)


def _check_arguments(args: list[str]) -> None:
    """No argument holds what no path or name can: a NUL (execve cannot pass one, but a
    caller in Python can), or a lone surrogate that is not an undecodable byte of argv."""
    from evalkit.foundations._text import has_lone_surrogate  # lazy: as every command module
    from evalkit.foundations.errors import InputError

    for i, arg in enumerate(args, 1):
        option = args[i - 2] if i > 1 and args[i - 2].startswith("--") else None
        which = f"argument {i} (the value of {option})" if option else f"argument {i}"
        if "\x00" in arg:
            raise InputError(f"{which} holds a NUL character: no path or name can")
        if has_lone_surrogate(arg):
            try:
                os.fsencode(arg)
            except UnicodeError:
                raise InputError(f"argument {i} holds a lone surrogate: no file name can") from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="evalkit")
def main() -> None:
    """evalkit: measure prompts, skills and agents with numbers you can defend."""


if __name__ == "__main__":  # pragma: no cover
    main()
