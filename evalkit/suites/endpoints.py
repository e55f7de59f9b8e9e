"""Where a model call goes, and what watches the server it goes to.

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

**A URL a request can go to.** Whatever its source, a base URL is `http://` or
`https://` with a host, no whitespace or control character, and no credentials
(`user:password@`: the HTTP library refuses to send one beside the API key's
Authorization header, and a password in a URL lands in logs and run records). Anything
else is an `InputError` naming the source (`check_base_url`), before any request,
with the URL's password masked; the API key goes in the variable `api_key_env` names.

**The served server.** `evalkit serve -- COMMAND` runs COMMAND with `EVALKIT_BASE_URL`
set and `EVALKIT_SERVED` holding a JSON object: `base_url`; `model`, the one model the
server answers as (null: the scripted server without a `model`, which answers any);
`status_file`, a file serve writes (atomically) with the server's exit reason once the
server process exits; `pid`, the server process (null when it runs inside serve's own
process). A call to that URL for another model than the served one is refused (the
llama.cpp server answers every model name with its one model, so the judge
`judge-model` would silently be Gemma); a run or grade on that URL is watched through
the status file.

**Watches.** A watch is a callable that returns None while the server is fine and the
reason once it is not (its first line the cause, e.g. "the llama.cpp server (pid 123)
exited: killed by SIGSEGV (signal 11)"; further lines: the last lines of its log).
`run_suite(watch=...)` and `grade_run(watch=...)` consult it before every sample and
every attempt and stop at once, INCOMPLETE, when it reports. `serve.ServerProcess`
offers `exit_reason` as one; `served_watch` gives the one for a URL `evalkit serve`
serves to this process.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from evalkit.foundations.errors import InputError
from evalkit.foundations.records import Endpoint

Watch = Callable[[], "str | None"]

GENERATOR_URL_ENV = "EVALKIT_BASE_URL"
JUDGE_URL_ENV = "EVALKIT_JUDGE_BASE_URL"
SIMULATOR_URL_ENV = "EVALKIT_SIMULATOR_BASE_URL"
SERVED_ENV = "EVALKIT_SERVED"

_ROLES = {
    "generator": (GENERATOR_URL_ENV, "$.generator.base_url", "--base-url", "base_url"),
    "judge": (JUDGE_URL_ENV, "$.judge.base_url", "--judge-base-url", "judge_base_url"),
    "simulator": (SIMULATOR_URL_ENV, "$.simulator.base_url", "--simulator-base-url", "simulator_base_url"),
}


def _same_url(a: str | None, b: str | None) -> bool:
    return bool(a and b) and a.rstrip("/") == b.rstrip("/")  # type: ignore[union-attr]


def _same_model(a: str, b: str) -> bool:
    return a.strip().casefold() == b.strip().casefold()


def masked_url(url: str) -> str:
    """`url` with the password of any `user:password@` replaced by `***` (for messages)."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://[^/@?#:]*):[^/@?#]*@", r"\1:***@", url)


def base_url_problem(url: str) -> str | None:
    """Why `url` cannot be a base URL (see the module docstring), or None when it can."""
    bad = next((ch for ch in url if ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F), None)
    if bad is not None:
        return f"it holds a whitespace or control character ({bad!r}): a request line cannot carry it"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number in range
    except ValueError as exc:
        return f"it is not a URL ({exc})"
    if parts.scheme.lower() not in ("http", "https"):
        scheme = f"scheme {parts.scheme!r}" if parts.scheme else "no scheme"
        return f"it has {scheme}: evalkit speaks only http:// and https://"
    if "@" in parts.netloc:
        return (
            "it holds credentials (user:password@): the HTTP client refuses to send them beside the API key, "
            "and a password in a URL lands in logs and run records; put the key in the variable api_key_env "
            "names and drop the credentials from the URL"
        )
    if not parts.hostname:
        return "it has no host"
    return None


