"""tools/build_progress.py, the filter tools/install-llama.sh pipes the compile through
(issue 33: set-up was silent for minutes): fed a verbose build log in the form pip -v,
scikit-build-core and ninja print (tests/data/install/llama-build-verbose.log: colour
codes, a byte that is not UTF-8, 40 ninja steps), it prints each stage and the build
steps with the time so far, and keeps the whole log."""

from __future__ import annotations

import importlib.util
import io
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "build_progress.py"
LOG = ROOT / "tests" / "data" / "install" / "llama-build-verbose.log"


def _tool():
    spec = importlib.util.spec_from_file_location("build_progress", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_stages_and_steps_are_printed_with_the_time_so_far():
    tool = _tool()
    ticks = iter(range(0, 10_000, 7))  # a clock that advances 7 s a reading
    out, log = io.StringIO(), io.StringIO()
    text = LOG.read_bytes().decode("utf-8", errors="replace")
    tool.follow(io.StringIO(text), out, log, now=lambda: float(next(ticks)))
    lines = out.getvalue().splitlines()
    assert all(re.fullmatch(r"  \[\+\d+:\d\d\] .+", line) for line in lines), lines
    said = [line.split("] ", 1)[1] for line in lines]
    stages = [s for s in said if not s.startswith("build step")]
    assert stages == ["scikit-build-core 0.11.5: building the wheel", "CMake configure", "CMake configure done",
                      "build with Ninja", "installing into the wheel",
                      "wheel made: llama_cpp_python-0.3.36-cp311-cp311-linux_x86_64.whl"]
    steps = [s for s in said if s.startswith("build step")]
    assert steps[0] == "build step 1 of 40 (2%)" and steps[-1] == "build step 40 of 40 (100%)"
    assert 10 <= len(steps) <= 13  # about one a tenth, not 40
    assert said.index("CMake configure done") < said.index(steps[0]) < said.index("installing into the wheel")
    # the time so far grows from line to line
    elapsed = [int(m.group(1)) * 60 + int(m.group(2)) for m in (re.search(r"\+(\d+):(\d\d)", x) for x in lines)]
    assert elapsed == sorted(elapsed) and elapsed[-1] > elapsed[0]
    assert log.getvalue() == text  # the whole log kept


def test_a_quiet_minute_prints_a_step_and_an_error_line_is_shown():
    tool = _tool()
    clock = [0.0]

    def now() -> float:
        clock[0] += 61.0  # every reading a minute later: each step is past the quiet limit
        return clock[0]

    out = io.StringIO()
    steps = "".join(f"[{n}/1000] Building CXX object x{n}.o\n" for n in range(1, 6))
    tool.follow(io.StringIO(steps + "FAILED: x6.o\nninja: build stopped: subcommand failed.\n"), out, None, now=now)
    said = [line.split("] ", 1)[1] for line in out.getvalue().splitlines()]
    assert said[:5] == [f"build step {n} of 1000 (0%)" for n in range(1, 6)]
    assert said[5:] == ["FAILED: x6.o", "ninja: build stopped: subcommand failed."]


def test_the_script_reads_bytes_that_are_not_utf8_to_the_end(tmp_path):
    proc = subprocess.run([sys.executable, str(TOOL), str(tmp_path / "build.log")], input=LOG.read_bytes(),
                          capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert b"wheel made: llama_cpp_python-0.3.36" in proc.stdout
    assert (tmp_path / "build.log").read_text(encoding="utf-8").count("\n") == LOG.read_bytes().count(b"\n")


def test_install_llama_pipes_a_verbose_compile_through_the_filter():
    script = (ROOT / "tools" / "install-llama.sh").read_text(encoding="utf-8")
    wheel = next(line for line in script.splitlines() if "pip wheel" in line)
    assert " -v " in wheel and "--quiet" not in wheel
    assert 'build_progress.py" "$tmp/build.log"' in script and 'tail -n 40 "$tmp/build.log"' in script


def _fake_python(tmp_path: Path, wheel_rc: int) -> Path:
    """A `python` for install-llama.sh whose pip replays the recorded log (no network, no
    compile: the script's own plumbing is what runs); anything else is the real Python."""
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text(f"""#!/bin/sh
dir=""; prev=""
for a in "$@"; do
    if [ "$prev" = "-d" ] || [ "$prev" = "-w" ]; then dir=$a; fi
    prev=$a
done
case "$1 $2 $3" in
    "-m pip download") mkdir -p "$dir"; : > "$dir/llama_cpp_python-0.3.36.tar.gz"; exit 0 ;;
    "-m pip wheel")
        cat "{LOG}"
        if [ {wheel_rc} = 0 ]; then mkdir -p "$dir"; : > "$dir/llama_cpp_python-0.3.36-cp311-cp311-linux_x86_64.whl"
        else echo "FAILED: vendor/llama.cpp/ggml/src/ggml.c.o"; fi
        exit {wheel_rc} ;;
    "-m pip install") exit 0 ;;
esac
exec "{sys.executable}" "$@"
""")
    fake.chmod(0o755)
    return fake


def test_install_llama_shows_progress_and_fails_with_the_compiles_status_and_log_tail(tmp_path):
    import os

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    script = ROOT / "tools" / "install-llama.sh"
    ok = subprocess.run(["sh", str(script), str(_fake_python(tmp_path, 0)), str(ROOT / "requirements" / "llama.txt")],
                        capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert ok.returncode == 0, ok.stderr
    assert "] CMake configure\n" in ok.stdout and "] build step 40 of 40 (100%)\n" in ok.stdout
    assert list((tmp_path / "cache" / "evalkit" / "wheels").glob("llama-*/llama_cpp_python-*.whl"))
    (tmp_path / "bin" / "python").unlink()
    (tmp_path / "bin").rmdir()
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache2")
    bad = subprocess.run(["sh", str(script), str(_fake_python(tmp_path, 3)), str(ROOT / "requirements" / "llama.txt")],
                         capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert bad.returncode == 3
    assert "compiling llama-cpp-python failed (exit 3)" in bad.stderr and "FAILED: vendor/llama.cpp" in bad.stderr
    assert not list((tmp_path / "cache2").rglob("*.whl"))  # no wheel cached from a failed build


def test_the_makefiles_editable_install_prints_no_build_backend_warning(tmp_path):
    """`make install`'s editable step, as the Makefile runs it (its environment included),
    into a fresh virtualenv from a copy of the checkout: no setuptools banner (the license
    as a TOML table, the editable-install notice) that reads like an error."""
    import os
    import shutil

    line = next(x for x in (ROOT / "Makefile").read_text().splitlines() if "-e ." in x and "$(PIP)" in x)
    env = dict(os.environ)
    for assignment in re.findall(r'(\w+)="([^"]*)"', line.split("$(PIP)")[0]):
        env[assignment[0]] = assignment[1]
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    src = tmp_path / "src"
    for f in (f for f in listed if f and (ROOT / f).is_file() and not f.startswith(("tests/", "data/"))):
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, src / f)
    # a fresh virtualenv that sees this one's packages (setuptools builds it, as make install's
    # does) through a .pth file, but not its evalkit (the .pth files of a .pth-added folder are
    # not read): pip installs there and leaves this environment's editable evalkit alone
    import sysconfig

    fresh = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(fresh)], check=True, timeout=120)
    fresh_py = fresh / "bin" / "python"
    site = Path(subprocess.run([str(fresh_py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "zz_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(fresh_py), "install", "--quiet", "--no-deps",
                           "--no-build-isolation", "--no-index", "-e", str(src)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_a_real_compiles_log_gives_its_stages_and_steps():
    """tests/data/install/llama-build-real.log: the log of `make install`'s compile of
    llama-cpp-python 0.3.36 (pip -v, scikit-build-core 1.1.2, CMake 4.4.5, ninja, 140
    steps) recorded on 2026-12-01 by tools/install-llama.sh on this branch, each line cut
    to 160 characters (the compiler command lines run to 1,500); the copy was taken while
    the wheel was being installed, so it ends before "Created ...whl" (the terminal showed
    "wheel made: llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl" 3 s later)."""
    tool = _tool()
    ticks = iter(range(0, 100_000, 5))
    out = io.StringIO()
    real = ROOT / "tests" / "data" / "install" / "llama-build-real.log"
    tool.follow(io.StringIO(real.read_text(encoding="utf-8")), out, None, now=lambda: float(next(ticks)))
    said = [line.split("] ", 1)[1] for line in out.getvalue().splitlines()]
    assert [s for s in said if not s.startswith("build step")] == [
        "scikit-build-core 1.1.2: building the wheel", "CMake configure", "CMake configure done", "build with Ninja",
        "installing into the wheel"]
    steps = [s for s in said if s.startswith("build step")]
    assert steps[0] == "build step 1 of 140 (0%)" and steps[-1] == "build step 140 of 140 (100%)"
    assert 11 <= len(steps) <= 30  # the tenths and a line each quiet minute, not 140 lines
