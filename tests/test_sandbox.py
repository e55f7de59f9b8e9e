"""The sandbox of command and python units (evalkit.calls.sandbox), through real processes,
real sockets and real bubblewrap: a hostile agent finds no key or URL, reaches nothing
but the proxy, writes nothing outside its workdir and leaves no process behind; bad
suite input is exit 2 naming the key; tool calls in the model's order; the output file."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from evalkit.calls import sandbox
from evalkit.conclusions.grading import grade_run
from evalkit.runfolder.runload import load_run
from evalkit.running.runner import run_suite
from evalkit.calls.serve import ScriptedServer
from evalkit.runfolder.trajectories import read_trajectory

AGENTS = Path(__file__).parent / "data" / "agents"
SECRET = "sk-upstream-secret-" + uuid.uuid4().hex
BASE = {
    "mode": "chat",
    "generator": {"model": "scripted", "api_key_env": "EVALKIT_SANDBOX_TEST_KEY"},
    "temperature": 0.0, "seed": 7, "k": 1, "concurrency": 2, "cost_cap_usd": 1.0,
    "max_tokens_in": 4000, "max_tokens_out": 40,
    "price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0}, "judge_price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0},
    "max_attempts": 1, "arms": [{"name": "baseline"}],
}
TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in ("get_weather", "send_email")]

pytestmark = pytest.mark.skipif(sandbox.probe() is not None, reason=f"no sandbox here: {sandbox.probe()}")


def write_suite(root: Path, cases: list[dict], unit: dict, **config) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps({**BASE, "unit": unit, **config}))
    (root / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    return root


def host_pids_with(marker: str) -> list[int]:
    """The host's processes whose command line holds `marker` (read from the host's /proc)."""
    found = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                cmd = Path(f"/proc/{p}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmd and int(p) != os.getpid():
                found.append(int(p))
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "zombie" in status.read_text())


def outlives(pid: int, grace_s: float = 10.0) -> bool:
    """Whether `pid` is still running `grace_s` after its sandbox ended. bubblewrap's outer
    process returns the program's status as soon as the sandbox's PID 1 reports it, while
    the kernel is still killing the rest of the PID namespace; so a process that is on its
    way out is waited for (its pidfd becomes readable when it exits), not polled."""
    import select

    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    try:
        ready, _, _ = select.select([fd], [], [], grace_s)
        return not ready and alive(pid)
    finally:
        os.close(fd)


@pytest.fixture(params=["under-tmp", "elsewhere", "under-tmp-python-forwarder"])
def where(request, tmp_path, monkeypatch):
    """A folder for the suite and runs: under /tmp (hidden by the sandbox's own /tmp) or
    elsewhere on the root filesystem (hidden by a tmpfs of its own); and under /tmp with
    the python forwarder (the fallback where the compiled one is not built). The hostile
    agent hangs past its timeout under /tmp with the compiled forwarder (the one test that
    waits the timeout out); in the other two it exits at once, leaving its child running."""
    if request.param.startswith("under-tmp"):
        if request.param.endswith("python-forwarder"):
            monkeypatch.setenv(sandbox.FORWARDER_ENV, "python")
        yield tmp_path
        return
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="evalkit-sandbox-test-", dir="/var/tmp"))
    yield base
    shutil.rmtree(base, ignore_errors=True)


def test_a_hostile_agent_finds_no_key_reaches_only_the_proxy_writes_only_its_workdir_and_leaves_nothing(
    where, monkeypatch, request
):
    tmp_path = where
    monkeypatch.setenv("EVALKIT_SANDBOX_TEST_KEY", SECRET)
    monkeypatch.setenv("OTHER_TOKEN", "ghp_" + "x" * 36)  # not a *_API_KEY: still never passed
    host = socket.socket()
    host.bind(("127.0.0.1", 0))
    host.listen(8)
    host.settimeout(0.2)
    marker = "evalkit-hostile-" + uuid.uuid4().hex
    run_dir = Path("/run") if os.access("/run", os.W_OK) else Path("/var/tmp")
    unix_path = run_dir / f"{marker}.sock"
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(str(unix_path))
    unix.listen(8)
    unix.settimeout(0.2)
    with ScriptedServer({"default": {"text": "hello from the proxy"}}) as srv:
        upstream = srv.base_url
        upstream_port = int(upstream.split(":")[2].split("/")[0])
        cases = [{"id": "h", "input": {"host_port": host.getsockname()[1], "upstream_port": upstream_port,
                                       "unix_path": str(unix_path)},
                  "tags": ["golden"], "checks": [{"kind": "contains", "value": "x"}]}]
        ending = "hang" if request.node.callspec.params["where"] == "under-tmp" else "exit"
        unit = {"kind": "command", "argv": ["{python}", str(AGENTS / "hostile.py"), "{suite}", marker, ending],
                "timeout_s": 10, "keep_workdir": True}
        suite = write_suite(tmp_path / "suite", cases, unit, generator={**BASE["generator"], "base_url": srv.base_url})
        before = (suite / "cases.jsonl").read_bytes()
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        requests = srv.stats["requests"]
    # nothing of the sandbox ever reached the host's own servers: every connection still queued
    # is read, and none is the hostile agent's (it sends its marker). The loopback port may
    # also be reached by another test running at the same time (one that probes a port it
    # found free, say), so a connection alone is not the sandbox's.
    for listener in (host, unix):
        while True:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                break
            with conn:
                conn.settimeout(0.5)
                try:
                    got = conn.recv(4096)
                except OSError:
                    got = b""
            assert marker.encode() not in got, f"the sandboxed agent reached the host's {listener}"
        listener.close()
    unix_path.unlink()
    assert requests == 1  # its one model call went through the proxy
    if ending == "hang":
        assert not res.complete and "timed out" in (res.path / "errors.jsonl").read_text()
    else:
        assert res.complete and (res.path / "results.jsonl").read_text().count('"case_id"') == 1
    [call] = read_trajectory(res.path, "h", "baseline", 0).model_calls
    assert call["status"] == "ok"
    work = res.path / "workdirs" / "h" / "baseline" / "sample-1"
    report = json.loads((work / "report.json").read_text())
    assert report["proxy_answer"] == "hello from the proxy"
    seen = json.dumps(report)
    assert SECRET not in seen and upstream not in seen and f"127.0.0.1:{upstream_port}" not in seen
    assert "ghp_" not in seen
    if os.geteuid() == 0:  # root's forwarder dropped to the sandbox's uid itself: not dumpable, not readable
        assert report["parent_mem_bytes"] == 0 and "Permission denied" in report.get("parent_mem_error", "")
    else:
        assert report["parent_mem_bytes"] > 1_000_000  # it did read its parent's memory: nothing in it
    assert len(report["environ"]) >= 2  # the sandbox's own processes only
    assert all(k not in report["own_environ"] for k in ("EVALKIT_SANDBOX_TEST_KEY", "OTHER_TOKEN"))
    assert report["files"]["config.json"].startswith("<FileNotFoundError")  # the suite is hidden
    assert report["files"]["./config.json"].startswith("<FileNotFoundError")  # its cwd is its own workdir
    assert all(v.startswith("refused") for v in report["connect"].values()), report["connect"]
    assert all(v.startswith("refused") for k, v in report["writes"].items() if k != "workdir"), report["writes"]
    assert (suite / "cases.jsonl").read_bytes() == before and not (suite / "planted.txt").exists()
    assert (work / "mine.txt").read_text() == "mine"
    assert report["child_alive"] and (work / "child.pid").read_text().isdigit()
    assert [p for p in host_pids_with(marker) if outlives(p)] == []  # its setsid child died with the sandbox


def test_a_python_unit_runs_in_a_worker_with_the_proxy_client_only(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALKIT_SANDBOX_TEST_KEY", SECRET)
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "spy.py").write_text(
        "import gc, os\n"
        "def run(case, client):\n"
        "    texts = [repr(o)[:2000] for o in gc.get_objects() if isinstance(o, (str, dict))]\n"
        "    blob = '\\n'.join(texts) + repr(dict(os.environ))\n"
        "    answer = client.chat.completions.create(model='m', messages=[{'role': 'user', 'content': 'hi'}])\n"
        "    print('a log line, not the output')\n"
        "    return json_of(blob, answer.choices[0].message.content, str(client.base_url))\n"
        "def json_of(blob, text, base):\n"
        "    import json\n"
        "    return json.dumps({'secret': %r in blob, 'pid': os.getpid(), 'text': text, 'base': base})\n" % SECRET
    )
    cases = [{"id": "p", "input": "q", "tags": ["golden"], "checks": [{"kind": "contains", "value": "secret"}]}]
    write_suite(suite, cases, {"kind": "python", "callable": "spy:run", "timeout_s": 60})
    with ScriptedServer({"default": {"text": "hi back"}}) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        upstream = srv.base_url
    assert res.complete, res.reason
    out = json.loads(load_run(res.path).samples.output.iloc[0])
    assert out["secret"] is False and out["text"] == "hi back" and out["pid"] != os.getpid()
    # the proxy's URL for the sample, its token redacted from what the function returned
    assert "/s/[redacted by evalkit]/v1" in out["base"] and upstream not in out["base"]


def _lint(suite: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Path(sys.executable).parent / "evalkit"), "run", str(suite), "--runs-dir", str(suite.parent / "runs"),
                           "--base-url", "http://127.0.0.1:9/v1"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "EVALKIT_SANDBOX_TEST_KEY": "k"})


def test_bad_sandbox_input_is_exit_2_naming_the_key(tmp_path):
    cases = [{"id": "a", "input": "q", "tags": ["golden"], "checks": [{"kind": "contains", "value": "x"}]}]
    argv = ["{python}", str(AGENTS / "plain_http.py")]
    bad_iso = write_suite(tmp_path / "iso", cases, {"kind": "command", "argv": argv, "isolation": "docker"})
    done = _lint(bad_iso)
    assert done.returncode == 2 and "$.unit.isolation" in done.stderr and "docker" in done.stderr, done.stderr
    missing = write_suite(tmp_path / "ro", cases, {"kind": "command", "argv": argv, "read_only_paths": ["data"]})
    done = _lint(missing)
    assert done.returncode == 2 and "$.unit.read_only_paths[0]" in done.stderr and "does not exist" in done.stderr
    key = write_suite(tmp_path / "env", cases, {"kind": "command", "argv": argv, "env": ["EVALKIT_SANDBOX_TEST_KEY"]})
    done = _lint(key)
    assert done.returncode == 2 and "$.unit.env[0]" in done.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").glob("2*"))


def test_without_bubblewrap_the_run_refuses_unless_isolation_none_and_then_says_so(tmp_path, monkeypatch):
    from evalkit.telling import nb
    from evalkit.foundations.errors import InputError

    monkeypatch.setenv(sandbox.BWRAP_ENV, str(tmp_path / "no-bwrap-here"))
    cases = [{"id": "a", "input": {"question": "q"}, "tags": ["golden"], "checks": [{"kind": "contains", "value": "x"}]}]
    unit = {"kind": "command", "argv": ["{python}", str(AGENTS / "plain_http.py")], "timeout_s": 60}
    suite = write_suite(tmp_path / "s", cases, unit)
    with pytest.raises(InputError, match=r"cannot be sandboxed: bubblewrap \(bwrap\) is not installed") as err:
        run_suite(suite, runs_dir=tmp_path / "runs", base_url="http://127.0.0.1:9/v1", progress=False)
    assert err.value.json_path == "$.unit.isolation"
    write_suite(tmp_path / "s", cases, {**unit, "isolation": "none"})
    with ScriptedServer({"default": {"text": "x"}}) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
    assert res.complete, res.reason
    assert json.loads((res.path / "summary.json").read_text())["isolation"] == "none"
    assert sandbox.NOT_CONTAINED in (res.path / "summary.md").read_text()
    assert nb.not_contained(load_run(res.path)) == sandbox.NOT_CONTAINED


PARALLEL = ("import json, os, sys, urllib.request\n"
            "json.load(sys.stdin)\n"
            "def post(url, body):\n"
            "    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={\n"
            "        'Authorization': 'Bearer ' + os.environ['OPENAI_API_KEY'], 'Content-Type': 'application/json'})\n"
            "    return json.load(urllib.request.urlopen(req, timeout=30))\n"
            "r = post(os.environ['OPENAI_BASE_URL'] + '/chat/completions',\n"
            "         {'model': 'm', 'messages': [{'role': 'user', 'content': 'go'}]})\n"
            "calls = r['choices'][0]['message']['tool_calls']\n"
            "for c in reversed(calls):  # the tools finish in the other order\n"
            "    post(os.environ['EVALKIT_TOOLS_URL'], {'name': c['function']['name'], 'call_id': c['id'],\n"
            "         'arguments': json.loads(c['function']['arguments'])})\n"
            "print('stdout is a log now')\n"
            "open(os.environ['EVALKIT_OUTPUT_FILE'], 'w').write('the final answer')\n")


def test_tool_calls_are_in_the_models_order_with_its_ids_and_the_output_file_is_the_output(tmp_path):
    script = {"default": {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}},
                                         {"name": "send_email", "arguments": {"to": "a@b.test"}}]}}
    cases = [{"id": "t", "input": {"tool_results": {"*": {"result": "ok"}}}, "tags": ["golden"],
              "checks": [{"kind": "tool_calls", "calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}},
                                                              {"name": "send_email", "arguments": {"to": "a@b.test"}}]},
                         {"kind": "exact", "value": "the final answer"}]}]
    suite = write_suite(tmp_path / "s", cases, {"kind": "command", "argv": ["{python}", "-c", PARALLEL]}, tools=TOOLS)
    with ScriptedServer(script) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
    assert res.complete, res.reason
    s = load_run(res.path).samples.iloc[0]
    assert [c["name"] for c in s.tool_calls] == ["get_weather", "send_email"]
    [answer] = read_trajectory(res.path, "t", "baseline", 0).model_calls
    assert [c["id"] for c in s.tool_calls] == [c["id"] for c in answer["answer"]["tool_calls"]]
    assert all(c["id"] for c in s.tool_calls)
    tools = read_trajectory(res.path, "t", "baseline", 0).tools
    assert [t["name"] for t in tools] == ["get_weather", "send_email"]  # in the model's order, written reversed
    assert s.output == "the final answer" and s.agent["stdout_tail"] == "stdout is a log now\n"
    assert all(g.passed for g in grade_run(res.path).grades)


def test_an_empty_trace_under_declared_and_checked_tools_is_a_finding_not_a_silent_pass(tmp_path):
    quiet = ("import json, os, sys, urllib.request\njson.load(sys.stdin)\n"
             "req = urllib.request.Request(os.environ['OPENAI_BASE_URL'] + '/chat/completions', data=json.dumps(\n"
             "    {'model': 'm', 'messages': [{'role': 'user', 'content': 'go'}]}).encode(), headers={\n"
             "    'Authorization': 'Bearer ' + os.environ['OPENAI_API_KEY'], 'Content-Type': 'application/json'})\n"
             "print(json.load(urllib.request.urlopen(req, timeout=30))['choices'][0]['message']['content'])\n")
    cases = [{"id": "q", "input": "q", "tags": ["golden"],
              "checks": [{"kind": "forbidden_tools", "tools": ["send_email"]}]}]
    suite = write_suite(tmp_path / "s", cases, {"kind": "command", "argv": ["{python}", "-c", quiet]}, tools=TOOLS)
    with ScriptedServer({"default": {"text": "I ran the tools in my own code"}}) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
    assert res.complete, res.reason
    found = [f.message for f in grade_run(res.path).findings]
    assert any(m.startswith("trajectory may be incomplete: the model asked for no tool in 1 sample(s) (q/baseline/0)") for m in found), found


def test_read_only_paths_and_the_argv_files_are_all_a_program_sees_of_its_suite(tmp_path):
    suite = tmp_path / "suite"
    (suite / "data").mkdir(parents=True)
    (suite / "data" / "facts.txt").write_text("the listed data")
    (suite / "unlisted.txt").write_text("never seen")
    (suite / "agent.py").write_text(
        "import json, os, sys\n"
        "json.load(sys.stdin)\n"
        "here = os.path.dirname(os.path.abspath(__file__))\n"
        "seen = {}\n"
        "for name in ('data/facts.txt', 'unlisted.txt', 'config.json'):\n"
        "    try:\n"
        "        seen[name] = open(os.path.join(here, name)).read()\n"
        "    except OSError as exc:\n"
        "        seen[name] = type(exc).__name__\n"
        "try:\n"
        "    open(os.path.join(here, 'data', 'new.txt'), 'w')\n"
        "    seen['write'] = 'written'\n"
        "except OSError as exc:\n"
        "    seen['write'] = type(exc).__name__\n"
        "print(json.dumps({'seen': seen, 'cwd': os.getcwd(), 'home': os.environ['HOME']}))\n")
    cases = [{"id": "r", "input": "q", "tags": ["golden"], "checks": [{"kind": "contains", "value": "seen"}]}]
    write_suite(suite, cases, {"kind": "command", "argv": ["{python}", "agent.py"], "read_only_paths": ["data"]})
    with ScriptedServer({"default": {"text": "x"}}) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
    assert res.complete, res.reason
    out = json.loads(load_run(res.path).samples.output.iloc[0])
    assert out["seen"] == {"data/facts.txt": "the listed data", "unlisted.txt": "FileNotFoundError",
                           "config.json": "FileNotFoundError", "write": "OSError"}
    assert out["cwd"] == out["home"] and not out["cwd"].startswith(str(suite))
    assert not (suite / "data" / "new.txt").exists() and not Path(out["cwd"]).exists()  # its workdir was discarded


@pytest.fixture(scope="module")
def compiled_forwarder(tmp_path_factory) -> Path:
    """The C forwarder built from this checkout's source (a C compiler is a requirement)."""
    dest = tmp_path_factory.mktemp("forwarder") / "evalkit-forwarder"
    assert sandbox.build_forwarder(dest) is None
    return dest


@pytest.fixture(params=["compiled", "python"])
def forwarder(request, compiled_forwarder, monkeypatch) -> str:
    """Each forwarder in turn: the compiled one, and the python one it falls back to."""
    monkeypatch.setenv(sandbox.FORWARDER_ENV, str(compiled_forwarder) if request.param == "compiled" else "python")
    return request.param


def _echo_upper(listener: socket.socket) -> None:
    """The proxy's stand-in on its Unix socket: each connection's bytes back in upper case."""
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            data = b""
            while chunk := conn.recv(65536):
                data += chunk
            conn.sendall(data.upper())


# The program: connects at once (no retry: the forwarder listens before it starts), sends
# 1 MiB, half-closes, reads the answer through, then exits with a status of its own.
_CLIENT = (
    "import socket, sys\n"
    "s = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
    "s.sendall(b'abc' * (1 << 18) + b'!'); s.shutdown(socket.SHUT_WR)\n"
    "got = b''\n"
    "while chunk := s.recv(65536): got += chunk\n"
    "print(len(got), got[:6].decode(), got[-1:].decode(), flush=True)\n"
    "sys.exit(int(sys.argv[2]))\n"
)


def test_each_forwarder_serves_the_proxy_socket_on_loopback_from_the_first_connect_and_passes_the_status(
    tmp_path, forwarder
):
    import threading

    assert (sandbox.forwarder_binary() is not None) == (forwarder == "compiled")
    work = tmp_path / "work"
    work.mkdir()
    sandbox.own_workdir(work)  # root's sandbox runs as another uid
    sock = tmp_path / "proxy.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock))
    sock.chmod(0o666)
    listener.listen(8)
    threading.Thread(target=_echo_upper, args=(listener,), daemon=True).start()
    port = 40000 + os.getpid() % 20000
    jail = sandbox.Jail(work, sock, port, sandbox.hidden_paths(tmp_path), sandbox.interpreter_paths())
    env = sandbox.environment({}, work)

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(sandbox.bwrap_argv(jail, list(argv)), env=env, cwd=work, capture_output=True,
                              text=True, timeout=60)

    try:
        done = run(sys.executable, "-c", _CLIENT, str(port), "3")
        assert (done.returncode, done.stdout) == (3, f"{3 * (1 << 18) + 1} ABCABC !\n"), done.stderr
        killed = run(sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
        assert killed.returncode == 128 + 15  # a signal's death as a shell reports it
        missing = run("no-such-program-here")
        assert missing.returncode == 127 and "could not start 'no-such-program-here'" in missing.stderr
        # none of the forwarder's processes (its server, its connections') outlives its sandbox
        mine = [p for p in host_pids_with(f"\0{port}\0{sandbox.SOCKET_INSIDE}\0--\0") if outlives(p)]
        assert mine == []
    finally:
        listener.close()


def test_a_compiled_forwarder_older_than_its_source_or_not_built_is_not_used(tmp_path, compiled_forwarder, monkeypatch):
    import shutil

    binary = Path(shutil.copy2(compiled_forwarder, tmp_path / "evalkit-forwarder"))
    monkeypatch.setenv(sandbox.FORWARDER_ENV, str(binary))
    jail = sandbox.Jail(Path("/w"), Path("/s"), 1, (), ())
    assert sandbox.forwarder_binary() == binary and sandbox.FORWARDER_BIN_INSIDE in sandbox.bwrap_argv(jail, ["true"])
    source = sandbox.FORWARDER_C.stat().st_mtime
    os.utime(binary, (source - 60, source - 60))
    assert sandbox.forwarder_binary() is None  # a stale build: the python forwarder runs
    stale = sandbox.bwrap_argv(jail, ["true"])
    at = len(stale) - 1 - stale[::-1].index(sandbox.FORWARDER_INSIDE)  # the one run, not its bind
    assert stale[at - 3 : at] == [sys.executable, "-I", "-S"]
    assert sandbox.build_forwarder(tmp_path / "broken", cc="false") is not None  # a compiler that fails
    assert not (tmp_path / "broken").exists() and not (tmp_path / "broken.part").exists()


def _serve_upper_threaded(listener: socket.socket) -> None:
    """`_echo_upper` with a thread per connection: concurrent clients are answered at once."""
    import threading

    def one(conn: socket.socket) -> None:
        with conn:
            data = b""
            while chunk := conn.recv(65536):
                data += chunk
            conn.sendall(data.upper())

    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=one, args=(conn,), daemon=True).start()


def _forwarded(tmp_path: Path):
    """A proxy stand-in on a Unix socket and a runner of argv under the forwarder, with
    that socket on the sandbox's loopback; the port, the runner and the listener to close."""
    import threading

    work = tmp_path / "work"
    work.mkdir()
    sandbox.own_workdir(work)  # root's sandbox runs as another uid
    sock = tmp_path / "proxy.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock))
    sock.chmod(0o666)
    listener.listen(64)
    threading.Thread(target=_serve_upper_threaded, args=(listener,), daemon=True).start()
    port = 40000 + os.getpid() % 20000
    jail = sandbox.Jail(work, sock, port, sandbox.hidden_paths(tmp_path), sandbox.interpreter_paths())

    def run(argv: list[str], **kw) -> subprocess.CompletedProcess[str]:
        return subprocess.run(sandbox.bwrap_argv(jail, argv), env=sandbox.environment({}, work), cwd=work,
                              capture_output=True, text=True, timeout=60, **kw)

    return port, run, listener


# Signals 32 and 33 are the C library's own (glibc's SIGCANCEL and SIGSETXID): sigaction()
# refuses to change them from user code (EINVAL), Python's signal module does not list them,
# and a glibc program sets its own handler before it uses them; so neither forwarder can
# reset them, and a disposition inherited from whatever started evalkit (seen in a fresh
# clone's make test: SigIgn 0000000080000000) is not the forwarder's.
_LIBC_SIGNALS = (1 << 31) | (1 << 32)


def _sig_masks(status: str) -> dict[str, str]:
    masks = {k: v.strip() for k, v in (line.split(":", 1) for line in status.splitlines()) if k in ("SigIgn", "SigBlk")}
    return {k: f"{int(v, 16) & ~_LIBC_SIGNALS:016x}" for k, v in masks.items()}


def test_each_forwarder_starts_the_program_with_no_signal_ignored_or_blocked(tmp_path, forwarder):
    import signal

    port, run, listener = _forwarded(tmp_path)
    try:
        # `cat` reads its own status: exec'd by the forwarder, no interpreter of its own to change it
        plain = run(["cat", "/proc/self/status"])
        # and under a parent that ignores SIGPIPE and SIGXFSZ (as pytest's python does) and blocks
        # SIGUSR1 and SIGTERM: the forwarder hands the program a clean state all the same
        inherited = run(["cat", "/proc/self/status"], restore_signals=False,
                        preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGTERM}))
    finally:
        listener.close()
    zero = {"SigIgn": "0" * 16, "SigBlk": "0" * 16}
    assert plain.returncode == 0 and _sig_masks(plain.stdout) == zero, plain.stderr
    assert inherited.returncode == 0 and _sig_masks(inherited.stdout) == zero, inherited.stderr


