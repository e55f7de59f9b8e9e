"""Samples of command units as Ray tasks (evalkit.running.executors) on a real three-node Ray
cluster on this machine (`ray.cluster_utils.Cluster`, one CPU each), against the
scripted server over real HTTP: a Ray run writes what a local run writes, key for key;
a runaway agent on each of the three nodes at once never passes the driver's cap; an unreachable cluster is
exit 2 before anything is written or spent; bad `executor` and `unit.resources` keys
are exit 2 naming the key."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.calls import sandbox
from evalkit._cli.main import main
from evalkit.foundations.errors import InputError
from evalkit.conclusions.grading import grade_run
from evalkit.suites.reader import load_suite
from evalkit.foundations.records import Executor
from evalkit.running.runner import run_suite
from evalkit.calls.serve import ScriptedServer
from evalkit.runfolder.trajectories import read_trajectory

AGENTS = Path(__file__).parent / "data" / "agents"
BASE = {
    "mode": "chat",
    "generator": {"model": "scripted", "api_key_env": "EVALKIT_RAY_TEST_KEY"},
    "temperature": 0.0, "seed": 7, "k": 2, "concurrency": 2, "cost_cap_usd": 1.0,
    "max_tokens_in": 4000, "max_tokens_out": 40,
    "price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0}, "judge_price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0},
    "max_attempts": 1, "arms": [{"name": "baseline"}],
}
# two model calls per sample: a tool call answered from the fixtures, then the answer
SCRIPT = {"rules": [
    {"match": "RESULT: rain", "text": "It rains in Oslo."},
    {"match": "Question", "text": "CALL get_weather(Oslo)"},
]}
FIXTURES = {"get_weather": [{"result": "rain, 12 C"}]}
# what differs between any two runs, local or not: times, the run's own ids and paths
VOLATILE = {"latency_ms", "duration_ms", "run_id", "created", "trajectory_id"}

CLUSTER_TRIES = 4
# how soon the head sees a node die (test_a_node_that_dies_mid_sample...): a health check each
# second, dead after 5 failed in a row (about 5 s), where Ray's defaults (every 3 s) take 15 s;
# a check still waits 3 s for its answer, so a node slow under load is not called dead
HEALTH_CHECKS = {"health_check_period_ms": 1000, "health_check_failure_threshold": 5,
                 "health_check_timeout_ms": 3000}
needs_sandbox = pytest.mark.skipif(sandbox.probe() is not None, reason=f"no sandbox here: {sandbox.probe()}")


@pytest.fixture(scope="module")
def cluster():
    """Three Ray nodes of one CPU each on this machine (the head, one plain worker, and the
    one worker with the custom resource "far"), started once for the module."""
    cluster_utils = pytest.importorskip("ray.cluster_utils")
    Cluster = cluster_utils.Cluster

    import psutil  # a dependency of Ray's

    args = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024}
    why = None
    for _ in range(CLUSTER_TRIES):  # Ray waits 30 s for a raylet to register, which a loaded machine can miss
        before = {p.pid for p in psutil.Process().children(recursive=True)}
        c = None
        try:
            c = Cluster(initialize_head=True, head_node_args={**args, "include_dashboard": False,
                                                              "_system_config": HEALTH_CHECKS})
            c.add_node(**args)
            # a custom resource: only this node has it (kept on the cluster for the test that kills it)
            c.far = c.add_node(**args, resources={"far": 1})
            c.wait_for_nodes()
            break
        except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception for a node that did not start
            why = exc
            if c is not None:
                c.shutdown()
            for p in psutil.Process().children(recursive=True):  # what the failed start left running
                if p.pid not in before:
                    p.kill()
    else:
        raise RuntimeError(f"the three-node Ray cluster did not start in {CLUSTER_TRIES} tries: {why}")
    try:
        join_as_driver(c)
    except BaseException:
        c.shutdown()  # no cluster left running into the worker's later files
        raise
    yield c
    import ray

    ray.shutdown()
    c.shutdown()


def join_as_driver(c) -> None:
    """This process joins `c` as one Ray driver for the module, as a notebook that called
    `ray.init` does: a run then keeps that connection (evalkit's executor joins and leaves
    only when nobody had), so the module's runs are one Ray job and share its worker
    processes (a job of its own per run starts a Python worker on each node it uses,
    about 1.5 CPU-s each). test_a_ray_run_writes_what_a_local_run_writes_key_for_key runs
    without it: a run that joins the cluster itself, and leaves it."""
    import logging

    import ray

    ray.init(address=c.address, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)


@pytest.fixture
def no_driver(cluster):
    """The test runs in a process that has not joined the cluster; the module's driver
    joins again after it."""
    import ray

    ray.shutdown()
    yield
    if not ray.is_initialized():
        join_as_driver(cluster)


def write_suite(root: Path, cases: list[dict], unit: dict, **config) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps({**BASE, "unit": unit, **config}))
    (root / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    return root


def local_then_ray(suite: Path, script: dict, tmp_path: Path, cluster):
    """`suite` run locally, then on `cluster`, against one scripted server (no cache, so
    each run pays its own calls): both results and the requests each run made."""
    with ScriptedServer(script) as srv:
        local = run_suite(suite, runs_dir=tmp_path / "local", base_url=srv.base_url, progress=False, cache=False)
        served_local = srv.stats["requests"]
        remote = run_suite(suite, runs_dir=tmp_path / "ray", base_url=srv.base_url, progress=False, cache=False,
                           executor=Executor(kind="ray", address=cluster.address))
        return local, remote, served_local, srv.stats["requests"] - served_local


def weather_cases(n: int) -> list[dict]:
    return [{"id": f"c{i}", "input": {"question": f"weather {i}?", "tool_results": FIXTURES}, "tags": ["golden"],
             "checks": [{"kind": "contains", "value": "rains" if i % 2 == 0 else "snows"}]} for i in range(n)]


def stable(value):
    """`value` without what differs between two runs of one suite (times, ids)."""
    if isinstance(value, dict):
        return {k: stable(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [stable(v) for v in value]
    return value


def by_key(path: Path) -> dict[tuple, dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {(r["case_id"], r["arm"], r["index"]): stable(r) for r in rows}


@needs_sandbox
def test_a_ray_run_writes_what_a_local_run_writes_key_for_key(tmp_path, cluster, no_driver, capfd):
    import ray

    unit = {"kind": "command", "argv": ["{python}", str(AGENTS / "plain_http.py"), "--turns", "3"], "timeout_s": 60,
            "resources": {"num_cpus": 1}}
    suite = write_suite(tmp_path / "suite", weather_cases(3), unit)
    local, remote, served_local, served = local_then_ray(suite, SCRIPT, tmp_path, cluster)
    assert not ray.is_initialized()  # the run joined the cluster itself, and left it
    assert local.complete and remote.complete, (local.reason, remote.reason)
    assert served == served_local == 3 * 2 * 2  # two model calls per sample, each run paid its own
    assert remote.spend_usd == pytest.approx(local.spend_usd)
    err = capfd.readouterr().err
    assert "ray: 6 sample process(es) ran on" in err
    # concurrency 2 on three 1-CPU nodes: the run says it leaves one idle
    assert "concurrency 2 runs at most 2 sample(s) at once; the cluster's 3 CPU(s) hold 3 at num_cpus 1" in err, err
    left, right = by_key(local.path / "results.jsonl"), by_key(remote.path / "results.jsonl")
    assert sorted(left) == sorted(right) and len(left) == 6
    for key in left:
        assert left[key] == right[key], key
        assert right[key]["usage"]["prompt_tokens"] > 0 and right[key]["agent"]["model_calls"] == 2
    for res in (local, remote):
        grade_run(res.path)
    g_left, g_right = by_key(local.path / "grades.jsonl"), by_key(remote.path / "grades.jsonl")
    assert g_left == g_right and {g["passed"] for g in g_right.values()} == {True, False}
    # the trajectories are the same events, call for call
    for key in left:
        a, b = (read_trajectory(res.path, *key) for res in (local, remote))
        assert a is not None and b is not None and a.finished and b.finished
        assert [e["type"] for e in a.events] == [e["type"] for e in b.events]
        assert [stable(c.get("usage")) for c in a.model_calls] == [stable(c.get("usage")) for c in b.model_calls]


def test_an_uncontained_program_on_a_node_reaches_the_proxy_through_the_relay_and_sees_no_key(
    tmp_path, cluster, monkeypatch
):
    """``"isolation": "none"``: the relay listens on the node's loopback and the
    program's URLs point at it; the upstream key set in the driver's environment is not
    in the program's."""
    monkeypatch.setenv("EVALKIT_TEST_KEY", "sk-upstream-only-in-the-driver")  # the env suite's upstream key
    unit = {"kind": "command", "argv": ["{python}", str(AGENTS / "plain_http.py"), "--turns", "3"], "timeout_s": 60,
            "isolation": "none"}
    suite = write_suite(tmp_path / "suite", weather_cases(1), unit, k=1)
    env_unit = {**unit, "argv": [*unit["argv"], "--env"]}
    env_suite = write_suite(tmp_path / "env-suite", weather_cases(1), env_unit, k=1,
                            generator={"model": "scripted", "api_key_env": "EVALKIT_TEST_KEY"})
    with ScriptedServer(SCRIPT) as srv:
        ray_exec = Executor(kind="ray", address=cluster.address)
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False, executor=ray_exec)
        seen = run_suite(env_suite, runs_dir=tmp_path / "env-runs", base_url=srv.base_url, progress=False,
                         executor=ray_exec)
        requests = srv.stats["requests"]
    assert res.complete and seen.complete and requests == 2
    [row] = [json.loads(x) for x in (res.path / "results.jsonl").read_text().splitlines()]
    assert row["output"].strip() == "It rains in Oslo." and row["agent"]["model_calls"] == 2
    [env_row] = [json.loads(x) for x in (seen.path / "results.jsonl").read_text().splitlines()]
    said = json.loads(env_row["output"])["seen"]
    assert said["OPENAI_BASE_URL"] and said["OPENAI_API_KEY"] and not said["EVALKIT_TEST_KEY"]