def endpoint_key(url: str) -> str:
    """`url` normalized as the identity of the server it reaches (what the response cache
    keys answers by): scheme and host lower-cased, a default port dropped, no trailing
    slash, no credentials. `http://LOCALHOST:80/v1/` and `http://localhost/v1` are one
    endpoint; `localhost` and `127.0.0.1` are two (nothing proves they are one server)."""
    parts = urlsplit(url.strip())
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    if ":" in host:
        host = f"[{host}]"  # an IPv6 literal
    netloc = host if port is None or (scheme, port) in (("http", 80), ("https", 443)) else f"{host}:{port}"
    path = parts.path.rstrip("/")
    return f"{scheme}://{netloc}{path}" + (f"?{parts.query}" if parts.query else "")


def cache_identity(endpoint: Endpoint, base_url: str) -> str:
    """What the response cache keys answers from `base_url` by: the endpoint's own
    `cache_identity` (config.json) when it has one; else, when `base_url` is the server
    `evalkit serve` runs, the identity serve gives it (the embedded model's file hash and
    settings, a script's hash: not its port, so an identical run through a new serve
    replays); else the normalized URL (`endpoint_key`)."""
    if endpoint.cache_identity:
        return endpoint.cache_identity
    key = endpoint_key(base_url)
    server = served()
    if server is not None and isinstance(server.get("cache_identity"), str) and server["cache_identity"]:
        if endpoint_key(str(server["base_url"])) == key:
            return str(server["cache_identity"])
    return key


def served_model_file(base_url: str | None) -> str | None:
    """The model file of the embedded model `evalkit serve` runs, when `base_url` is that
    server's (its `model_path` in `EVALKIT_SERVED`); else None."""
    server = served() if base_url else None
    if server is None or not isinstance(server.get("model_path"), str) or not server["model_path"]:
        return None
    return str(server["model_path"]) if endpoint_key(str(server["base_url"])) == endpoint_key(str(base_url)) else None


SCRIPTED_IDENTITY = "scripted:sha256="  # how the scripted server's cache identity starts (calls.serve)


def scripted_answers(endpoint: Endpoint, base_url: str | None) -> dict[str, str] | None:
    """`{"answered_by": "scripted", "script_sha256": ...}` when calls to `base_url` are
    answered by evalkit's scripted server (`evalkit serve --scripted`, known by the
    identity serve gives it), so no page or file names the config's model for answers a
    script wrote; None for any other server."""
    ident = cache_identity(endpoint, base_url) if base_url else ""
    if not ident.startswith(SCRIPTED_IDENTITY):
        return None
    return {"answered_by": "scripted", "script_sha256": ident[len(SCRIPTED_IDENTITY) :]}


def check_base_url(url: str, source: str, config_path: str | Path | None = None, json_path: str | None = None) -> str:
    """`url` when a request can go to it, else an `InputError` naming `source` (a flag, an
    environment variable, a config key) and the URL with its password masked."""
    problem = base_url_problem(url)
    if problem is not None:
        raise InputError(
            f"the base URL {masked_url(url)!r} from {source} cannot be used: {problem}",
            config_path,
            json_path=json_path,
        )
    return url


def served() -> dict[str, Any] | None:
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
        raise InputError(
            f"environment variable {SERVED_ENV} is not the JSON object `evalkit serve` sets "
            "(base_url, model, status_file, pid); unset it"
        )
    return data