# The program: 120 connections one after another, then 60 at once, each with its own bytes;
# prints how many came back right.
_MANY = (
    "import socket, sys, threading\n"
    "port = int(sys.argv[1]); ok = []\n"
    "def one(i):\n"
    "    s = socket.create_connection(('127.0.0.1', port), timeout=30)\n"
    "    msg = b'conn-%d-' % i * 50; s.sendall(msg); s.shutdown(socket.SHUT_WR)\n"
    "    got = b''\n"
    "    while chunk := s.recv(65536): got += chunk\n"
    "    s.close(); ok.append(got == msg.upper())\n"
    "for i in range(120): one(i)\n"
    "ts = [threading.Thread(target=one, args=(i,)) for i in range(120, 180)]\n"
    "for t in ts: t.start()\n"
    "for t in ts: t.join()\n"
    "print(sum(ok), len(ok))\n"
)


def _script_forwarded(tmp_path: Path, script: str):
    """`python -c script PORT` under the forwarder (PORT: the proxy's on the sandbox's
    loopback); what it printed, and the forwarder's processes that outlived the sandbox."""
    port, run, listener = _forwarded(tmp_path)
    try:
        done = run([sys.executable, "-c", script, str(port)])
        return done, [p for p in host_pids_with(f"\0{port}\0{sandbox.SOCKET_INSIDE}\0--\0") if outlives(p)]
    finally:
        listener.close()


