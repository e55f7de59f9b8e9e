"""CLI subcommands for suites: `init`, `lint`, `import` (registered by evalkit._cli.main)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import click

from evalkit._cli.options import echo_text, skills_root_option
from evalkit.foundations.layout import CASES_FILE, CONFIG_FILE
from evalkit.foundations.records import set_gate
from evalkit.intake import lint
from evalkit.suites import reader, suite


@click.command("init")
@click.argument("unit_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--ci",
    "ci",
    type=click.Choice(["github"]),
    default=None,
    help="Also write a CI workflow (.github/workflows/evalkit.yml) for the suite; with an existing "
    "suite, only the workflow.",
)
@click.option(
    "--watch",
    multiple=True,
    metavar="GLOB",
    help="--ci: another path whose change runs the workflow (the agent's code, say); repeatable.",
)
@click.option(
    "--repo-root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="--ci: the repository root (default: the nearest folder above the suite with .git).",
)
@click.option(
    "--evalkit-spec",
    default=None,
    metavar="SPEC",
    help='--ci: what the workflow pip-installs evalkit from: "evalkit @ git+https://...@COMMIT", a wheel URL, '
    "or a path inside the repository (default: where this evalkit was installed from; never the bare name, "
    "which on PyPI is another project).",
)
@click.option(
    "--conversation",
    is_flag=True,
    help="Write a two-arm conversation suite: a simulated user (config.json `simulator`, "
    "simulator/prompt-v1.md) meets each arm's agent.",
)
def init_cmd(
    unit_dir: Path,
    ci: str | None,
    watch: tuple[str, ...],
    repo_root: Path | None,
    evalkit_spec: str | None,
    conversation: bool,
) -> None:
    """Scaffold a suite folder UNIT_DIR (e.g. evals/my-unit) with a commented config,
    two example cases, a prompt template, guidance and judge files; with --ci github,
    also the workflow that runs, grades and gates it on pull requests."""
    if ci is None and (watch or repo_root or evalkit_spec):
        raise click.UsageError("--watch, --repo-root and --evalkit-spec go with --ci")
    if ci is not None:
        # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
        from evalkit.telling.workflow import WORKFLOW_PATH, check_workflow_text, install_spec, repo_root_of

        check_workflow_text(str(unit_dir), "the suite path")  # before anything is scaffolded
        for w in watch:
            check_workflow_text(w, "the --watch pattern")
        root = repo_root if repo_root is not None else repo_root_of(unit_dir)
        # a new suite is scaffolded before the workflow: the install source is checked first
        # (an existing suite or workflow is refused as such by write_github_workflow, below)
        if not (unit_dir / CONFIG_FILE).is_file() and not (root / WORKFLOW_PATH).exists():
            install_spec(evalkit_spec, root)
    existing = ci is not None and (unit_dir / CONFIG_FILE).is_file()
    if not existing:
        dest = suite.scaffold_suite(unit_dir, conversation=conversation)
        echo_text(f"created {dest}")
    if ci is not None:
        # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
        from evalkit.telling.workflow import write_github_workflow

        wf = write_github_workflow(
            reader.load_suite(unit_dir), repo_root=repo_root, watch=watch, requirement=evalkit_spec
        )
        echo_text(f"created {wf} (caps and thresholds stay in {unit_dir / CONFIG_FILE}; it never writes a baseline)")
    if not existing:
        echo_text(f"next: edit {dest / CASES_FILE} and {dest / CONFIG_FILE}, then `evalkit lint {dest}`")


@click.command("lint")
@click.argument("suite_path", metavar="SUITE", type=click.Path(path_type=Path))
@click.option("--strict", is_flag=True, help="Fail on format warnings too (unknown check options).")
@click.option(
    "--lenient-keys", is_flag=True, help="An unknown key is a warning (ignored) instead of an error ('did you mean')."
)
@skills_root_option
def lint_cmd(suite_path: Path, strict: bool, lenient_keys: bool, skills_root: Path | None) -> None:
    """Validate SUITE (a suite folder, an evals.json or an eval.yaml) without calling any
    model. Prints each finding as `path:line: level: message`; exits 2 on errors, 0 when
    there are only warnings or none."""
    # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    from evalkit.conclusions.results import with_prompt_lengths

    report = lint.lint_suite(suite_path, strict=strict, lenient_keys=lenient_keys, skills_root=skills_root)
    loaded = None if report.errors else reader.load_suite(suite_path, lenient_keys=True, skills_root=skills_root)
    report = with_prompt_lengths(report, loaded, strict=strict)
    for finding in report.errors:
        echo_text(str(finding), err=True)  # a message may quote the suite's files
    for finding in report.warnings:
        echo_text(str(finding))
    summary = f"{report.suite}: {len(report.errors)} error(s), {len(report.warnings)} warning(s)"
    weights = Counter(f.severity for f in report.findings)
    if weights:
        summary += " (" + ", ".join(f"{weights[w]} {w}" for w in ("HIGH", "MEDIUM", "LOW") if weights[w]) + ")"
    if report.errors:
        click.echo(summary, err=True)
        sys.exit(2)
    click.echo(summary)


@click.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--to",
    "dest",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The native suite folder to create (must not exist, or be empty).",
)
@click.option(
    "--guidance",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The skill or guidance under test: adds a `skilled` arm beside `baseline`.",
)
@click.option(
    "--redact",
    is_flag=True,
    help="Replace personal data and secrets with typed placeholders (<EMAIL_1>, the same value the "
    "same placeholder within a case); redaction-log.json records what was replaced where.",
)
def import_cmd(file: Path, dest: Path, guidance: Path | None, redact: bool) -> None:
    """Import an agent-evals evals.json or a Vally/SKRAFT eval.yaml as a native suite."""
    out = lint.import_suite(
        file,
        dest,
        guidance=guidance,
        redact=redact,  # lints what it writes
        on_warning=lambda w: echo_text(str(w)),
    )
    loaded = reader.load_suite(out)
    echo_text(f"imported {file} -> {out} ({len(loaded.cases)} cases)")
    for name, n in Counter(c.set for c in loaded.cases).items():
        echo_text(f"  set {name}: {n} case(s), gate {set_gate(name)}")
    if redact:
        # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
        from evalkit.pii.privacy import REDACTION_LOG, redaction_summary

        echo_text(f"{redaction_summary(out / REDACTION_LOG)}; log: {out / REDACTION_LOG}")
    for warning in loaded.warnings:
        echo_text(warning)


COMMANDS: list[click.Command] = [init_cmd, lint_cmd, import_cmd]