@needs_sandbox
def test_a_runaway_agent_on_every_node_never_passes_the_drivers_cap(tmp_path, cluster, capfd):
    """Three runaway loops at once, one on each of the three 1-CPU nodes: the first call
    of each is held at the server until all three are (each task takes the one CPU of its
    node, so three running at once are on three nodes), then they loop until the
    driver's one ledger refuses. ``concurrency`` 3: the samples in flight at once, on the
    whole cluster (at 2, as an earlier version of this test had, the third loop could
    only start once another ended)."""
    import threading

    worst = (4000 * 1.0 + 40 * 2.0) / 1e6
    cap = worst * 10
    cases = [{"id": f"r{i}", "input": {"question": "loop"}, "tags": ["golden"],
              "checks": [{"kind": "contains", "value": "x"}]} for i in range(3)]
    unit = {"kind": "command", "argv": ["{python}", str(AGENTS / "plain_http.py"), "--forever"], "timeout_s": 120,
            "resources": {"num_cpus": 1}}  # a node's one CPU per loop: three at once are one on each node
    suite = write_suite(tmp_path / "suite", cases, unit, cost_cap_usd=cap, k=2, concurrency=3)
    heavy = {"prompt_tokens": 3000, "completion_tokens": 30}  # each call costs most of its ceiling
    script = {"rules": [{"match": "loop", "text": "CALL get_weather(Oslo)", "usage": heavy}], "latency_s": 0.005,
              "faults": [{"kind": "slow", "hold": True, "times": 3}]}
    out: dict = {}
    with ScriptedServer(script) as srv:
        runner = threading.Thread(target=lambda: out.update(res=run_suite(
            suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False,
            executor=Executor(kind="ray", address=cluster.address))))
        runner.start()
        try:
            # the server signals as it counts each held call; the deadline only bounds a failure
            every = srv.wait_until(lambda stats: stats["faults"]["slow"] >= 3, 120)
            held = srv.stats["faults"]["slow"]
        finally:
            srv.release()
            runner.join(180)
        requests = srv.stats["requests"]
    assert every and held == 3, f"{held} of the three loops were held at once"
    res = out["res"]
    err = capfd.readouterr().err
    assert not res.complete and "budget exhausted" in (res.reason or "")
    paid_by_server = requests * (3000 * 1.0 + 30 * 2.0) / 1e6  # what the endpoint served, priced independently
    assert res.spend_usd <= cap + 1e-12 and paid_by_server <= cap + 1e-12
    assert requests >= 4  # the loops did run past their held calls until the cap refused them
    ledger = [json.loads(x) for x in (res.path / "ledger.jsonl").read_text().splitlines()]
    assert requests == sum(1 for e in ledger if e["event"] == "reserve")  # every call reserved on the one ledger
    assert any(e["event"] == "refuse" for e in ledger)
    # the tasks' own word for where they ran: three in flight at once, on three nodes
    assert "sample process(es) ran on 3 node(s)" in err and "at most 3 at once, on 3 node(s)" in err, err
    assert "raise concurrency" not in err  # concurrency 3 uses the cluster's three CPUs


