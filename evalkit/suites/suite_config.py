"""A suite's `config.json`, validated: endpoints, prices, the gate, limits on calls and cost,
into a `Config` record. Split out of `evalkit.suites.suite`, which re-exports every public name.
"""

from __future__ import annotations

import json
from typing import Any

from evalkit.checking.judge import model_family, same_family
from evalkit.foundations._io import (
    line_of,
)
from evalkit.foundations.findings import Findings
from evalkit.foundations.records import (
    Config,
    Endpoint,
    Executor,
    GateThresholds,
    Json,
    Price,
    Simulator,
    Unit,
)
from evalkit.foundations.records_suite import noise_guard_asked
from evalkit.suites.suite_arms import _SuiteSide, _validate_arms
from evalkit.suites.suite_conversation import parse_simulator
from evalkit.suites.suite_settings import (
    SAMPLING_BOUNDS,
    _batch_price_above,
    _check_calls_fit,
    _endpoint,
    _on_underpowered,
    _price,
    _same_model,
)
from evalkit.suites.suite_source import (
    CI_KEYS,
    CONFIG_KEYS,
    GATE_KEYS,
    MAX_ATTEMPTS,
    MAX_CASES,
    MAX_CONCURRENCY,
    MAX_CONNECTION_FAILURES,
    MAX_COST_CAP_USD,
    MAX_K,
    MAX_RATE_LIMIT_BUDGET_S,
    MAX_TIMEOUT_S,
    MAX_TOKENS,
    REQUIRED_CONFIG_KEYS,
    SuiteSource,
    _Reader,
    _rel_file,
    _template_identifiers,
)
from evalkit.suites.units import parse_executor, parse_unit

# config.json's numbers, in the order they are checked: (key, the bounds `_Reader.number`
# checks, the type `Config` holds). The key is also the `Config` field's name.
_CONFIG_NUMBERS: tuple[tuple[str, dict[str, Any], type[int] | type[float]], ...] = (
    ("temperature", SAMPLING_BOUNDS["temperature"], float),
    ("top_p", SAMPLING_BOUNDS["top_p"], float),
    ("seed", SAMPLING_BOUNDS["seed"], int),
    ("k", {"integer": True, "positive": True, "maximum": MAX_K, "default": 5}, int),
    ("concurrency", {"integer": True, "positive": True, "maximum": MAX_CONCURRENCY, "default": 4}, int),
    ("cost_cap_usd", {"positive": True, "maximum": MAX_COST_CAP_USD}, float),
    ("max_tokens_in", {"integer": True, "positive": True, "maximum": MAX_TOKENS}, int),
    ("max_tokens_out", SAMPLING_BOUNDS["max_tokens_out"], int),
    ("timeout_s", {"positive": True, "maximum": MAX_TIMEOUT_S, "default": 60.0}, float),
    ("max_attempts", {"integer": True, "positive": True, "maximum": MAX_ATTEMPTS, "default": 6}, int),
    ("rate_limit_budget_s", {"positive": True, "maximum": MAX_RATE_LIMIT_BUDGET_S, "default": 300.0}, float),
    (
        "max_connection_failures",
        {"integer": True, "positive": True, "maximum": MAX_CONNECTION_FAILURES, "default": 8},
        int,
    ),
)

# The numbers a suite cannot run without (they have no default): no `Config` when one is bad.
_NEEDED_NUMBERS = ("cost_cap_usd", "max_tokens_in", "max_tokens_out")

# The Batch API's optional prices (`run --batch`, `grade --batch`): (key, its online price, role).
_BATCH_PRICES = (("batch_price", "price", "generator"), ("judge_batch_price", "judge_price", "judge"))


