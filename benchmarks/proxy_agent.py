"""The agent program of bench_proxy.py's command-unit run: the standard library only, so
the benchmark measures evalkit's per-sample work, not an SDK's import. Two completions and
one tool call per sample: `CALL lookup(...)`, answered at EVALKIT_TOOLS_URL when evalkit
runs it (or by a local stub in the bare loop), then the answer. One keep-alive
connection per host, as an HTTP client library would keep."""
import http.client
import json
import os
import sys
from urllib.parse import urlsplit

case = json.load(sys.stdin)
base, key = os.environ["OPENAI_BASE_URL"], os.environ.get("OPENAI_API_KEY", "bench")
_conns: dict[str, http.client.HTTPConnection] = {}


def post(url, body):
    u = urlsplit(url)
    conn = _conns.get(u.netloc) or _conns.setdefault(u.netloc, http.client.HTTPConnection(u.netloc, timeout=60))
    conn.request("POST", u.path, json.dumps(body), {"Content-Type": "application/json",
                                                   "Authorization": f"Bearer {key}"})
    resp = conn.getresponse()
    data = resp.read()
    if resp.status != 200:
        sys.exit(f"HTTP {resp.status}: {data[:200]!r}")
    return json.loads(data)


prompt = f"Question: {case['input']}\n"
r = post(base + "/completions", {"model": case["model"], "prompt": prompt, "max_tokens": 16, "seed": case["seed"]})
line = r["choices"][0]["text"].strip()
tools = os.environ.get("EVALKIT_TOOLS_URL")
result = post(tools, {"name": "lookup", "arguments": {"q": line}})["content"] if tools else "stub"
r = post(base + "/completions", {"model": case["model"], "prompt": f"{prompt}{line}\nRESULT: {result}\n",
                                 "max_tokens": 16, "seed": case["seed"]})
print(r["choices"][0]["text"].strip())
