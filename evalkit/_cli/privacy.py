"""CLI subcommands `evalkit privacy scan | hash` (registered by evalkit._cli.main). Thin over
`evalkit.pii.privacy`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from evalkit._cli.options import echo_text
from evalkit.pii import privacy


@click.group("privacy")
def privacy_group() -> None:
    """Personal data and secrets: scan files for them, and hash the synthetic look-alikes
    a suite keeps on purpose for its allow-list (privacy.json)."""


@privacy_group.command("scan")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--privacy",
    "policy_file",
    default=None,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A privacy.json: its allow-list and phone regions.",
)
def scan_cmd(files: tuple[Path, ...], policy_file: Path | None) -> None:
    """Scan FILES (JSON, JSON lines or text: a run's results.jsonl, a transcript, a
    dataset) and print each finding as `path:line: JSON path: kind`, never the value.
    Exits 1 when there is a finding."""
    policy = privacy.load_policy_file(policy_file) if policy_file is not None else privacy.Policy()
    found = [f for p in files for f in privacy.scan_file(p, policy)]
    for f in found:
        where = f"{f.path}" + (f":{f.line}" if f.line else "")
        echo_text(f"{where}: {f.json_path + ': ' if f.json_path else ''}{f.message}")
    echo_text(f"{len(found)} finding(s) in {len(files)} file(s)", err=bool(found))
    sys.exit(1 if found else 0)


@privacy_group.command("hash")
@click.option("--kind", type=click.Choice(sorted(privacy.KINDS)), default=None, help="Only values of this kind.")
@click.option(
    "--privacy",
    "policy_file",
    default=None,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A privacy.json whose phone regions read national phone formats.",
)
def hash_cmd(kind: str | None, policy_file: Path | None) -> None:
    """Read text on standard input (not as an argument: it would stay in the shell
    history) and print one allow-list entry per sensitive value found in it,
    {"kind": ..., "sha256": ...}, ready for privacy.json's "allow". The value itself is
    never printed."""
    policy = privacy.load_policy_file(policy_file) if policy_file is not None else privacy.Policy()
    entries = privacy.allow_entries(sys.stdin.read(), policy, kind=kind)
    for e in entries:
        click.echo(json.dumps(e))
    if not entries:
        click.echo(
            "no value of that kind found on standard input"
            if kind
            else "no personal data or secret found on standard input",
            err=True,
        )
        sys.exit(1)


COMMANDS: list[click.Command] = [privacy_group]
