"""The scripted server and the embedded model, driven over real HTTP on loopback.

Every model call goes through the official `openai` client (sync and async) or a raw
`httpx` request, against a real `ScriptedServer` or llama.cpp server; nothing is patched.
"""
from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
import textwrap
import time

import httpx
import openai
import pytest

from evalkit.errors import InputError
from evalkit.serve import ScriptedServer, count_words, load_script

SCRIPT = {
    "model": "scripted",
    "rules": [
        {"match": "France", "text": "Paris is the capital of France"},
        {"match": "Peru", "texts": ["Lima", "Cusco", "Arequipa", "Trujillo"], "weights": [0.4, 0.3, 0.2, 0.1]},
        {"match": "weather", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}]},
        {"match": "big", "text": "x", "usage": {"prompt_tokens": 10, "completion_tokens": 99999}},
        {"match": ["alpha", "omega"], "text": "both\nsecond line"},
    ],
    "default": {"text": "unknown"},
}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def server():
    with ScriptedServer(SCRIPT) as srv:
        yield srv


def client(srv: ScriptedServer, **kw) -> openai.OpenAI:
    kw.setdefault("max_retries", 0)
    return openai.OpenAI(base_url=srv.base_url, api_key="test-key", **kw)


def aclient(srv: ScriptedServer, **kw) -> openai.AsyncOpenAI:
    kw.setdefault("max_retries", 0)
    return openai.AsyncOpenAI(base_url=srv.base_url, api_key="test-key", **kw)


# -- answers ---------------------------------------------------------------------------

def test_completion_answer_has_openai_shape(server):
    r = client(server).completions.create(model="scripted", prompt="Capital of France?", max_tokens=50)
    assert r.object == "text_completion" and r.id.startswith("cmpl-")
    assert r.model == "scripted" and r.system_fingerprint and r.created > 0
    assert r.choices[0].text == "Paris is the capital of France"
    assert r.choices[0].finish_reason == "stop"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (3, 6, 9)
    assert server.requests[-1]["prompt"] == "Capital of France?"


def test_chat_answer_through_async_client(server):
    async def go():
        c = aclient(server)
        try:
            return await c.chat.completions.create(
                model="scripted",
                messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "France?"}],
            )
        finally:
            await c.close()

    r = asyncio.run(go())
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    msg = r.choices[0].message
    assert msg.role == "assistant" and msg.content == "Paris is the capital of France"
    assert msg.tool_calls is None and r.choices[0].finish_reason == "stop"
    assert r.usage.prompt_tokens == count_words("Be brief.\nFrance?") == 3


def test_tool_calls_parsed_by_client(server):
    r = client(server).chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": "weather in Oslo?"}], tools=TOOLS, seed=3)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Oslo", "days": 2}


def test_unmatched_request_gets_default_and_list_match_needs_all(server):
    c = client(server)
    assert c.completions.create(model="scripted", prompt="Mars?").choices[0].text == "unknown"
    assert c.completions.create(model="scripted", prompt="alpha only").choices[0].text == "unknown"
    assert c.completions.create(model="scripted", prompt="alpha and omega").choices[0].text.startswith("both")


def test_seeded_choice_is_reproducible_and_varies_across_seeds(server):
    c = client(server)

    def ask(seed: int) -> str:
        return c.completions.create(model="scripted", prompt="Capital of Peru?", seed=seed).choices[0].text

    first = [ask(s) for s in range(40)]
    assert [ask(s) for s in range(40)] == first
    assert len(set(first)) >= 3 and set(first) <= {"Lima", "Cusco", "Arequipa", "Trujillo"}
    with ScriptedServer(SCRIPT) as other:  # a fresh server gives the same text for the same seed
        c2 = client(other)
        assert [c2.completions.create(model="scripted", prompt="Peru", seed=s).choices[0].text
                for s in range(10)] == first[:10]


def test_max_tokens_truncates_with_length(server):
    r = client(server).completions.create(model="scripted", prompt="France", max_tokens=2)
    assert r.choices[0].text == "Paris is"
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 2
    r = client(server).chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": "weather"}], tools=TOOLS, max_tokens=1)
    assert r.choices[0].finish_reason == "length" and not r.choices[0].message.tool_calls


