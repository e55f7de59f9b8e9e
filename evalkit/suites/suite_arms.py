"""A suite's arms, validated: each arm's overrides of the suite's settings, checked against the
suite's side (mode, generator, judge, placeholders, CI cap), and an arm's skill file.
Split out of `evalkit.suites.suite`, which re-exports every public name.
"""

from __future__ import annotations

import json
import os
import string
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.foundations._io import (
    outside_message,
    outside_root,
)
from evalkit.foundations.errors import InputError
from evalkit.foundations.records import (
    Arm,
    Endpoint,
    Unit,
)
from evalkit.suites.suite_settings import (
    SAMPLING_BOUNDS,
    _batch_price_above,
    _check_calls_fit,
    _endpoint,
    _price,
    _same_model,
)
from evalkit.suites.suite_source import (
    ARM_KEYS,
    ARM_OVERRIDE_KEYS,
    ENDPOINT_KEYS,
    SKILL_FILE,
    SuiteSource,
    _ArmReader,
    _Reader,
    _rel_file,
    _template_identifiers,
    case_id_problem,
)
from evalkit.suites.units import parse_unit


@dataclass(frozen=True)
class _SuiteSide:
    """What an arm's settings are checked against: the suite's mode, generator, judge,
    template placeholders and whether it has a CI cap."""

    mode: str
    generator: Endpoint | None
    judge: Endpoint | None
    allow_same_judge_model: bool
    identifiers: set[str]
    ci: bool


# An arm's own template files: (its key, the `Arm` field of the text, what a message calls it).
_ARM_TEMPLATES = (("prompt", "template", "template"), ("system", "system", "system template"))

# `Arm` fields that record where an override came from, not a setting of their own.
_SOURCE_FIELDS = ("template_file", "system_file")


def _arm_overrides(
    src: SuiteSource, r: _Reader, cfg: dict[str, Any], a: dict[str, Any], jp: str, unit: Unit | None, side: _SuiteSide
) -> dict[str, Any] | None:
    """The settings an arm sets over the suite's (`Arm` fields, with `overrides`), checked
    as the suite's own are, each message naming the arm; None after reporting a problem."""
    ar = _ArmReader(r, str(a.get("name")))
    out: dict[str, Any] = {}
    ok = True
    gen = side.generator
    if "generator" in a:
        gen = _arm_generator(ar, cfg, a["generator"], jp)
        if gen is None:
            return None
        out["generator"] = gen
        ok = _arm_model_is_not_judge(ar, gen, jp, side)
    prices, prices_ok = _arm_prices(ar, cfg, a, jp, gen, side)
    sampling, sampling_ok = _arm_sampling(ar, a, jp)
    out |= prices | sampling
    _check_arm_calls_fit(ar, cfg, a, jp, side)
    templates, templates_ok = _arm_templates(src, ar, a, jp, unit, side)
    out |= templates
    if "unit" in a:
        u = _arm_unit(ar, cfg, a["unit"], jp, side)
        if u is None:
            return None
        out["unit"] = u
    if not (ok and prices_ok and sampling_ok and templates_ok):
        return None
    out["overrides"] = tuple(key for key in out if key not in _SOURCE_FIELDS)
    return out


def _arm_generator(ar: _ArmReader, cfg: dict[str, Any], g: Any, jp: str) -> Endpoint | None:
    """An arm's generator: the fields it gives over the suite generator's; None after
    reporting a problem."""
    if not isinstance(g, dict):
        ar.err(f"{jp}.generator", "generator must be an object with model, base_url, api_key_env")
        return None
    raw_gen = cfg.get("generator")
    base_gen: dict[str, Any] = raw_gen if isinstance(raw_gen, dict) else {}
    merged = {k: v for k, v in base_gen.items() if k in ENDPOINT_KEYS} | g
    return _endpoint(ar, merged, f"{jp}.generator", f"arm {ar.arm!r}'s generator", required=True)


