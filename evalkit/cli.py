"""The `evalkit` command line: one click group, one function per subcommand.

Subcommands live beside the module they drive (`_cmd_*.py`) and are thin over it;
this file only assembles them and maps evalkit errors to exit statuses
(0 ok, 1 failed gate / INCOMPLETE run, 2 bad input).
"""
from __future__ import annotations

import sys

import click

from . import _cmd_suite, _cmd_run, _cmd_serve, _cmd_grade, _cmd_stats, _cmd_dataset, _cmd_ingest, _cmd_report
from .errors import EvalkitError


class _Group(click.Group):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except EvalkitError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="evalkit")
def main() -> None:
    """evalkit: measure prompts, skills and agents with numbers you can defend."""


for _mod in (_cmd_suite, _cmd_run, _cmd_serve, _cmd_grade, _cmd_stats, _cmd_dataset, _cmd_ingest, _cmd_report):
    for _cmd in _mod.COMMANDS:
        main.add_command(_cmd)


if __name__ == "__main__":  # pragma: no cover
    main()
