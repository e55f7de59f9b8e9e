"""The sandbox holds as root and as a user (issue 44 item 1), with real bubblewrap: root's
sandboxed program is an unprivileged uid with no capability and no host root mapped (no
root-only file read, no mount undone, nothing written outside its workdir); run as a user
(the evalkit command under setpriv) the same attacks fail. Skipped where no sandbox can
be made, and the user's half where this test does not run as root."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evalkit.calls import sandbox
from evalkit.calls.serve import ScriptedServer
from evalkit.runfolder.runload import load_run
from evalkit.runfolder.trajectories import read_trajectory
from evalkit.running.runner import run_suite

HOSTILE = Path(__file__).parent / "data" / "agents" / "hostile_root.py"
NOBODY = 65534
BASE = {
    "mode": "chat",
    "generator": {"model": "scripted", "api_key_env": "EVALKIT_ROOT_TEST_KEY"},
    "temperature": 0.0, "seed": 7, "k": 1, "concurrency": 1, "cost_cap_usd": 1.0,
    "max_tokens_in": 4000, "max_tokens_out": 40,
    "price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0}, "judge_price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0},
    "max_attempts": 1, "arms": [{"name": "baseline"}],
}

pytestmark = pytest.mark.skipif(sandbox.probe() is not None, reason=f"no sandbox here: {sandbox.probe()}")


@pytest.fixture
def user_dir():
    """A folder the user can reach (pytest's own are root's alone)."""
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="evalkit-user-test-", dir="/var/tmp"))
    yield base
    shutil.rmtree(base, ignore_errors=True)


def _suite(root: Path, targets: dict, python: str = "{python}") -> Path:
    suite = root / "suite"
    suite.mkdir(parents=True)
    unit = {"kind": "command", "argv": [python, str(HOSTILE), json.dumps(targets)], "timeout_s": 30}
    (suite / "config.json").write_text(json.dumps({**BASE, "unit": unit}))
    cases = [{"id": "h", "input": "q", "tags": ["golden"], "checks": [{"kind": "contains", "value": "uid"}]}]
    (suite / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    return suite


def _targets(root: Path, suite: Path) -> dict:
    token = root / "token"
    token.write_text("root-only-token")
    token.chmod(0o600)
    host_file = root / "host-file.txt"
    host_file.write_text("root's own\n")
    return {
        "read": [str(token), str(suite / "config.json")],
        "write": [str(host_file), str(suite / "cases.jsonl"), str(root / "runs" / "planted.txt"),
                  str(Path(sys.prefix) / "planted.txt")],
    }


def _assert_held(report: dict, root: Path, suite: Path) -> None:
    assert report["uid"] != 0 and report["euid"] != 0 and int(report["cap_eff"], 16) == 0, report
    assert all(v.startswith("refused") for v in report["reads"].values()), report["reads"]
    assert all(v.startswith("refused") for v in report["writes"].values()), report["writes"]
    assert all(v != 0 for v in report["mounts"].values()), report["mounts"]
    assert (root / "host-file.txt").read_text() == "root's own\n"
    assert "planted" not in (suite / "cases.jsonl").read_text()
    assert not (Path(sys.prefix) / "planted.txt").exists() and not (root / "runs" / "planted.txt").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_root_s_sandboxed_program_is_an_unprivileged_uid_that_reads_writes_and_unmounts_nothing(tmp_path):
    root = tmp_path / "r"
    root.mkdir()
    suite = _suite(root, {})
    (suite / "config.json").write_text(
        (suite / "config.json").read_text().replace('"{}"', json.dumps(json.dumps(_targets(root, suite))))
    )
    with ScriptedServer({"default": {"text": "x"}}) as srv:
        res = run_suite(suite, runs_dir=root / "runs", base_url=srv.base_url, progress=False)
    assert res.complete, res.reason
    report = json.loads(load_run(res.path).samples.output.iloc[0])
    assert report["uid"] == NOBODY
    _assert_held(report, root, suite)


def _closed_to_the_user(paths: list[Path]) -> Path | None:
    """The first of `paths` that uid NOBODY cannot open (asked of the kernel, as that user)."""
    for path in paths:
        probe = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--",
                                "test", "-r", str(path)], capture_output=True)
        if probe.returncode != 0:
            return path
    return None


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to become a user")
def test_a_user_s_sandboxed_program_reads_writes_and_unmounts_nothing(user_dir):
    root = user_dir
    # the user's own interpreter: evalkit's here may be root's alone (under /root)
    suite = _suite(root, {}, shutil.which("python3", path="/usr/bin:/bin") or "{python}")
    targets = _targets(root, suite)
    (suite / "config.json").write_text(
        (suite / "config.json").read_text().replace('"{}"', json.dumps(json.dumps(targets)))
    )
    (root / "runs").mkdir()
    for p in (root, root / "runs"):
        p.chmod(0o755)
    os.chown(root / "runs", NOBODY, NOBODY)  # the user's own runs folder; the suite and files stay root's
    evalkit = Path(sys.prefix) / "bin" / "evalkit"
    closed = _closed_to_the_user([evalkit, Path(sys.executable), Path(__file__).parents[1] / "evalkit"])
    if closed:  # not the sandbox's doing: the user cannot start evalkit at all
        pytest.skip(f"uid {NOBODY} cannot reach {closed} (a folder above it is closed to others): "
                    "put evalkit's virtualenv and checkout where a user can read them (.ci/run does)")
    forwarder = root / "forwarder"  # compiled: the python one runs on evalkit's interpreter
    if sandbox.build_forwarder(forwarder) is not None:
        pytest.skip("no C compiler for the forwarder")
    env = {"PATH": os.environ["PATH"], "HOME": str(root / "runs"), "PYTHONPATH": str(Path(__file__).parents[1]),
           "EVALKIT_ROOT_TEST_KEY": "k", sandbox.FORWARDER_ENV: str(forwarder)}
    with ScriptedServer({"default": {"text": "x"}}) as srv:
        done = subprocess.run(
            ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--", str(evalkit), "run",
             str(suite), "--runs-dir", str(root / "runs"), "--base-url", srv.base_url],
            capture_output=True, text=True, timeout=120, env=env, cwd=root / "runs",
        )
    assert done.returncode == 0, done.stderr
    [run] = [p for p in (root / "runs").iterdir() if p.is_dir()]
    report = json.loads(load_run(run).samples.output.iloc[0])
    assert report["uid"] == NOBODY
    _assert_held(report, root, suite)


_MAIN = """import json, os, sys
from helper import ask  # a sibling module of the agent/ package
case = json.load(sys.stdin)
seen = {}
for name in ("../.env", "../pyproject.toml", "../evals/shop/config.json", "../evals/shop/cases.jsonl"):
    try:
        seen[name] = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), name)).read()
    except OSError as exc:
        seen[name] = type(exc).__name__
