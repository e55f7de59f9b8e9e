"""CLI subcommands for evaluation datasets: `evalkit dataset validate | new | sample |
to-suite` (registered by evalkit._cli.main). Thin over `evalkit.datasets.dataset`."""

from __future__ import annotations

import json
import sys

import click

from evalkit._cli.options import echo_text


@click.group("dataset")
def dataset_group() -> None:
    """Evaluation datasets (JSON + CSV companion, contract v1): validate, author, sample
    for review, convert to a suite."""


@dataset_group.command("validate")
@click.option("--json", "json_path", required=True, help="The dataset's JSON file.")
@click.option("--csv", "csv_path", required=True, help="The dataset's CSV companion.")
@click.option("--strict", is_flag=True, help="Personal data or a secret in the dataset makes it invalid.")
@click.option(
    "--privacy",
    "privacy_file",
    default=None,
    help="A privacy.json allow-list for the synthetic look-alikes the dataset holds on purpose.",
)
@click.option(
    "--no-shape",
    is_flag=True,
    help="Skip the size floor (30 pairs) and the difficulty-balance warnings: for a dataset still being written.",
)
@click.option(
    "--strict-shape",
    is_flag=True,
    help="The size floor (30 pairs) and a missing easy, hard, negative or safety pair are failures (exit 1), "
    "not warnings.",
)
def validate_cmd(
    json_path: str, csv_path: str, strict: bool, privacy_file: str | None, no_shape: bool, strict_shape: bool
) -> None:
    """Check both files against the contract, and scan them for personal data and
    secrets. Prints exactly {"valid": ..., "errors": [...]}; the shape's findings (size
    floor, difficulty balance) and the privacy findings go to stderr as `warning:` lines
    (the shape's failures are errors under --strict-shape, privacy findings under
    --strict). Exits as the contract's validator does: 0 when valid, 1 on contract
    failures, 2 (stderr only) when a file cannot be read, decoded or parsed, a path
    leaves the working directory, or the schema cannot be set up."""
    from evalkit.datasets.dataset import (
        SHAPE,
        validate_files,  # lazy: the dataset contract loads jsonschema, numpy and the privacy scanner
    )

    shape = None if no_shape else SHAPE
    result = validate_files(
        json_path, csv_path, strict=strict, privacy=privacy_file, shape=shape, strict_shape=strict_shape
    )
    for w in result.warnings:
        echo_text(f"warning: {w}", err=True)
    click.echo(json.dumps(result.as_json(), ensure_ascii=False))
    sys.exit(0 if result.valid else 1)


@dataset_group.command("new")
@click.argument("source")
@click.option("--json", "json_out", required=True, help="The dataset JSON file to write.")
@click.option("--csv", "csv_out", required=True, help="The CSV companion to write.")
@click.option("--force", is_flag=True, help="Overwrite existing files.")
@click.option(
    "--redact",
    is_flag=True,
    help="Replace personal data and secrets with typed placeholders (<EMAIL_1>, the same value the same "
    "placeholder within a pair); <json stem>.redaction-log.json records what was replaced where.",
)
@click.option(
    "--scope",
    "scope_file",
    default=None,
    help="The scope file the scoping_interview notebook wrote: nothing is generated unless it is confirmed; "
    "the metadata's system_name, user_populations and approach come from it.",
)
@click.option(
    "--no-scope",
    is_flag=True,
    help="Generate without a confirmed scope (seed 004 asks for the interview first).",
)
@click.option(
    "--allow-private-data",
    is_flag=True,
    help="Write personal data or secrets the scan gate found (reported as notes) instead of stopping.",
)
def new_cmd(
    source: str,
    json_out: str,
    csv_out: str,
    force: bool,
    redact: bool,
    scope_file: str | None,
    no_scope: bool,
    allow_private_data: bool,
) -> None:
    """Write both forms of a dataset from one authoring SOURCE (.json, .yaml or .yml:
    metadata and evaluation_pairs; the counts are computed from the pairs). Spreadsheet
    formula cells in the CSV are escaped with a leading '. Needs a confirmed --scope
    (or --no-scope). Personal data or a secret in the source stops the write (exit 1,
    never their values) unless --redact or --allow-private-data."""
    from evalkit.datasets.dataset import (
        new_dataset,  # lazy: the dataset contract loads jsonschema, numpy and the privacy scanner
    )

    if scope_file is None and not no_scope:
        raise click.UsageError(
            "no --scope: run the scoping interview first (notebooks/scoping_interview.ipynb writes the "
            "scope file), confirm it, and pass --scope FILE; --no-scope generates without one"
        )
    if scope_file is not None and no_scope:
        raise click.UsageError("--scope and --no-scope contradict each other: drop one")
    ds, notes = new_dataset(
        source,
        json_out,
        csv_out,
        force=force,
        redact=redact,
        scope=scope_file,
        allow_private_data=allow_private_data,
    )
    for note in notes:
        echo_text(f"note: {note}", err=True)
    md = ds["metadata"]
    echo_text(f"wrote {json_out} and {csv_out} ({md['total_pairs']} pairs, review_state {md['review_state']})")


