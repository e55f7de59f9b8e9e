"""A suite's `config.json`, validated: endpoints, prices, the gate, limits on calls and cost,
into a `Config` record. Split out of `evalkit.suites.suite`, which re-exports every public name.
"""

from __future__ import annotations

import json

from evalkit.checking.judge import model_family, same_family
from evalkit.foundations._io import (
    line_of,
)
from evalkit.foundations.findings import Findings
from evalkit.foundations.records import (
    Config,
    Executor,
    GateThresholds,
    Json,
)
from evalkit.foundations.records_suite import noise_guard_asked
from evalkit.suites.suite_arms import _SuiteSide, _validate_arms
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


def _validate_config(src: SuiteSource, fx: Findings, uses_judge: bool) -> Config | None:
    cfg = src.config
    path = src.config_path
    r = _Reader(fx, path, lambda jp: line_of(src.config_lines, jp))
    r.unknown_keys(cfg, CONFIG_KEYS, "$", "config")
    for key in REQUIRED_CONFIG_KEYS:
        if key not in cfg and key not in ("price", "judge_price", "generator"):
            r.err(f"$.{key}", f"missing required key {key!r}: evalkit refuses to start without it")

    mode = cfg.get("mode", "chat")
    if mode not in ("completion", "chat"):
        r.err("$.mode", f'mode must be "completion" or "chat", got {json.dumps(mode)}')
        mode = "chat"

    generator = _endpoint(r, cfg.get("generator"), "$.generator", "generator", required=True)
    judge = _endpoint(r, cfg.get("judge"), "$.judge", "judge", required=False)
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
    allow_uncalibrated = r.boolean(cfg, "allow_uncalibrated_judge", "$")
    if allow_uncalibrated:
        r.warn(
            "$.allow_uncalibrated_judge",
            "allow_uncalibrated_judge: judged pass/fail counts without a calibration against people "
            "(recorded on every judged line and shown on every report page)",
        )
    verdict_judge = cfg.get("verdict_judge", "direct")
    if verdict_judge not in ("direct", "pairwise"):
        r.err("$.verdict_judge", f'verdict_judge must be "direct" or "pairwise", got {json.dumps(verdict_judge)}')
        verdict_judge = "direct"
    judged_estimate = cfg.get("judged_estimate", "judge")
    if judged_estimate not in ("judge", "corrected"):
        r.err(
            "$.judged_estimate",
            f'judged_estimate must be "judge" or "corrected", got {json.dumps(judged_estimate)}',
        )
        judged_estimate = "judge"
    if verdict_judge == "pairwise" and cfg.get("judge") is None:
        r.err("$.verdict_judge", 'verdict_judge "pairwise" needs a judge')

    temperature = r.number(cfg, "temperature", "$", **SAMPLING_BOUNDS["temperature"])
    top_p = r.number(cfg, "top_p", "$", **SAMPLING_BOUNDS["top_p"])
    seed = r.number(cfg, "seed", "$", **SAMPLING_BOUNDS["seed"])
    k = r.number(cfg, "k", "$", integer=True, positive=True, maximum=MAX_K, default=5)
    concurrency = r.number(cfg, "concurrency", "$", integer=True, positive=True, maximum=MAX_CONCURRENCY, default=4)
    cap = r.number(cfg, "cost_cap_usd", "$", positive=True, maximum=MAX_COST_CAP_USD)
    tin = r.number(cfg, "max_tokens_in", "$", integer=True, positive=True, maximum=MAX_TOKENS)
    tout = r.number(cfg, "max_tokens_out", "$", **SAMPLING_BOUNDS["max_tokens_out"])
    timeout_s = r.number(cfg, "timeout_s", "$", positive=True, maximum=MAX_TIMEOUT_S, default=60.0)
    attempts = r.number(cfg, "max_attempts", "$", integer=True, positive=True, maximum=MAX_ATTEMPTS, default=6)
    rate_budget = r.number(
        cfg, "rate_limit_budget_s", "$", positive=True, maximum=MAX_RATE_LIMIT_BUDGET_S, default=300.0
    )
    conn_failures = r.number(
        cfg, "max_connection_failures", "$", integer=True, positive=True, maximum=MAX_CONNECTION_FAILURES, default=8
    )
    price = _price(r, cfg, "price")
    judge_price = _price(r, cfg, "judge_price")
    _check_calls_fit(r, cfg, "price", "generator")
    if cfg.get("judge") is not None:
        _check_calls_fit(r, cfg, "judge_price", "judge")
    # Optional: the Batch API's prices (`run --batch`, `grade --batch`), bounded as `price` is.
    batch_prices = {}
    for key, online, role in (("batch_price", "price", "generator"), ("judge_batch_price", "judge_price", "judge")):
        if key in cfg:
            batch_prices[key] = _price(r, cfg, key)
            _check_calls_fit(r, cfg, key, f"{role} batch")
            _batch_price_above(r, cfg, key, online)

    gate = GateThresholds()
    if "gate" in cfg:
        g = cfg["gate"]
        if not isinstance(g, dict):
            r.err("$.gate", "gate must be an object")
        else:
            r.unknown_keys(g, GATE_KEYS, "$.gate", "gate")
            gate = GateThresholds(
                float(r.number(g, "max_success_drop_points", "$.gate", minimum=0, maximum=100, default=3.0)),
                float(r.number(g, "max_cost_increase_pct", "$.gate", minimum=0, default=20.0)),
                int(r.number(g, "min_tag_cases", "$.gate", integer=True, positive=True, maximum=MAX_CASES, default=5)),
                # the noise guard's level (and the power computation's)
                float(r.number(g, "alpha", "$.gate", positive=True, maximum=1, default=0.05)),
                _on_underpowered(r, g),
                # the noise guard: asked for, or implied by an `alpha` below 1 (its meaning before issue 41)
                r.boolean(g, "require_significance", "$.gate", default=noise_guard_asked(g)),
            )

    ci_cap = None
    if "ci" in cfg:
        c = cfg["ci"]
        if not isinstance(c, dict):
            r.err("$.ci", 'ci must be an object {"cost_cap_usd": ...}')
        else:
            r.unknown_keys(c, CI_KEYS, "$.ci", "ci")
            ci_cap = r.number(c, "cost_cap_usd", "$.ci", required=True, positive=True)
            if ci_cap is not None and cap is not None and ci_cap >= cap:
                r.err(
                    "$.ci.cost_cap_usd",
                    f"the CI cost cap ({ci_cap:g}) must be lower than the local cost_cap_usd ({cap:g})",
                )
                ci_cap = None
            elif ci_cap is not None:  # `run --ci` and its grading spend under this cap
                _check_calls_fit(r, cfg, "price", "generator", ci=True)
                if cfg.get("judge") is not None:
                    _check_calls_fit(r, cfg, "judge_price", "judge", ci=True)

    stop: tuple[str, ...] = ()
    if "stop" in cfg:
        s = cfg["stop"]
        s = [s] if isinstance(s, str) else s
        if not isinstance(s, list) or not all(isinstance(x, str) and x for x in s):
            r.err("$.stop", "stop must be a non-empty string or a list of them")
        elif len(s) > 4:
            r.err("$.stop", "stop takes at most 4 sequences (OpenAI API limit)")
        else:
            stop = tuple(s)

    tools: tuple[Json, ...] = ()
    if "tools" in cfg:
        t = cfg["tools"]
        if not isinstance(t, list) or not all(isinstance(x, dict) for x in t):
            r.err("$.tools", "tools must be a list of tool objects")
        else:
            tools = tuple(t)
            raw_unit = cfg.get("unit")
            program = isinstance(raw_unit, dict) and raw_unit.get("kind") in ("command", "python")
            if mode != "chat" and not program:  # a program's tools are answered at EVALKIT_TOOLS_URL
                r.err("$.tools", "tools need chat mode (the completions endpoint has no tools)")

    unit = parse_unit(r, cfg.get("unit"), mode)
    executor = parse_executor(r, cfg.get("executor"))
    # templates: a command or python unit renders none (the case goes to the program as JSON)
    # a broken command or python unit (reported above) still renders no template: no second, spurious error
    raw_unit = cfg.get("unit")
    kind = unit.kind if unit is not None else raw_unit.get("kind") if isinstance(raw_unit, dict) else raw_unit
    own_program = kind in ("command", "python")
    template_file = cfg.get("template", "prompt.txt")
    template: str | None
    if own_program:
        if "template" in cfg or "system" in cfg:
            r.warn("$.template" if "template" in cfg else "$.system", f"a {kind} unit uses no template (ignored)")
        template = ""
    else:
        template = _rel_file(src, r, template_file, "$.template", "template")
    identifiers: set[str] = set()
    if template is not None and not own_program:
        ids = _template_identifiers(template, r, "$.template", f"template {template_file!r}")
        identifiers |= ids or set()
        if not template.strip():
            r.err("$.template", f"template {template_file!r} is empty")
    system = None
    if own_program:
        pass
    elif "system" in cfg and cfg["system"] is not None:
        if mode != "chat":
            r.err("$.system", "a system template needs chat mode")
        else:
            system = _rel_file(src, r, cfg["system"], "$.system", "system template")
    elif mode == "chat" and "system" not in cfg and src.exists("system.txt"):
        system = _rel_file(src, r, "system.txt", "$.system", "system template")
    if system is not None:
        identifiers |= _template_identifiers(system, r, "$.system", "system template") or set()

    suite_side = _SuiteSide(mode, generator, judge, allow_same, identifiers, ci_cap is not None)
    arms = _validate_arms(src, r, cfg, identifiers, unit, suite_side)
    if verdict_judge == "pairwise" and arms is not None and len(arms) < 2:
        r.err("$.verdict_judge", 'verdict_judge "pairwise" compares two arms: the config has one')

    if (
        not generator
        or None in (cap, tin, tout, template, unit, executor)
        or price is None
        or judge_price is None
        or arms is None
    ):
        return None
    assert unit is not None
    return Config(
        generator=generator,
        judge=judge,
        mode=mode,
        template=template or "",
        system=system,
        temperature=None if temperature is None else float(temperature),
        seed=seed,
        k=int(k),
        concurrency=int(concurrency),
        cost_cap_usd=float(cap),
        max_tokens_in=int(tin),
        max_tokens_out=int(tout),
        price=price,
        judge_price=judge_price,
        gate=gate,
        arms=arms,
        stop=stop,
        tools=tools,
        allow_same_judge_model=allow_same,
        allow_uncalibrated_judge=allow_uncalibrated,
        verdict_judge=verdict_judge,
        judged_estimate=judged_estimate,
        timeout_s=float(timeout_s),
        max_attempts=int(attempts),
        ci_cost_cap_usd=None if ci_cap is None else float(ci_cap),
        rate_limit_budget_s=float(rate_budget),
        max_connection_failures=int(conn_failures),
        batch_price=batch_prices.get("batch_price"),
        judge_batch_price=batch_prices.get("judge_batch_price"),
        unit=unit,
        raw=dict(cfg),
        top_p=None if top_p is None else float(top_p),
        executor=executor or Executor(),
    )