def _calibration_rule(r: _Reader, cfg: dict[str, Any]) -> bool | None:
    """`Config.allow_uncalibrated_judge` from the two keys that set it: None when neither
    is set (a judge that is not calibrated counts, flagged "judge not calibrated (n of
    20 labels)"; one whose calibration missed the bars is held), True for
    `allow_uncalibrated_judge: true` (every judge counts, as before), False for
    `judge.require_calibration: true` or `allow_uncalibrated_judge: false` (evalkit
    0.1's default: every judge not calibrated is held). Both true contradict."""
    judge = cfg.get("judge")
    require = r.boolean(judge, "require_calibration", "$.judge") if isinstance(judge, dict) else False
    allow = r.boolean(cfg, "allow_uncalibrated_judge", "$") if "allow_uncalibrated_judge" in cfg else None
    if require and allow:
        r.err(
            "$.judge.require_calibration",
            "judge.require_calibration and allow_uncalibrated_judge contradict each other: keep one",
        )
    if allow:
        r.warn(
            "$.allow_uncalibrated_judge",
            "allow_uncalibrated_judge: judged pass/fail counts without a calibration against people, even one "
            "that missed the bars (recorded on every judged line and shown on every report page)",
        )
    return False if require else allow


def _validate_config(src: SuiteSource, fx: Findings, uses_judge: bool) -> Config | None:
    """A suite's `config.json` checked part by part, every problem reported with its JSON
    path and line in `fx`; the `Config`, or None when a part it needs is unusable."""
    cfg = src.config
    r = _Reader(fx, src.config_path, lambda jp: line_of(src.config_lines, jp))
    _check_config_keys(r, cfg)
    mode = _choice(r, cfg, "mode", ("completion", "chat"), "chat")
    generator, judge, allow_same = _config_models(r, cfg, uses_judge)
    allow_uncalibrated, verdict_judge, judged_estimate = _judge_options(r, cfg)
    numbers = {key: r.number(cfg, key, "$", **bounds) for key, bounds, _ in _CONFIG_NUMBERS}
    price, judge_price, batch_prices = _config_prices(r, cfg)
    gate = _config_gate(r, cfg)
    ci_cap = _config_ci_cap(r, cfg, numbers["cost_cap_usd"])
    stop = _config_stop(r, cfg)
    tools = _config_tools(r, cfg, mode)
    unit = parse_unit(r, cfg.get("unit"), mode)
    executor = parse_executor(r, cfg.get("executor"))
    stopping = _config_stopping(r, cfg)
    template, system, identifiers = _config_templates(src, r, cfg, mode, unit)
    simulator = _config_simulator(src, r, cfg, unit)
    suite_side = _SuiteSide(mode, generator, judge, allow_same, identifiers, ci_cap is not None)
    arms = _validate_arms(src, r, cfg, identifiers, unit, suite_side)
    if verdict_judge == "pairwise" and arms is not None and len(arms) < 2:
        r.err("$.verdict_judge", 'verdict_judge "pairwise" compares two arms: the config has one')
    verdict_unit = _choice(r, cfg, "verdict_unit", ("case", "trial"), "case")
    if verdict_unit == "trial" and verdict_judge == "pairwise":
        r.err(
            "$.verdict_unit", 'verdict_unit "trial" counts each sample\'s pass/fail: not with verdict_judge "pairwise"'
        )

    if (
        not generator
        or None in (*(numbers[key] for key in _NEEDED_NUMBERS), template, unit, executor)
        or price is None
        or judge_price is None
        or arms is None
        or (cfg.get("simulator") is not None and simulator is None)
    ):
        return None
    assert unit is not None
    return Config(
        generator=generator,
        judge=judge,
        mode=mode,
        template=template or "",
        system=system,
        price=price,
        judge_price=judge_price,
        gate=gate,
        arms=arms,
        stop=stop,
        tools=tools,
        allow_same_judge_model=allow_same,
        allow_uncalibrated_judge=allow_uncalibrated,
        verdict_judge=verdict_judge,
        verdict_unit=verdict_unit,
        judged_estimate=judged_estimate,
        ci_cost_cap_usd=None if ci_cap is None else float(ci_cap),
        batch_price=batch_prices.get("batch_price"),
        judge_batch_price=batch_prices.get("judge_batch_price"),
        unit=unit,
        raw=dict(cfg),
        executor=executor or Executor(),
        stopping=stopping,
        simulator=simulator,
        **_as_config_numbers(numbers),
    )


def _as_config_numbers(numbers: dict[str, Any]) -> dict[str, Any]:
    """The numbers read by `_CONFIG_NUMBERS` as the `Config` fields hold them (int or
    float; None stays None)."""
    return {key: None if numbers[key] is None else as_type(numbers[key]) for key, _, as_type in _CONFIG_NUMBERS}