def test_stop_sequence_cuts_output(server):
    r = client(server).completions.create(model="scripted", prompt="alpha omega", stop=["\n"])
    assert r.choices[0].text == "both" and r.usage.completion_tokens == 1


def test_declared_usage_is_reported_verbatim(server):
    r = client(server).completions.create(model="scripted", prompt="big", max_tokens=5)
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (10, 99999, 100009)


def test_tokenize_count_and_models(server):
    root = server.base_url.removesuffix("/v1")
    r = httpx.post(f"{root}/extras/tokenize/count", json={"input": "three little words"})
    assert r.status_code == 200 and r.json() == {"count": 3}
    assert [m.id for m in client(server).models.list()] == ["scripted"]


def test_wrong_model_and_no_answer_are_openai_errors(server):
    with pytest.raises(openai.NotFoundError) as e:
        client(server).completions.create(model="gpt-4o", prompt="France")
    assert e.value.status_code == 404 and e.value.code == "model_not_found"
    with ScriptedServer({"rules": [{"match": "France", "text": "Paris"}]}) as srv:
        with pytest.raises(openai.BadRequestError) as e:
            client(srv).completions.create(model="any", prompt="Peru")
        assert e.value.body["code"] == "no_scripted_answer"
    assert httpx.get(server.base_url + "/nope").json()["error"]["code"] == "unknown_url"


# -- faults ----------------------------------------------------------------------------

def test_429_has_retry_after_and_client_retries_past_it():
    script = {"default": {"text": "ok"}, "faults": [{"kind": "429", "retry_after": 0.05, "times": 2, "match": "go"}]}
    with ScriptedServer(script) as srv:
        raw = httpx.post(srv.base_url + "/completions", json={"model": "m", "prompt": "go"})
        assert raw.status_code == 429 and raw.headers["Retry-After"] == "0.05"
        assert raw.json()["error"]["code"] == "rate_limit_exceeded"
        with pytest.raises(openai.RateLimitError):
            client(srv).completions.create(model="m", prompt="go")
        # `times` is used up: the next request is answered.
        assert client(srv).completions.create(model="m", prompt="go").choices[0].text == "ok"
        assert srv.stats["faults"]["429"] == 2 and srv.stats["requests"] == 3
    with ScriptedServer(script) as srv:  # the official client's own retry honours Retry-After
        r = client(srv, max_retries=3).completions.create(model="m", prompt="go")
        assert r.choices[0].text == "ok" and srv.stats["requests"] == 3


def test_503_is_an_overloaded_server_with_retry_after():
    script = {"default": {"text": "ok"}, "faults": [{"kind": "503", "retry_after": 0.2, "times": 1}]}
    with ScriptedServer(script) as srv:
        raw = httpx.post(srv.base_url + "/completions", json={"model": "m", "prompt": "go"})
        assert raw.status_code == 503 and raw.headers["Retry-After"] == "0.2"
        assert raw.headers["retry-after-ms"] == "200" and raw.json()["error"]["type"] == "overloaded_error"
        assert client(srv).completions.create(model="m", prompt="go").choices[0].text == "ok"
        assert srv.stats["faults"]["503"] == 1


def test_a_fault_window_counts_from_the_start():
    script = {"default": {"text": "ok"}, "faults": [{"kind": "500", "until_s": 0.3}, {"kind": "429", "after_s": 0.6}]}
    with ScriptedServer(script) as srv:
        codes = [httpx.post(srv.base_url + "/completions", json={"model": "m", "prompt": "go"}).status_code]
        time.sleep(0.35)
        codes.append(httpx.post(srv.base_url + "/completions", json={"model": "m", "prompt": "go"}).status_code)
        time.sleep(0.35)
        codes.append(httpx.post(srv.base_url + "/completions", json={"model": "m", "prompt": "go"}).status_code)
    assert codes == [500, 200, 429]