def test_each_forwarder_serves_many_connections_in_a_row_and_at_once(tmp_path, forwarder):
    # none of the forwarder's processes (its server, its 180 connections') outlives its sandbox
    done, mine = _script_forwarded(tmp_path, _MANY)
    assert (done.returncode, done.stdout) == (0, "180 180\n"), done.stderr
    assert mine == []


# The program: makes the forwarder's server run out of descriptors (its soft RLIMIT_NOFILE
# lowered to 1 with prlimit: same user), so its accept() fails
# with EMFILE; waits until it has retried (its voluntary context switches grow: each retry
# is a back-off sleep) or is gone; connects; gives the descriptors back; that connection
# must be served. The server is the forwarder's other child (compiled) or the forwarder's
# own process (python: a thread).
_EMFILE = (
    "import os, resource, select, socket, sys, time\n"
    "port = int(sys.argv[1])\n"
    "def ask(msg, timeout=30):\n"
    "    got = b''\n"
    "    try:\n"
    "        s = socket.create_connection(('127.0.0.1', port), timeout=timeout)\n"
    "        s.sendall(msg); s.shutdown(socket.SHUT_WR)\n"
    "        while chunk := s.recv(65536): got += chunk\n"
    "    except OSError as exc:\n"
    "        return repr(exc)\n"
    "    return got\n"
    "assert ask(b'first') == b'FIRST'  # the server is up\n"
    "me, parent = os.getpid(), os.getppid()\n"
    "def ppid(p):\n"
    "    try:\n"
    "        return int(open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()[1])\n"
    "    except OSError:\n"
    "        return None\n"
    "sib = [int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) != me and ppid(p) == parent]\n"
    "server = sib[0] if sib else parent\n"
    "soft, hard = resource.prlimit(server, resource.RLIMIT_NOFILE)\n"
    "resource.prlimit(server, resource.RLIMIT_NOFILE, (1, hard))  # no new descriptor at all\n"
    "def switches():\n"
    "    n = 0\n"
    "    for t in os.listdir(f'/proc/{server}/task'):\n"
    "        try:\n"
    "            for line in open(f'/proc/{server}/task/{t}/status'):\n"
    "                if line.startswith('voluntary_ctxt_switches'): n += int(line.split()[1])\n"
    "        except OSError:\n"
    "            pass\n"
    "    return n\n"
    "pidfd = os.pidfd_open(server)\n"
    "starved = socket.create_connection(('127.0.0.1', port))  # wakes an accept already waiting\n"
    "base, deadline, gone = switches(), time.monotonic() + 10, False\n"
    "while switches() < base + 5 and not gone and time.monotonic() < deadline:\n"
    "    gone = bool(select.select([pidfd], [], [], 0.005)[0])\n"
    "print('retrying:', switches() - base, flush=True); print('gone:', gone, flush=True)\n"
    "s = socket.create_connection(('127.0.0.1', port), timeout=10)  # queued in the backlog\n"
    "resource.prlimit(server, resource.RLIMIT_NOFILE, (soft, hard))\n"
    "s.sendall(b'after'); s.shutdown(socket.SHUT_WR); got = b''\n"
    "while chunk := s.recv(65536): got += chunk\n"
    "print('after:', got.decode(), flush=True)\n"
)


def test_each_forwarders_server_survives_running_out_of_descriptors(tmp_path, forwarder):
    done, mine = _script_forwarded(tmp_path, _EMFILE)
    assert mine == []  # the server, kept alive by its retries, still ends with its sandbox
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert done.returncode == 0, (done.stdout, done.stderr)
    # it retried (backing off) while out of descriptors, stayed up, and served the next connection
    assert (lines["gone"], lines["after"]) == ("False", "AFTER") and int(lines["retrying"]) >= 5, done.stdout


def test_the_compiled_forwarder_compiles_without_a_warning(tmp_path):
    cc = os.environ.get("CC") or "cc"
    done = subprocess.run([cc, "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(tmp_path / "fwd"), str(sandbox.FORWARDER_C)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
