"""Sentences, not tracebacks (issue 31): the CLI walked with hostile arguments, a bad
rater name, and `grade` on a really full disk (a tmpfs in a private mount namespace),
which says "disk full: <path>" and finishes once there is room again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit._cli.main import main
from evalkit.calls.serve import ScriptedServer

from conftest import private_tmpfs
from test_grading import JUDGE_SCRIPT, write_run, write_suite

HOSTILE = ["\x00x", "../../../../tmp/evil", "/dev/zero", "a\ud800b", "a\udcffb", "", "-", "a\nb", "x" * 5000,
           "${{ x }}", "\x1b[31m"]
COMMANDS = [["lint"], ["run"], ["grade"], ["report"], ["compare"], ["gate"], ["verdict"], ["ingest"], ["replay"],
            ["privacy", "scan"], ["dataset", "validate"], ["judge", "sample"], ["judge", "label"],
            ["batch", "status"], ["noise"], ["import"], ["init"], ["microtest"], ["baseline", "accept"],
            ["judge", "calibrate"], ["dataset", "to-suite"], ["dataset", "sample"]]


def test_no_hostile_argument_gets_a_traceback(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    failures = []
    for cmd in COMMANDS:
        for arg in HOSTILE:
            args = [*cmd, arg] + (["--to", "out"] if cmd == ["ingest"] else [])
            res = CliRunner().invoke(main, args)
            crashed = res.exception is not None and not isinstance(res.exception, SystemExit)
            if crashed or "Traceback" in res.output:
                failures.append((cmd, arg[:20], repr(res.exception)[:120]))
            elif res.exit_code not in (0, 1, 2):
                failures.append((cmd, arg[:20], f"exit {res.exit_code}"))
    assert not failures, failures
    assert not (tmp_path.parent.parent / "tmp" / "evil").exists() or (Path("/tmp/evil").exists() is False)


def test_a_bad_rater_name_says_what_a_name_may_hold(tmp_path: Path) -> None:
    labels = tmp_path / "labels.jsonl"
    labels.write_text("")
    for rater in ("a/b", "../x", "a b", ".hidden", "x" * 65):
        res = CliRunner().invoke(main, ["judge", "label", str(labels), "--rater", rater])
        assert res.exit_code == 2, res.output
        assert "a rater name may hold letters, digits" in res.output and "Traceback" not in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["labels.jsonl"]



def test_grade_on_a_full_disk_says_disk_full_and_resumes(tmp_path: Path) -> None:
    prefix = private_tmpfs()
    if prefix is None:
        pytest.skip("no private mount namespace here (not root, and no user namespaces): needs a real full disk")
    suite = write_suite(tmp_path / "suite", opt_out=True)
    run = write_run(tmp_path, suite)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with ScriptedServer(JUDGE_SCRIPT) as srv:
        grade = f"{sys.executable} -m evalkit._cli.main grade {mnt}/run --judge-base-url {srv.base_url}"
        script = (
            f"mount -t tmpfs -o size=512k tmpfs {mnt} && cp -r {run} {mnt}/run && "
            f"(dd if=/dev/zero of={mnt}/filler bs=4k 2>/dev/null || true)\n"
            f"{grade} 2>&1; echo \"RC1=$?\"; rm {mnt}/filler; {grade} >/dev/null 2>&1; echo \"RC2=$?\"; "
            f"wc -l < {mnt}/run/grades.jsonl"
        )
        p = subprocess.run([*prefix, "sh", "-c", script], capture_output=True, text=True, timeout=300)
    out = p.stdout
    assert "Traceback" not in out and "OperationalError" not in out, out
    assert f"disk full: {mnt}/run/" in out, out
    assert "RC1=1" in out and "RC2=0" in out, out
    assert int(out.strip().splitlines()[-1]) == 24  # every sample graded once there was room


def test_a_grade_stopped_by_a_full_disk_and_resumed_reports_the_ledgers_judge_spend(tmp_path: Path) -> None:
    """Issue 26: a grade stopped by a really full disk mid-way (the judge cache could not
    store what was paid) and completed once there is room reports what the ledger holds
    of the judge (`judge_ledger_usd`), what it paid this time, what the cache replayed,
    and a whole grade's cost per case, not `judge_spend_usd 0.0` beside a ledger of
    settled judge calls."""
    import json
    import shutil

    from evalkit.conclusions.grading import grade_run
    from evalkit.runfolder.runs import iter_jsonl

    prefix = private_tmpfs()
    if prefix is None:
        pytest.skip("no private mount namespace here (not root, and no user namespaces): needs a real full disk")
    # 40 judged cases x 3 distinct outputs: 120 judge calls, 2 at a time. Each asks 210
    # tokens in and 7 out at $3/M + $6/M: $0.000672 a call, $0.08064 for all 120; with
    # the generator's 120 x $0.00002, a case costs 3 x (0.000672 + 0.00002) = $0.002076.
    cases = [{"id": f"open-{i:02d}", "input": f"Describe city {i}", "expected": {"rubric": "Mentions a river"},
              "tags": ["open"]} for i in range(40)]
    suite = write_suite(tmp_path, cases=cases)
    run = write_run(tmp_path, suite, outputs={c["id"]: [f"ANSWER-GOOD {c['id']} take {i}" for i in range(3)]
                                              for c in cases})
    clean = shutil.copytree(run, tmp_path / "clean")
    mnt, out_dir = tmp_path / "mnt", tmp_path / "out"
    mnt.mkdir()
    out_dir.mkdir()
    with ScriptedServer(JUDGE_SCRIPT) as srv:
        grade = f"{sys.executable} -m evalkit._cli.main grade {mnt}/run --judge-base-url {srv.base_url}"
        # 40 free pages (160 KiB) once the disk is otherwise full: room for the judge
        # cache to open and store a few answers (its WAL grows a page or more a commit),
        # not for all 120
        script = (
            f"mount -t tmpfs -o size=2m tmpfs {mnt} && cp -r {run} {mnt}/run && "
            f"dd if=/dev/zero of={mnt}/slack bs=4k count=40 2>/dev/null && "
            f"(dd if=/dev/zero of={mnt}/filler bs=4k 2>/dev/null || true) && rm {mnt}/slack\n"
            f"{grade} > {out_dir}/first.txt 2>&1; echo \"RC1=$?\"; cp {mnt}/run/ledger.jsonl {out_dir}/ledger1.jsonl; "
            f"rm {mnt}/filler; {grade} >/dev/null 2>&1; echo \"RC2=$?\"; cp -r {mnt}/run {out_dir}/run"
        )
        p = subprocess.run([*prefix, "sh", "-c", script], capture_output=True, text=True, timeout=300)
        whole = grade_run(clean, judge_base_url=srv.base_url).summary  # the same run graded in one pass
    first = (out_dir / "first.txt").read_text()
    assert "RC1=1" in p.stdout and "RC2=0" in p.stdout, (p.stdout, p.stderr, first)
    assert f"disk full: {mnt}/run/" in first and "Traceback" not in first, first
    settled1 = [e for e in iter_jsonl(out_dir / "ledger1.jsonl") if e["event"] == "settle"]
    assert 0 < len(settled1) < 120, len(settled1)  # it really stopped mid-way, having paid
    assert all(e["role"] == "judge" and e["cost_usd"] == pytest.approx(0.000672) for e in settled1)
    s = json.loads((out_dir / "run" / "grades-summary.json").read_text())
    o = s["overall"]
    assert s["complete"] and o["n_graded"] == 120
    ledger = list(iter_jsonl(out_dir / "run" / "ledger.jsonl"))
    settled = [e for e in ledger if e["event"] == "settle"]
    # the ledger's judge spend: every settled call of both passes, at $0.000672 each
    assert s["judge_ledger_usd"] == pytest.approx(0.000672 * len(settled), rel=1e-9)
    assert s["judge_ledger_usd"] == pytest.approx(sum(e["cost_usd"] for e in settled), rel=1e-9)
    # this pass paid for what the cache did not hold; the cache replayed the rest at
    # what it cost when first paid, so paid + avoided is a whole grade's judge cost
    paid_now = len(settled) - len(settled1)
    assert s["judge_spend_usd"] == pytest.approx(0.000672 * paid_now, rel=1e-9) and paid_now > 0
    assert o["judge_cache_avoided_usd"] == pytest.approx(0.000672 * s["cache_hits"], rel=1e-9)
    assert s["judge_spend_usd"] + o["judge_cache_avoided_usd"] == pytest.approx(0.08064, rel=1e-9)
    assert whole.judge_spend_usd == pytest.approx(0.08064, rel=1e-9)
    # the full cache stopped the judge at once: paid and lost are at most the answer it
    # could not store and the one other call in flight (concurrency 2)
    assert len(settled1) - 2 <= s["cache_hits"] <= len(settled1)
    assert o["cost_per_case_usd"] == pytest.approx(0.002076, rel=1e-9)
    assert o["cost_per_case_usd"] == pytest.approx(whole.overall.cost_per_case_usd, rel=1e-12)