def resolve_base_url(
    role: str,
    endpoint: Endpoint,
    override: str | None = None,
    *,
    config_path: str | Path | None = None,
    replay_only: bool = False,
) -> str | None:
    """The base URL a `role` ("generator" or "judge") call goes to, from the sources in
    the module docstring, in order. Raises `InputError` when there is none (unless
    `replay_only`: then None) and when the URL is the served server's but the model is
    not the one it serves. `config_path`: the suite's config.json, named in errors."""
    env_name, json_path, flag, kwarg = _ROLES[role]
    server = served()
    url = override or os.environ.get(env_name) or endpoint.base_url
    if url:
        if override:
            check_base_url(url, f"{flag} (Python: {kwarg}=...)")
        elif os.environ.get(env_name):
            check_base_url(url, f"environment variable {env_name}")
        else:
            check_base_url(url, f"{json_path} in config.json", config_path, json_path)
    if not url and role == "judge" and server is not None:
        if server.get("model") is not None and not _same_model(str(server["model"]), endpoint.model):
            raise InputError(
                f"the judge model {endpoint.model!r} has no base URL, and the server `evalkit serve` runs at "
                f"{server['base_url']} answers only as {server['model']!r}, which would judge in its place. "
                f"Either give the judge its own endpoint ({json_path} in config.json, {flag} or {env_name}), "
                f'or make the served model the judge ("judge": {{"model": "{server["model"]}"}}; when it is '
                'also the generator\'s model, add "allow_same_judge_model": true at the top level of config.json, '
                "and its scores are not independent)",
                config_path,
                json_path=json_path,
            )
        url = check_base_url(server["base_url"], f"environment variable {SERVED_ENV}")
    served_model = None if server is None else server.get("model")
    if not url and role == "simulator" and server is not None and served_model in (None, endpoint.model):
        # the server `evalkit serve` runs plays the user too when it answers as any model or as this one
        url = check_base_url(server["base_url"], f"environment variable {SERVED_ENV}")
    if not url:
        if replay_only:
            return None
        raise InputError(
            f"no base URL for the {role} model {endpoint.model!r}: set {json_path} in config.json, pass {flag} "
            f"(Python: {kwarg}=...), or set {env_name} (`evalkit serve -- COMMAND` sets "
            f"{GENERATOR_URL_ENV} for the model it serves). evalkit never falls back to the openai client's "
            "default host (api.openai.com)",
            config_path,
            json_path=json_path,
        )
    if (
        server is not None
        and _same_url(url, server["base_url"])
        and server.get("model") is not None
        and not _same_model(str(server["model"]), endpoint.model)
    ):
        raise InputError(
            f"the {role} model is {endpoint.model!r}, but {url} is the server `evalkit serve` runs, which answers "
            f"only as {server['model']!r} (and would answer in its place): name {server['model']!r} as the "
            f"{role} model, or point {json_path} ({flag}, {env_name}) at an endpoint that serves "
            f"{endpoint.model!r}",
            config_path,
            json_path=json_path.replace("base_url", "model"),
        )
    return url


def process_gone(pid: int) -> bool:
    """True when process `pid` has exited (gone, or a zombie its parent has not reaped
    yet), as far as this process can see; False while it runs or when it cannot tell."""
    if os.path.isdir("/proc/self"):
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                stat = fh.read()
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return stat[stat.rindex(b")") + 2 :][:1] in (b"Z", b"X")  # the state follows "(name) "
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def status_file_watch(path: str | Path, pid: int | None = None, *, grace_s: float = 2.0) -> Watch:
    """A watch that reports the text of `path` once that file exists (`evalkit serve`
    writes its server's exit reason there within ~50 ms of the exit). With `pid` (the
    server process) it also looks at the process itself, so a death is seen as soon
    as in the server's parent; it then waits up to `grace_s` for the file's reason. One
    stat (and one read of /proc) per call until then."""
    p = Path(path)
    seen: list[str] = []

    def read() -> str | None:
        try:
            return p.read_text(encoding="utf-8").strip() or "the model server exited"
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"the model server's status file {p} cannot be read: {exc.strerror or exc}"

    def watch() -> str | None:
        if seen:
            return seen[0]
        text = read()
        if text is None and pid is not None and process_gone(pid):
            deadline = time.monotonic() + grace_s
            while text is None and time.monotonic() < deadline:
                time.sleep(0.02)
                text = read()
            text = text or f"the model server (pid {pid}) exited"
        if text is not None:
            seen.append(text)
        return text

    return watch


def served_watch(base_url: str | None) -> Watch | None:
    """The watch on the server `evalkit serve` runs for this process, when `base_url`
    is that server's; else None."""
    server = served()
    if server is None or not server.get("status_file") or not _same_url(base_url, server["base_url"]):
        return None
    pid = server.get("pid")
    return status_file_watch(server["status_file"], pid if isinstance(pid, int) else None)


def combine(*watches: Watch | None) -> Watch | None:
    """One watch reporting the first reason any of `watches` gives (None: no watch)."""
    live = [w for w in watches if w is not None]
    if not live:
        return None
    if len(live) == 1:
        return live[0]

    def watch() -> str | None:
        for w in live:
            reason = w()
            if reason:
                return reason
        return None

    return watch