def _arm_model_is_not_judge(ar: _ArmReader, gen: Endpoint, jp: str, side: _SuiteSide) -> bool:
    """False (an error) when an arm's own generator is the judge's model, a model
    favouring its own output; a warning instead under `allow_same_judge_model`."""
    if side.judge is None or not _same_model(gen, side.judge):
        return True
    if side.allow_same_judge_model:
        ar.warn(f"{jp}.generator.model", f"judge model {side.judge.model!r} is this arm's model; allowed")
        return True
    ar.err(
        f"{jp}.generator.model",
        f"judge model {side.judge.model!r} is the same as this arm's generator: a model favours its own "
        'output; use a different judge or set "allow_same_judge_model": true',
    )
    return False


def _arm_prices(
    ar: _ArmReader, cfg: dict[str, Any], a: dict[str, Any], jp: str, gen: Endpoint | None, side: _SuiteSide
) -> tuple[dict[str, Any], bool]:
    """An arm's `price` and `batch_price`, and whether both are usable. An arm on another
    model than the suite's needs its own price, and has no batch price unless it sets one
    (the suite's is another model's: `run --batch` refuses it)."""
    out: dict[str, Any] = {}
    ok = True
    new_model = gen is not None and side.generator is not None and not _same_model(gen, side.generator)
    for key in ("price", "batch_price"):
        if key in a:
            out[key] = _price(ar, a, key, jp)
            ok = ok and out[key] is not None
        elif new_model and key == "price":
            assert gen is not None and side.generator is not None
            ar.err(
                f"{jp}.price",
                f"missing key 'price' for model {gen.model!r}: the suite's price is for {side.generator.model!r}; "
                'an arm that runs another model sets its own price {"in_per_mtok": ..., "out_per_mtok": ...}',
            )
            ok = False
        elif new_model:
            out[key] = None
    if "batch_price" in a and out.get("batch_price") is not None:
        _batch_price_above(ar, a if "price" in a else {**a, "price": cfg.get("price")}, "batch_price", "price", jp)
    return out, ok


def _arm_sampling(ar: _ArmReader, a: dict[str, Any], jp: str) -> tuple[dict[str, Any], bool]:
    """The sampling parameters an arm sets (`SAMPLING_BOUNDS`: temperature, top_p, seed,
    max_tokens_out), bounded as the suite's, and whether all are usable."""
    out: dict[str, Any] = {}
    ok = True
    for key, kw in SAMPLING_BOUNDS.items():
        if key in a:
            before = len(ar.fx.errors)
            v = ar.number(a, key, jp, **kw)
            if len(ar.fx.errors) > before:
                ok = False
            out[key] = None if v is None else (int(v) if kw.get("integer") else float(v))
    return out, ok


def _check_arm_calls_fit(ar: _ArmReader, cfg: dict[str, Any], a: dict[str, Any], jp: str, side: _SuiteSide) -> None:
    """That the worst case of one of this arm's calls fits under the caps, when the arm
    changes its price or its output ceiling (else the suite's own check said it)."""
    fit = {
        **cfg,
        "price": a.get("price", cfg.get("price")),
        "max_tokens_out": a.get("max_tokens_out", cfg.get("max_tokens_out")),
    }
    if "price" in fit and ("price" in a or "max_tokens_out" in a):
        _check_calls_fit(ar, fit, "price", "generator", at=jp)
        if side.ci:
            _check_calls_fit(ar, fit, "price", "generator", ci=True, at=jp)
    if "batch_price" in a and isinstance(a.get("batch_price"), dict):
        _check_calls_fit(ar, {**fit, "batch_price": a["batch_price"]}, "batch_price", "generator batch", at=jp)


