"""The skills dashboard (`evalkit dashboard [ROOT]`, issue 32, seed 002): one
self-contained page over every skill folder and suite under ROOT, "the whole
catalogue: every skill, its context cost, its evaluation coverage, and for those
evaluated the verdict and its trend", and a preview server on loopback.

Every number is one the package already computes, read the same way:

* a skill's context cost is `evalkit tokens` (`prompts.skills.skill_tokens`);
* a suite covers a skill when one of its arms has the skill's folder as `skill_dir`;
  how: its cases, their sets, and its non-activation cases (`intent: non-activation`,
  the case lint asks every skill suite for);
* the latest verdict is the skill arm against the baseline arm in the suite's latest
  graded run: the comparison `evalkit compare` recorded in the run's `verdicts.json`
  (what the reports show), else the same computation `compare` makes
  (`conclusions.compare.compare_arms`, held to the run's plan), not recorded: the
  dashboard writes nothing into a run folder;
* the trend is each arm's sample pass rate per run (`grades-summary.json`, the rate
  reports/index.html shows), drawn by the index's own `trend_svg`.

Why hand-written: a page of tables and the index's inline SVG; the preview is the
standard library's `http.server`, which serves the page and only the report pages it
links to.
"""

from __future__ import annotations

import html
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from evalkit.foundations import fmt
from evalkit.foundations._io import RUN_JSON_BYTES, read_file_bytes, read_json_object, write_atomic
from evalkit.foundations.errors import EvalkitError, FileTooLarge, InputError
from evalkit.foundations.layout import (
    CASES_FILE,
    CONFIG_FILE,
    FOREIGN_SUITE_NAMES,
    MANIFEST,
    REDACTED_RUN,
    RESULTS,
    RUN_CONFIG,
    VALLY_NAMES,
)
from evalkit.foundations.records import RunVerdicts, Suite, Verdict
from evalkit.prompts.analyze import front_matter_block
from evalkit.prompts.skills import SkillTokens, skill_tokens
from evalkit.runfolder.runs import RunFolder, config_arm_names, find_suite_dir
from evalkit.suites.formats.vally import load_yaml
from evalkit.suites.suite import SKILL_FILE
from evalkit.telling.report_index import CSP, trend_svg, verdict_entries

DASHBOARD_HTML = "dashboard.html"  # written in ROOT unless told otherwise
MAX_PAGE_BYTES = 64 * 1024 * 1024  # a report page the preview serves (self-contained HTML: a few MiB)
LAST_RUNS = 10  # runs a trend shows by default
NON_ACTIVATION = "non-activation"
# Folders never searched: version control, environments, caches, a report's redacted copy.
_SKIP = {"node_modules", "__pycache__", REDACTED_RUN}
# The report page a run's row links to, first found first.
_REPORT_PAGES = ("skill_comparison", "run_summary")


@dataclass(frozen=True)
class DashboardOptions:
    """What `build_dashboard` reads: the tokenizer of the context cost (`evalkit
    tokens --model`) and how many runs a trend shows."""

    model: str = "gpt-4o"
    last: int = LAST_RUNS


@dataclass(frozen=True)
class RunPoint:
    """One run of a suite, as the trend shows it: each arm's sample pass rate (None when
    the run is not graded) and its report page, relative to ROOT, when one exists."""

    run: str
    path: str
    created: str | None
    graded: bool
    complete: bool | None
    rates: dict[str, float | None]
    report: str | None = None
    problem: str | None = None  # why its grades-summary.json could not be read

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "path": self.path,
            "created": self.created,
            "graded": self.graded,
            "complete": self.complete,
            "sample_pass_rate": dict(self.rates),
            "report": self.report,
            "problem": self.problem,
        }


@dataclass(frozen=True)
class SkillVerdict:
    """The skill arm against the baseline in one run: the comparison `compare` recorded
    (`recorded`), else the one it would record."""

    run: str
    verdict: Verdict
    recorded: bool
    report: str | None = None