@needs_sandbox
def test_a_driver_killed_mid_run_then_resumed_with_ray_runs_every_key_once_and_pays_nothing_twice(tmp_path, cluster):
    """The driver (a real `evalkit run --ray` process) is SIGKILLed while its third
    sample's first call is held at the server; `--resume RUN --ray` finishes the run."""
    import collections
    import os
    import signal
    import subprocess
    import sys

    unit = {"kind": "command", "argv": ["{python}", str(AGENTS / "plain_http.py"), "--turns", "3"], "timeout_s": 60}
    suite = write_suite(tmp_path / "suite", weather_cases(3), unit, k=1, concurrency=1)
    runs = tmp_path / "runs"
    script = {**SCRIPT, "faults": [{"kind": "slow", "hold": True, "times": 1, "match": "weather 2?"}]}
    with ScriptedServer(script) as srv:
        proc = subprocess.Popen(
            [sys.executable, "-m", "evalkit._cli.main", "run", str(suite), "--runs-dir", str(runs), "--base-url",
             srv.base_url, "--no-progress", "--ray", cluster.address],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, "EVALKIT_RAY_TEST_KEY": "sk-test"},
        )
        try:
            assert srv.held.wait(120), "the run never reached its third sample"
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        [folder] = list(runs.glob("2*"))
        assert not (folder / "summary.json").exists()
        before = {(r["case_id"], r["arm"], r["index"]) for r in map(json.loads, (folder / "results.jsonl").open())}
        assert before == {("c0", "baseline", 0), ("c1", "baseline", 0)}
        epoch1 = {json.loads(x)["run_epoch"] for x in (folder / "ledger.jsonl").read_text().splitlines()}
        srv.release()
        res = run_suite(suite, resume=folder, base_url=srv.base_url, progress=False,
                        executor=Executor(kind="ray", address=cluster.address))
    assert res.complete and res.exit_code == 0, res.reason
    rows = [json.loads(x) for x in (folder / "results.jsonl").read_text().splitlines()]
    keys = collections.Counter((r["case_id"], r["arm"], r["index"]) for r in rows)
    assert len(keys) == 3 and set(keys.values()) == {1}
    later = [json.loads(x) for x in (folder / "ledger.jsonl").read_text().splitlines()]
    later = [e for e in later if e["run_epoch"] not in epoch1]
    touched = {e["key"].split("#")[0] for e in later if e["event"] == "reserve"}
    assert touched == {"c2/baseline/0"}  # only the cut sample ran again: a finished one was not paid twice
    t = read_trajectory(folder, "c2", "baseline", 0)
    assert t is not None and t.attempt == 2 and t.finished