def test_500_and_dropped_connection():
    script = {"default": {"text": "ok"}, "faults": [{"kind": "500", "times": 1}, {"kind": "drop", "times": 1}]}
    with ScriptedServer(script) as srv:
        c = client(srv)
        with pytest.raises(openai.InternalServerError) as e:
            c.completions.create(model="m", prompt="x")
        assert e.value.status_code == 500 and e.value.body["type"] == "server_error"
        with pytest.raises(openai.APIConnectionError):
            c.completions.create(model="m", prompt="x")
        assert c.completions.create(model="m", prompt="x").choices[0].text == "ok"
        assert srv.stats["faults"]["500"] == 1 and srv.stats["faults"]["drop"] == 1


def test_dropped_connection_through_async_client():
    with ScriptedServer({"default": {"text": "ok"}, "faults": [{"kind": "drop", "times": 1}]}) as srv:
        async def go():
            c = aclient(srv)
            try:
                with pytest.raises(openai.APIConnectionError):
                    await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
                return await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
            finally:
                await c.close()

        assert asyncio.run(go()).choices[0].message.content == "ok"


def test_slow_response_times_out_then_answers():
    script = {"default": {"text": "ok"}, "faults": [{"kind": "slow", "delay_s": 0.4, "times": 2}]}
    with ScriptedServer(script) as srv:
        with pytest.raises(openai.APITimeoutError):
            client(srv, timeout=0.1).completions.create(model="m", prompt="x")
        t0 = time.perf_counter()
        r = client(srv, timeout=5).completions.create(model="m", prompt="x")
        assert r.choices[0].text == "ok" and time.perf_counter() - t0 >= 0.4
        assert srv.stats["faults"]["slow"] == 2


def test_malformed_body_is_not_json():
    with ScriptedServer({"default": {"text": "ok"}, "faults": [{"kind": "malformed", "times": 2}]}) as srv:
        raw = httpx.post(srv.base_url + "/completions", json={"model": "m", "prompt": "x"})
        assert raw.status_code == 200 and raw.headers["content-type"].startswith("application/json")
        with pytest.raises(json.JSONDecodeError):
            json.loads(raw.content)
        with pytest.raises((ValueError, openai.APIResponseValidationError)):
            client(srv).completions.create(model="m", prompt="x")
        assert srv.stats["faults"]["malformed"] == 2


def test_over_usage_reports_more_than_max_tokens():
    script = {"default": {"text": "ok"}, "faults": [{"kind": "over_usage", "times": 1},
                                                    {"kind": "over_usage", "completion_tokens": 500}]}
    with ScriptedServer(script) as srv:
        r = client(srv).completions.create(model="m", prompt="x", max_tokens=8)
        assert r.choices[0].text == "ok" and r.usage.completion_tokens == 81 > 8
        assert client(srv).completions.create(model="m", prompt="x", max_tokens=8).usage.completion_tokens == 500


def test_fault_times_are_exact_under_concurrency():
    script = {"default": {"text": "ok"}, "faults": [{"kind": "429", "retry_after": 0.01, "times": 7}]}
    with ScriptedServer(script) as srv:
        async def go():
            c = aclient(srv)
            try:
                return await asyncio.gather(
                    *(c.completions.create(model="m", prompt=f"q{i}") for i in range(48)), return_exceptions=True)
            finally:
                await c.close()

        results = asyncio.run(go())
        assert sum(isinstance(r, openai.RateLimitError) for r in results) == 7
        assert sum(not isinstance(r, Exception) for r in results) == 41
        assert srv.stats == {"requests": 48, "faults": {**srv.stats["faults"], "429": 7}, "tokenize": 0}


def test_rate_faults_are_seeded():
    script = {"seed": 5, "default": {"text": "ok"}, "faults": [{"kind": "500", "rate": 0.5}]}

    def pattern() -> list[bool]:
        with ScriptedServer(script) as srv, httpx.Client(base_url=srv.base_url) as http:
            return [http.post("/completions", json={"model": "m", "prompt": "x"}).status_code == 500
                    for _ in range(24)]

    first = pattern()
    assert first == pattern() and 0 < sum(first) < 24


# -- the script ------------------------------------------------------------------------

