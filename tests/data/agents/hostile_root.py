"""A hostile agent for tests/test_sandbox_root.py: what root's (or a user's) sandboxed
program tries against the host. Prints one JSON report: for each attempt, what happened."""
import json
import os
import subprocess
import sys

targets = json.loads(sys.argv[1])
json.load(sys.stdin)
report = {"uid": os.getuid(), "euid": os.geteuid(), "cap_eff": "", "reads": {}, "writes": {}, "mounts": {}}
for line in open("/proc/self/status"):
    if line.startswith("CapEff:"):
        report["cap_eff"] = line.split()[1]
for path in ["/etc/shadow", *targets["read"]]:
    try:
        report["reads"][path] = open(path).read()[:200]
    except OSError as exc:
        report["reads"][path] = f"refused: {type(exc).__name__}"
for path in targets["write"]:
    try:
        with open(path, "a") as f:
            f.write("planted by the sandboxed program\n")
        report["writes"][path] = "written"
    except OSError as exc:
        report["writes"][path] = f"refused: {type(exc).__name__}"
for name, argv in {
    "umount /tmp": ["umount", "/tmp"],
    "remount / rw": ["mount", "-o", "remount,rw", "/"],
    "user namespace umount": ["unshare", "-Urm", "umount", "/tmp"],
}.items():
    try:
        done = subprocess.run(argv, capture_output=True, timeout=10)
        report["mounts"][name] = done.returncode
    except OSError as exc:
        report["mounts"][name] = f"refused: {type(exc).__name__}"
print(json.dumps(report))