@needs_sandbox
def test_a_node_that_dies_mid_sample_errors_it_and_it_runs_once_more_elsewhere(tmp_path, cluster):
    """The sample needs the custom resource only the worker node has; that node is
    killed while the sample's first call is held at the server; a new node with the
    resource joins; the sample is errored (its call paid) and runs once more there."""
    import threading

    unit = {"kind": "command", "argv": ["{python}", str(AGENTS / "plain_http.py"), "--turns", "3"], "timeout_s": 120,
            "resources": {"num_cpus": 1, "custom": {"far": 1}}}
    suite = write_suite(tmp_path / "suite", weather_cases(1), unit, k=1)
    script = {**SCRIPT, "faults": [{"kind": "slow", "hold": True, "times": 1}]}
    out: dict = {}
    with ScriptedServer(script) as srv:
        runner = threading.Thread(target=lambda: out.update(res=run_suite(
            suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False,
            executor=Executor(kind="ray", address=cluster.address))))
        runner.start()
        assert srv.held.wait(120)  # the sample is mid-call, on the node with the resource
        cluster.remove_node(cluster.far, allow_graceful=False)  # the node with "far"
        cluster.far = cluster.add_node(num_cpus=1, object_store_memory=80 * 1024 * 1024, resources={"far": 1})
        srv.release()
        runner.join(180)
        requests = srv.stats["requests"]
    res = out["res"]
    assert res.complete, res.reason
    errors = [json.loads(x) for x in (res.path / "errors.jsonl").read_text().splitlines()]
    assert len(errors) == 1 and "the Ray task failed" in errors[0]["error"], errors
    [row] = [json.loads(x) for x in (res.path / "results.jsonl").read_text().splitlines()]
    assert row["agent"]["attempt"] == 2 and row["agent"]["model_calls"] == 2
    ledger = [json.loads(x) for x in (res.path / "ledger.jsonl").read_text().splitlines()]
    # the lost attempt's held call was sent and stays paid (or settled at its worst case): 1 + 2 calls
    assert sum(1 for e in ledger if e["event"] == "reserve") == 3 == requests