def _check_config_keys(r: _Reader, cfg: dict[str, Any]) -> None:
    """Unknown keys (a "did you mean" for a misspelt one), then each required key that is
    missing; the generator and the prices report their own absence, with their shape."""
    r.unknown_keys(cfg, CONFIG_KEYS, "$", "config")
    for key in REQUIRED_CONFIG_KEYS:
        if key not in cfg and key not in ("price", "judge_price", "generator"):
            r.err(f"$.{key}", f"missing required key {key!r}: evalkit refuses to start without it")


def _choice(r: _Reader, cfg: dict[str, Any], key: str, options: tuple[str, str], default: str) -> Any:
    """A setting that is one of two words (`mode`, `verdict_judge`, `judged_estimate`):
    its value, or `default` when absent or after reporting any other value."""
    value = cfg.get(key, default)
    if value not in options:
        r.err(f"$.{key}", f'{key} must be "{options[0]}" or "{options[1]}", got {json.dumps(value)}')
        return default
    return value


STOPPING = ("fixed", "sequential", "per_case")


def _config_stopping(r: _Reader, cfg: dict[str, Any]) -> Any:
    """`stopping`: when a run may stop before the fixed design's end (`evalkit.running.until_decided`);
    "fixed" when absent or after reporting any other value."""
    value = cfg.get("stopping", "fixed")
    if value not in STOPPING:
        r.err("$.stopping", f"stopping must be one of {', '.join(map(json.dumps, STOPPING))}, got {json.dumps(value)}")
        return "fixed"
    return value


def _config_models(r: _Reader, cfg: dict[str, Any], uses_judge: bool) -> tuple[Endpoint | None, Endpoint | None, bool]:
    """The generator and the judge endpoints and `allow_same_judge_model`; a judge that is
    the generator's model is an error unless allowed, one of its family a warning, and a
    suite with judged cases needs a judge."""
    generator = _endpoint(r, cfg.get("generator"), "$.generator", "generator", required=True)
    judge_obj = cfg.get("judge")
    if isinstance(judge_obj, dict):  # the judge's endpoint, and whether its calibration is required
        judge_obj = {k: v for k, v in judge_obj.items() if k != "require_calibration"}
    judge = _endpoint(r, judge_obj, "$.judge", "judge", required=False)
    allow_same = r.boolean(cfg, "allow_same_judge_model", "$")
    if generator and judge and _same_model(generator, judge):
        if allow_same:
            r.warn(
                "$.allow_same_judge_model",
                f"judge model {judge.model!r} is the generator's model; allowed by "
                "allow_same_judge_model (recorded; expect self-preference bias)",
            )
        else:
            r.err(
                "$.judge.model",
                f"judge model {judge.model!r} is the same as the generator's: a model favours its "
                'own output; use a different judge or set "allow_same_judge_model": true',
            )
    elif generator and judge and same_family(judge.model, generator.model):
        r.warn(
            "$.judge.model",
            f"judge model {judge.model!r} is from the generator's model family ({model_family(judge.model)}, "
            f"generator {generator.model!r}): same-family models share failure modes and rate their own style "
            "higher; prefer a judge from another family",
            weight="MEDIUM",
        )
    if uses_judge and cfg.get("judge") is None:
        r.err("$.judge", "the suite has judged cases (expected.rubric) but config has no judge")
    return generator, judge, allow_same


def _judge_options(r: _Reader, cfg: dict[str, Any]) -> tuple[bool | None, Any, Any]:
    """How judged verdicts count: `allow_uncalibrated_judge` (a warning when set),
    `verdict_judge` (pairwise needs a judge) and `judged_estimate`."""
    allow_uncalibrated = _calibration_rule(r, cfg)
    verdict_judge = _choice(r, cfg, "verdict_judge", ("direct", "pairwise"), "direct")
    judged_estimate = _choice(r, cfg, "judged_estimate", ("judge", "corrected"), "judge")
    if verdict_judge == "pairwise" and cfg.get("judge") is None:
        r.err("$.verdict_judge", 'verdict_judge "pairwise" needs a judge')
    return allow_uncalibrated, verdict_judge, judged_estimate


