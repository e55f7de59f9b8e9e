"""Micro-tests: settle the wording of one piece of guidance against a no-guidance
control (`evalkit microtest UNIT --variants DIR`).

Each variant file becomes an arm beside `control`; the suite's cases run REPS
fresh-context repetitions each; `analyse` counts the flagged outputs (a regex, or a
sample that fails its checks) and the distinct answer shapes of each arm, and concludes:
a control that shows no failure means there is nothing to fix; otherwise the best
variant (fewest flags, then fewest shapes) among those that flag less than the control
passes, and when none does, the guidance does not help (no variant is called best).
The micro_test notebook displays the conclusion and every flagged output.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Any

import pandas as pd
import regex

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


def analyse(run: Run | str | Path, control: str = CONTROL, flag_pattern: str = "") -> MicrotestResult:
    """The micro-test's result (`records.MicrotestResult`): per arm, the flagged share
    with its 95% Wilson interval and the distinct answer shapes; the conclusion.

    References: Wilson 1927 (the interval, via `stats.proportion_interval`)."""
    run = as_run(run)
    arms = run.arm_names()
    if control not in arms:
        raise InputError(f"no control arm {control!r} in this run (arms: {', '.join(arms)})", json_path="control")
    st = flagged_samples(run, flag_pattern)
    out: dict[str, MicrotestArm] = {}
    for arm in [control] + [a for a in arms if a != control]:
        s = st[st["arm"] == arm]
        n, k = len(s), int(s["flagged"].sum())
        ci = stats.proportion_interval(k, n) if n else None
        out[arm] = MicrotestArm(
            samples=n,
            flagged=k,
            rate=k / n if n else None,
            ci_low=ci.low if ci else None,
            ci_high=ci.high if ci else None,
            shapes=int(s["shape"].nunique()),
        )
    ctrl = out[control]
    variants = {a: v for a, v in out.items() if a != control}
    sc = st[st["arm"] == control]
    n_cases = int(sc["case_id"].nunique())
    per_case = sc.groupby("case_id").size()
    reps = int(per_case.max()) if len(per_case) else 0
    unit = f"samples: {fmt.count(n_cases, 'case')} x {fmt.count(reps, 'repetition')} per case"
    best = None
    if ctrl.flagged == 0:
        conclusion = (
            f"Nothing to fix: the control shows no failure in {ctrl.samples} {unit}. Do not author this guidance."
        )
        kind = "no-improvement"
    elif not variants:
        conclusion = f"The control is flagged in {ctrl.flagged} of {ctrl.samples} {unit}; no variant ran."
        kind = "inconclusive"
    else:
        # the best is chosen only among the variants that flag less than the control: a
        # variant that does not beat the control is never "best"
        beating = {a: v for a, v in variants.items() if (v.rate or 0.0) < (ctrl.rate or 0.0)}
        head = f"The control is flagged in {ctrl.flagged} of {ctrl.samples} {unit}."
        if beating:
            best = min(beating, key=lambda a: (beating[a].rate or 0.0, beating[a].shapes))
            b = beating[best]
            conclusion = (
                f"{head} Best variant: {best}, flagged in {b.flagged} of {b.samples}, "
                f"{fmt.count(b.shapes, 'answer shape')}."
            )
            if b.shapes > max(1, b.samples // 2):
                conclusion += " Its answers still scatter: tighten the form of the wording before adding words."
            kind = "pass"
        else:
            least = min(variants, key=lambda a: (variants[a].rate or 0.0, variants[a].shapes))
            v = variants[least]
            conclusion = (
                f"{head} No variant beats the control (the least flagged, {least}, in {v.flagged} of "
                f"{v.samples}): this guidance does not help as worded. Do not ship it."
            )
            kind = "no-improvement"
    return MicrotestResult(control, flag_pattern, out, kind, conclusion, ctrl.flagged == 0, best)