def test_the_progress_line_shows_each_sample_in_flight_on_its_node(tmp_path, cluster):
    """A task says where it started: while its program blocks (on a FIFO the test opens
    afterwards), the progress suffix counts it on its node."""
    import asyncio
    import os
    import re
    import sys

    from evalkit.running.executors import RayExecutor
    from evalkit.foundations.records import Resources

    fifo = tmp_path / "go"
    os.mkfifo(fifo)
    program = f"import sys; sys.stdin.read(); open({str(fifo)!r}).read(); print('went')"
    spec = {"argv": [sys.executable, "-c", program], "sandbox": False, "hidden": [], "read_only": [],
            "proxy": ("127.0.0.1", 9), "env": {"PATH": os.environ.get("PATH", "")}, "driver_workdir": str(tmp_path),
            "payload": {}, "timeout_s": 60, "max_output": 1024, "tail_bytes": 256}
    ex = RayExecutor(Executor(kind="ray", address=cluster.address)).connect()
    try:
        async def main():
            run = asyncio.ensure_future(ex.run(spec, Resources(), lambda: None, 0.05))
            assert await asyncio.to_thread(ex.started.wait, 60)
            line = ex.progress()
            await asyncio.to_thread(lambda: open(fifo, "w").close())  # the program may go on
            return line, await run, ex.progress()

        during, got, after = asyncio.run(main())
    finally:
        ex.close()
    assert re.fullmatch(r"ray in flight 1 \([0-9a-f]{8}:1\); done per node -", during), during
    assert got["status"] == 0 and got["out"] == b"went\n"
    assert re.fullmatch(r"ray in flight 0 \(-\); done per node [0-9a-f]{8}:1", after), after


def _run_on_free_port(tmp_path):
    """`evalkit run --ray 127.0.0.1:PORT` (in-process) where nothing listens on PORT: the
    result, the port, and the requests the server saw."""
    unit = {"kind": "command", "argv": ["{python}", str(AGENTS / "plain_http.py")], "timeout_s": 10}
    suite = write_suite(tmp_path / "suite", weather_cases(1), unit)
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()  # nothing listens there now
    with ScriptedServer(SCRIPT) as srv:
        proc = CliRunner().invoke(main, ["run", str(suite), "--runs-dir", str(tmp_path / "runs"), "--base-url",
                                         srv.base_url, "--no-progress", "--ray", f"127.0.0.1:{port}"])
        return proc, port, srv.stats["requests"]


def test_an_unreachable_cluster_is_exit_2_before_anything_is_written(tmp_path, no_driver):
    proc, port, requests = _run_on_free_port(tmp_path)
    assert proc.exit_code == 2, proc.output
    assert f"the Ray cluster at 127.0.0.1:{port} (--ray) cannot be reached" in proc.output
    assert requests == 0 and not (tmp_path / "runs").exists()


def test_a_process_joined_to_one_cluster_refuses_a_run_asked_for_another_before_anything_is_written(
    tmp_path, cluster
):
    """The module's driver has joined `cluster`; a run asked for another address does not
    quietly go to the joined one."""
    proc, port, requests = _run_on_free_port(tmp_path)
    assert proc.exit_code == 2, proc.output
    assert (f"already connected to the Ray cluster at {cluster.address}, not the one at 127.0.0.1:{port} (--ray)"
            in proc.output), proc.output
    assert requests == 0 and not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("change", "where", "words"),
    [
        ({"executor": {"kind": "ray", "adress": "auto"}}, "$.executor.adress", "unknown key 'adress'"),
        ({"executor": {"kind": "spark"}}, "$.executor.kind", "executor kind must be one of local, ray"),
        ({"executor": {"kind": "ray", "address": 6379}}, "$.executor.address", "address must be"),
        ({"unit_resources": {"num_cpu": 1}}, "$.unit.resources.num_cpu", "unknown key 'num_cpu'"),
        ({"unit_resources": {"memory": 1.5}}, "$.unit.resources.memory", "whole number of bytes"),
        ({"unit_resources": {"custom": {"GPU": 1}}}, "$.unit.resources.custom.GPU", "a name of its own"),
        ({"executor": {"kind": "ray", "proxy_host": ""}}, "$.executor.proxy_host", "proxy_host must be"),
        ({"executor": {"kind": "ray", "proxy_host": 10}}, "$.executor.proxy_host", "proxy_host must be"),
        ({"executor": {"kind": "local", "proxy_host": "10.0.0.5"}}, "$.executor.proxy_host", '"kind": "ray"'),
    ],
)
def test_bad_executor_and_resources_keys_are_exit_2_naming_the_key(tmp_path, change, where, words):
    unit = {"kind": "command", "argv": ["{python}", str(AGENTS / "plain_http.py")]}
    change = dict(change)  # the parameter's own dict stays whole for a second run of the test
    if "unit_resources" in change:
        unit["resources"] = change.pop("unit_resources")
    suite = write_suite(tmp_path / "suite", weather_cases(1), unit, **change)
    with pytest.raises(InputError) as exc:
        load_suite(suite)
    assert where in str(exc.value) and words in str(exc.value)
    assert exc.value.exit_code == 2


