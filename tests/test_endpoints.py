"""No silent default endpoint: every model call has a base URL from a named source, or
it is refused before any request; the server `evalkit serve` runs is offered to the
judge only when it answers as the judge's model; watches report a dead server."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evalkit.suites.endpoints import GENERATOR_URL_ENV, JUDGE_URL_ENV, SERVED_ENV, process_gone, resolve_base_url, served_watch, status_file_watch
from evalkit.foundations.errors import InputError
from evalkit.foundations.records import Endpoint
from evalkit.running.runner import run_suite

from conftest import write_engine_suite

GEN = Endpoint("gen-model", None, "EVALKIT_TEST_KEY")
JUDGE = Endpoint("judge-model", None, "EVALKIT_TEST_KEY")
CASES = [{"id": "c1", "input": "France?", "expected": "Paris", "tags": ["capital"]}]


@pytest.fixture(autouse=True)
def _no_urls_from_the_environment(monkeypatch):
    for name in (GENERATOR_URL_ENV, JUDGE_URL_ENV, SERVED_ENV, "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def _served(monkeypatch, url: str, model: str | None, status_file: Path | None = None, pid: int | None = None):
    monkeypatch.setenv(SERVED_ENV, json.dumps({"base_url": url, "model": model,
                                               "status_file": str(status_file) if status_file else None,
                                               "pid": pid}))


def test_the_sources_in_order_override_env_config(monkeypatch):
    cfg = Endpoint("gen-model", "http://127.0.0.1:3/v1", "K")
    assert resolve_base_url("generator", cfg) == "http://127.0.0.1:3/v1"
    monkeypatch.setenv(GENERATOR_URL_ENV, "http://127.0.0.1:2/v1")
    assert resolve_base_url("generator", cfg) == "http://127.0.0.1:2/v1"
    assert resolve_base_url("generator", cfg, "http://127.0.0.1:1/v1") == "http://127.0.0.1:1/v1"
    # each role reads its own variable
    assert resolve_base_url("judge", Endpoint("judge-model", "http://127.0.0.1:4/v1")) == "http://127.0.0.1:4/v1"
    monkeypatch.setenv(JUDGE_URL_ENV, "http://127.0.0.1:5/v1")
    assert resolve_base_url("judge", JUDGE) == "http://127.0.0.1:5/v1"


@pytest.mark.parametrize("role, endpoint, key, flag, env", [
    ("generator", GEN, "$.generator.base_url", "--base-url", GENERATOR_URL_ENV),
    ("judge", JUDGE, "$.judge.base_url", "--judge-base-url", JUDGE_URL_ENV),
])
def test_no_url_from_any_source_names_the_key_and_every_way_to_set_it(role, endpoint, key, flag, env, tmp_path):
    with pytest.raises(InputError) as e:
        resolve_base_url(role, endpoint, config_path=tmp_path / "config.json")
    msg = str(e.value)
    assert e.value.json_path == key and str(tmp_path / "config.json") in msg
    assert flag in msg and env in msg and endpoint.model in msg and "api.openai.com" in msg
    assert resolve_base_url(role, endpoint, replay_only=True) is None  # a replay sends no request


def test_the_served_server_judges_only_as_its_own_model(monkeypatch, tmp_path):
    _served(monkeypatch, "http://127.0.0.1:7/v1", "gemma-3-270m")
    with pytest.raises(InputError) as e:
        resolve_base_url("judge", JUDGE, config_path=tmp_path / "config.json")
    msg = str(e.value)
    # what to do: the judge's own endpoint, or the served model as judge (and the override)
    assert "'gemma-3-270m'" in msg and "$.judge.base_url" in msg and "--judge-base-url" in msg
    assert "allow_same_judge_model" in msg
    assert resolve_base_url("judge", Endpoint("Gemma-3-270M")) == "http://127.0.0.1:7/v1"
    # a judge with an endpoint of its own is not taken over by serve
    assert resolve_base_url("judge", Endpoint("judge-model", "http://127.0.0.1:8/v1")) == "http://127.0.0.1:8/v1"
    # the generator is not served a model under another name either
    with pytest.raises(InputError, match="answers only as 'gemma-3-270m'") as e:
        resolve_base_url("generator", GEN, "http://127.0.0.1:7/v1/")
    assert e.value.json_path == "$.generator.model"
    # a server that answers any model (the scripted server without `model`) judges any
    _served(monkeypatch, "http://127.0.0.1:7/v1", None)
    assert resolve_base_url("judge", JUDGE) == "http://127.0.0.1:7/v1"


def test_a_value_of_evalkit_served_that_serve_did_not_write_is_refused(monkeypatch):
    monkeypatch.setenv(SERVED_ENV, "http://127.0.0.1:7/v1")
    with pytest.raises(InputError, match=SERVED_ENV):
        resolve_base_url("judge", JUDGE)


def test_a_status_file_watch_reports_the_file_and_a_dead_pid(tmp_path, monkeypatch):
    status = tmp_path / "status.txt"
    proc = subprocess.Popen(["sleep", "60"])  # a live pid to watch (no interpreter needed); killed below
    try:
        watch = status_file_watch(status, proc.pid, grace_s=0.3)
        assert watch() is None and not process_gone(proc.pid)
        status.write_text("the model server exited: killed by SIGSEGV (signal 11)\nlog line\n")
        assert watch().startswith("the model server exited: killed by SIGSEGV")
    finally:
        proc.kill()
        proc.wait()
    assert process_gone(proc.pid)
    # a dead process with no status file yet: reported after the grace, by pid
    t0 = time.monotonic()
    assert status_file_watch(tmp_path / "none.txt", proc.pid, grace_s=0.3)() == \
        f"the model server (pid {proc.pid}) exited"
    assert 0.25 < time.monotonic() - t0 < 2
    # served_watch only watches the URL serve serves
    _served(monkeypatch, "http://127.0.0.1:7/v1", "m", status, proc.pid)
    assert served_watch("http://127.0.0.1:8/v1") is None
    assert served_watch("http://127.0.0.1:7/v1")().endswith("log line")


def _listener() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    s.setblocking(False)
    return s


def _accepted_nothing(s: socket.socket) -> bool:
    try:
        conn, _ = s.accept()
    except BlockingIOError:
        return True
    conn.close()
    return False


def _run_cli(args: list[str], env: dict[str, str]):
    """`evalkit ARGS` through click in this process with exactly `env` as the environment
    (every other variable unset for the call): what a fresh process would see, without
    paying for one (the process boundary is not what these tests test)."""
    from click.testing import CliRunner

    from evalkit._cli.main import main

    unset: dict[str, str | None] = {k: None for k in os.environ if k not in env}
    return CliRunner().invoke(main, args, env={**unset, **env})


def test_a_run_with_no_base_url_is_refused_before_any_connection(tmp_path):
    """`evalkit run` with no URL from any source, a key set, and the openai client's own
    fallbacks pointed at listening sockets: OPENAI_BASE_URL (which the client reads when
    given no base URL) and the proxy variables (through which it would reach
    api.openai.com). Before the fix the run connected to the first; now it exits 2,
    names the key and connects to neither."""
    suite = write_engine_suite(tmp_path / "suite", CASES)
    fallback, proxy = _listener(), _listener()
    env = {k: v for k, v in os.environ.items() if k not in (GENERATOR_URL_ENV, JUDGE_URL_ENV, SERVED_ENV)}
    env.update({"EVALKIT_TEST_KEY": "sk-test", "OPENAI_API_KEY": "sk-test",
                "OPENAI_BASE_URL": f"http://127.0.0.1:{fallback.getsockname()[1]}/v1",
                **{v: f"http://127.0.0.1:{proxy.getsockname()[1]}" for v in
                   ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")},
                "NO_PROXY": "", "no_proxy": ""})
    try:
        # In this process (the openai client and its transports read these variables when
        # built, wherever that is): once the command has returned, a connection it made
        # would already wait in a listener's backlog, as the kernel completes a loopback
        # handshake before connect() returns.
        res = _run_cli(["run", str(suite), "--no-progress", "--runs-dir", str(tmp_path / "runs")], env)
        assert res.exit_code == 2, res.stderr
        assert "$.generator.base_url" in res.stderr and str(suite / "config.json") in res.stderr
        assert "--base-url" in res.stderr and GENERATOR_URL_ENV in res.stderr
        assert _accepted_nothing(fallback) and _accepted_nothing(proxy)
    finally:
        fallback.close()
        proxy.close()
    assert not (tmp_path / "runs").exists()  # nothing half-made


def test_the_python_api_refuses_a_run_with_no_base_url_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALKIT_TEST_KEY", "sk-test")
    suite = write_engine_suite(tmp_path / "suite", CASES)
    with pytest.raises(InputError, match=r"base_url=\.\.\.") as e:
        run_suite(suite, runs_dir=tmp_path / "runs", progress=False)
    assert e.value.json_path == "$.generator.base_url"
    assert not (tmp_path / "runs").exists()
    # a bare ModelClient without a URL is refused too: nothing builds an openai client on its default host
    from evalkit.calls.client import ModelClient
    from evalkit.calls.ledger import Ledger
    from evalkit.foundations.records import Price
    with pytest.raises(InputError, match="never falls back"):
        ModelClient(GEN, Price(1.0, 1.0), Ledger(1.0), max_tokens_in=8, max_tokens_out=8)


@pytest.mark.parametrize("source", ["override", "env", "config", "served"])
def test_a_base_url_no_request_can_go_to_is_refused_naming_its_source(source, monkeypatch, tmp_path):
    bad = "http://u:p4ssw0rd@127.0.0.1:9/v1"
    endpoint = Endpoint("gen-model", bad if source == "config" else None, "K")
    if source == "env":
        monkeypatch.setenv(GENERATOR_URL_ENV, bad)
    if source == "served":
        _served(monkeypatch, bad, None)
        endpoint = Endpoint("judge-model", None, "K")
    with pytest.raises(InputError) as e:
        resolve_base_url("judge" if source == "served" else "generator", endpoint,
                         bad if source == "override" else None, config_path=tmp_path / "config.json")
    msg = str(e.value)
    assert "credentials" in msg and "p4ssw0rd" not in msg and "http://u:***@127.0.0.1:9/v1" in msg
    named = {"override": "--base-url", "env": GENERATOR_URL_ENV, "config": "$.generator.base_url",
             "served": SERVED_ENV}[source]
    assert named in msg
    if source == "config":
        assert e.value.json_path == "$.generator.base_url" and str(tmp_path / "config.json") in msg


@pytest.mark.parametrize("env, args, named", [
    ({"EVALKIT_TEST_KEY": "sk-abc123\n"}, [], "EVALKIT_TEST_KEY"),
    ({"EVALKIT_TEST_KEY": "sk-abc123"}, ["--base-url", "http://u:p4ssw0rd@{host}/v1"], "--base-url"),
    ({"EVALKIT_TEST_KEY": "sk-abc123"}, ["--base-url", "ftp://{host}/v1"], "scheme 'ftp'"),
])
def test_a_run_that_could_send_nothing_exits_2_before_writing_anything(tmp_path, env, args, named):
    """Before the fix each of these made every key "malformed response" (or "connection
    error") at its worst case until the cap was spent, the server receiving nothing."""
    from evalkit.calls.serve import ScriptedServer
    suite = write_engine_suite(tmp_path / "suite", CASES)
    with ScriptedServer({"default": {"text": "Paris"}}) as srv:
        host = srv.base_url.split("//")[1].split("/")[0]
        args = [a.format(host=host) for a in args] or ["--base-url", srv.base_url]
        full = {**{k: v for k, v in os.environ.items() if not k.startswith("EVALKIT_")}, **env}
        res = _run_cli(["run", str(suite), "--no-progress", "--runs-dir", str(tmp_path / "runs"), *args], full)
        assert srv.stats["requests"] == 0
    assert res.exit_code == 2, res.stderr
    assert named in res.stderr and "p4ssw0rd" not in res.stderr + res.stdout and "sk-abc" not in res.stderr
    assert not (tmp_path / "runs").exists()  # nothing written


def test_the_cache_identity_is_the_configs_then_the_served_servers_then_the_url(monkeypatch):
    # issue 33: the response cache keys answers by what they depend on, never by a serve's port
    import json as _json

    from evalkit.suites.endpoints import cache_identity
    from evalkit.foundations.records import Endpoint

    monkeypatch.delenv("EVALKIT_SERVED", raising=False)
    plain = Endpoint("m", None)
    assert cache_identity(plain, "http://LOCALHOST:80/v1/") == "http://localhost/v1"  # the URL, normalized
    named = Endpoint("m", None, cache_identity="prod-gpt")
    assert cache_identity(named, "http://127.0.0.1:9/v1") == "prod-gpt"
    served = {"base_url": "http://127.0.0.1:18181/v1", "model": None, "status_file": "/x", "pid": 1,
              "cache_identity": "llama.cpp:gguf-sha256=abc;n_ctx=2048"}
    monkeypatch.setenv("EVALKIT_SERVED", _json.dumps(served))
    assert cache_identity(plain, "http://127.0.0.1:18181/v1/") == served["cache_identity"]
    assert cache_identity(plain, "http://127.0.0.1:9999/v1") == "http://127.0.0.1:9999/v1"  # another server
    assert cache_identity(named, "http://127.0.0.1:18181/v1") == "prod-gpt"  # the config's own wins
    monkeypatch.setenv("EVALKIT_SERVED", _json.dumps({**served, "cache_identity": None}))  # a server that has none
    assert cache_identity(plain, "http://127.0.0.1:18181/v1") == "http://127.0.0.1:18181/v1"


def test_cache_identity_in_config_is_read_and_an_empty_one_refused(tmp_path):
    import json as _json

    from evalkit.intake.lint import lint_suite, load_suite
    from evalkit.suites.suite import scaffold_suite

    suite = tmp_path / "unit"
    scaffold_suite(suite)
    cfg = _json.loads((suite / "config.json").read_text())
    cfg["generator"]["cache_identity"] = "gemma-3-270m@my-gpu-box"
    (suite / "config.json").write_text(_json.dumps(cfg))
    assert load_suite(suite).config.generator.cache_identity == "gemma-3-270m@my-gpu-box"
    cfg["generator"]["cache_identity"] = " "
    (suite / "config.json").write_text(_json.dumps(cfg))
    assert any(e.json_path == "$.generator.cache_identity" for e in lint_suite(suite).errors)


def test_cache_identity_is_the_generators_only(tmp_path):
    import json as _json

    from evalkit.intake.lint import lint_suite
    from evalkit.suites.suite import scaffold_suite

    suite = tmp_path / "unit"
    scaffold_suite(suite)
    cfg = _json.loads((suite / "config.json").read_text())
    cfg["judge"]["cache_identity"] = "my-judge"
    (suite / "config.json").write_text(_json.dumps(cfg))
    [err] = [e for e in lint_suite(suite).errors if e.json_path == "$.judge.cache_identity"]
    assert "the generator's" in err.message


def test_the_generators_api_may_be_anthropic_or_gemini_the_judges_may_not_and_nothing_else_is_read(tmp_path):
    from evalkit.suites.reader import load_suite

    case = [{"id": "a", "input": "x", "tags": ["golden"], "checks": [{"kind": "contains", "value": "y"}]}]
    generator = {"model": "claude", "base_url": "https://api.anthropic.com/v1", "api_key_env": "ANTHROPIC_KEY"}
    suite = load_suite(write_engine_suite(tmp_path / "ok", case, generator={**generator, "api": "anthropic"}))
    assert suite.config.generator.api == "anthropic"
    assert load_suite(write_engine_suite(tmp_path / "plain", case)).config.generator.api == "openai"
    gemini = load_suite(write_engine_suite(tmp_path / "gemini", case, generator={**generator, "api": "gemini"}))
    assert gemini.config.generator.api == "gemini"
    with pytest.raises(InputError, match=r"api must be one of openai, anthropic, gemini, got 'bedrock'"):
        load_suite(write_engine_suite(tmp_path / "bad", case, generator={**generator, "api": "bedrock"}))
    with pytest.raises(InputError, match="api is the generator's"):
        load_suite(write_engine_suite(tmp_path / "judge", case, judge={**generator, "api": "anthropic"}))