@pytest.mark.parametrize("script, json_path", [
    ({"rules": [{"match": 1, "text": "a"}]}, "$.rules[0].match"),
    ({"rules": [{"text": "a"}, {"match": "b"}]}, "$.rules[1]"),
    ({"default": {"texts": ["a", "b"], "weights": [1]}}, "$.default.weights"),
    ({"faults": [{"kind": "404"}]}, "$.faults[0].kind"),
    ({"rules": [{"text": "a", "tool_calls": [{"arguments": {}}]}]}, "$.rules[0].tool_calls[0]"),
    ({"latency_s": -1}, "$.latency_s"),
])
def test_bad_script_names_json_path(script, json_path):
    with pytest.raises(InputError) as e:
        ScriptedServer(script)
    assert e.value.json_path == json_path and json_path in str(e.value)


def test_bad_script_file_names_file_and_line(tmp_path):
    bad = tmp_path / "script.json"
    bad.write_text('{"rules": [\n  {"text": "a"},\n  oops\n]}\n')
    with pytest.raises(InputError) as e:
        load_script(bad)
    assert e.value.path == str(bad) and e.value.line == 3
    good = tmp_path / "script.yaml"
    good.write_text("rules:\n  - match: France\n    text: Paris\n")
    assert load_script(good)["rules"][0]["text"] == "Paris"


# -- the command -----------------------------------------------------------------------

def test_serve_command_passes_url_and_exit_status(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    child = textwrap.dedent("""
        import os, sys
        from openai import OpenAI
        c = OpenAI(base_url=os.environ["EVALKIT_BASE_URL"], api_key="k", max_retries=0)
        print(c.completions.create(model="scripted", prompt="France").choices[0].text)
        sys.exit(3)
    """)
    proc = subprocess.run(
        [sys.executable, "-m", "evalkit.cli", "serve", "--scripted", str(script), "--", sys.executable, "-c", child],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout.strip() == "Paris is the capital of France"


def test_serve_command_rejects_bad_script_with_exit_2(tmp_path):
    from click.testing import CliRunner

    from evalkit.cli import main

    script = tmp_path / "script.json"
    script.write_text('{"rules": [{"match": "a"}]}')
    result = CliRunner().invoke(main, ["serve", "--scripted", str(script), "--", "true"])
    assert result.exit_code == 2
    assert "$.rules[0]" in result.output and str(script) in result.output


# -- the embedded model ----------------------------------------------------------------

@pytest.mark.local_model
@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                    reason="llama-cpp-python is not installed (pip install 'evalkit[local]')")
def test_embedded_model_answers_a_few_shot_capital_prompt():
    from evalkit.serve import LocalModelServer

    prompt = ("Q: What is the capital of Italy?\nA: Rome\n"
              "Q: What is the capital of Japan?\nA: Tokyo\n"
              "Q: What is the capital of Spain?\nA: Madrid\n"
              "Q: What is the capital of France?\nA:")
    with LocalModelServer(n_ctx=512) as srv:
        assert srv.model_name == "gemma-3-270m"
        c = openai.OpenAI(base_url=srv.base_url, api_key="local", max_retries=0, timeout=60)
        r = c.completions.create(model=srv.model_name, prompt=prompt, max_tokens=8, temperature=0, stop=["\n"])
        assert "Paris" in r.choices[0].text
        assert 0 < r.usage.completion_tokens <= 8
        count = httpx.post(srv.base_url.removesuffix("/v1") + "/extras/tokenize/count", json={"input": prompt})
        assert count.json()["count"] == r.usage.prompt_tokens
    with pytest.raises(httpx.ConnectError):  # stopped on exit
        httpx.get(srv.base_url + "/models", timeout=2)


@pytest.mark.local_model
@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                    reason="llama-cpp-python is not installed (pip install 'evalkit[local]')")
def test_embedded_server_that_dies_reports_its_log(tmp_path):
    from evalkit.errors import EvalkitError
    from evalkit.serve import LocalModelServer

    junk = tmp_path / "not-a-model.gguf"
    junk.write_bytes(b"this is not a GGUF file")
    with pytest.raises(EvalkitError, match="exited with status") as e:
        LocalModelServer(junk, startup_timeout_s=60).start()
    assert str(junk) in str(e.value) or "gguf" in str(e.value).lower()
