"""The embedded model that calls tools (`evalkit serve --tools-model`): SmolLM2-135M-Instruct
served by llama.cpp with its ChatML function-calling handler, answering the OpenAI chat
endpoint's `tools` with `tool_calls`, through the official client on real HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import openai
import pytest

WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.mark.local_model
def test_the_tools_model_answers_a_tool_call_in_the_openai_shape():
    from evalkit.calls.serve import TOOLS_MODEL_ALIAS, LocalModelServer

    with LocalModelServer(n_ctx=2048, tools=True, startup_timeout_s=300) as srv:
        assert srv.model_name == TOOLS_MODEL_ALIAS and "chat_format=chatml-function-calling" in srv.cache_identity
        c = openai.OpenAI(base_url=srv.base_url, api_key="local", max_retries=0, timeout=300)
        # the tool named: the handler constrains the call's arguments to the tool's schema
        r = c.chat.completions.create(
            model=srv.model_name, tools=WEATHER, max_tokens=48, temperature=0.0, seed=7,
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            messages=[{"role": "user", "content": "What is the weather in Oslo?"}])
        calls = r.choices[0].message.tool_calls
        assert calls and calls[0].type == "function" and calls[0].function.name == "get_weather"
        args = json.loads(calls[0].function.arguments)
        assert isinstance(args.get("city"), str) and args["city"]
        assert r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0
    with pytest.raises(httpx.ConnectError):  # stopped on exit
        httpx.get(srv.base_url + "/models", timeout=2)


@pytest.mark.local_model
def test_the_tools_model_answers_a_smolagents_shaped_call(tmp_path):
    """smolagents' ToolCallingAgent sends every message as text parts and
    ``tool_choice: "required"``; llama-cpp-python alone answered each such call with a 500
    (a system message's content must be a string; "required" fails an assertion), so the
    agent got no sample. `evalkit.calls._llamaserve` hands the server what it takes."""
    from evalkit.calls.serve import LocalModelServer

    parts = [{"type": "text", "text": "You answer weather questions. Use the tools."}]
    with LocalModelServer(n_ctx=2048, tools=True, startup_timeout_s=300) as srv:
        c = openai.OpenAI(base_url=srv.base_url, api_key="local", max_retries=0, timeout=300)
        r = c.chat.completions.create(
            model=srv.model_name, tools=WEATHER, tool_choice="required", max_tokens=48, temperature=0.0, seed=7,
            messages=[{"role": "system", "content": parts},
                      {"role": "user", "content": [{"type": "text", "text": "What is the weather in Oslo?"}]}])
        calls = r.choices[0].message.tool_calls
        assert calls and calls[0].function.name == "get_weather"
        assert json.loads(calls[0].function.arguments)["city"] == "Oslo"


def test_the_llama_server_gets_text_parts_as_one_string_tool_choice_auto_and_each_tool_result():
    from evalkit.calls._llamaserve import llama_body

    text = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    image = [{"type": "image_url", "image_url": {"url": "data:,"}}]
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    body = {"model": "m", "tools": WEATHER, "tool_choice": "required", "messages": [
        {"role": "system", "content": text}, {"role": "user", "content": image},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": text}]}
    assert llama_body(body) == {**body, "tool_choice": "auto", "messages": [
        {"role": "system", "content": "a\nb"}, {"role": "user", "content": image},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        # the function-calling template writes a tool message as an empty turn
        {"role": "user", "content": "functions.get_weather returned:\na\nb"}]}
    assert body["messages"][0]["content"] is text  # the request itself is left as it was
    # OpenAI's default with tools is "auto": llama-cpp-python's is to offer the model none
    assert llama_body({"tools": WEATHER, "messages": []})["tool_choice"] == "auto"
    named = {"type": "function", "function": {"name": "get_weather"}}
    tool = {"role": "tool", "tool_call_id": "c1", "content": "x"}  # no tools offered: left as sent
    for kept in ({"messages": [], "tool_choice": named, "tools": WEATHER}, {"messages": [tool], "tool_choice": "none"},
                 {"messages": []}, {"prompt": "x"}, [1]):
        assert llama_body(kept) == kept


def test_serve_refuses_a_script_beside_the_tools_model(tmp_path):
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"rules": [], "default": {"text": "x"}}))
    out = subprocess.run([sys.executable, "-m", "evalkit._cli.main", "serve", "--scripted", str(script), "--tools-model"],
                         capture_output=True, text=True, timeout=120, env={**os.environ})
    assert out.returncode == 2 and "--scripted excludes --model and --tools-model" in out.stderr
