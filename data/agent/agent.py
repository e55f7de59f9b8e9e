"""The demo's agent: a weather assistant on the official openai client, one tool.

evalkit runs it once per sample (`"unit": {"kind": "command", ...}` in config.json),
with the case as JSON on stdin and OPENAI_BASE_URL / OPENAI_API_KEY pointing at its
metering proxy, and takes what it prints as the output.

The embedded model is a base model (Gemma 3 270M, no chat template), so tool use is a
text protocol on the completions endpoint: the model writes one line at a time; a line
`CALL get_weather(<city>)` is a tool call, answered as a `RESULT: ...` line, and any
other line is the answer. The tool is implemented over fixtures: EVALKIT_TOOLS_URL (the
smallest seam: with it set, evalkit answers from the case's `tool_results`, so no real
service is ever called, and records the call in the sample's trajectory).

With a skill (`skill_dir` in the case, the arm's), the agent reads its SKILL.md and
puts it in the prompt: that is the skill being "loaded", and what evalkit's
skill_activation check sees in the requests.
"""

import json
import os
import re
import sys
import urllib.request
from pathlib import Path

import openai

INSTRUCTIONS = """You answer questions about the weather. To look up the weather, write one line:
CALL get_weather(<city>)
and wait for the RESULT line. Then write ANSWER: <your answer>.
"""
CALL = re.compile(r"^CALL\s+(\w+)\((.*?)\)")
MAX_MODEL_CALLS = 4


def tool(name: str, arguments: dict) -> str:
    """Run a tool: here, only through evalkit's fixtures (there is no real weather service)."""
    url = os.environ.get("EVALKIT_TOOLS_URL")
    if not url:
        return "error: no weather service configured"
    req = urllib.request.Request(url, data=json.dumps({"name": name, "arguments": arguments}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.load(resp)["content"]


def main() -> None:
    case = json.load(sys.stdin)
    prompt = INSTRUCTIONS
    if case.get("skill_dir"):
        prompt += "\n" + (Path(case["skill_dir"]) / "SKILL.md").read_text(encoding="utf-8").split("---", 2)[-1]
    prompt += f"\nQuestion: {case['input']['question']}\n"
    client = openai.OpenAI(max_retries=0)
    line = ""
    for _ in range(MAX_MODEL_CALLS):
        r = client.completions.create(model=case["model"], prompt=prompt, max_tokens=case["max_tokens"],
                                      temperature=case["temperature"], seed=case["seed"], stop=["\n"])
        line = r.choices[0].text.strip()
        m = CALL.match(line)
        if not m:
            break
        name, arg = m.group(1), m.group(2).strip().strip("'\"")
        result = tool(name, {"city": arg} if name == "get_weather" else {"arg": arg})
        prompt += f"{line}\nRESULT: {result}\n"
    print(line.removeprefix("ANSWER:").strip())


if __name__ == "__main__":
    main()
