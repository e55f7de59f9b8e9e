"""A new user's first hour, through the CLI as they would type it (issue 33): init,
lint, power, run twice through `evalkit serve` (the second replays from the response
cache at $0), grade, compare, report, an own agent program as a command unit, and
JupyterLab as root, against the scripted server; the embedded model's cache identity has a
test of its own (`local_model`).

Real processes where a newcomer's process is the point: the first command typed
(`evalkit init`) and the first `evalkit serve -- evalkit run` (both processes, as the
README says to type it; the response cache it fills is read by later, separate
processes); the command `serve` runs is always a process of its own (serve spawns it),
and so are an agent program and JupyterLab. The other commands run in this process
through click's CliRunner (`cli`), with the same arguments, environment and folder:
their outputs and exit statuses are what is asserted, not their process boundary."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit._cli.main import main
from evalkit.calls.serve import DEFAULT_PORT, default_port

EVALKIT = [sys.executable, "-m", "evalkit._cli.main"]
SCRIPT = {
    "rules": [
        {"match": "France", "text": " Paris"},
        {"match": "Italy", "texts": [" Rome", " HACKED"], "weights": [0.7, 0.3]},
    ],
    "default": {"text": " unknown"},
}
DOCS = Path(__file__).resolve().parents[1] / "docs"
UNSET = ("EVALKIT_BASE_URL", "EVALKIT_JUDGE_BASE_URL", "EVALKIT_SERVED", "EVALKIT_NOTEBOOKS")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in UNSET}
    env["EVALKIT_API_KEY"] = "local"  # the scaffold's api_key_env
    return env


def evalkit(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EVALKIT, *args], cwd=cwd, capture_output=True, text=True, env=_env(), timeout=timeout)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`evalkit ARGS...` in this process (CliRunner), in the current folder (the test's, by
    monkeypatch.chdir), with `_env()`'s variables: the exit status and the two streams, as
    `evalkit` gives them."""
    env: dict[str, str | None] = {k: None for k in UNSET}
    env["EVALKIT_API_KEY"] = "local"
    res = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    return subprocess.CompletedProcess(args, res.exit_code, res.stdout, res.stderr)


def served(cwd: Path, script: Path, *command: str, port: str | None = None) -> subprocess.CompletedProcess[str]:
    """`evalkit serve --scripted SCRIPT [--port N] -- evalkit COMMAND...`, two real processes."""
    return evalkit(cwd, "serve", "--scripted", str(script), *(["--port", port] if port else []), "--", *EVALKIT,
                   *command)


