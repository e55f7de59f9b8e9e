"""A completions agent on the standard library alone: the model writes `CALL tool(arg)`
lines, each answered at EVALKIT_TOOLS_URL, until a line that is not a call."""
import argparse
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("--turns", type=int, default=4)
ap.add_argument("--forever", action="store_true")
ap.add_argument("--ignore-errors", action="store_true")
ap.add_argument("--exit", type=int, default=0)
ap.add_argument("--sleep", type=float, default=0.0)
ap.add_argument("--big", action="store_true")
ap.add_argument("--env", action="store_true")
args = ap.parse_args()
case = json.load(sys.stdin)
base, key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]


def post(url, body, auth=True):
    headers = {"Content-Type": "application/json"}
    if auth:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.load(resp)


if args.env:
    seen = {k: k in os.environ for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "EVALKIT_TOOLS_URL", "EVALKIT_MODEL",
                                        "EVALKIT_TEST_KEY", "EVALKIT_SERVED", "ANTHROPIC_API_KEY",
                                        "EVALKIT_API_KEY", "MY_PROVIDER_API_KEY", "EVALKIT_KEEP_ME")}
    # the Anthropic and Gemini clients' keys are the proxy token too, never a provider's key
    wires = {k: os.environ.get(k) == key for k in ("ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")}
    print(json.dumps({"seen": seen, "case": case, "wire_keys_are_the_token": wires}))
    sys.exit(0)
if args.sleep:
    time.sleep(args.sleep)
question = case["input"]["question"] if isinstance(case["input"], dict) else case["input"]
prompt = (case.get("guidance") or "") + f"Question: {question}\n"
if args.big:
    try:
        post(base + "/completions", {"model": case["model"], "prompt": "word " * 5000, "max_tokens": 4})
    except urllib.error.HTTPError as exc:
        sys.stderr.write(f"refused: {exc.code} {exc.read().decode()}\n")
    print("fine anyway")
    sys.exit(0)
line = ""
turn = 0
while args.forever or turn < args.turns:
    turn += 1
    try:
        r = post(base + "/completions", {"model": case["model"], "prompt": prompt, "seed": case["seed"],
                                         "max_tokens": case["max_tokens"], "stop": ["\n"]})
    except urllib.error.HTTPError as exc:
        if args.ignore_errors:
            continue
        sys.stderr.write(f"model call failed: {exc.code} {exc.read().decode()}\n")
        sys.exit(3)
    except urllib.error.URLError:
        sys.exit(4)  # the proxy is gone (its run was killed)
    line = r["choices"][0]["text"].strip()
    m = re.match(r"CALL (\w+)\((.*)\)", line)
    if not m:
        break
    answer = post(os.environ["EVALKIT_TOOLS_URL"], {"name": m.group(1), "arguments": {"arg": m.group(2)}}, auth=False)
    prompt += f"{line}\nRESULT: {answer['content']}\n"
print(line)
sys.exit(args.exit)
