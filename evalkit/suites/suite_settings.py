"""The settings a suite and each of its arms share, read and checked one way for both: an
endpoint, a price, a batch price above the online one, the calls a cost cap covers.
Split out of `evalkit.suites.suite`, which re-exports every public name.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal, cast

from evalkit.foundations.records import (
    Endpoint,
    Price,
)
from evalkit.suites.endpoints import base_url_problem, masked_url
from evalkit.suites.suite_source import (
    ENDPOINT_APIS,
    ENDPOINT_KEYS,
    MAX_PRICE_PER_MTOK,
    MAX_SEED,
    MAX_TOKENS,
    PRICE_KEYS,
    _Reader,
)

# The bounds of the sampling settings a suite sets and an arm may override (`_Reader.number`'s
# keywords): one table, so that the suite and each arm are held to the same limits.
SAMPLING_BOUNDS: dict[str, dict[str, Any]] = {
    "temperature": {"minimum": 0, "maximum": 2, "nullable": True},
    "top_p": {"minimum": 0, "maximum": 1, "nullable": True},
    "seed": {"integer": True, "nullable": True, "minimum": -MAX_SEED - 1, "maximum": MAX_SEED},
    "max_tokens_out": {"integer": True, "positive": True, "maximum": MAX_TOKENS},
}


def _endpoint(r: _Reader, obj: Any, jp: str, what: str, required: bool) -> Endpoint | None:
    if obj is None:
        if required:
            r.err(jp, f"missing required key {jp.rsplit('.', 1)[-1]!r}")
        return None
    if not isinstance(obj, dict):
        r.err(jp, f"{what} must be an object with model, base_url, api_key_env")
        return None
    r.unknown_keys(obj, ENDPOINT_KEYS, jp, what)
    model = r.text(obj, "model", jp, required=True)
    base_url = r.text(obj, "base_url", jp, nullable=True)
    if isinstance(base_url, str) and not re.match(r"^https?://", base_url):
        r.err(f"{jp}.base_url", f"base_url must start with http:// or https://, got {masked_url(base_url)!r}")
    elif isinstance(base_url, str) and (problem := base_url_problem(base_url)) is not None:
        r.err(f"{jp}.base_url", f"base_url {masked_url(base_url)!r} cannot be used: {problem}")
    key_env = r.text(obj, "api_key_env", jp, default="OPENAI_API_KEY")
    if isinstance(key_env, str) and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key_env):
        r.err(f"{jp}.api_key_env", "api_key_env must name an environment variable (not hold a key)")
    identity = r.text(obj, "cache_identity", jp, nullable=True)
    if isinstance(identity, str) and not identity.strip():
        r.err(f"{jp}.cache_identity", "cache_identity must be a non-empty string (or null: the base URL)")
    elif identity is not None and what != "generator":
        # the judge's answers are cached per run, scoped to its identity (model, endpoint,
        # judge files), which its calibration is recorded for: not renamed by a key
        r.err(f"{jp}.cache_identity", "cache_identity is the generator's (the response cache); the judge has none")
    api = r.text(obj, "api", jp, default="openai") or "openai"
    if api not in ENDPOINT_APIS:
        r.err(f"{jp}.api", f"api must be one of {', '.join(ENDPOINT_APIS)}, got {api!r}")
    elif api != "openai" and what != "generator":
        r.err(f"{jp}.api", "api is the generator's (an agent's Messages calls pass through); the judge speaks chat")
    if model is None:
        return None
    return Endpoint(
        model=model,
        base_url=base_url,
        api_key_env=key_env or "OPENAI_API_KEY",
        cache_identity=identity or None,
        api=api,
    )


def _price(r: _Reader, cfg: dict[str, Any], key: str, at: str = "$") -> Price | None:
    jp = f"{at}.{key}"
    if key not in cfg:
        r.err(
            jp,
            f"missing required key {key!r}: evalkit refuses to run without a price "
            '({"in_per_mtok": ..., "out_per_mtok": ...} in USD per million tokens)',
        )
        return None
    obj = cfg[key]
    if not isinstance(obj, dict):
        r.err(jp, f'{key} must be an object {{"in_per_mtok", "out_per_mtok"}}')
        return None
    r.unknown_keys(obj, PRICE_KEYS, jp, key)
    pin = r.number(obj, "in_per_mtok", jp, required=True, minimum=0, maximum=MAX_PRICE_PER_MTOK)
    pout = r.number(obj, "out_per_mtok", jp, required=True, minimum=0, maximum=MAX_PRICE_PER_MTOK)
    if pin is None or pout is None:
        return None
    if pin == 0 and pout == 0:
        r.warn(
            jp,
            f"{key} is 0 for input and output tokens: every call costs $0 at its worst case, so "
            "cost_cap_usd cannot bind (nothing stops a run that is in fact paid for)",
        )
    else:
        for name, v, what in (("in_per_mtok", pin, "input"), ("out_per_mtok", pout, "output")):
            if v == 0:
                r.warn(
                    f"{jp}.{name}",
                    f"{name} is 0: {what} tokens cost nothing under the ledger, so the cap cannot bind on them",
                )
    return Price(float(pin), float(pout))


def _positive_number(obj: Any, key: str, *, zero_ok: bool = False) -> float | None:
    """`obj[key]` when it is a finite number above 0 (or 0 with `zero_ok`), else None
    (the typed getters report what is wrong with it)."""
    v = obj.get(key) if isinstance(obj, dict) else None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v) if (v > 0 or (zero_ok and v == 0)) else None


def _on_underpowered(r: _Reader, g: dict[str, Any]) -> Literal["fail", "warn"]:
    """`gate.on_underpowered`: "warn" (the default: an UNDERPOWERED gate says so and is
    decided on its thresholds) or "fail" (a suite that wants a gate too small to see its
    threshold to exit 1)."""
    v = g.get("on_underpowered", "warn")
    if v not in ("fail", "warn"):
        r.err("$.gate.on_underpowered", f'on_underpowered must be "fail" or "warn", got {v!r}')
        return "warn"
    return cast(Literal["fail", "warn"], v)


def _check_calls_fit(
    r: _Reader, cfg: dict[str, Any], price_key: str, role: str, *, ci: bool = False, at: str = "$"
) -> None:
    """An error when not one call fits under the cap at its worst case: the ledger would
    refuse the first reservation and the run could never sample anything. Checked on
    the values as written, even those over a limit (so 10**9 tokens says both). `ci`:
    the CI cap (`ci.cost_cap_usd`, which `run --ci` and its grading spend under)
    instead of `cost_cap_usd`."""
    cap_name = "ci.cost_cap_usd" if ci else "cost_cap_usd"
    cap = _positive_number(cfg.get("ci") if ci else cfg, "cost_cap_usd")
    tin, tout = (_positive_number(cfg, k) for k in ("max_tokens_in", "max_tokens_out"))
    price = cfg.get(price_key)
    pin, pout = (_positive_number(price, k, zero_ok=True) for k in ("in_per_mtok", "out_per_mtok"))
    if None in (cap, tin, tout, pin, pout):
        return
    assert cap is not None and tin is not None and tout is not None and pin is not None and pout is not None
    worst = Price(pin, pout).cost(int(tin), int(tout))  # what the ledger reserves for one call
    if worst > cap + 1e-12:  # the ledger's own tolerance
        if ci:
            jp = "$.ci.cost_cap_usd"
        else:
            jp = f"{at}.max_tokens_out" if tout * pout >= tin * pin else "$.max_tokens_in"
        never = "a CI run could never grade" if ci and role == "judge" else "the run could never sample"
        r.err(
            jp,
            f"one {role} call costs up to ${worst:.6g} (max_tokens_in {int(tin)} x {price_key}.in_per_mtok "
            f"{pin:g} + max_tokens_out {int(tout)} x {price_key}.out_per_mtok {pout:g}, per million tokens), "
            f"over {cap_name} ${cap:g}: 0 calls fit under the cap, {never}; lower the "
            "token ceilings or raise the cap",
        )


def _batch_price_above(r: _Reader, cfg: dict[str, Any], key: str, online: str, at: str = "$") -> None:
    """A warning when a batch price is above its online price: providers charge less for
    a batch (OpenAI: half), so the number is likely a typo or a swap."""
    b, o = cfg.get(key), cfg.get(online)
    for name in ("in_per_mtok", "out_per_mtok"):
        bv, ov = _positive_number(b, name, zero_ok=True), _positive_number(o, name, zero_ok=True)
        if bv is not None and ov is not None and bv > ov:
            r.warn(
                f"{at}.{key}.{name}",
                f"{key}.{name} {bv:g} is above {online}.{name} {ov:g}: a provider batch costs less than "
                "an online call (OpenAI: half); check the two prices",
            )


def _same_model(a: Endpoint, b: Endpoint) -> bool:
    return a.model.strip().casefold() == b.model.strip().casefold()