def _config_prices(r: _Reader, cfg: dict[str, Any]) -> tuple[Price | None, Price | None, dict[str, Price | None]]:
    """The generator's and the judge's prices, and the optional batch prices (bounded as
    `price` is, warned when above the online price); each checked to let one call fit
    under the cap."""
    price = _price(r, cfg, "price")
    judge_price = _price(r, cfg, "judge_price")
    _check_online_calls_fit(r, cfg)
    batch_prices = {}
    for key, online, role in _BATCH_PRICES:
        if key in cfg:
            batch_prices[key] = _price(r, cfg, key)
            _check_calls_fit(r, cfg, key, f"{role} batch")
            _batch_price_above(r, cfg, key, online)
    return price, judge_price, batch_prices


def _check_online_calls_fit(r: _Reader, cfg: dict[str, Any], ci: bool = False) -> None:
    """That one generator call, and one judge call when there is a judge, fits under the
    cost cap (`ci`: under the CI cap)."""
    _check_calls_fit(r, cfg, "price", "generator", ci=ci)
    if cfg.get("judge") is not None:
        _check_calls_fit(r, cfg, "judge_price", "judge", ci=ci)


def _config_gate(r: _Reader, cfg: dict[str, Any]) -> GateThresholds:
    """The gate's thresholds (`gate`), each bounded; the defaults when absent or not an object."""
    if "gate" not in cfg:
        return GateThresholds()
    g = cfg["gate"]
    if not isinstance(g, dict):
        r.err("$.gate", "gate must be an object")
        return GateThresholds()
    r.unknown_keys(g, GATE_KEYS, "$.gate", "gate")
    return GateThresholds(
        float(r.number(g, "max_success_drop_points", "$.gate", minimum=0, maximum=100, default=3.0)),
        float(r.number(g, "max_cost_increase_pct", "$.gate", minimum=0, default=20.0)),
        int(r.number(g, "min_tag_cases", "$.gate", integer=True, positive=True, maximum=MAX_CASES, default=5)),
        # the noise guard's level (and the power computation's)
        float(r.number(g, "alpha", "$.gate", positive=True, maximum=1, default=0.05)),
        _on_underpowered(r, g),
        # the noise guard: asked for, or implied by an `alpha` below 1 (its meaning before issue 41)
        r.boolean(g, "require_significance", "$.gate", default=noise_guard_asked(g)),
    )


def _config_ci_cap(r: _Reader, cfg: dict[str, Any], cap: Any) -> Any:
    """`ci.cost_cap_usd`, the cap of `run --ci`: below the local `cost_cap_usd`, with
    room for one call; None when absent or unusable (reported)."""
    if "ci" not in cfg:
        return None
    c = cfg["ci"]
    if not isinstance(c, dict):
        r.err("$.ci", 'ci must be an object {"cost_cap_usd": ...}')
        return None
    r.unknown_keys(c, CI_KEYS, "$.ci", "ci")
    ci_cap = r.number(c, "cost_cap_usd", "$.ci", required=True, positive=True)
    if ci_cap is not None and cap is not None and ci_cap >= cap:
        r.err(
            "$.ci.cost_cap_usd",
            f"the CI cost cap ({ci_cap:g}) must be lower than the local cost_cap_usd ({cap:g})",
        )
        return None
    if ci_cap is not None:  # `run --ci` and its grading spend under this cap
        _check_online_calls_fit(r, cfg, ci=True)
    return ci_cap


def _config_simulator(src: SuiteSource, r: _Reader, cfg: dict[str, Any], unit: Unit | None) -> Simulator | None:
    """The simulated user of a conversation suite (`suite_conversation.parse_simulator`);
    its unit answers each turn: the prompt unit, evalkit's tool loop or the user's
    program (a command unit, run once a turn)."""
    if cfg.get("simulator") is None:
        return None
    if unit is not None and unit.kind not in ("prompt", "agent", "command"):
        r.err(
            "$.unit",
            f'a conversation suite\'s unit is "prompt", "agent" or "command" (each turn answered), not {unit.kind!r}',
        )
    if cfg.get("mode", "chat") != "chat":
        r.err("$.mode", "a conversation needs chat mode")
    return parse_simulator(src, r, cfg)


