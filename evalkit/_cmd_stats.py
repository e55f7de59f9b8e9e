"""CLI subcommands for stats (registered by evalkit.cli)."""
from __future__ import annotations

import click

COMMANDS: list[click.Command] = []