@dataset_group.command("sample")
@click.option("--json", "json_path", required=True, help="The dataset's JSON file.")
@click.option("--csv", "csv_path", required=True, help="The dataset's CSV companion.")
@click.option("--out", "out_path", help="The review sheet to write (CSV with a review_feedback column).")
@click.option("--size", default=10, show_default=True, type=click.IntRange(min=1), help="Pairs to draw.")
@click.option("--seed", default=1234, show_default=True, type=int, help="Seed of the draw.")
@click.option(
    "--confirm",
    is_flag=True,
    help="Instead of drawing: mark a sampled dataset confirmed once the review's feedback is in.",
)
@click.option("--force", is_flag=True, help="Overwrite an existing review sheet.")
@click.option(
    "--review",
    "review_sheet",
    default=None,
    help="With --confirm: the reviewed sheet (sample_review notebook); confirmed only when its review is accepted.",
)
def sample_cmd(
    json_path: str,
    csv_path: str,
    out_path: str | None,
    size: int,
    seed: int,
    confirm: bool,
    force: bool,
    review_sheet: str | None,
) -> None:
    """Draw a review sample stratified by difficulty and population (review_state draft
    -> sampled), or with --confirm move a sampled dataset to confirmed."""
    from evalkit.datasets.dataset import (  # lazy: the dataset contract loads jsonschema and numpy
        confirm_dataset,
        sample_dataset,
    )

    if confirm:
        if out_path:
            raise click.UsageError("--confirm draws nothing: drop --out")
        if review_sheet:
            from evalkit.datasets.review import (
                confirm_reviewed,  # lazy: the review reads the dataset contract (jsonschema, numpy)
            )

            state = confirm_reviewed(json_path, csv_path, review_sheet)
        else:
            state = confirm_dataset(json_path, csv_path)
        echo_text(f"review_state: {state}")
        return
    if review_sheet:
        raise click.UsageError("--review goes with --confirm")
    if not out_path:
        raise click.UsageError("--out is required to draw a sample")
    chosen, state = sample_dataset(json_path, csv_path, out_path, size=size, seed=seed, force=force)
    by_level: dict[str, int] = {}
    for p in chosen:
        by_level[p["difficulty"]] = by_level.get(p["difficulty"], 0) + 1
    populations = sorted({n for p in chosen for n in p["populations"]})
    click.echo(
        f"wrote {out_path}: {len(chosen)} pairs "
        f"({', '.join(f'{k} {v}' for k, v in by_level.items())}; {len(populations)} populations); "
        f"review_state: {state}"
    )


@dataset_group.command("to-suite")
@click.option("--json", "json_path", required=True, help="The dataset's JSON file.")
@click.option("--csv", "csv_path", required=True, help="The dataset's CSV companion.")
@click.option("--out", "dest", required=True, help="The suite folder to create (must not exist, or be empty).")
@click.option("--context-dir", help="Folder of grounding source texts, named by each pair's source_reference.")
def to_suite_cmd(json_path: str, csv_path: str, dest: str, context_dir: str | None) -> None:
    """Convert a valid dataset into a native suite: one case per pair, difficulty and
    populations as tags, expected tools as checks, a refusal check on safety pairs."""
    from evalkit.intake.lint import dataset_to_suite  # lazy: the loader brings the privacy scanner (detect_secrets)

    out = dataset_to_suite(json_path, csv_path, dest, context_dir=context_dir)
    echo_text(f"wrote suite {out}; next: `evalkit lint {dest}`")


@dataset_group.command("guide")
@click.option("--scope", "scope_file", required=True, help="The confirmed scope file (scoping_interview notebook).")
@click.option("--suite", "suite_dir", required=True, help="The suite the dataset is measured with.")
@click.option("--out", "out_path", required=True, help="The evaluation guide to write (Markdown).")
@click.option("--json", "json_path", default=None, help="The dataset's JSON file, for its curation notes.")
@click.option("--csv", "csv_path", default=None, help="The dataset's CSV companion (with --json).")
@click.option("--review", "review_sheet", default=None, help="The sample-review sheet, for its outcome.")
@click.option("--force", is_flag=True, help="Overwrite an existing guide.")
def guide_cmd(
    scope_file: str,
    suite_dir: str,
    out_path: str,
    json_path: str | None,
    csv_path: str | None,
    review_sheet: str | None,
    force: bool,
) -> None:
    """Write the evaluation guide: the confirmed scope, the metrics with their rationale
    (from the suite's checks, judge, k and gate, held against the scope), and the
    tooling. Refuses (exit 2) a scope that is not confirmed."""
    from evalkit.datasets.guide import GuideInputs, write_guide  # lazy: loads the suite loader

    if (json_path is None) != (csv_path is None):
        raise click.UsageError("--json and --csv go together")
    inputs = GuideInputs(
        scope=scope_file,
        suite=suite_dir,
        dataset=(json_path, csv_path) if json_path and csv_path else None,
        review=review_sheet,
    )
    out = write_guide(inputs, out_path, force=force)
    echo_text(f"wrote {out}")


COMMANDS: list[click.Command] = [dataset_group]