@dataclass(frozen=True)
class Coverage:
    """How one suite covers one skill: the arm that loads it (`skill_dir`), or none when
    a Vally or Waza spec only names it (`skill:`), the baseline it is compared with, the
    suite's cases, their sets, its non-activation cases, its last runs (oldest first)
    and the latest verdict (or why there is none)."""

    suite: str
    suite_path: str
    arm: str | None  # None: the spec names the skill (`skill:`), no arm loads its folder
    baseline: str | None
    how: str  # "skill_dir", or "named by <spec file>'s skill field"
    arms: tuple[str, ...]  # the arms the trend shows
    cases: int
    sets: tuple[tuple[str, int], ...]
    non_activation: int
    runs: tuple[RunPoint, ...]
    verdict: SkillVerdict | None
    no_verdict: str | None = None

    def to_json(self) -> dict[str, Any]:
        v = self.verdict
        return {
            "suite": self.suite,
            "suite_path": self.suite_path,
            "arm": self.arm,
            "baseline": self.baseline,
            "how": self.how,
            "cases": self.cases,
            "sets": dict(self.sets),
            "non_activation_cases": self.non_activation,
            "runs": [r.to_json() for r in self.runs],
            "verdict": None
            if v is None
            else {"run": v.run, "recorded": v.recorded, "report": v.report, **v.verdict.to_json()},
            "no_verdict": self.no_verdict,
        }


@dataclass(frozen=True)
class SkillEntry:
    """One skill folder: its name and description (front matter), its context cost and
    the suites that cover it (none: uncovered)."""

    path: str
    name: str
    description: str
    tokens: SkillTokens
    coverage: tuple[Coverage, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "name": self.name,
            "description": self.description,
            "tokens": self.tokens.to_json(),
            "covered": bool(self.coverage),
            "coverage": [c.to_json() for c in self.coverage],
        }


@dataclass(frozen=True)
class SuiteEntry:
    """One suite folder: name, unit, arms, cases, the skills it covers (their paths),
    its runs under ROOT; `error` when it does not load (the page says why)."""

    path: str
    name: str
    unit: str | None
    arms: tuple[str, ...]
    cases: int
    skills: tuple[str, ...]
    runs: int
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "name": self.name,
            "unit": self.unit,
            "arms": list(self.arms),
            "cases": self.cases,
            "skills": list(self.skills),
            "runs": self.runs,
            "error": self.error,
        }


@dataclass(frozen=True)
class Dashboard:
    """The catalogue under `root`: every skill and suite, and what could not be read."""

    root: str
    skills: tuple[SkillEntry, ...]
    suites: tuple[SuiteEntry, ...]
    problems: tuple[str, ...] = ()
    links: frozenset[str] = field(default_factory=frozenset)  # the report pages linked, relative to root
    last: int = LAST_RUNS  # the runs a trend shows at most

    def to_json(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "skills": [s.to_json() for s in self.skills],
            "suites": [s.to_json() for s in self.suites],
            "problems": list(self.problems),
        }


@dataclass
class _Found:
    skills: list[Path] = field(default_factory=list)
    suites: list[Path] = field(default_factory=list)
    runs: list[Path] = field(default_factory=list)
    reports: list[Path] = field(default_factory=list)


def _walk(root: Path) -> _Found:
    """Every skill, suite, run and report folder under `root` (hidden folders and
    environments skipped; a run or report folder is not searched inside)."""
    found = _Found()
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        files = set(filenames)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in _SKIP)
        suite_here = (CASES_FILE in files and CONFIG_FILE in files) or bool(files & set(FOREIGN_SUITE_NAMES))
        if SKILL_FILE in files:  # its own files (a report.json asset, say) make it no run or report
            found.skills.append(here)
            if suite_here:  # a Waza spec beside its SKILL.md
                found.suites.append(here)
            continue
        if RUN_CONFIG in files and RESULTS in files:
            found.runs.append(here)
            dirnames[:] = []
            continue
        if MANIFEST in files:
            found.reports.append(here)
            dirnames[:] = []
            continue
        if suite_here:
            found.suites.append(here)
    return found


def _inside(p: Path, root: Path) -> str | None:
    """`p` resolved (symlinks followed), relative to resolved `root`; None when it lies
    outside root (a `..` or a symlink out): such a path is never linked nor served."""
    try:
        return p.resolve().relative_to(root.resolve()).as_posix() or "."
    except ValueError:
        return None


