"""Micro-tests: settle the wording of one piece of guidance against a no-guidance
control (`evalkit microtest UNIT --variants DIR`).

Each variant file becomes an arm beside `control`; the suite's cases run REPS
fresh-context repetitions each; `analyse` counts the flagged outputs (a regex, or a
sample that fails its checks) and the distinct answer shapes of each arm, tests each
variant against the control paired by case (an exact stratified test, Holm across the
variants: `variant_tests`), and concludes: a control that shows no failure means there
is nothing to fix; otherwise the best variant (fewest flags, then fewest shapes) among
those that flag significantly less than the control at alpha 0.05 passes, and when none
does, no variant beats the control (none is called best, and `evalkit microtest` exits 1).
The micro_test notebook displays the conclusion and every flagged output.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import regex

from evalkit.conclusions.gates import holm
from evalkit.foundations import fmt
from evalkit.foundations._io import MAX_TEXT_BYTES, read_text_file, write_atomic
from evalkit.foundations.errors import InputError
from evalkit.foundations.layout import CONFIG_FILE, MICROTEST_MARKER
from evalkit.foundations.records import Arm, MicrotestArm, MicrotestResult, Suite
from evalkit.numbers import stats
from evalkit.runfolder.runload import Run, as_run, sample_texts
from evalkit.suites.suite import case_id_problem

MIN_REPS = 5  # fewer fresh-context repetitions than this is noise, not a micro-test
CONTROL = "control"
FLAG_TIMEOUT_S = 1.0


def variant_files(variants: Path) -> dict[Path, str]:
    """The guidance variants in a folder (`*.md`, `*.txt`) and their texts; each file's
    stem becomes an arm, so it must be a safe arm name like any in a config."""
    if not variants.is_dir():
        raise InputError("--variants must be a folder of guidance files (*.md or *.txt)", variants)
    files = sorted(p for p in variants.iterdir() if p.is_file() and p.suffix in (".md", ".txt"))
    if not files:
        raise InputError("no guidance variants (*.md or *.txt) in the folder", variants)
    names = [p.stem for p in files]
    if CONTROL in names:
        raise InputError(f"a variant may not be called {CONTROL!r}: that is the no-guidance arm", variants)
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InputError(f"two variant files share the name {dupes[0]!r}", variants)
    texts = {}
    for p in files:
        problem = case_id_problem(p.stem)
        if problem:
            raise InputError(f"the variant's name {p.stem!r} cannot name an arm: {problem}", p)
        texts[p] = read_text_file(p, limit=MAX_TEXT_BYTES)  # UTF-8, size-limited, empty refused
    return texts


def check_options(reps: int, flag_pattern: str) -> None:
    """`InputError` for too few repetitions or a flag pattern that does not compile."""
    if reps < MIN_REPS:
        raise InputError(f"--reps {reps}: a micro-test needs at least {MIN_REPS} repetitions per variant")
    if flag_pattern:
        try:
            regex.compile(flag_pattern)
        except regex.error as exc:
            raise InputError(f"--flag-pattern does not compile: {exc}") from None


def microtest_suite(suite: Suite, files: dict[Path, str]) -> Suite:
    """The suite with its arms replaced by `control` (no guidance) and one arm per
    variant file. `InputError` when no template uses `${guidance}`: the variants would
    not reach the model."""
    if "guidance" not in suite.config.template + (suite.config.system or ""):
        raise InputError(
            "no template of the suite uses ${guidance}: the variants would not reach the model",
            Path(suite.path) / CONFIG_FILE,
            json_path="$.template",
        )
    arms = (Arm(name=CONTROL),) + tuple(
        Arm(name=p.stem, guidance_file=str(p.resolve()), guidance=text) for p, text in files.items()
    )
    raw = dict(suite.config.raw)
    raw["arms"] = [{"name": CONTROL}] + [{"name": p.stem, "guidance": str(p.resolve())} for p in files]
    return dataclasses.replace(suite, config=dataclasses.replace(suite.config, arms=arms, raw=raw))


def write_marker(run_path: str | Path, files: dict[Path, str], reps: int, flag_pattern: str) -> Path:
    """Mark a run folder as a micro-test (`microtest.json`): its control, variants, reps
    and flag pattern."""
    marker = {
        "control": CONTROL,
        "variants": {p.stem: str(p.resolve()) for p in files},
        "reps": reps,
        "flag_pattern": flag_pattern,
    }
    path = Path(run_path) / MICROTEST_MARKER
    write_atomic(path, json.dumps(marker, indent=2) + "\n")
    return path


def flag_outputs(samples: pd.DataFrame, pattern: str = "") -> pd.Series:
    """Which outputs show the failure: those matching `pattern` (a regex, searched with
    a timeout since outputs are untrusted), or with no pattern those whose grade did not
    pass (a missing or null grade is flagged: it was not shown to be free of the failure)."""
    if pattern:
        rx = regex.compile(pattern)

        def hit(text: Any) -> bool:
            try:
                return rx.search("" if text is None else str(text), timeout=FLAG_TIMEOUT_S) is not None
            except TimeoutError:
                return True  # could not be cleared: show it to the reader

        return samples["output"].map(hit).astype(bool)
    if not len(samples):
        return pd.Series(dtype=bool)
    return samples["passed"].map(lambda v: not is_pass(v)).astype(bool)


def is_pass(value: Any) -> bool:
    """A grade's `passed` as a strict pass: True (Python or numpy) only; None, NaN (no
    grade) and False are not passes."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    try:
        return bool(value) is True and str(value) in ("True", "1", "1.0")
    except (TypeError, ValueError):
        return False


