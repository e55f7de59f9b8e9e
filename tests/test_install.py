"""A pip install is a whole install.

The wheel is built from a copy of the checkout's files (git's list: tracked and
untracked, not ignored), so the checkout gets no `build/` or `*.egg-info`; it is
installed into a fresh virtualenv whose only evalkit is the wheel's. Its dependencies
come from this environment through a `.pth` file (no download: the point is what the
wheel holds, not pip's resolver), and `evalkit report` runs from a folder outside the
checkout with no `EVALKIT_NOTEBOOKS`.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from evalkit.grading import grade_run
from evalkit.reports import NOTEBOOKS
from evalkit.runner import run_suite
from evalkit.serve import ScriptedServer

from test_reports import _two_arm_script, _two_arm_suite

ROOT = Path(__file__).resolve().parent.parent


def _checkout_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                         capture_output=True, check=True)
    return [f for f in out.stdout.decode().split("\0") if f and (ROOT / f).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    for f in _checkout_files():
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, src / f)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-cache-dir", str(src), "-w", str(tmp / "dist")], check=True, timeout=300,
                   capture_output=True)
    [whl] = (tmp / "dist").glob("evalkit-*.whl")
    return whl


def test_the_wheel_holds_the_package_and_its_data_and_nothing_else(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"evalkit/notebooks/{n}.ipynb" for n in NOTEBOOKS} <= names
    assert "evalkit/templates/judge-pairwise-v1.md" in names and "evalkit/schemas/dataset-v1.json" in names
    # every file of the package in the checkout ships (a new notebook or template left out fails here)
    package = {f for f in _checkout_files() if f.startswith("evalkit/") and "__pycache__" not in f}
    assert package - names == set()
    top = {n.split("/")[0] for n in names}
    assert top == {"evalkit", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info"}
    assert not any(n.startswith(("tests/", "data/", "benchmarks/", "notebooks/")) for n in names)


@pytest.mark.slow  # about 10 s: a run, a fresh virtualenv and five notebooks in it
def test_evalkit_report_from_an_installed_wheel_outside_the_checkout(wheel, tmp_path):
    # A real two-arm run, graded, made here against the scripted server.
    os.environ.setdefault("EVALKIT_TEST_KEY", "test-key")
    with ScriptedServer(_two_arm_script()) as srv:
        suite = _two_arm_suite(tmp_path, srv.base_url)
        run = run_suite(suite, progress=False)
        grade_run(run.path)

    fresh = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(fresh)], check=True, timeout=120)
    fresh_py = fresh / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(fresh_py), "install", "--quiet", "--no-deps",
                    "--no-index", "--no-cache-dir", str(wheel)], check=True, timeout=300, capture_output=True)
    site = Path(subprocess.run([str(fresh_py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    # the dependencies, from this environment; its own evalkit (an editable install, a
    # .pth there) is not reachable this way: .pth files of a .pth-added folder are not read
    (site / "zz_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # ... and their data files, which a real install puts under the new prefix (nbconvert's
    # HTML templates); not the kernel specs: this environment's names its own python
    shared = fresh / "share" / "jupyter"
    shared.mkdir(parents=True)
    for entry in (Path(sys.prefix) / "share" / "jupyter").iterdir():
        if entry.name != "kernels":
            (shared / entry.name).symlink_to(entry)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "EVALKIT_NOTEBOOKS", "PYTHONHOME")}
    env["PATH"] = f"{fresh / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    where = subprocess.run([str(fresh_py), "-c", "import evalkit, evalkit.reports as r; print(evalkit.__file__); "
                            "print(r.notebooks_dir()); from jupyter_client.kernelspec import get_kernel_spec; "
                            "print(get_kernel_spec('python3').argv[0])"], capture_output=True, text=True, env=env,
                           cwd=outside, check=True).stdout.split()
    # evalkit, its notebooks and the notebooks' kernel: the fresh environment's
    assert all(Path(p).is_relative_to(fresh) for p in where), where

    proc = subprocess.run([str(fresh / "bin" / "evalkit"), "report", str(run.path), "--reports-dir", "reports"],
                          capture_output=True, text=True, env=env, cwd=outside, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    pages = outside / "reports" / run.path.name
    made = {p.stem for p in pages.glob("*.html")}
    assert {"run_summary", "pass_at_k", "skill_comparison"} <= made
    assert (outside / proc.stdout.strip().splitlines()[-1]).resolve() == (outside / "reports" / "index.html").resolve()
    index = (outside / "reports" / "index.html").read_text()
    assert all(f"{run.path.name}/{n}.html" in index for n in made)

    # the same install with its notebooks gone: exit 1 naming the notebook, no thread traceback
    shutil.rmtree(site / "evalkit" / "notebooks")
    proc = subprocess.run([str(fresh / "bin" / "evalkit"), "report", str(run.path), "--reports-dir", "broken",
                           "--only", "run_summary"], capture_output=True, text=True, env=env, cwd=outside, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "run_summary" in proc.stderr and "notebook not found" in proc.stderr and "not whole" in proc.stderr
    assert "Traceback" not in proc.stderr and "Exception in thread" not in proc.stderr