def serve_here(capfd: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    """`evalkit serve ARGS...` in this process (`cli`); the command after `--` is still a
    process of its own, whose streams (this process's file descriptors) capfd reads: its
    output follows serve's own."""
    capfd.readouterr()
    res = cli("serve", *args)
    child = capfd.readouterr()
    return subprocess.CompletedProcess(args, res.returncode, res.stdout + child.out, res.stderr + child.err)


def served_here(capfd: pytest.CaptureFixture[str], script: Path, *command: str,
                port: str | None = None) -> subprocess.CompletedProcess[str]:
    """`served`, with `evalkit serve` in this process and the `evalkit` command under it a real one."""
    return serve_here(capfd, "--scripted", str(script), *(["--port", port] if port else []), "--", *EVALKIT,
                      *command)


def _spend(out: str) -> tuple[str, str]:
    m = re.search(r"spend: (\$\S+) of cap \$\S+ \(avoided by the cache: (\$\S+)\)", out)
    assert m, out
    return m.group(1), m.group(2)


def _run_folder(out: str, cwd: Path) -> Path:
    m = re.search(r"run folder: (\S+)", out)
    assert m, out
    return cwd / m.group(1)


def test_a_newcomers_loop_runs_with_no_guess_and_no_surprise(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)  # where the newcomer types, for the commands run in this process
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    unit = "evals/my-unit"

    init = evalkit(tmp_path, "init", unit)
    assert init.returncode == 0 and f"evalkit lint {unit}" in init.stdout, init.stderr
    lint = cli("lint", unit)
    assert lint.returncode == 0 and "0 error(s)" in lint.stdout, lint.stdout + lint.stderr
    power = cli("power", "--win-rate", "0.75", "--tie-rate", "0.3", "--alpha", "0.05", "--power",
                    "0.8", "--write", unit)
    assert power.returncode == 0 and (tmp_path / unit / "plan.json").is_file(), power.stderr

    # the recommended path, twice: the second run replays every answer at $0
    first = served(tmp_path, script, "run", unit)
    assert first.returncode == 0, first.stderr
    paid, avoided = _spend(first.stdout)
    assert paid != "$0" and avoided == "$0"
    second = served_here(capfd, script, "run", unit)
    assert second.returncode == 0, second.stderr
    assert _spend(second.stdout) == ("$0", paid)  # what the first paid, the cache avoided
    # ... on another port too: the answers are keyed by the script, not by where it was served
    third = served_here(capfd, script, "run", unit, port="0")
    assert _spend(third.stdout)[0] == "$0", third.stdout
    run = _run_folder(second.stdout, tmp_path)

    # grade, compare and report need no server
    grade = cli("grade", str(run))
    assert grade.returncode == 0, grade.stdout + grade.stderr
    assert "p95 latency" not in grade.stdout  # no retry on the ledger, the scripted server: no false alarm
    compare = cli("compare", str(run), "--baseline", "baseline", "--treatment", "skilled")
    assert compare.returncode == 0 and compare.stdout.startswith("verdict: "), compare.stdout + compare.stderr
    report = cli("report", str(run))
    assert report.returncode == 0, report.stdout + report.stderr
    # a suite with no judged case: no judge-calibration page, and the index says why
    assert "judge_calibration: skipped (nothing to calibrate" in report.stderr + report.stdout
    pages = tmp_path / "reports" / run.name
    assert not (pages / "judge_calibration.html").exists() and (pages / "skill_comparison.html").is_file()
    index = (tmp_path / "reports" / "index.html").read_text(encoding="utf-8")
    assert "not made: " in index and "Judge calibration (nothing to calibrate" in index
    page = (pages / "skill_comparison.html").read_text(encoding="utf-8")
    assert "/^(?!.*hacked)/" in page and "&#x27;^(?!.*hacked)&#x27;" not in page  # the regex as written
    assert "discordant or errored" not in page  # "discordant" names the tally's cases only

    # an own agent program: the minimal command unit of docs/agents.md, as written there
    agent = tmp_path / "evals" / "my-agent"
    agent.mkdir()
    page = (DOCS / "agents.md").read_text(encoding="utf-8")
    section = page[page.index("**A minimal command unit.**"):]
    config = json.loads(re.search(r"```json\n(.*?)\n```", section, flags=re.S).group(1))
    program = re.search(r"```python\n# agent.py\n(.*?)\n```", section, flags=re.S).group(1)
    (agent / "config.json").write_text(json.dumps(config, indent=2))
    (agent / "agent.py").write_text(program + "\n")
    (agent / "guidance.md").write_text("Answer with the city name only.\n")
    (agent / ".gitignore").write_text("runs/\n")
    (agent / "cases.jsonl").write_text(json.dumps({"id": "capital-france", "input": "What is the capital of France?",
                                                   "expected": "Paris", "tags": ["capital"]}) + "\n")
    lint = cli("lint", "evals/my-agent")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    first = served_here(capfd, script, "run", "evals/my-agent", "--k", "1")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "baseline: 1 samples, 0 errors" in first.stdout and "skilled: 1 samples, 0 errors" in first.stdout
    again = served_here(capfd, script, "run", "evals/my-agent", "--k", "1")
    assert _spend(again.stdout)[0] == "$0", again.stdout  # the agent's calls replay too
    grade = cli("grade", str(_run_folder(first.stdout, tmp_path)))
    assert grade.returncode == 0 and "sample_pass_rate" in grade.stdout, grade.stdout + grade.stderr


def test_serve_takes_the_same_default_port_each_time_it_is_free_and_another_when_not(tmp_path, monkeypatch, capfd):
    """serve in this process (what is tested is its choice of port), the command it runs a process."""
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    show = [sys.executable, "-c", "import os; print(os.environ['EVALKIT_BASE_URL'])"]
    urls = []
    for _ in range(2):
        free = default_port() == DEFAULT_PORT  # another test's serve may hold it for a moment
        proc = serve_here(capfd, "--scripted", str(script), "--", *show)
        assert proc.returncode == 0, proc.stderr
        urls.append((free, proc.stdout.strip()))
    for free, url in urls:
        assert url.startswith("http://127.0.0.1:") and (url == f"http://127.0.0.1:{DEFAULT_PORT}/v1" or not free)
    import socket

    from evalkit.calls import serve as serve_module

    with socket.socket() as held:  # a default port some other process holds (not 18181: another test's may)
        held.bind(("127.0.0.1", 0))
        held.listen()
        busy = held.getsockname()[1]
        monkeypatch.setattr(serve_module, "DEFAULT_PORT", busy)
        proc = serve_here(capfd, "--scripted", str(script), "--", *show)
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/v1", proc.stdout.strip())
    assert proc.stdout.strip() != f"http://127.0.0.1:{busy}/v1"


@pytest.mark.local_model
def test_a_serve_that_loses_the_default_port_to_another_after_looking_serves_on_a_free_one(
    tmp_path, monkeypatch, capfd
):
    """The race of two serves started at once: the default port was free when this serve
    looked, and another server (one that answers /v1/models, as another serve's would)
    holds it by the time the model server binds. Its readiness check never takes the
    other server for its own; its model server fails to bind, and serve starts it again
    on a free port, where the command's run goes."""
    from evalkit.calls import serve as serve_module
    from evalkit.calls.serve import ScriptedServer

    show = [sys.executable, "-c", "import os; print(os.environ['EVALKIT_BASE_URL'])"]
    with ScriptedServer(SCRIPT) as other:
        theirs = other.base_url
        taken = int(theirs.split(":")[2].split("/")[0])
        monkeypatch.setattr(serve_module, "default_port", lambda host="127.0.0.1": taken)  # "free", it said
        proc = serve_here(capfd, "--n-ctx", "512", "--", *show)
        asked = other.stats["requests"]
    assert proc.returncode == 0, proc.stderr
    url = proc.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/v1", url) and url != theirs, proc.stdout
    assert asked == 0  # not even the start-up completion went to the other server


@pytest.mark.skipif(os.geteuid() != 0, reason="docs/notebooks.md's line for root; a user's jupyter lab needs no flag")
def test_jupyterlab_as_root_starts_with_the_readmes_flag(tmp_path):
    assert "jupyter lab --allow-root" in (DOCS / "notebooks.md").read_text(encoding="utf-8")
    lab = Path(sys.executable).parent / "jupyter"
    env = {**_env(), "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"), "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg")}
    refused = subprocess.run([str(lab), "lab", "--no-browser", "--port=0"], cwd=tmp_path, capture_output=True,
                             text=True, env=env, timeout=120)
    assert refused.returncode != 0 and "--allow-root" in refused.stderr  # what the documented flag is for
    proc = subprocess.Popen([str(lab), "lab", "--allow-root", "--no-browser", "--port=0", "--IdentityProvider.token=t"],
                            cwd=tmp_path, stderr=subprocess.PIPE, text=True, env=env)
    try:
        seen = []
        for line in proc.stderr:  # the server says where it runs once it is up
            seen.append(line)
            if "http://" in line:  # the line after "Jupyter Server ... is running at:"
                break
        assert any("http://" in line for line in seen), "".join(seen)
    finally:
        proc.terminate()
        proc.wait(timeout=60)


@pytest.mark.local_model
def test_two_serves_of_the_embedded_model_share_the_cache(tmp_path):
    """The embedded model's answers are keyed by its file's sha256 and the server's
    settings: a second `evalkit serve -- evalkit run` (a new server, on any port) is $0."""
    unit = tmp_path / "evals" / "tiny"
    assert evalkit(tmp_path, "init", str(unit)).returncode == 0
    cases = (unit / "cases.jsonl").read_text().splitlines()[:1]
    (unit / "cases.jsonl").write_text("\n".join(cases) + "\n")
    runs = []
    for port in (None, "0"):
        proc = evalkit(tmp_path, "serve", "--n-ctx", "512", *(["--port", port] if port else []), "--", *EVALKIT,
                       "run", str(unit), "--k", "1", timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        runs.append(_spend(proc.stdout))
    assert runs[0][0] != "$0" and runs[1] == ("$0", runs[0][0])