_SHAPE_PUNCT = re.compile(r"[^\w\s]", re.UNICODE)
_SHAPE_DIGITS = re.compile(r"\d+")
_SHAPE_SPACE = re.compile(r"\s+")


def answer_shape(text: Any, words: int = 8) -> str:
    """The shape of an answer, to count how many different answers repetitions give:
    the first non-empty line's first `words` words, case-folded, digits and punctuation
    folded, plus its number of non-empty lines. Why hand-written: no library defines
    an answer's shape; this is the seed practice's "same shape" made countable."""
    s = "" if text is None or (isinstance(text, float) and math.isnan(text)) else str(text)
    lines = [ln for ln in s.splitlines() if ln.strip()]
    if not lines:
        return "(empty)"
    first = _SHAPE_DIGITS.sub("#", lines[0].casefold())
    first = _SHAPE_SPACE.sub(" ", _SHAPE_PUNCT.sub(" ", first)).strip()
    head = " ".join(first.split(" ")[:words]) or "(punctuation)"
    return f"{head} [{len(lines)} line{'s' if len(lines) != 1 else ''}]"


def flagged_samples(run: Run | str | Path, flag_pattern: str = "") -> pd.DataFrame:
    """The run's samples (`runload.sample_texts`) with `flagged` and `shape` columns, in
    repetition order (arm, case, repetition)."""
    run = as_run(run)
    order = {a: i for i, a in enumerate(run.arm_names())}
    st = sample_texts(run)
    st = (
        st.assign(_arm=st["arm"].map(order))
        .sort_values(["_arm", "case_id", "index"], kind="stable")
        .drop(columns="_arm")
        .reset_index(drop=True)
    )
    st["flagged"] = flag_outputs(st, flag_pattern)
    st["shape"] = st["output"].map(answer_shape)
    return st


def cached_samples(run: Run | str | Path) -> tuple[int, int]:
    """(samples answered from the response cache, samples) of a run: a re-run of a
    micro-test replays its repetitions, so they are not fresh."""
    s = as_run(run).samples
    if not len(s) or "cached" not in s.columns:
        return 0, len(s)
    return int(s["cached"].fillna(False).astype(bool).sum()), len(s)


ALPHA = 0.05  # a variant is "best" only when it flags significantly less than the control at this level
TEST = "exact stratified test by case (one-sided), Holm across variants"
Counts = dict[str, tuple[int, int]]  # case -> (flagged, samples) of one arm