def test_valid_resources_and_executor_are_read_into_the_config(tmp_path):
    unit = {"kind": "command", "argv": ["{python}", str(AGENTS / "plain_http.py")],
            "resources": {"num_cpus": 0.5, "memory": 1 << 20, "custom": {"agent_slot": 1}}}
    suite = write_suite(tmp_path / "suite", weather_cases(1), unit, executor={"kind": "ray", "address": "auto"})
    config = load_suite(suite).config
    assert config.executor == Executor(kind="ray", address="auto")
    far = write_suite(tmp_path / "far", weather_cases(1), unit,
                      executor={"kind": "ray", "address": "auto", "proxy_host": "10.0.0.5"})
    assert load_suite(far).config.executor.proxy_host == "10.0.0.5"
    prompt = write_suite(tmp_path / "prompt", weather_cases(1), {"kind": "prompt", "resources": {"num_cpus": 0.25}},
                         template="prompt.txt")
    (prompt / "prompt.txt").write_text("${question}")
    assert load_suite(prompt).config.unit.resources.num_cpus == 0.25
    assert (config.unit.resources.num_cpus, config.unit.resources.memory) == (0.5, 1 << 20)
    assert config.unit.resources.custom == (("agent_slot", 1.0),)


# -- prompt and agent units on Ray: one task per sample, every call made by the driver ------

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "the weather in a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
OSLO = {"get_weather": [{"arguments": {"city": "Oslo"}, "result": "Sunny in Oslo, 18 C"}]}
AGENT_SCRIPT = {"rules": [
    {"match": "Sunny in Oslo", "text": "It is sunny in Oslo."},
    {"match": "no fixture", "text": "I could not find out."},
    {"match": "Oslo", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]},
    {"match": "Bergen", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Bergen"}}]},
]}


def templated_suite(root: Path, cases: list[dict], unit: dict, **config) -> Path:
    write_suite(root, cases, unit, template="prompt.txt", **config)
    (root / "prompt.txt").write_text("${question}")
    return root


def ledger_events(path: Path) -> list[tuple]:
    """The ledger's reservations and settlements per key, without times or ids."""
    rows = [json.loads(x) for x in (path / "ledger.jsonl").read_text().splitlines()]
    return sorted((e["event"], e.get("key"), e.get("cost_usd")) for e in rows if e["event"] in ("reserve", "settle"))


def test_a_prompt_suite_on_ray_is_key_for_key_the_local_run(tmp_path, cluster, capfd):
    """A prompt unit's sample is one Ray task; its one call is sent from the node to the
    driver's proxy, which makes it with the run's client: the results, grades and ledger
    are the local run's, and the upstream key is only in the driver."""
    cases = [{"id": f"p{i}", "input": {"question": f"Question {i}: say {'yes' if i % 2 else 'no'}"},
              "tags": ["golden"], "checks": [{"kind": "contains", "value": "yes"}]} for i in range(3)]
    suite = templated_suite(tmp_path / "suite", cases, {"kind": "prompt", "resources": {"num_cpus": 0.5}},
                            top_p=0.9, stop=["STOP"])
    script = {"rules": [{"match": "say yes", "text": "yes, indeed"}, {"match": "say no", "text": "no, never"}]}
    local, remote, served_local, served = local_then_ray(suite, script, tmp_path, cluster)
    assert local.complete and remote.complete, (local.reason, remote.reason)
    assert served == served_local == 6
    assert "ray: 6 sample process(es) ran on" in capfd.readouterr().err  # one task per sample
    left, right = by_key(local.path / "results.jsonl"), by_key(remote.path / "results.jsonl")
    assert sorted(left) == sorted(right) and len(right) == 6
    for key in left:
        assert left[key] == right[key], key
    assert {r["output"] for r in right.values()} == {"yes, indeed", "no, never"}
    assert ledger_events(local.path) == ledger_events(remote.path)
    for res in (local, remote):
        grade_run(res.path)
    assert by_key(local.path / "grades.jsonl") == by_key(remote.path / "grades.jsonl")
    assert not (remote.path / "trajectories").exists() and not (local.path / "trajectories").exists()


