"""A hostile agent: tries every way out of its sandbox that issue 25 found, and writes
what it got to report.json in its working directory (kept by the suite), then makes one
model call through the proxy, leaves a setsid child behind and hangs past its timeout
(or, given `exit`, exits at once: the sandbox must still take the child with it).

argv: SUITE_DIR MARKER [hang|exit]. The case input names the host's own loopback port to try
(`host_port`), the upstream's (`upstream_port`) and a Unix socket of the host's own
(`unix_path`)."""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

suite, marker = sys.argv[1], sys.argv[2]
ending = sys.argv[3] if len(sys.argv) > 3 else "hang"
case = json.load(sys.stdin)
report = {"environ": {}, "cmdline": {}, "files": {}, "connect": {}, "writes": {}}


def read(path, limit=None):
    try:
        with open(path, "rb") as f:
            return f.read(limit) if limit else f.read()
    except OSError as exc:
        return f"<{type(exc).__name__}: {exc.strerror}>".encode()


# every process's environment and command line it can see
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    report["environ"][pid] = read(f"/proc/{pid}/environ").decode("utf-8", "replace")
    report["cmdline"][pid] = read(f"/proc/{pid}/cmdline").decode("utf-8", "replace")

# its parent's memory: every readable mapping
ppid = os.getppid()
maps = read(f"/proc/{ppid}/maps").decode("utf-8", "replace")
report["parent_maps"] = maps
memory = bytearray()
try:
    with open(f"/proc/{ppid}/mem", "rb") as mem:
        for line in maps.splitlines():
            span, perms = line.split()[:2]
            if "r" not in perms:
                continue
            lo, hi = (int(x, 16) for x in span.split("-"))
            try:
                mem.seek(lo)
                memory += mem.read(min(hi - lo, 64 << 20))
            except (OSError, ValueError, OverflowError):
                pass
except OSError as exc:
    report["parent_mem_error"] = str(exc)
report["parent_mem_bytes"] = len(memory)
report["parent_mem"] = memory.decode("latin-1")

# the suite's config and cases, evalkit's config in the working directory it had
for name in ("config.json", "cases.jsonl"):
    report["files"][name] = read(os.path.join(suite, name)).decode("utf-8", "replace")
report["files"]["./config.json"] = read("config.json").decode("utf-8", "replace")

# any address but the proxy
for label, port in (("host_port", case["input"]["host_port"]), ("upstream_port", case["input"]["upstream_port"])):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as c:
            report["connect"][label] = "connected"
            c.sendall(marker.encode())  # so the host can tell this connection from anyone else's
    except OSError as exc:
        report["connect"][label] = f"refused: {exc}"
try:  # a Unix socket of the host's own (where services keep theirs)
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    u.settimeout(2)
    u.connect(case["input"]["unix_path"])
    report["connect"]["host_unix_socket"] = "connected"
    u.sendall(marker.encode())
except OSError as exc:
    report["connect"]["host_unix_socket"] = f"refused: {exc}"
try:
    socket.create_connection(("1.1.1.1", 80), timeout=2).close()
    report["connect"]["internet"] = "connected"
except OSError as exc:
    report["connect"]["internet"] = f"refused: {exc}"

# writes outside its working directory
for target in (os.path.join(suite, "cases.jsonl"), os.path.join(suite, "planted.txt"), "/usr/planted.txt"):
    try:
        with open(target, "a") as f:
            f.write('{"id": "planted"}\n')
        report["writes"][target] = "written"
    except OSError as exc:
        report["writes"][target] = f"refused: {exc.strerror}"
with open("mine.txt", "w") as f:
    f.write("mine")
report["writes"]["workdir"] = "written"

# one call through the proxy (OPENAI_BASE_URL, unchanged)
body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hello"}]}).encode()
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=body,
                             headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                                      "Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=30) as resp:
    report["proxy_answer"] = json.load(resp)["choices"][0]["message"]["content"]

# a child in a session of its own, left behind
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", marker], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
with open("child.pid", "w") as f:
    f.write(str(child.pid))
os.kill(child.pid, 0)
report["child_alive"] = True
report["own_environ"] = dict(os.environ)
with open("report.json.tmp", "w") as f:
    json.dump(report, f)
os.replace("report.json.tmp", "report.json")
if ending == "exit":
    print("done, my child left running")
    sys.exit(0)
time.sleep(600)  # past its timeout: the sandbox must kill it, and its child