def _rel(p: Path, root: Path) -> str:
    """How a found folder is named on the page: relative to root, else as given (a
    name to read, never a link: links come from `_inside`)."""
    rel = _inside(p, root)
    return str(p) if rel is None else rel


def _report_pages(reports: list[Path], root: Path) -> dict[Path, str]:
    """The resolved run folder each report folder stands for -> its page to link
    (relative to root): the skill comparison, else the run summary, else its first page."""
    out: dict[Path, str] = {}
    for rep in reports:
        try:
            m = read_json_object(rep / MANIFEST, MANIFEST, limit=RUN_JSON_BYTES)
        except InputError:
            continue
        run_dir = m.get("run_dir")
        pages = {
            str(nb.get("name")): str(nb.get("html"))
            for nb in m.get("notebooks") or []
            if isinstance(nb, dict) and nb.get("html")
        }
        if not isinstance(run_dir, str) or not pages:
            continue
        name = next((n for n in _REPORT_PAGES if n in pages), next(iter(pages)))
        page = rep / pages[name]
        # a page is a file of the report folder itself (report_index writes bare names):
        # a `..` or a symlink out of it, or out of root, is no page to link or serve
        rel = _inside(page, root)
        if rel is not None and _inside(page, rep) is not None and page.is_file():
            out[Path(run_dir).resolve()] = rel
    return out


def _rates(run: Path) -> tuple[bool, dict[str, float | None], str | None]:
    """(graded, each arm's sample pass rate, why not read): the headline of
    reports/index.html, from the run's grades-summary.json (`report_index.write_manifest`
    reads it the same way); one that cannot be read is no grading, and says why."""
    from evalkit.runfolder.runload import grades_summary  # lazy: pandas, only where runs are read

    try:
        g = grades_summary(run)
    except InputError as exc:
        return False, {}, str(exc)
    if g is None:
        return False, {}, None
    return True, {a: s.overall.sample_pass_rate for a, s in g.per_arm.items()}, None


def _skill_verdict(run: Path, baseline: str, treatment: str) -> Verdict:
    """The verdict `evalkit compare RUN --baseline B --treatment T` would record, for a
    run it has not been run on: `compare_arms` held to the run's plan as `compare` holds
    it (alpha from the plan, else 0.05), not written."""
    # lazy: the statistics (scipy, pandas) load only for a dashboard with graded runs
    from evalkit.conclusions import verdicts as V
    from evalkit.conclusions.compare import compare_arms
    from evalkit.runfolder.runload import as_run

    loaded = as_run(run)
    plan = V.run_plan(loaded)
    return compare_arms(loaded, baseline, treatment, alpha=plan.alpha if plan else 0.05, plan=plan)


def _named_skill(suite_dir: Path) -> tuple[str | None, str | None]:
    """(the spec file, the skill it names): a Vally or Waza `eval.yaml` evaluates the
    skill its top-level `skill` names (its arms do not load the folder)."""
    for name in VALLY_NAMES:
        p = suite_dir / name
        if p.is_file():
            try:
                doc, _ = load_yaml(p, suite_dir)  # as the importer reads it: size-limited, no aliases
            except InputError:
                return name, None
            skill = doc.get("skill") if isinstance(doc, dict) else None
            return name, skill.strip() if isinstance(skill, str) and skill.strip() else None
    return None, None


_RunKey = tuple[str, str, Path, dict[str, Any]]  # (created, run name, run folder, run.json)


@dataclass(frozen=True)
class _Catalogue:
    """What `build_dashboard` gathers as it reads the tree: the root, the options, the
    report pages, the problems met, the skills read (by resolved folder: folder, tokens,
    description) and each skill's coverage."""

    base: Path
    opts: DashboardOptions
    pages: dict[Path, str]
    problems: list[str] = field(default_factory=list)
    skills_at: dict[Path, tuple[Path, SkillTokens, str]] = field(default_factory=dict)
    covers: dict[Path, list[Coverage]] = field(default_factory=dict)