def test_an_agent_unit_on_ray_runs_its_tool_loop_on_a_node_key_for_key_the_local_run(tmp_path, cluster):
    """evalkit's own tool loop as a Ray task: its model calls and tool calls come back to
    the driver's proxy, so the results, the trajectories (call for call, tool for tool)
    and the ledger are the local run's."""
    cases = [{"id": cid, "input": {"question": q, "tool_results": OSLO}, "tags": ["golden"],
              "checks": [{"kind": "contains", "value": "sunny"}, {"kind": "tool_errors"}]}
             for cid, q in (("oslo", "Weather in Oslo?"), ("bergen", "Weather in Bergen?"))]
    suite = templated_suite(tmp_path / "suite", cases, {"kind": "agent", "max_turns": 4}, tools=TOOLS)
    local, remote, served_local, served = local_then_ray(suite, AGENT_SCRIPT, tmp_path, cluster)
    assert local.complete and remote.complete, (local.reason, remote.reason)
    assert served == served_local == 2 * 2 * 2  # a tool call, then the answer, per sample
    left, right = by_key(local.path / "results.jsonl"), by_key(remote.path / "results.jsonl")
    assert sorted(left) == sorted(right) and len(right) == 4
    for key in left:
        assert left[key] == right[key], key
        assert right[key]["agent"]["model_calls"] == 2
    assert ledger_events(local.path) == ledger_events(remote.path)
    for key in left:
        a, b = (read_trajectory(res.path, *key) for res in (local, remote))
        assert a is not None and b is not None and a.finished and b.finished
        untimed = [[{k: v for k, v in stable(e).items() if k != "t"} for e in t.events] for t in (a, b)]
        assert untimed[0] == untimed[1], key
        assert [e["type"] for e in b.events].count("tool") == 1
    for res in (local, remote):
        grade_run(res.path)
    grades = by_key(remote.path / "grades.jsonl")
    assert grades == by_key(local.path / "grades.jsonl")
    assert {k[0]: g["passed"] for k, g in grades.items()} == {"oslo": True, "bergen": False}


# -- the proxy where the cluster reaches it ---------------------------------------------------


def _own_address() -> tuple[str, str]:
    """This machine's non-loopback IPv4 address as Ray reports it, and where it came from."""
    import ray.util

    ip = ray.util.get_node_ip_address()
    return ip, "ray.util.get_node_ip_address()"


def test_with_proxy_host_the_relay_reaches_the_drivers_proxy_on_a_non_loopback_address(tmp_path, cluster, capfd):
    """``executor.proxy_host`` set to this machine's own non-loopback address: the
    driver's proxy (and board) listen there, the samples' relays reach it there, and the
    run is the loopback run, key for key. This machine must have such an address: the
    test fails (it does not skip) when it has none."""
    ip, source = _own_address()
    assert not ip.startswith("127."), f"no non-loopback address on this machine ({source} says {ip})"
    unit = {"kind": "command", "argv": ["{python}", str(AGENTS / "plain_http.py"), "--turns", "3"], "timeout_s": 60,
            "isolation": "sandbox" if sandbox.probe() is None else "none"}
    suite = write_suite(tmp_path / "suite", weather_cases(2), unit, k=1)
    with ScriptedServer(SCRIPT) as srv:
        near = run_suite(suite, runs_dir=tmp_path / "near", base_url=srv.base_url, progress=False, cache=False,
                         executor=Executor(kind="ray", address=cluster.address))
        assert "the metering proxy listens on 127.0.0.1 (every node is on this machine" in capfd.readouterr().err
        far = run_suite(suite, runs_dir=tmp_path / "far", base_url=srv.base_url, progress=False, cache=False,
                        executor=Executor(kind="ray", address=cluster.address, proxy_host=ip))
        err = capfd.readouterr().err
    assert f"the metering proxy listens on {ip} (executor.proxy_host)" in err, err
    assert near.complete and far.complete, (near.reason, far.reason)
    assert by_key(near.path / "results.jsonl") == by_key(far.path / "results.jsonl")
    [row] = [r for r in by_key(far.path / "results.jsonl").values() if r["case_id"] == "c0"]
    assert row["output"].strip() == "It rains in Oslo." and row["agent"]["model_calls"] == 2