def _arm_templates(
    src: SuiteSource, ar: _ArmReader, a: dict[str, Any], jp: str, unit: Unit | None, side: _SuiteSide
) -> tuple[dict[str, Any], bool]:
    """An arm's own prompt and system template files: their texts and file names, and
    whether both are usable. A command or python unit renders no template; a system
    template needs chat mode."""
    out: dict[str, Any] = {}
    ok = True
    for key, field_name, what in _ARM_TEMPLATES:
        if key not in a:
            continue
        if _program_unit(unit):
            ar.err(f"{jp}.{key}", f"a {getattr(unit, 'kind', '')} unit uses no template")
            ok = False
            continue
        if key == "system" and side.mode != "chat":
            ar.err(f"{jp}.system", "a system template needs chat mode")
            ok = False
            continue
        text = _rel_file(src, ar, a[key], f"{jp}.{key}", what)
        if text is None:
            ok = False
            continue
        if _template_identifiers(text, ar, f"{jp}.{key}", f"{what} {a[key]!r}") is None:
            ok = False
        if not text.strip():
            ar.err(f"{jp}.{key}", f"{what} {a[key]!r} is empty")
            ok = False
        out[field_name], out[f"{field_name}_file"] = text, a[key]
    return out, ok


def _arm_unit(ar: _ArmReader, cfg: dict[str, Any], given: Any, jp: str, side: _SuiteSide) -> Unit | None:
    """An arm's unit: the suite unit's fields it changes (argv, ...), never its kind;
    None after reporting a problem."""
    raw_unit = cfg.get("unit") or {"kind": "prompt"}
    base = {"kind": raw_unit} if isinstance(raw_unit, str) else dict(raw_unit) if isinstance(raw_unit, dict) else {}
    if not isinstance(given, dict):
        ar.err(f"{jp}.unit", "an arm's unit must be an object of the suite unit's fields it changes (argv, ...)")
        return None
    if "kind" in given and given["kind"] != base.get("kind", "prompt"):
        ar.err(
            f"{jp}.unit.kind",
            f"an arm cannot change the unit's kind ({base.get('kind', 'prompt')!r} in the suite): "
            "make it a suite of its own",
        )
        return None
    return parse_unit(ar, base | given, side.mode, jp=f"{jp}.unit")


def _validate_arms(
    src: SuiteSource,
    r: _Reader,
    cfg: dict[str, Any],
    identifiers: set[str],
    unit: Unit | None = None,
    side: _SuiteSide | None = None,
) -> tuple[Arm, ...] | None:
    raw = cfg.get("arms", [{"name": "baseline"}])
    if not isinstance(raw, list) or not raw:
        r.err("$.arms", 'arms must be a non-empty list of {"name", "guidance"}')
        return None
    arms: list[Arm] = []
    seen: dict[str, int] = {}
    ok = True
    for i, a in enumerate(raw):
        jp = f"$.arms[{i}]"
        if not isinstance(a, dict):
            r.err(jp, 'an arm must be an object {"name", "guidance"}')
            ok = False
            continue
        name = r.text(a, "name", jp, required=True)
        r.unknown_keys(a, ARM_KEYS, jp, f"arm {name!r}" if isinstance(name, str) else "arm")
        if name is None:
            ok = False
            continue
        own: dict[str, Any] = {}
        if side is not None and any(key in a for key in ARM_OVERRIDE_KEYS):
            got = _arm_overrides(src, r, cfg, a, jp, unit, side)
            if got is None:
                ok = False
            else:
                own = got
        problem = case_id_problem(name)
        if problem:
            r.err(f"{jp}.name", f"arm name {name!r} is not safe as a folder name: {problem}")
            ok = False
        if name in seen:
            r.err(f"{jp}.name", f"duplicate arm name {name!r} (also $.arms[{seen[name]}])")
            ok = False
        seen[name] = i
        guidance_file, guidance = a.get("guidance"), None
        if guidance_file is not None:
            guidance = _rel_file(src, r, guidance_file, f"{jp}.guidance", "guidance")
            if guidance is None:
                ok = False
            elif not guidance.strip():
                r.warn(f"{jp}.guidance", f"guidance file {guidance_file!r} is empty")
            arm_ids = identifiers | {
                i for t in (own.get("template"), own.get("system")) if t for i in string.Template(t).get_identifiers()
            }
            if guidance is not None and "guidance" not in arm_ids and not _program_unit(unit):
                r.err(
                    f"{jp}.guidance",
                    f"arm {name!r} has guidance but no template uses ${{guidance}}: "
                    "every arm would send the same prompt",
                )
                ok = False
        skill_dir, skill = a.get("skill_dir"), None
        if skill_dir is not None:
            skill = _skill_text(src, r, skill_dir, f"{jp}.skill_dir", unit, identifiers)
            if skill is None:
                ok = False
        arms.append(
            Arm(name=name, guidance_file=guidance_file, guidance=guidance, skill_dir=skill_dir, skill=skill, **own)
        )
    texts: dict[tuple[str, str, str], str] = {}
    for a in arms:
        own_settings = json.dumps({k: repr(getattr(a, k, None)) for k in a.overrides}, sort_keys=True)
        key = ((a.guidance or "").strip(), a.skill_dir or "", own_settings)
        if key in texts:
            what = "guidance and skill" if a.skill_dir else "guidance"
            r.warn("$.arms", f"arms {texts[key]!r} and {a.name!r} send the same {what}: they measure nothing")
        texts.setdefault(key, a.name)
    return tuple(arms) if ok else None