def _runs_by_suite(runs: list[Path], base: Path, problems: list[str]) -> dict[Path, list[_RunKey]]:
    """The runs, by the resolved suite folder they were made from, oldest first; a run
    whose run.json cannot be read is a problem."""
    runs_of: dict[Path, list[_RunKey]] = {}
    for run in runs:
        try:
            meta = RunFolder(run).read_meta()
        except (InputError, OSError, ValueError) as exc:
            problems.append(f"run {_rel(run, base)}: not read ({exc})")
            continue
        suite_dir = find_suite_dir(run, meta.get("suite") if isinstance(meta.get("suite"), str) else None)
        if suite_dir is None:
            continue
        key = (str(meta.get("created") or ""), run.name, run, meta)
        runs_of.setdefault(suite_dir.resolve(), []).append(key)
    for lst in runs_of.values():
        lst.sort(key=lambda t: (t[0], t[1]))
    return runs_of


def _add_skill(cat: _Catalogue, sdir: Path) -> None:
    """Read one skill folder into the catalogue (its tokens and description), or note
    the problem."""
    try:
        tokens = skill_tokens(sdir, cat.opts.model)
        text = (sdir / SKILL_FILE).read_text(encoding="utf-8", errors="replace")
    except (InputError, OSError) as exc:
        cat.problems.append(f"skill {_rel(sdir, cat.base)}: not read ({exc})")
        return
    cat.skills_at[sdir.resolve()] = (sdir, tokens, str(front_matter_block(text)[0].get("description") or ""))


def _arm_coverage(cat: _Catalogue, suite: Suite, sdir: Path, srun: list[_RunKey]) -> list[str]:
    """The skills the suite's arms load (`skill_dir`), each covered against the arm
    without a skill (else the first other arm); returns them, relative to the root."""
    rel = _rel(sdir, cat.base)
    covered: list[str] = []
    for arm in suite.config.arms:
        if not arm.skill_dir:
            continue
        target = (sdir / arm.skill_dir).resolve()
        if target not in cat.skills_at:
            _add_skill(cat, target)  # a skill_dir the walk did not reach (a hidden folder)
        covered.append(_rel(target, cat.base))
        others = [a for a in suite.config.arms if a.name != arm.name]
        baseline = next((a.name for a in others if not a.skill_dir), others[0].name if others else None)
        arms = tuple(a for a in (baseline, arm.name) if a is not None)
        cat.covers.setdefault(target, []).append(
            _coverage(
                suite.name, rel, arm.name, baseline, "skill_dir", arms, suite.cases, srun, cat.pages, cat.base, cat.opts
            )
        )
    return covered


def _named_coverage(cat: _Catalogue, suite: Suite, sdir: Path, srun: list[_RunKey], covered: list[str]) -> None:
    """The skill a Vally or Waza spec names (its top-level `skill`), covered by all the
    suite's arms unless an arm already loads it; added to `covered`."""
    spec, named = _named_skill(sdir)
    if not named:
        return
    names = tuple(a.name for a in suite.config.arms)
    for target, (skdir, tokens, _) in cat.skills_at.items():
        if named in (tokens.skill, skdir.name) and _rel(target, cat.base) not in covered:
            covered.append(_rel(target, cat.base))
            how = f"named by {spec}'s skill field"
            cat.covers.setdefault(target, []).append(
                _coverage(
                    suite.name,
                    _rel(sdir, cat.base),
                    None,
                    None,
                    how,
                    names,
                    suite.cases,
                    srun,
                    cat.pages,
                    cat.base,
                    cat.opts,
                )
            )


def _suite_entry(cat: _Catalogue, sdir: Path, srun: list[_RunKey]) -> SuiteEntry:
    """One suite's row, and the coverage it gives the skills it evaluates; a suite that
    does not load is a row with its error."""
    # lazy: the suite validators load only when a dashboard is built
    from evalkit.suites.reader import load_suite

    rel = _rel(sdir, cat.base)
    try:
        suite = load_suite(sdir)
    except EvalkitError as exc:
        return SuiteEntry(rel, sdir.name, None, (), 0, (), len(srun), error=str(exc))
    covered = _arm_coverage(cat, suite, sdir, srun)
    _named_coverage(cat, suite, sdir, srun, covered)
    names = tuple(a.name for a in suite.config.arms)
    return SuiteEntry(rel, suite.name, suite.config.unit.kind, names, len(suite.cases), tuple(covered), len(srun))