def test_a_proxy_on_a_non_loopback_address_refuses_every_request_without_its_samples_token(tmp_path):
    """The proxy on this machine's own address, one sample open: its token's request is
    served; no token, a made-up one, a closed sample's, and any other path are refused
    before anything is metered or sent."""
    import asyncio

    import httpx
    import openai

    from evalkit.calls.client import ModelClient
    from evalkit.calls.ledger import Ledger
    from evalkit.foundations.records import Endpoint, Price
    from evalkit.calls.proxy import MeteringProxy
    from evalkit.calls.session import SampleSession
    from evalkit.runfolder.trajectories import TrajectoryWriter
    from evalkit.suites.units import ToolFixtures

    ip, source = _own_address()
    assert not ip.startswith("127."), f"no non-loopback address on this machine ({source} says {ip})"
    async def main(base_url: str) -> dict:
        ledger = Ledger(1.0, tmp_path / "ledger.jsonl")
        client = ModelClient(Endpoint("scripted", base_url, "EVALKIT_RAY_TEST_KEY"), Price(1.0, 2.0), ledger,
                             max_tokens_in=500, max_tokens_out=20, max_attempts=1)
        proxy = await MeteringProxy(ip, model="scripted").start()
        session = SampleSession(client=client, key=("c0", "baseline", 0),
                                writer=TrajectoryWriter(tmp_path / "run", "c0", "baseline", 0),
                                fixtures=ToolFixtures.of_case({}, None), should_stop=lambda: None,
                                on_stop=lambda cause: None)
        ep = proxy.open(session)
        root = f"http://{ip}:{proxy.port}"
        body = {"model": "scripted", "messages": [{"role": "user", "content": "Question"}]}
        out: dict = {"root": ep.base_url.startswith(root)}

        def calls() -> None:
            good = openai.OpenAI(base_url=ep.base_url, api_key=ep.api_key, max_retries=0)
            out["served"] = good.chat.completions.create(**body).choices[0].message.content
            for name, url, key in (("no token", f"{root}/v1", ""), ("made up", f"{root}/v1", "ek-made-up"),
                                   ("made up in url", f"{root}/s/ek-made-up/v1", "x")):
                headers = {"Authorization": f"Bearer {key}"} if key else {}
                r = httpx.post(url + "/chat/completions", json=body, headers=headers, timeout=10)
                out[name] = r.status_code
            out["other path"] = httpx.get(f"{root}/", timeout=10).status_code

        await asyncio.to_thread(calls)
        await proxy.close(ep.token, "over")
        closed = await asyncio.to_thread(httpx.post, ep.base_url + "/chat/completions", json=body, timeout=10)
        out["closed"] = closed.status_code
        await proxy.aclose()
        await client.aclose()
        return out

    with ScriptedServer(SCRIPT) as srv:
        out = asyncio.run(main(srv.base_url))
        requests = srv.stats["requests"]
    assert out["root"] and out["served"] == "CALL get_weather(Oslo)"
    assert (out["no token"], out["made up"], out["made up in url"], out["closed"]) == (401, 401, 401, 401), out
    assert out["other path"] == 404
    assert requests == 1  # only the token's request reached the endpoint


def test_a_task_on_another_machine_than_a_loopback_proxy_ends_with_an_error_naming_proxy_host(tmp_path, cluster):
    """The driver says its proxy is on loopback and gives an IP that is not this node's
    (as a node on another machine sees it): the task starts nothing and says to set
    ``proxy_host``, for a sample process and for a prompt or agent sample's calls."""
    import asyncio
    import sys

    from evalkit.running.executors import RayExecutor
    from evalkit.foundations.records import Resources

    ex = RayExecutor(Executor(kind="ray", address=cluster.address)).connect()
    assert ex.proxy_connect == "127.0.0.1"
    ex.driver_ip = "198.51.100.7"  # TEST-NET-2: no node of this cluster has it
    process = {"argv": [sys.executable, "-c", "print('ran')"], "sandbox": False, "hidden": [], "read_only": [],
               "proxy": ("127.0.0.1", 9), "env": {}, "driver_workdir": str(tmp_path), "payload": {},
               "timeout_s": 60, "max_output": 1024, "tail_bytes": 256}
    calls = {"kind": "prompt", "base_url": "http://127.0.0.1:9/v1", "api_key": "ek-x", "request": {}, "timeout_s": 5}
    try:
        async def main():
            return (await ex.run(process, Resources(), lambda: None, 0.05),
                    await ex.run(calls, Resources(), lambda: None, 0.05, calls=True))

        ran, called = asyncio.run(main())
    finally:
        ex.close()
    assert "198.51.100.7" in ran["start_error"] and '"proxy_host"' in ran["start_error"], ran
    assert "out" not in ran
    assert '"proxy_host"' in called["error"] and "stop" not in called, called
