"""agent-evals compatibility: run-evals.ps1's decisions on a fixture folder we write."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.conclusions.agentevals import EvalCase, grade_outputs, match_sample, render, wildcard_to_regex
from evalkit._cli.main import main
from evalkit.foundations.errors import InputError

CASES = [
    {"id": "cap-exact", "set": "capability", "prompt": "capital of France?", "expect": " PARIS ", "match": "exact"},
    {"id": "cap-contains", "set": "capability", "prompt": "summarise", "expect": "## summary"},  # no match: contains
    {"id": "reg-regex", "set": "regression", "prompt": "greet", "expect": "gr(ü|ue)sse|strasse", "match": "REGEX"},
    {"id": "reg-short", "set": "regression", "prompt": "x", "expect": "ok", "match": "contains"},
    {"id": "reg-one-bad", "set": "Regression", "prompt": "x", "expect": "ok", "match": "Contains"},
    {"id": "cap-missing", "set": "capability", "prompt": "x", "expect": "anything"},
    {"id": "reg-missing", "set": "regression", "prompt": "x", "expect": "anything"},
    {"id": "cap-wild", "set": "capability", "prompt": "x", "expect": "5 * 3"},
]

SAMPLES = {
    "cap-exact": ["  paris\n", "Lyon", "Paris, France", "pARIS", "Marseille"],  # exact after trim, any case
    "cap-contains": ["Intro\n## SUMMARY\nbody", "no heading", "x", "y", "z"],
    "reg-regex": ["GRUESSE aus Wien", "Strasse 5", "grüsse", "STRASSE", "Grüsse!"],
    "reg-short": ["ok", "OK", "Ok"],  # all pass, but 3 < k samples
    "reg-one-bad": ["ok", "ok", "ok", "ok", "nope"],
    "cap-wild": ["5 plus 3", "five", "x", "y", "z"],  # passes only if * is a wildcard
}


def write_fixture(root: Path, cases=CASES, samples=SAMPLES) -> tuple[Path, Path]:
    eval_file = root / "evals.json"
    eval_file.write_text(json.dumps({"cases": cases}, ensure_ascii=False), encoding="utf-8")
    out = root / "out"
    out.mkdir()
    for cid, texts in samples.items():
        (out / cid).mkdir()
        for n, t in enumerate(texts, start=1):
            (out / cid / f"sample-{n}.txt").write_text(t, encoding="utf-8")
    if (out / "cap-exact").is_dir():
        (out / "cap-exact" / "notes.txt").write_text("Paris", encoding="utf-8")  # not a sample file
    return eval_file, out


def rows(report):
    return {r.id: (r.samples, r.passes, r.pass_at_k, r.pass_hat_k, r.gate_passed) for r in report.rows}


def test_harness_decisions(tmp_path):
    ev, out = write_fixture(tmp_path)
    rep = grade_outputs(ev, out, k=5)
    assert rows(rep) == {
        "cap-exact": (5, 2, True, False, True),
        "cap-contains": (5, 1, True, False, True),
        "reg-regex": (5, 5, True, True, True),
        "reg-short": (3, 3, True, False, False),
        "reg-one-bad": (5, 4, True, False, False),
        "cap-missing": (0, 0, False, False, False),
        "reg-missing": (0, 0, False, False, False),
        "cap-wild": (5, 0, False, False, False),
    }
    assert rep.failed == ("reg-short", "reg-one-bad", "cap-missing", "reg-missing", "cap-wild")
    assert rep.exit_code == 1
    assert any("No outputs for case 'cap-missing'" in w for w in rep.warnings)
    assert any("No outputs for case 'reg-missing'" in w for w in rep.warnings)


def test_compat_wildcards_reproduce_the_like_trap(tmp_path):
    ev, out = write_fixture(tmp_path)
    rep = grade_outputs(ev, out, k=5, compat_wildcards=True)
    assert rows(rep)["cap-wild"] == (5, 1, True, False, True)
    assert "cap-wild" not in rep.failed


def test_wildcard_translation_like_powershell():
    case = EvalCase("c", "capability", "[draft]", "contains")
    assert not match_sample("the end", case)  # literal by default
    assert match_sample("any word with a d", case, compat_wildcards=True)  # [draft] is a character set
    assert match_sample("v1.2 released", EvalCase("c", "capability", "v?.2", "contains"), compat_wildcards=True)
    assert match_sample("a*b", EvalCase("c", "capability", "a`*b", "contains"), compat_wildcards=True)
    assert not match_sample("axxb", EvalCase("c", "capability", "a`*b", "contains"), compat_wildcards=True)
    assert match_sample("line1\nline2", EvalCase("c", "capability", "1*line", "contains"), compat_wildcards=True)
    with pytest.raises(ValueError):
        wildcard_to_regex("*[abc*")


def test_pass_hat_k_needs_all_samples_when_more_than_k(tmp_path):
    ev, out = write_fixture(tmp_path, cases=[{"id": "r", "set": "regression", "prompt": "p", "expect": "ok"}],
                            samples={"r": ["ok"] * 6 + ["bad"]})
    (r,) = grade_outputs(ev, out, k=5).rows
    assert (r.samples, r.passes, r.pass_hat_k) == (7, 6, False)


def test_render_table_per_set_figures_and_verdict(tmp_path):
    ev, out = write_fixture(tmp_path)
    text = render(grade_outputs(ev, out, k=5))
    lines = text.splitlines()
    header = next(i for i, ln in enumerate(lines) if ln.startswith("Id"))
    assert lines[header].split() == ["Id", "Set", "Samples", "Passes", "Pass@k", "Pass^k"]
    assert set(lines[header + 1].replace(" ", "")) == {"-"}
    assert lines[header + 2].split() == ["cap-exact", "capability", "5", "2", "True", "False"]
    assert "capability" in text and any(ln.split()[:2] == ["capability", "4"] for ln in lines)
    cap_line = next(ln for ln in lines if ln.split()[:2] == ["capability", "4"])
    assert "2/4 (50.0%)" in cap_line  # pass@k of capability: cap-exact, cap-contains
    reg_line = next(ln for ln in lines if ln.split()[:2] == ["regression", "4"])
    assert "1/4 (25.0%)" in reg_line  # pass^k / gate of regression: only reg-regex
    assert lines[-1] == "FAIL: 5 eval case(s) failed the gate: reg-short, reg-one-bad, cap-missing, reg-missing, cap-wild"


def test_cli_pass_and_fail_exit_codes(tmp_path):
    ev, out = write_fixture(tmp_path)
    runner = CliRunner()
    res = runner.invoke(main, ["grade", "--eval-file", str(ev), "--outputs", str(out), "-k", "5"])
    assert res.exit_code == 1, res.output
    assert res.stdout.splitlines()[-1].startswith("FAIL: 5 eval case(s) failed the gate: ")
    assert "WARNING: No outputs for case 'cap-missing'" in res.stderr

    good = tmp_path / "good"
    good.mkdir()
    ev2, out2 = write_fixture(good, cases=CASES[:3], samples={k: SAMPLES[k] for k in ("cap-exact", "cap-contains")}
                              | {"reg-regex": SAMPLES["reg-regex"]})
    res = runner.invoke(main, ["grade", "--eval-file", str(ev2), "--outputs", str(out2), "-k", "5"])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[-1] == "PASS: all eval cases met their gate."


@pytest.mark.parametrize("bad, where", [
    ({"id": "a", "prompt": "p", "expect": "x"}, "$.cases[0].set"),  # the harness silently ungates this
    ({"id": "a", "set": " ", "prompt": "p", "expect": "x"}, "$.cases[0].set"),
    ({"id": "a", "set": "capability", "prompt": "p", "expect": ""}, "$.cases[0].expect"),
    ({"id": "a", "set": "capability", "prompt": "p", "expect": "x", "match": "fuzzy"}, "$.cases[0].match"),
    ({"id": "a", "set": "capability", "prompt": "p", "expect": "(x", "match": "regex"}, "$.cases[0].expect"),
    ({"id": "../a", "set": "capability", "prompt": "p", "expect": "x"}, "$.cases[0].id"),
])
def test_bad_eval_file_is_exit_2_naming_the_place(tmp_path, bad, where):
    ev, out = write_fixture(tmp_path, cases=[bad], samples={})
    with pytest.raises(InputError) as exc:
        grade_outputs(ev, out, k=5)
    assert exc.value.json_path == where and str(ev) in str(exc.value)
    res = CliRunner().invoke(main, ["grade", "--eval-file", str(ev), "--outputs", str(out)])
    assert res.exit_code == 2 and res.stderr.startswith("error: ")


def test_other_sets_are_shown_with_gate_none_and_never_fail_the_gate(tmp_path):
    """run-evals.ps1 accepts any `set` and gates only capability (pass@k) and regression
    (pass^k): an `exploratory` case that fails every sample is graded and shown, with
    gate none, and the verdict is PASS; a misspelt gated set is named in a warning."""
    cases = [{"id": "cap", "set": "capability", "prompt": "p", "expect": "ok"},
             {"id": "explore", "set": "Exploratory", "prompt": "p", "expect": "never"},
             {"id": "typo", "set": "regresion", "prompt": "p", "expect": "ok"}]
    ev, out = write_fixture(tmp_path, cases=cases,
                            samples={"cap": ["ok", "no"], "explore": ["a", "b"], "typo": ["ok", "no"]})
    rep = grade_outputs(ev, out, k=2)
    assert rows(rep) == {"cap": (2, 1, True, False, True), "explore": (2, 0, False, False, True),
                         "typo": (2, 1, True, False, True)}
    assert {r.id: r.gate for r in rep.rows} == {"cap": "pass@k", "explore": "none", "typo": "none"}
    assert rep.exit_code == 0 and rep.failed == ()
    assert [(s.set, s.gate, s.cases) for s in rep.sets] == [("capability", "pass@k", 1), ("exploratory", "none", 1),
                                                            ("regresion", "none", 1)]
    assert any("'typo'" in w and "did you mean 'regression'?" in w for w in rep.warnings), rep.warnings
    res = CliRunner().invoke(main, ["grade", "--eval-file", str(ev), "--outputs", str(out), "-k", "2"])
    assert res.exit_code == 0, res.output
    per_set = res.stdout.split("Per set")[1].splitlines()
    assert "other sets not gated: gate none" in per_set[0]
    explore = next(line for line in per_set if line.startswith("exploratory"))
    assert explore.split()[-1] == "none" and "0/1 (0.0%)" in explore  # pass@k 0/1, gate none
    assert res.stdout.splitlines()[-1] == "PASS: all eval cases met their gate."
    assert "WARNING:" in res.stderr and "gate \"none\"" in res.stderr


def test_regex_timeout_fails_the_sample_not_the_run(tmp_path, short_regex_timeout):
    ev, out = write_fixture(tmp_path, cases=[{"id": "r", "set": "capability", "prompt": "p",
                                              "expect": "(a+)+$", "match": "regex"}],
                            samples={"r": ["a" * 4000 + "!", "aaa"]})
    rep = grade_outputs(ev, out, k=2)
    assert rows(rep)["r"] == (2, 1, True, False, True)
    assert any("timed out" in w for w in rep.warnings)


_GRADE_IN_SUBPROCESS = (
    "import sys; from evalkit._cli.main import main; "
    "main(['grade', '--eval-file', sys.argv[1], '--outputs', sys.argv[2], '-k', '1', '--compat-wildcards'])"
)


def test_compat_wildcards_backtracking_pattern_fails_the_sample_and_never_hangs(tmp_path):
    """`a*a*a*a*a*a*a*a*b` as a `-like` pattern against 3,000 'a's backtracks for hours on
    the stdlib engine; on the `regex` engine with its timeout the sample fails and the
    gate is decided. A subprocess with a generous deadline stands guard against a hang
    (a matcher stuck in C holds the GIL, so an in-process guard could not fire)."""
    ev, out = write_fixture(tmp_path, cases=[{"id": "w", "set": "capability", "prompt": "p",
                                              "expect": "a*a*a*a*a*a*a*a*b"}],
                            samples={"w": ["a" * 3000]})
    res = subprocess.run([sys.executable, "-c", _GRADE_IN_SUBPROCESS, str(ev), str(out)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1, res.stderr
    assert res.stdout.splitlines()[-1] == "FAIL: 1 eval case(s) failed the gate: w"


def test_compat_wildcards_timeout_is_a_failed_sample_with_the_reason(tmp_path, short_regex_timeout):
    ev, out = write_fixture(tmp_path, cases=[{"id": "w", "set": "capability", "prompt": "p",
                                              "expect": "a*a*a*a*a*a*a*a*a*a*a*a*b"}],
                            samples={"w": ["a" * 10000, "xx " + "a" * 12 + "b yy"]})
    rep = grade_outputs(ev, out, k=2, compat_wildcards=True)
    assert rows(rep)["w"] == (2, 1, True, False, True)  # the hostile sample fails, the other still counts
    assert any("'w' sample-1.txt: wildcard match timed out" in w for w in rep.warnings), rep.warnings


def test_a_device_or_fifo_among_the_sample_files_is_an_error_not_a_dropped_sample(tmp_path):
    import os

    ev = tmp_path / "evals.json"
    ev.write_text(json.dumps({"cases": [{"id": "cap", "set": "capability", "prompt": "?", "expect": "paris"}]}))
    (tmp_path / "out" / "cap").mkdir(parents=True)
    (tmp_path / "out" / "cap" / "sample-1.txt").write_text("Paris")
    (tmp_path / "out" / "cap" / "sample-2.txt").symlink_to("/dev/zero")
    with pytest.raises(InputError, match="sample-2.txt: not a regular file: it is a character device"):
        grade_outputs(ev, tmp_path / "out", k=2)
    (tmp_path / "out" / "cap" / "sample-2.txt").unlink()
    os.mkfifo(tmp_path / "out" / "cap" / "sample-2.txt")
    with pytest.raises(InputError, match="sample-2.txt: not a regular file: it is a FIFO"):
        grade_outputs(ev, tmp_path / "out", k=2)
