"""A conversation suite's parts, validated: the simulator endpoint, its prompt file, each
case's simulated user (tau2-bench's `user_scenario`).

A suite whose `config.json` has a `simulator` runs every case as a conversation
(`evalkit.conversations`): the simulator plays the user described by the case's
`input.user`, the unit under test answers each turn. The simulator is a third paid role,
checked by the same rules as the generator and the judge: an endpoint with no silent
default host, a price, one call that fits under the cap. docs/formats.md, "Conversations".
"""

from __future__ import annotations

from typing import Any

from evalkit.foundations.checks import CHECK_SCOPES
from evalkit.foundations.layout import SIMULATOR_DIR, simulator_prompt_file
from evalkit.foundations.records import Simulator
from evalkit.suites.suite_settings import SAMPLING_BOUNDS, _check_calls_fit, _endpoint, _price
from evalkit.suites.suite_source import SuiteSource, _Reader, _rel_file

SIMULATOR_KEYS = {"model", "base_url", "api_key_env", "price", "temperature", "max_tokens_out"}
# `input.user`: tau2-bench's `user_scenario` (persona) and its `instructions` (the rest)
USER_KEYS = ("persona", "reason_for_call", "known_info", "unknown_info", "task_instructions")
CONVERSATION_INPUT_KEYS = ("user", "first_message", "max_turns")
DEFAULT_MAX_TURNS, MAX_MAX_TURNS = 10, 100
# What the simulator ends a conversation with (text before a marker is the user's last turn).
STOP_MARKERS = {"###STOP###": "user_stop", "###TRANSFER###": "transfer", "###OUT-OF-SCOPE###": "out_of_scope"}


def parse_simulator(src: SuiteSource, r: _Reader, cfg: dict[str, Any]) -> Simulator | None:
    """`config.json`'s `simulator` as a `Simulator`, with the suite's latest
    `simulator/prompt-vN.md`; None when absent or after reporting what is wrong."""
    obj = cfg.get("simulator")
    if obj is None:
        return None
    jp = "$.simulator"
    if not isinstance(obj, dict):
        r.err(jp, "simulator must be an object with model, base_url, api_key_env, price")
        return None
    r.unknown_keys(obj, SIMULATOR_KEYS, jp, "simulator")
    endpoint = _endpoint(
        r, {k: v for k, v in obj.items() if k in ("model", "base_url", "api_key_env")}, jp, "simulator", True
    )
    price = _price(r, obj, "price", at=jp)
    temperature = r.number(obj, "temperature", jp, **SAMPLING_BOUNDS["temperature"])
    tokens_out = r.number(obj, "max_tokens_out", jp, **{**SAMPLING_BOUNDS["max_tokens_out"], "default": 256})
    # one simulator call at its worst case fits under the cap
    _check_calls_fit(
        r,
        {**cfg, "simulator_price": obj.get("price"), "max_tokens_out": tokens_out},
        "simulator_price",
        "simulator",
        at=jp,
    )
    prompt = _simulator_prompt(src, r)
    if endpoint is None or price is None or tokens_out is None or prompt is None:
        return None
    return Simulator(
        endpoint=endpoint,
        price=price,
        prompt=prompt[1],
        prompt_file=prompt[0],
        temperature=None if temperature is None else float(temperature),
        max_tokens_out=int(tokens_out),
    )


def _simulator_prompt(src: SuiteSource, r: _Reader) -> tuple[str, str] | None:
    """The suite's simulator prompt: (its file, its text), the highest version of
    `simulator/prompt-vN.md`; None after reporting that there is none or that it is empty."""
    versions = sorted(
        (v, name) for name in src.listdir(SIMULATOR_DIR) if (v := simulator_prompt_file(name)) is not None
    )
    if not versions:
        r.err(
            "$.simulator",
            f"a simulator needs its prompt: {SIMULATOR_DIR}/prompt-v1.md (evalkit init --conversation writes one)",
        )
        return None
    rel = f"{SIMULATOR_DIR}/{versions[-1][1]}"
    text = _rel_file(src, r, rel, "$.simulator", "simulator prompt")
    if text is not None and not text.strip():
        r.err("$.simulator", f"simulator prompt {rel!r} is empty")
        return None
    return None if text is None else (rel, text)


def check_conversation_input(r: _Reader, inp: Any, prefix: str, label: str) -> bool:
    """A conversation case's `input.user` (strings, the keys of `USER_KEYS`),
    `input.first_message` (a string) and `input.max_turns` (1..100); whether usable."""
    if not isinstance(inp, dict):
        r.err(prefix + ".input", label + "a conversation case's input is an object with a `user`")
        return False
    user = inp.get("user")
    ok = True
    if not isinstance(user, dict) or not user:
        r.err(prefix + ".input.user", label + f"input.user must be an object with any of {', '.join(USER_KEYS)}")
        return False
    r.unknown_keys(user, set(USER_KEYS), prefix + ".input.user", "input.user")
    for key, value in user.items():
        if key in USER_KEYS and not isinstance(value, str):
            r.err(prefix + f".input.user.{key}", label + f"input.user.{key} must be a string")
            ok = False
    if "first_message" in inp and not (isinstance(inp["first_message"], str) and inp["first_message"].strip()):
        r.err(prefix + ".input.first_message", label + "input.first_message must be a non-empty string")
        ok = False
    at = prefix + ".input"
    if (
        "max_turns" in inp
        and r.number(inp, "max_turns", at, integer=True, positive=True, maximum=MAX_MAX_TURNS) is None
    ):
        ok = False
    return ok


def check_scope(r: _Reader, scope: Any, jp: str, label: str, conversation: bool) -> bool:
    """A check's `scope`: "final" (the final assistant message, the default) or
    "conversation" (every assistant message), the latter only in a conversation suite."""
    if scope not in CHECK_SCOPES:
        r.err(f"{jp}.scope", label + f"scope must be one of {', '.join(CHECK_SCOPES)}, got {scope!r}")
        return False
    if scope == "conversation" and not conversation:
        r.err(f"{jp}.scope", label + 'scope "conversation" needs a conversation suite (config.json `simulator`)')
        return False
    return True


# What the judge is asked of a case's `expected.nl_assertions` (tau2-bench's name): one
# call per conversation, the whole transcript as the output it reads.
NL_ASSERTIONS_RUBRIC = (
    "Read the whole conversation between the user and the agent. Score 5 when every statement "
    "below holds of the agent's side of it, 1 when any one does not (name it in your reason):"
)


def nl_assertions_rubric(r: _Reader, expected: dict[str, Any], prefix: str, label: str) -> tuple[str | None, bool]:
    """A conversation case's `expected.nl_assertions` (a non-empty list of statements) as
    the judge's rubric; it takes the place of `expected.rubric`, never both."""
    jp = prefix + ".expected.nl_assertions"
    items = expected["nl_assertions"]
    if "rubric" in expected:
        r.err(jp, label + "expected has both rubric and nl_assertions: keep one")
        return None, False
    if not isinstance(items, list) or not items or not all(isinstance(x, str) and x.strip() for x in items):
        r.err(jp, label + "nl_assertions must be a non-empty list of statements (strings)")
        return None, False
    return NL_ASSERTIONS_RUBRIC + "\n" + "\n".join(f"- {x.strip()}" for x in items), True