def build_dashboard(root: str | Path, options: DashboardOptions | None = None) -> Dashboard:
    """The catalogue of every skill and suite under `root` (see the module notes)."""
    opts = options or DashboardOptions()
    base = Path(root)
    if not base.is_dir():
        raise InputError("not a folder", base)
    found = _walk(base)
    cat = _Catalogue(base, opts, _report_pages(found.reports, base))
    runs_of = _runs_by_suite(found.runs, base, cat.problems)
    for sdir in found.skills:
        _add_skill(cat, sdir)
    suites = [_suite_entry(cat, sdir, runs_of.get(sdir.resolve(), [])) for sdir in found.suites]
    skills = [
        SkillEntry(_rel(sdir, base), tokens.skill, desc, tokens, tuple(cat.covers.get(resolved, ())))
        for resolved, (sdir, tokens, desc) in sorted(cat.skills_at.items(), key=lambda kv: _rel(kv[1][0], base))
    ]
    links = frozenset(r.report for s in skills for c in s.coverage for r in c.runs if r.report)
    return Dashboard(str(base), tuple(skills), tuple(suites), tuple(cat.problems), links, opts.last)


def _coverage(
    suite: str,
    suite_rel: str,
    arm: str | None,
    baseline: str | None,
    how: str,
    arms: tuple[str, ...],
    cases: Any,
    runs: list[tuple[str, str, Path, dict[str, Any]]],
    pages: dict[Path, str],
    root: Path,
    opts: DashboardOptions,
) -> Coverage:
    sets: dict[str, int] = {}
    for c in cases:
        sets[c.set] = sets.get(c.set, 0) + 1
    non_activation = sum(1 for c in cases if c.intent == NON_ACTIVATION)
    points: list[RunPoint] = []
    for created, name, path, _meta in runs[-max(1, opts.last) :]:
        graded, rates, unread = _rates(path)
        summary_p = path / "summary.json"
        complete = None
        if summary_p.is_file():
            try:
                complete = read_json_object(summary_p, "summary.json", limit=RUN_JSON_BYTES).get("complete")
            except InputError:
                complete = None
        shown = {a: rates.get(a) for a in arms}
        points.append(
            RunPoint(
                name, _rel(path, root), created or None, graded, complete, shown, pages.get(path.resolve()), unread
            )
        )
    verdict: SkillVerdict | None = None
    why: str | None = None
    latest = next(
        (
            (name, path, meta)
            for _, name, path, meta in reversed(runs)
            if _rates(path)[0] and arm in config_arm_names(meta) and baseline in config_arm_names(meta)
        ),
        None,
    )
    if arm is None:
        why = "no arm of the suite loads the skill's folder (skill_dir): no skill-vs-baseline verdict"
    elif baseline is None:
        why = "the suite has no other arm to compare the skill arm with"
    elif latest is None:
        why = "no graded run of the suite has both arms" if runs else "the suite has not been run"
    else:
        from evalkit.runfolder.runload import run_verdicts  # lazy: pandas, only where a graded run is read

        name, path, _ = latest
        try:
            recorded = run_verdicts(path).comparison(baseline, arm)
            v = recorded if recorded is not None else _skill_verdict(path, baseline, arm)
        except EvalkitError as exc:
            why = f"run {name}: {exc}"
        else:
            verdict = SkillVerdict(name, v, recorded is not None, pages.get(path.resolve()))
    return Coverage(
        suite,
        suite_rel,
        arm,
        baseline,
        how,
        arms,
        len(cases),
        tuple(sorted(sets.items())),
        non_activation,
        tuple(points),
        verdict,
        why,
    )