def flag_counts(st: pd.DataFrame, arm: str) -> Counts:
    """Per case, (flagged, samples) of one arm of `flagged_samples`."""
    s = st[st["arm"] == arm]
    g = s.groupby("case_id", sort=False)["flagged"]
    return {str(c): (int(k), int(n)) for c, k, n in zip(g.sum().index, g.sum(), g.size(), strict=True)}


def variant_p(control: Counts, variant: Counts) -> tuple[float, int, int, int]:
    """The one-sided exact p that a variant flags less than the control, paired by case,
    and the cases where it flagged fewer, more or as many outputs (a share of its
    samples) as the control.

    Within a case, the control's and the variant's repetitions are fresh-context samples
    of one task: under "the guidance changes nothing" they are exchangeable, so given a
    case's total flags the variant's count is hypergeometric. The statistic is the
    variant's flags summed over the cases both arms ran; its exact null distribution is
    the convolution of the cases' hypergeometric laws (scipy.stats.hypergeom), and p is
    its lower tail. This is the exact conditional test of conditional independence in a
    2x2xK table (a one-sided Fisher exact test for one case); neither scipy nor
    statsmodels offers it for K tables (statsmodels' StratifiedTable test is the
    asymptotic Cochran-Mantel-Haenszel), hence the convolution. Each case's repetitions
    count, yet a case never stands in for another: its flags are compared only with its
    own control.

    References: Birch 1964, "The detection of partial association, I: the 2x2 case",
    JRSS B 26(2); Agresti 2002, Categorical Data Analysis, 2nd ed., sec. 6.7.5 (exact
    conditional test for 2x2xK tables)."""
    from scipy.stats import hypergeom  # lazy: only a micro-test's analysis needs scipy

    null = np.ones(1)
    observed, fewer, more = 0, 0, 0
    cases = [c for c in control if c in variant and control[c][1] and variant[c][1]]
    for c in cases:
        (kc, nc), (kv, nv) = control[c], variant[c]
        null = np.convolve(null, hypergeom.pmf(np.arange(nv + 1), nc + nv, kc + kv, nv))
        observed += kv
        fewer += kv * nc < kc * nv
        more += kv * nc > kc * nv
    p = float(min(1.0, null[: observed + 1].sum()))
    return p, fewer, more, len(cases) - fewer - more


def variant_tests(control: Counts, variants: dict[str, Counts], alpha: float = ALPHA) -> dict[str, tuple[float, ...]]:
    """Each variant's test against the control (`variant_p`) with its Holm-adjusted p
    across the variants: {arm: (p, p_adjusted, cases fewer, more, same)}. A variant
    flags significantly less than the control when p_adjusted <= alpha; Holm keeps the
    chance that any of them is called so, when none helps, at most alpha.

    References: Holm 1979, Scand. J. Statist. 6(2) (`gates.holm`)."""
    raw = {a: variant_p(control, v) for a, v in variants.items()}
    adjusted = holm([r[0] for r in raw.values()])
    return {a: (r[0], adj, *r[1:]) for (a, r), adj in zip(raw.items(), adjusted, strict=True)}


def _arm_summary(s: pd.DataFrame, test: tuple[float, ...] | None) -> MicrotestArm:
    """One arm's counts, Wilson interval, shapes and (a variant) its test."""
    n, k = len(s), int(s["flagged"].sum())
    ci = stats.proportion_interval(k, n) if n else None
    p, p_adj, fewer, more, same = test if test is not None else (None,) * 5
    return MicrotestArm(
        samples=n,
        flagged=k,
        rate=k / n if n else None,
        ci_low=ci.low if ci else None,
        ci_high=ci.high if ci else None,
        shapes=int(s["shape"].nunique()),
        p_value=p,
        p_adjusted=p_adj,
        cases_fewer=None if fewer is None else int(fewer),
        cases_more=None if more is None else int(more),
        cases_same=None if same is None else int(same),
    )


