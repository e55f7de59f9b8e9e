"""CLI subcommand `serve` (registered by evalkit.cli)."""
from __future__ import annotations

import click

COMMANDS: list[click.Command] = []
