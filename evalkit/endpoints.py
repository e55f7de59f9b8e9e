"""Where a model call goes.

**No silent default endpoint.** The openai client falls back to `api.openai.com` (or to
`OPENAI_BASE_URL`) when it is given no base URL; a user testing a local model would send
their prompts to a third party. evalkit never lets it: every generator and judge call
has a base URL from one of these sources, the first that gives one:

1. the explicit override: `--base-url` / `--judge-base-url`, `run_suite(base_url=...)`,
   `grade_run(judge_base_url=...)`;
2. the role's environment variable, `EVALKIT_BASE_URL` / `EVALKIT_JUDGE_BASE_URL`;
3. the suite's `config.json`, `$.generator.base_url` / `$.judge.base_url`;
4. the judge only: the server `evalkit serve -- COMMAND` runs for this process (see
   below), when that server answers as the judge's model.

None of them: `InputError` (exit 2) before any request, naming the config key and the
other ways to set it. `OPENAI_BASE_URL` is not a source. A replay-only run makes no
model request and may go without one.

**The served server.** `evalkit serve -- COMMAND` runs COMMAND with `EVALKIT_BASE_URL`
set and `EVALKIT_SERVED` holding a JSON object: `base_url`; `model`, the one model the
server answers as (null: the scripted server without a `model`, which answers any);
`pid`, the process serving. A call to that URL for another model than the served one
is refused (the llama.cpp server answers every model name with its one model, so the
judge `judge-model` would silently be Gemma).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from .errors import InputError
from .records import Endpoint

GENERATOR_URL_ENV = "EVALKIT_BASE_URL"
JUDGE_URL_ENV = "EVALKIT_JUDGE_BASE_URL"
SERVED_ENV = "EVALKIT_SERVED"

_ROLES = {
    "generator": (GENERATOR_URL_ENV, "$.generator.base_url", "--base-url", "base_url"),
    "judge": (JUDGE_URL_ENV, "$.judge.base_url", "--judge-base-url", "judge_base_url"),
}


def _same_url(a: str | None, b: str | None) -> bool:
    return bool(a and b) and a.rstrip("/") == b.rstrip("/")  # type: ignore[union-attr]


def _same_model(a: str, b: str) -> bool:
    return a.strip().casefold() == b.strip().casefold()


def served() -> dict | None:
    """The server `evalkit serve -- COMMAND` runs for this process (`EVALKIT_SERVED`),
    or None outside serve. A value that is not the JSON serve writes is an InputError."""
    raw = os.environ.get(SERVED_ENV)
    if not raw:
        return None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("base_url"), str):
        raise InputError(f"environment variable {SERVED_ENV} is not the JSON object `evalkit serve` sets "
                         "(base_url, model, pid); unset it")
    return data


def resolve_base_url(role: str, endpoint: Endpoint, override: str | None = None, *,
                     config_path: str | Path | None = None, replay_only: bool = False) -> str | None:
    """The base URL a `role` ("generator" or "judge") call goes to, from the sources in
    the module docstring, in order. Raises `InputError` when there is none (unless
    `replay_only`: then None) and when the URL is the served server's but the model is
    not the one it serves. `config_path`: the suite's config.json, named in errors."""
    env_name, json_path, flag, kwarg = _ROLES[role]
    server = served()
    url = override or os.environ.get(env_name) or endpoint.base_url
    if not url and role == "judge" and server is not None:
        if server.get("model") is not None and not _same_model(str(server["model"]), endpoint.model):
            raise InputError(
                f"the judge model {endpoint.model!r} has no base URL, and the server `evalkit serve` runs at "
                f"{server['base_url']} answers only as {server['model']!r}, which would judge in its place. "
                f"Either give the judge its own endpoint ({json_path} in config.json, {flag} or {env_name}), "
                f"or make the served model the judge (\"judge\": {{\"model\": \"{server['model']}\"}}; when it is "
                "also the generator's model, add \"allow_same_judge_model\": true, and its scores are not "
                "independent)", config_path, json_path=json_path)
        url = server["base_url"]
    if not url:
        if replay_only:
            return None
        raise InputError(
            f"no base URL for the {role} model {endpoint.model!r}: set {json_path} in config.json, pass {flag} "
            f"(Python: {kwarg}=...), or set {env_name} (`evalkit serve -- COMMAND` sets "
            f"{GENERATOR_URL_ENV} for the model it serves). evalkit never falls back to the openai client's "
            "default host (api.openai.com)", config_path, json_path=json_path)
    if server is not None and _same_url(url, server["base_url"]) and server.get("model") is not None \
            and not _same_model(str(server["model"]), endpoint.model):
        raise InputError(
            f"the {role} model is {endpoint.model!r}, but {url} is the server `evalkit serve` runs, which answers "
            f"only as {server['model']!r} (and would answer in its place): name {server['model']!r} as the "
            f"{role} model, or point {json_path} ({flag}, {env_name}) at an endpoint that serves "
            f"{endpoint.model!r}", config_path, json_path=json_path.replace("base_url", "model"))
    return url
