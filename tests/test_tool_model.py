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


def test_serve_refuses_a_script_beside_the_tools_model(tmp_path):
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"rules": [], "default": {"text": "x"}}))
    out = subprocess.run([sys.executable, "-m", "evalkit._cli.main", "serve", "--scripted", str(script), "--tools-model"],
                         capture_output=True, text=True, timeout=120, env={**os.environ})
    assert out.returncode == 2 and "--scripted excludes --model and --tools-model" in out.stderr