# --- the page ------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em;color:#222;max-width:1300px}
table{border-collapse:collapse;margin:0.5em 0 1.5em 0}th,td{border:1px solid #ddd;padding:4px 8px;vertical-align:top;
font-size:13px}th{background:#f4f4f4;text-align:left}.pass{color:#1a7f37;font-weight:bold}
.regression{color:#c62828;font-weight:bold}.inconclusive{color:#8a6d00}.no-improvement{color:#555}
.warn{color:#c62828}.uncovered{color:#c62828;font-weight:bold}code{font-size:12px}.small{color:#555;font-size:12px}
table.runs td,table.runs th{font-size:12px;padding:2px 6px}pre{white-space:pre-wrap;font-size:12px;margin:0}
"""


def _link(target: str | None, text: str, page_dir: Path, root: Path) -> str:
    e = html.escape
    if not target:
        return e(text)
    href = os.path.relpath(root / target, page_dir).replace(os.sep, "/")
    return f"<a href='{e(href, quote=True)}'>{e(text)}</a>"


def _verdict_html(sv: SkillVerdict, page_dir: Path, root: Path) -> str:
    """The verdict as reports/index.html labels it (`report_index.verdict_entries`)."""
    e = html.escape
    v = sv.verdict
    entry = verdict_entries(RunVerdicts(run=sv.run, comparisons=(v,)))[0]
    style = str(entry.get("style") or entry["kind"])
    label = str(entry.get("label") or entry["kind"])
    parts = [
        f"<span class='{e(style)}'>{e(label)}</span> {e(str(v.treatment_arm))} vs {e(str(v.baseline_arm))}",
        f"(p = {e(fmt.pvalue(v.p_value))}, {v.wins}W/{v.ties}T/{v.losses}L"
        + (f", {v.errored} errored" if v.errored else "")
        + f", {e(v.judge)} judge)",
    ]
    if entry.get("text"):
        parts.append(f"<br><span class='small'>{e(str(entry['text']))}</span>")
    parts.append(f"<br><span class='small'>{e(v.reason)}</span>")
    how = "recorded by compare" if sv.recorded else "computed as compare does (compare not yet run on it)"
    parts.append(f"<br><span class='small'>run {_link(sv.report, sv.run, page_dir, root)}, {e(how)}</span>")
    return " ".join(parts)


def _trend_html(c: Coverage, page_dir: Path, root: Path) -> str:
    e = html.escape
    if not c.runs:
        return "<i>no runs</i>"
    arms = list(c.arms)
    series = {a: [r.rates.get(a) for r in c.runs] for a in arms}
    graded = [r for r in c.runs if r.graded]
    if len(graded) >= 2:
        chart = trend_svg(series, [r.run for r in c.runs])
    elif graded:
        chart = "one graded run so far (a trend needs two)"
    else:
        chart = "<i>no graded runs</i>"
    rows = "".join(
        "<tr><td>"
        + _link(r.report, r.run, page_dir, root)
        + ("" if r.complete in (True, None) else " <span class='warn'>INCOMPLETE</span>")
        + "</td>"
        + (
            "".join(f"<td>{e(fmt.pct(r.rates.get(a)))}</td>" for a in arms)
            if r.graded
            else f"<td colspan='{len(arms)}' class='warn'>grades not read: {e(r.problem)}</td>"
            if r.problem
            else f"<td colspan='{len(arms)}' class='small'>not graded</td>"
        )
        + "</tr>"
        for r in reversed(c.runs)
    )
    head = "".join(f"<th>{e(a)}</th>" for a in arms)
    return (
        f"{chart}<table class='runs'><thead><tr><th>run (newest first)</th>{head}</tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


def _coverage_html(c: Coverage) -> str:
    e = html.escape
    sets = ", ".join(f"{e(s)} {n}" for s, n in c.sets) or "none"
    na = (
        f"{c.non_activation} non-activation case(s)"
        if c.non_activation
        else "<span class='warn'>no non-activation case</span> (nothing shows the skill stays out of tasks "
        "that are not its own)"
    )
    return (
        f"suite <b>{e(c.suite)}</b> <code>{e(c.suite_path)}</code>, "
        + (f"arm <code>{e(c.arm)}</code>" if c.arm else e(c.how))
        + (f" vs <code>{e(c.baseline)}</code>" if c.baseline else "")
        + f"<br>{c.cases} case(s); sets: {sets}; {na}"
    )


def render_html(d: Dashboard, page_dir: str | Path | None = None) -> str:
    """The page; links to report pages relative to `page_dir` (the folder the page is
    written in or served as; ROOT by default). Every text from a file is escaped."""
    e = html.escape
    root = Path(d.root)
    where = Path(page_dir) if page_dir is not None else root
    uncovered = [s for s in d.skills if not s.coverage]
    rows = []
    for s in d.skills:
        t = s.tokens
        how = "exact" if t.exact else "at most"
        on_demand = sum(n for _, n in t.on_demand)
        cost = (
            f"catalogue {t.catalogue:,}<br>activation {t.activation:,}<br>on demand {on_demand:,}"
            f"<br><b>total {t.activation + on_demand:,}</b><br><span class='small'>{e(how)} ({e(t.method)})</span>"
        )
        head = (
            f"<td><b>{e(s.name)}</b><br><code>{e(s.path)}</code>"
            + (f"<br><span class='small'>{e(s.description)}</span>" if s.description else "")
            + f"</td><td>{cost}</td>"
        )
        if not s.coverage:
            rows.append(
                f"<tr class='skill'>{head}<td colspan='3'><span class='uncovered'>uncovered</span>: "
                "no suite that loads has an arm with this folder as skill_dir, "
                "or names it (a Vally or Waza spec)</td></tr>"
            )
            continue
        for i, c in enumerate(s.coverage):
            verdict = _verdict_html(c.verdict, where, root) if c.verdict else f"<i>{e(c.no_verdict or '')}</i>"
            lead = head if i == 0 else ""
            if i == 0 and len(s.coverage) > 1:
                lead = head.replace("<td>", f"<td rowspan='{len(s.coverage)}'>")
            rows.append(
                f"<tr class='skill'>{lead}<td>{_coverage_html(c)}</td><td>{verdict}</td>"
                f"<td>{_trend_html(c, where, root)}</td></tr>"
            )
    suite_rows = []
    for su in d.suites:
        if su.error:
            suite_rows.append(
                f"<tr><td><code>{e(su.path)}</code></td><td colspan='5'><span class='warn'>does not load:</span> "
                f"<pre>{e(su.error)}</pre></td></tr>"
            )
            continue
        suite_rows.append(
            f"<tr><td><b>{e(su.name)}</b><br><code>{e(su.path)}</code></td><td>{e(su.unit or '')}</td>"
            f"<td>{e(', '.join(su.arms))}</td><td>{su.cases}</td>"
            f"<td>{'<br>'.join(f'<code>{e(p)}</code>' for p in su.skills) or 'none'}</td><td>{su.runs}</td></tr>"
        )
    problems = "".join(f"<li>{e(p)}</li>" for p in d.problems)
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">"
        f"<title>evalkit skills dashboard</title><style>{_CSS}</style></head><body>"
        f"<h1>evalkit skills dashboard</h1><p>Under <code>{e(d.root)}</code>: {len(d.skills)} skill(s), "
        f"{len(uncovered)} uncovered; {len(d.suites)} suite(s).</p>"
        "<p class='small'>Context cost: the tokens an agent carries for the skill, counted offline as "
        "<code>evalkit tokens</code> counts them (catalogue: name and description, in every session; activation: "
        "SKILL.md; on demand: the folder's other files). Coverage: the suites with an arm whose skill_dir is the "
        "skill's folder, and the Vally or Waza specs whose skill field names it. Verdict: that arm against the "
        "baseline arm in the suite's latest graded run, the exact sign test with one vote per case, as "
        "<code>evalkit compare</code> records it. Trend: each arm's sample pass rate per run (the rate "
        f"reports/index.html shows), the last {d.last} runs at most, oldest first.</p>"
        "<h2>Skills</h2><table><thead><tr><th>skill</th><th>context cost (tokens)</th><th>coverage</th>"
        "<th>latest verdict</th><th>sample pass rate per run</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table><h2>Suites</h2><table><thead><tr><th>suite</th><th>unit</th><th>arms</th><th>cases</th>"
        "<th>skills covered</th><th>runs</th></tr></thead><tbody>"
        + "".join(suite_rows)
        + "</tbody></table>"
        + (f"<h2>Not read</h2><ul>{problems}</ul>" if problems else "")
        + "</body></html>\n"
    )


def write_dashboard(
    root: str | Path, out: str | Path | None = None, options: DashboardOptions | None = None
) -> tuple[Path, Dashboard]:
    """Build the dashboard of `root` and write it to `out` (default ROOT/dashboard.html),
    atomically; the page's links are relative to where it is written."""
    d = build_dashboard(root, options)
    path = Path(out) if out is not None else Path(root) / DASHBOARD_HTML
    write_atomic(path, render_html(d, path.resolve().parent))
    return path, d


# --- the preview server -------------------------------------------------------------------


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so the server unwinds as on Ctrl-C."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise _Terminated


_TYPES = {".html": "text/html; charset=utf-8", ".json": "application/json", ".png": "image/png"}


def _handler(root: Path, options: DashboardOptions) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        """GET / : the dashboard, rebuilt on each request; GET /<page>: a report page the
        dashboard links to; anything else 404 (nothing else under ROOT is served). A
        request naming another host than the loopback one is refused (403): a page on
        the web cannot reach the preview through a name of its own (DNS rebinding)."""

        def do_GET(self) -> None:  # noqa: N802 (the http.server name)
            port = getattr(self.server, "server_port", None)  # HTTPServer sets it when it binds
            if self.headers.get("Host") not in (f"127.0.0.1:{port}", f"localhost:{port}"):
                self._send(403, b"forbidden: not a loopback host\n", "text/plain; charset=utf-8")
                return
            path = self.path.split("?", 1)[0]
            try:
                d = build_dashboard(root, options)
            except EvalkitError as exc:  # ROOT changed under the preview: say so, as the CLI would
                self._send(500, f"error: {exc}\n".encode("utf-8", "replace"), "text/plain; charset=utf-8")
                return
            if path in ("/", "/" + DASHBOARD_HTML):
                self._send(200, render_html(d, root).encode("utf-8"), _TYPES[".html"])
                return
            rel = unquote(path.lstrip("/"))
            try:  # served: a page the dashboard links, resolved inside root (no `..`, no symlink out)
                target = (root / rel).resolve()
            except (OSError, ValueError):  # a NUL byte, a symlink loop
                target = None
            linked = {(root / link).resolve() for link in d.links}
            if target is not None and target.is_relative_to(root.resolve()) and target in linked and target.is_file():
                self._send_page(target)
                return
            self._send(404, b"not found\n", "text/plain; charset=utf-8")

        def _send_page(self, target: Path) -> None:
            """A linked page, read under `MAX_PAGE_BYTES` (a 1 GiB link is a 413, not read)."""
            try:
                body = read_file_bytes(target, limit=MAX_PAGE_BYTES)
            except InputError as exc:
                self._send(413 if isinstance(exc, FileTooLarge) else 404, f"{exc.message}\n".encode(), "text/plain")
                return
            self._send(200, body, _TYPES.get(target.suffix, "application/octet-stream"))

        def _send(self, status: int, body: bytes, ctype: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Content-Security-Policy", CSP)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the http.server name)
            return  # quiet: the command prints its URL and nothing per request

    return Handler


@dataclass(frozen=True)
class ServeOptions:
    """Where the preview listens: always 127.0.0.1, on `port` (0: a free one)."""

    port: int = 0


def serve_dashboard(
    root: str | Path,
    ready: Callable[[str], None],
    options: DashboardOptions | None = None,
    serve: ServeOptions | None = None,
) -> None:
    """Preview the dashboard of `root` on 127.0.0.1 until Ctrl-C or SIGTERM: `ready` is
    called with the URL once the server listens; the socket is closed on the way out."""
    opts = options or DashboardOptions()
    base = Path(root)
    build_dashboard(base, opts)  # a bad ROOT fails here, before anything listens
    port = (serve or ServeOptions()).port
    try:
        server = ThreadingHTTPServer(("127.0.0.1", port), _handler(base, opts))
    except OSError as exc:
        raise InputError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}") from None
    server.daemon_threads = True
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if in_main else None
    try:
        host, bound = server.server_address[:2]
        ready(f"http://{host!s}:{bound}/")
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        if in_main:
            signal.signal(signal.SIGTERM, previous)


__all__ = [
    "DASHBOARD_HTML",
    "Dashboard",
    "DashboardOptions",
    "ServeOptions",
    "build_dashboard",
    "render_html",
    "serve_dashboard",
    "write_dashboard",
]
