"""A weather agent on langgraph with langchain-openai, unchanged: langgraph's prebuilt
ReAct agent over `ChatOpenAI(use_responses_api=True)` (the Responses API), one tool
that langgraph runs itself. ``WEATHER_AGENT_API=chat`` switches it to chat completions
(`use_responses_api=False`), for an endpoint without the Responses API (llama.cpp's
server: `evalkit serve --tools-model`); the suite passes the variable (`unit.env`).

evalkit runs it once per sample with the case as JSON on stdin; OPENAI_BASE_URL and
OPENAI_API_KEY point at evalkit's metering proxy (ChatOpenAI reads them), so every
model call is reserved, settled and recorded. LangSmith tracing is off in the agent's
environment (set by evalkit). The tool answers from the case's fixtures through
EVALKIT_TOOLS_URL.
"""

import json
import os
import sys
import urllib.request

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent


def fixture(name: str, arguments: dict) -> str:
    req = urllib.request.Request(
        os.environ["EVALKIT_TOOLS_URL"],
        data=json.dumps({"name": name, "arguments": arguments}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.load(resp)["content"]


@tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    return fixture("get_weather", {"city": city})


def main() -> None:
    case = json.load(sys.stdin)
    responses = os.environ.get("WEATHER_AGENT_API") != "chat"
    llm = ChatOpenAI(model=case["model"], use_responses_api=responses, max_retries=0)
    agent = create_react_agent(
        llm, [get_weather], prompt="You answer questions about the weather. Look it up with get_weather."
    )
    state = agent.invoke({"messages": [("user", case["input"]["question"])]})
    print(state["messages"][-1].text)


if __name__ == "__main__":
    main()