def _config_stop(r: _Reader, cfg: dict[str, Any]) -> tuple[str, ...]:
    """`stop`: a sequence or a list of up to 4 (the OpenAI API's limit); () when absent or bad."""
    if "stop" not in cfg:
        return ()
    s = cfg["stop"]
    s = [s] if isinstance(s, str) else s
    if not isinstance(s, list) or not all(isinstance(x, str) and x for x in s):
        r.err("$.stop", "stop must be a non-empty string or a list of them")
    elif len(s) > 4:
        r.err("$.stop", "stop takes at most 4 sequences (OpenAI API limit)")
    else:
        return tuple(s)
    return ()


def _config_tools(r: _Reader, cfg: dict[str, Any], mode: str) -> tuple[Json, ...]:
    """`tools`: a list of tool objects, which need chat mode unless a program (a command
    or python unit) answers them at EVALKIT_TOOLS_URL; () when absent or bad."""
    if "tools" not in cfg:
        return ()
    t = cfg["tools"]
    if not isinstance(t, list) or not all(isinstance(x, dict) for x in t):
        r.err("$.tools", "tools must be a list of tool objects")
        return ()
    raw_unit = cfg.get("unit")
    program = isinstance(raw_unit, dict) and raw_unit.get("kind") in ("command", "python")
    if mode != "chat" and not program:
        r.err("$.tools", "tools need chat mode (the completions endpoint has no tools)")
    return tuple(t)


def _config_templates(
    src: SuiteSource, r: _Reader, cfg: dict[str, Any], mode: str, unit: Unit | None
) -> tuple[str | None, str | None, set[str]]:
    """The prompt template, the system template and the placeholders they use. A command
    or python unit renders none (the case goes to the program as JSON): ("", None, {}),
    with a warning for a template it names; a broken such unit (reported already) still
    renders none, so no second, spurious error."""
    raw_unit = cfg.get("unit")
    kind = unit.kind if unit is not None else raw_unit.get("kind") if isinstance(raw_unit, dict) else raw_unit
    if kind in ("command", "python"):
        if "template" in cfg or "system" in cfg:
            r.warn("$.template" if "template" in cfg else "$.system", f"a {kind} unit uses no template (ignored)")
        return "", None, set()
    if cfg.get("simulator") is not None:  # a conversation: the simulator writes the user's turns
        if "template" in cfg:
            r.warn("$.template", "a conversation suite uses no user template: the simulator writes the user's turns")
        system = _config_system(src, r, cfg, mode)
        ids = None if system is None else _template_identifiers(system, r, "$.system", "system template")
        return "", system, ids or set()
    template_file = cfg.get("template", "prompt.txt")
    if kind in (None, "prompt") and _input_is_the_message(src, cfg, mode):
        template: str | None = USER_MESSAGE_TEMPLATE
    else:
        template = _rel_file(src, r, template_file, "$.template", "template")
    identifiers: set[str] = set()
    if template is not None and template is not USER_MESSAGE_TEMPLATE:
        identifiers |= _template_identifiers(template, r, "$.template", f"template {template_file!r}") or set()
        if not template.strip():
            r.err("$.template", f"template {template_file!r} is empty")
    system = _config_system(src, r, cfg, mode)
    if system is not None:
        identifiers |= _template_identifiers(system, r, "$.system", "system template") or set()
    return template, system, identifiers


# A chat-mode prompt unit with no template (no `template` key, no prompt.txt) sends the
# case input as the user message (seed 001: "input (whatever the unit takes)").
USER_MESSAGE_TEMPLATE = "${input}"


def _input_is_the_message(src: SuiteSource, cfg: dict[str, Any], mode: str) -> bool:
    """Whether the case input is the user message: chat mode, and no template given or
    found (an object input goes as its JSON)."""
    return mode == "chat" and "template" not in cfg and not src.exists("prompt.txt")


def _config_system(src: SuiteSource, r: _Reader, cfg: dict[str, Any], mode: str) -> str | None:
    """The system template's text: the file `system` names (chat mode only), else a
    `system.txt` beside the config in chat mode; None when there is none or it is bad."""
    if "system" in cfg and cfg["system"] is not None:
        if mode != "chat":
            r.err("$.system", "a system template needs chat mode")
            return None
        return _rel_file(src, r, cfg["system"], "$.system", "system template")
    if mode == "chat" and "system" not in cfg and src.exists("system.txt"):
        return _rel_file(src, r, "system.txt", "$.system", "system template")
    return None