print(json.dumps({"answer": ask(case["input"]), "seen": seen, "prefix": sys.prefix}))
"""
_HELPER = """import openai
def ask(q):
    r = openai.OpenAI().chat.completions.create(model=os.environ["EVALKIT_MODEL"], messages=[{"role": "user", "content": q}])
    return r.choices[0].message.content
import os
"""


def test_an_agent_in_its_own_project_with_its_own_venv_runs_sandboxed_and_sees_no_secret(tmp_path, monkeypatch, capfd):
    """Issue 43's layout: a project under $HOME with its own .venv (openai from a .pth),
    an agent/ package importing a sibling, the suite at evals/shop naming
    ../../.venv/bin/python, run from the project root: the samples pass sandboxed, the
    project's .env is hidden (a finding names it), the suite's files are not seen."""
    home = tmp_path / "home"
    proj = home / "proj"
    (proj / "agent").mkdir(parents=True)
    (proj / "pyproject.toml").write_text("[project]\nname = 'shop'\n")
    (proj / ".env").write_text("UPSTREAM_KEY=sk-from-the-dotenv")
    (proj / "agent" / "__init__.py").write_text("")
    (proj / "agent" / "main.py").write_text(_MAIN)
    (proj / "agent" / "helper.py").write_text(_HELPER)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(proj / ".venv")], check=True)
    site = next((proj / ".venv" / "lib").glob("python3*/site-packages"))
    evalkit_site = next(Path(sys.prefix, "lib").glob("python3*/site-packages"))
    (site / "parent.pth").write_text(str(evalkit_site) + "\n")  # openai, as the project's own install would
    suite = proj / "evals" / "shop"
    suite.mkdir(parents=True)
    unit = {"kind": "command", "argv": ["../../.venv/bin/python", "../../agent/main.py"], "timeout_s": 60}
    (suite / "config.json").write_text(json.dumps({**BASE, "unit": unit}))
    cases = [{"id": "s", "input": "q", "tags": ["golden"], "checks": [{"kind": "contains", "value": "from the proxy"}]}]
    (suite / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EVALKIT_ROOT_TEST_KEY", "sk-upstream")
    monkeypatch.chdir(proj)
    with ScriptedServer({"default": {"text": "hello from the proxy"}}) as srv:
        res = run_suite(Path("evals/shop"), runs_dir=proj / "runs", base_url=srv.base_url, progress=False)
    assert res.complete, (res.reason, capfd.readouterr().err)
    out = json.loads(load_run(res.path).samples.output.iloc[0])
    assert out["answer"] == "hello from the proxy" and out["prefix"] == str(proj / ".venv")
    assert out["seen"]["../.env"] in ("", "PermissionError") and out["seen"]["../pyproject.toml"].startswith("[project]")
    assert out["seen"]["../evals/shop/config.json"] == "FileNotFoundError"
    assert out["seen"]["../evals/shop/cases.jsonl"] == "FileNotFoundError"
    err = capfd.readouterr().err
    assert "hidden from the sandboxed program" in err and str(proj / ".env") in err


def test_a_failing_sample_s_stderr_tail_is_under_incomplete_on_the_terminal_and_in_summary_md(tmp_path, capfd):
    """Issue 43 item 2: the first errored samples' tracebacks (last lines) under INCOMPLETE."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "agent.py").write_text("import sys\nsys.stdin.read()\nraise ModuleNotFoundError(\"No module named 'openai'\")\n")
    unit = {"kind": "command", "argv": ["{python}", "agent.py"], "timeout_s": 30}
    (suite / "config.json").write_text(json.dumps({**BASE, "unit": unit}))
    cases = [{"id": f"c{i}", "input": "q", "tags": ["golden"], "checks": [{"kind": "contains", "value": "x"}]}
             for i in range(4)]
    (suite / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    with ScriptedServer({"default": {"text": "x"}}) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
    assert not res.complete
    err = capfd.readouterr().err
    assert err.count("ModuleNotFoundError: No module named 'openai'") == 3 and "stderr of c" in err
    md = (res.path / "summary.md").read_text()
    assert md.index("INCOMPLETE") < md.index("ModuleNotFoundError") < md.index("# Run of")
    assert len(json.loads((res.path / "summary.json").read_text())["stderr_tails"]) == 3


_LEAKER = """import base64, json, os, sys, urllib.parse, urllib.request
json.load(sys.stdin)
secrets = [os.environ["OPENAI_API_KEY"], os.environ["GITHUB_TOKEN"]]
forms = []
for s in secrets:
    forms += [s, base64.b64encode(b"x" + s.encode()).decode(), s.encode().hex(), urllib.parse.quote(s + "/", safe="")]
req = urllib.request.Request(os.environ["EVALKIT_TOOLS_URL"], method="POST",
    data=json.dumps({"name": "leak", "arguments": {"k": forms[0]}, "result": forms[1]}).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
urllib.request.urlopen(req).read()
sys.stderr.write(" ".join(forms) + "\\n")
print("out: " + " ".join(forms))
"""


def test_every_secret_evalkit_holds_is_redacted_from_what_the_program_returns_in_its_encodings_too(tmp_path, capfd,
                                                                                                 monkeypatch):
    token = "ghp_" + "A1b2C3d4" * 5
    monkeypatch.setenv("GITHUB_TOKEN", token)
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "agent.py").write_text(_LEAKER)
    unit = {"kind": "command", "argv": ["{python}", "agent.py"], "timeout_s": 30, "env": ["GITHUB_TOKEN"]}
    (suite / "config.json").write_text(json.dumps({**BASE, "unit": unit}))
    cases = [{"id": "l", "input": "q", "tags": ["golden"], "checks": [{"kind": "contains", "value": "out"}]}]
    (suite / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    with ScriptedServer({"default": {"text": "x"}}) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
    assert res.complete, res.reason
    import base64
    import urllib.parse

    written = "".join(p.read_text() for p in res.path.rglob("*.json*"))
    for form in (token, base64.b64encode(b"x" + token.encode()).decode()[4:-4], token.encode().hex(),
                 urllib.parse.quote(token + "/", safe="")):
        assert form not in written
    sample = load_run(res.path).samples.iloc[0]
    assert sample.output.count("[redacted by evalkit]") == 8
    [tool] = [e for e in read_trajectory(res.path, "l", "baseline", 0).events if e["type"] == "tool"]
    assert json.dumps(tool).count("[redacted by evalkit]") == 2  # the report's proxy token, as is and base64
    assert sample.agent["stderr_tail"].count("[redacted by evalkit]") == 8
    err = capfd.readouterr().err
    assert "a secret evalkit holds was in what the program returned" in err and "GITHUB_TOKEN (base64)" in err
    assert "the sample's proxy token (hex)" in err


_GREEDY = """import json, os, sys
attack = json.load(sys.stdin)["input"]
if attack == "file":
    with open("big", "wb") as f:
        for _ in range(64):
            f.write(b"x" * 65536)
elif attack == "tmp":
    with open("/tmp/big", "wb") as f:
        for _ in range(64):
            f.write(b"x" * 65536)
elif attack == "memory":
    hog = bytearray(512 * 1024 * 1024)
elif attack == "processes":
    r, w = os.pipe()
    for _ in range(400):
        if os.fork() == 0:
            os.close(w)
            os.read(r, 1)  # alive until the parent exits (EOF), so the forks pile up past limits.processes
            os._exit(0)
print("done " + attack)
"""


def test_each_per_sample_limit_errors_its_sample_naming_the_limit_and_the_run_goes_on(tmp_path):
    """Issue 44 item 2: a sample past a limit (file size, /tmp, memory, processes) errors,
    its error naming the limit; the sample beside it passes."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "agent.py").write_text(_GREEDY)
    limits = {"file_size_bytes": 2 * 1024 * 1024, "tmp_bytes": 1024 * 1024, "memory_bytes": 256 * 1024 * 1024,
              "processes": 40}
    unit = {"kind": "command", "argv": ["{python}", "agent.py"], "timeout_s": 60, "limits": limits}
    (suite / "config.json").write_text(json.dumps({**BASE, "concurrency": 1, "unit": unit}))
    attacks = ("file", "tmp", "memory", "processes", "none")
    cases = [{"id": a, "input": a, "tags": ["golden"], "checks": [{"kind": "contains", "value": "done"}]}
             for a in attacks]
    (suite / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    with ScriptedServer({"default": {"text": "x"}}) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
    errors = {e["case_id"]: e["error"] for e in map(json.loads, (res.path / "errors.jsonl").read_text().splitlines())}
    assert errors.keys() == {"file", "tmp", "memory", "processes"}, errors
    for attack, name in (("file", "file_size_bytes"), ("tmp", "tmp_bytes"), ("memory", "memory_bytes"),
                         ("processes", "processes")):
        assert f"it hit a per-sample limit: limits.{name} = " in errors[attack], errors[attack]
    assert load_run(res.path).samples.output.tolist() == ["done none\n"]


_REPORTER = """import json, os, sys, urllib.error, urllib.request
case = json.load(sys.stdin)
n, size = case["input"]["n"], case["input"]["size"]
for i in range(n):
    req = urllib.request.Request(os.environ["EVALKIT_TOOLS_URL"], method="POST",
        data=json.dumps({"name": "t", "arguments": {}, "result": "x" * size}).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
    try:
        urllib.request.urlopen(req).read()
    except urllib.error.HTTPError as exc:
        print("refused", exc.code)
print("done")
"""


def test_tool_reports_past_their_count_or_size_error_the_sample_naming_the_limit(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "agent.py").write_text(_REPORTER)
    unit = {"kind": "command", "argv": ["{python}", "agent.py"], "timeout_s": 60,
            "limits": {"tool_reports": 3, "tool_report_bytes": 100_000}}
    (suite / "config.json").write_text(json.dumps({**BASE, "unit": unit}))
    inputs = {"count": {"n": 5, "size": 10}, "size": {"n": 1, "size": 200_000}, "fine": {"n": 3, "size": 50_000}}
    cases = [{"id": k, "input": v, "tags": ["golden"], "checks": [{"kind": "contains", "value": "done"}]}
             for k, v in inputs.items()]
    (suite / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    with ScriptedServer({"default": {"text": "x"}}) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
    errors = {e["case_id"]: e["error"] for e in map(json.loads, (res.path / "errors.jsonl").read_text().splitlines())}
    assert errors.keys() == {"count", "size"}, errors
    assert "limits.tool_reports = 3" in errors["count"] and "limits.tool_report_bytes = 100000" in errors["size"]
    assert len([e for e in read_trajectory(res.path, "count", "baseline", 0).events if e["type"] == "tool"]) == 3


_HOARDER = """import json, os, select, socket, sys, urllib.parse
json.load(sys.stdin)
url = urllib.parse.urlparse(os.environ["OPENAI_BASE_URL"])
held, closed = [], 0
for _ in range(100):
    s = socket.create_connection((url.hostname, url.port))
    held.append(s)
# the forwarder accepts the connections after connect() returned and closes each past
# its 10: wait for those 90 closes (it names the limit on stderr before the second), not
# for a time; the unit's timeout_s bounds the wait
waiting = list(held)
while closed < 90 and waiting:
    for s in select.select(waiting, [], [])[0]:
        try:
            closed += s.recv(1) == b""
        except OSError:
            closed += 1
        waiting.remove(s)
print(json.dumps({"closed": closed}))
"""


@pytest.mark.parametrize("forwarder", ["compiled", "python"])
def test_idle_connections_past_proxy_connections_are_closed_and_error_the_sample(tmp_path, monkeypatch, forwarder):
    if forwarder == "python":
        monkeypatch.setenv(sandbox.FORWARDER_ENV, "python")
    else:
        built = tmp_path / "forwarder"
        if sandbox.build_forwarder(built) is not None:
            pytest.skip("no C compiler")
        monkeypatch.setenv(sandbox.FORWARDER_ENV, str(built))
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "agent.py").write_text(_HOARDER)
    unit = {"kind": "command", "argv": ["{python}", "agent.py"], "timeout_s": 60, "keep_workdir": True,
            "limits": {"proxy_connections": 10}}
    (suite / "config.json").write_text(json.dumps({**BASE, "unit": unit}))
    cases = [{"id": "c", "input": "q", "tags": ["golden"], "checks": [{"kind": "contains", "value": "closed"}]}]
    (suite / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    with ScriptedServer({"default": {"text": "x"}}) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
    [error] = [json.loads(line)["error"] for line in (res.path / "errors.jsonl").read_text().splitlines()]
    assert "it hit a per-sample limit: limits.proxy_connections = 10" in error
    end = read_trajectory(res.path, "c", "baseline", 0).end
    assert end["exit_status"] == 0 and "limits.proxy_connections = 10" in end["stderr_tail"]


def test_the_run_summary_page_shows_the_errored_programs_stderr_tails_escaped(monkeypatch):
    import types

    import IPython.display

    from evalkit.telling import nb

    shown: list[str] = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj.data))
    run = types.SimpleNamespace(summary={"stderr_tails": [{"sample": "c0/baseline/0", "tail": "Traceback\n<Err>: x"}]})
    nb.show_stderr_tails(run)
    assert len(shown) == 1 and "stderr of c0/baseline/0" in shown[0] and "<pre>Traceback\n&lt;Err&gt;: x</pre>" in shown[0]
    nb.show_stderr_tails(types.SimpleNamespace(summary={}))
    assert len(shown) == 1


def test_tmp_is_mounted_once_sized_and_writable_whatever_is_hidden(tmp_path):
    """evalkit run from /tmp (its cwd hidden) must not mount a second, unsized, read-only /tmp."""
    work = tmp_path / "work"
    work.mkdir()
    jail = sandbox.Jail(work, None, 0, sandbox.hidden_paths("/tmp", tmp_path), sandbox.interpreter_paths(),
                        limits=sandbox.Limits(tmp_bytes=1234567))
    argv = sandbox.bwrap_argv(jail, ["true"])
    at = [i for i, a in enumerate(argv) if a == "/tmp" and argv[i - 1] in ("--tmpfs", "--remount-ro")]
    assert len(at) == 1 and argv[at[0] - 5 : at[0]] == ["--size", "1234567", "--perms", "1777", "--tmpfs"]


def test_a_ray_node_holds_at_most_the_local_stdout_limit_of_a_sample_and_kills_it_past_that():
    """Issue 44 item 5: a node read a sample's whole stdout (768 MiB); now, as locally, at
    most max_output + 1 bytes, the program's group killed past it, the stderr tail bounded."""
    from evalkit.running.executors import _bounded_communicate

    script = "import sys\nsys.stderr.write('e' * 100000)\nwhile True:\n    sys.stdout.write('x' * 65536)\n"
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    out, err, why = _bounded_communicate(proc, b"{}\n", 30.0, 1024 * 1024, 4096)
    assert len(out) == 1024 * 1024 + 1 and len(err) == 4096 and why == "its stdout passed 1048576 bytes"
    assert proc.wait(timeout=10) < 0  # killed
    # a program still running when its 0.5 s are up (the timeout under test), killed by it
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    assert _bounded_communicate(slow, b"{}\n", 0.5, 100, 100)[2] == "timed out after 0.5s"


def test_limits_are_validated_and_an_absolute_read_only_path_is_bound(tmp_path):
    """Issue 43: absolute read_only_paths accepted (and bound); a relative one may not leave
    the suite; `unit.limits` takes whole numbers above 0 under known names (exit 2 naming the key)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "facts.txt").write_text("the shared facts")
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "agent.py").write_text(f"import sys\nsys.stdin.read()\nprint(open({str(shared / 'facts.txt')!r}).read())\n")
    cases = [{"id": "a", "input": "q", "tags": ["golden"], "checks": [{"kind": "contains", "value": "facts"}]}]
    (suite / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    evalkit = Path(sys.prefix) / "bin" / "evalkit"
    env = {**os.environ, "EVALKIT_ROOT_TEST_KEY": "k", "PYTHONPATH": str(Path(__file__).parents[1])}
    for unit_extra, key in (({"limits": {"processes": 0}}, "$.unit.limits.processes"),
                            ({"limits": {"bogus": 1}}, "$.unit.limits.bogus"),
                            ({"read_only_paths": ["../shared"]}, "$.unit.read_only_paths[0]")):
        unit = {"kind": "command", "argv": ["{python}", "agent.py"], **unit_extra}
        (suite / "config.json").write_text(json.dumps({**BASE, "unit": unit}))
        done = subprocess.run([str(evalkit), "lint", str(suite)], capture_output=True, text=True, timeout=120, env=env)
        assert done.returncode == 2 and key in done.stderr, (key, done.stderr)
    unit = {"kind": "command", "argv": ["{python}", "agent.py"], "read_only_paths": [str(shared)]}
    (suite / "config.json").write_text(json.dumps({**BASE, "unit": unit}))
    with ScriptedServer({"default": {"text": "x"}}) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
    assert res.complete, res.reason
    assert load_run(res.path).samples.output.iloc[0] == "the shared facts\n"


def test_secret_files_are_found_by_name_and_a_git_config_only_with_credentials(tmp_path):
    proj = tmp_path / "p"
    for rel in (".env", ".env.prod", "certs/server.pem", "deploy/id.key", ".netrc", "src/app.py",
                ".venv/lib/cacert.pem", "node_modules/x/test.key", ".git/config"):
        (proj / rel).parent.mkdir(parents=True, exist_ok=True)
        (proj / rel).write_text("x")
    names = {p.relative_to(proj).as_posix() for p in sandbox.secret_files([proj])}
    assert names == {".env", ".env.prod", "certs/server.pem", "deploy/id.key", ".netrc"}
    (proj / ".git" / "config").write_text('[remote "o"]\n\turl = https://me:ghp_abc@github.com/o/r\n')
    assert proj / ".git" / "config" in sandbox.secret_files([proj])


def test_the_redactor_finds_a_secret_in_any_base64_offset_hex_and_url_encoding():
    import base64
    import urllib.parse

    secret = "sk-proj-" + "Zq9" * 10
    r = sandbox.Redactor({"OPENAI_API_KEY": secret})
    for prefix in (b"", b"a", b"ab"):
        blob = base64.b64encode(prefix + secret.encode() + b" tail").decode()
        assert secret not in r.text(blob) and "[redacted by evalkit]" in r.text(blob)
    assert r.text(secret.encode().hex().upper()) == "[redacted by evalkit]"
    assert r.text("k=" + urllib.parse.quote(secret + "/", safe="")).startswith("k=[redacted by evalkit]")
    assert r.fields({"a": [secret]}) == {"a": ["[redacted by evalkit]"]}
    assert {"OPENAI_API_KEY (base64)", "OPENAI_API_KEY (hex)", "OPENAI_API_KEY (as is)"} <= r.hits
    assert sandbox.Redactor({"SHORT": "abc"}).text("abc") == "abc"  # too short to be taken for a secret