def analyse(
    run: Run | str | Path, control: str = CONTROL, flag_pattern: str = "", alpha: float = ALPHA
) -> MicrotestResult:
    """The micro-test's result (`records.MicrotestResult`): per arm, the flagged share
    with its 95% Wilson interval and the distinct answer shapes; per variant, its exact
    test against the control paired by case (`variant_tests`); the conclusion. A variant
    is "best" only when it flags significantly less than the control (Holm-adjusted
    p <= alpha); the least flagged of those (then the fewest shapes) is named.

    References: Wilson 1927 (the interval, via `stats.proportion_interval`); Birch 1964
    and Holm 1979 (the test, `variant_tests`)."""
    run = as_run(run)
    arms = run.arm_names()
    if control not in arms:
        raise InputError(f"no control arm {control!r} in this run (arms: {', '.join(arms)})", json_path="control")
    st = flagged_samples(run, flag_pattern)
    others = [a for a in arms if a != control]
    tests = variant_tests(flag_counts(st, control), {a: flag_counts(st, a) for a in others}, alpha)
    out = {a: _arm_summary(st[st["arm"] == a], tests.get(a)) for a in [control, *others]}
    sc = st[st["arm"] == control]
    per_case = sc.groupby("case_id").size()
    reps = int(per_case.max()) if len(per_case) else 0
    unit = f"samples: {fmt.count(int(sc['case_id'].nunique()), 'case')} x {fmt.count(reps, 'repetition')} per case"
    kind, conclusion, best = _conclude(out, control, unit, alpha)
    return MicrotestResult(control, flag_pattern, out, kind, conclusion, out[control].flagged == 0, best, TEST, alpha)


def _p_words(v: MicrotestArm) -> str:
    return f"one-sided p = {fmt.pvalue(v.p_value)}, Holm-adjusted {fmt.pvalue(v.p_adjusted)}"


def _conclude(out: dict[str, MicrotestArm], control: str, unit: str, alpha: float) -> tuple[str, str, str | None]:
    """(kind, conclusion, best variant) from the arms' summaries and tests."""
    ctrl = out[control]
    variants = {a: v for a, v in out.items() if a != control}
    if ctrl.flagged == 0:
        return (
            "no-improvement",
            f"Nothing to fix: the control shows no failure in {ctrl.samples} {unit}. Do not author this guidance.",
            None,
        )
    head = f"The control is flagged in {ctrl.flagged} of {ctrl.samples} {unit}."
    if not variants:
        return (
            "inconclusive",
            f"The control is flagged in {ctrl.flagged} of {ctrl.samples} {unit}; no variant ran.",
            None,
        )
    # a variant is best only when it flags significantly less than the control: fewer flags by chance are not a win
    beating = {a: v for a, v in variants.items() if v.p_adjusted is not None and v.p_adjusted <= alpha}
    if beating:
        best = min(beating, key=lambda a: (beating[a].rate or 0.0, beating[a].shapes))
        b = beating[best]
        conclusion = (
            f"{head} Best variant: {best}, flagged in {b.flagged} of {b.samples}, "
            f"{fmt.count(b.shapes, 'answer shape')}; significantly less than the control ({_p_words(b)} "
            f"<= {alpha:g}; {TEST})."
        )
        if b.shapes > max(1, b.samples // 2):
            conclusion += " Its answers still scatter: tighten the form of the wording before adding words."
        return "pass", conclusion, best
    least = min(variants, key=lambda a: (variants[a].rate or 0.0, variants[a].p_value or 1.0, variants[a].shapes))
    v = variants[least]
    fewer = (v.rate or 0.0) < (ctrl.rate or 0.0)
    return (
        "no-improvement",
        f"{head} No variant beats the control (the least flagged, {least}, in {v.flagged} of {v.samples}: "
        f"{_p_words(v)} > {alpha:g}; {TEST}): "
        + (
            "its fewer flags are within chance; this guidance does not help as worded, or the micro-test is too "
            "small to tell (more cases or repetitions). Do not ship it on this evidence."
            if fewer
            else "this guidance does not help as worded. Do not ship it."
        ),
        None,
    )