def _program_unit(unit: Any) -> bool:
    """A unit that renders no template (`command`, `python`): guidance goes to the program."""
    return unit is not None and unit.kind in ("command", "python")


def _skill_text(src: SuiteSource, r: _Reader, rel: Any, jp: str, unit: Any, identifiers: set[str]) -> str | None:
    """The `SKILL.md` text of an arm's `skill_dir` (a folder inside the suite), or None
    after reporting why it cannot be used."""
    kind = getattr(unit, "kind", "prompt")
    if kind == "prompt" and "skill" not in identifiers:
        r.err(
            jp,
            'skill_dir is for agent units ("unit": {"kind": "agent" | "command" | "python"}) '
            "or a prompt template that uses ${skill}; use guidance",
        )
        return None
    resolved = isinstance(rel, str) and rel.strip() != "" and _resolved_skill(src, rel)
    if not resolved and (not isinstance(rel, str) or not rel.strip() or os.path.isabs(rel) or ".." in Path(rel).parts):
        r.err(jp, "skill_dir must be a folder relative to the suite folder (no absolute path, no '..')")
        return None
    folder = Path(src.root) / rel
    if not folder.is_dir():
        r.err(jp, f"skill_dir {rel!r} is not a folder in {src.root}")
        return None
    outside = None if resolved else outside_root(folder, src.root)
    if outside is not None:
        r.err(jp, f"skill_dir {rel!r}: {outside_message(outside, src.root)}")
        return None
    if kind == "agent" and "skill" not in identifiers:
        r.err(jp, "an agent unit gives the skill to the model as ${skill}: no template uses it")
        return None
    if not src.exists(f"{rel.rstrip('/')}/{SKILL_FILE}"):
        if kind in ("agent", "prompt"):
            r.err(jp, f"skill_dir {rel!r} has no {SKILL_FILE} (the text ${{skill}} stands for)")
            return None
        return ""  # the program reads the folder as it likes
    try:
        return src.read(f"{rel.rstrip('/')}/{SKILL_FILE}")
    except InputError as exc:
        r.fx.add(exc)
        return None


def _resolved_skill(src: SuiteSource, rel: str) -> bool:
    """Whether `rel` is a skill folder the importer resolved outside the suite (a SKRAFT
    spec's skill under plugins/): the one place a skill_dir may leave the suite folder."""
    return bool(src.skill_folders) and (Path(src.root) / rel).resolve() in {f.resolve() for f in src.skill_folders}


def two_arms(arms: Sequence[str]) -> tuple[str, str]:
    """The baseline and treatment of a two-arm run: the arm called baseline or control
    (else the first), then the other; of a run of more arms, that baseline and the first
    other arm (the pair its skill-comparison page shows in full)."""
    base = next((a for a in arms if a in ("baseline", "control")), arms[0])
    return base, next(a for a in arms if a != base)
