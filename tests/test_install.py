"""A pip install is a whole install, the embedded model is built for any x86-64 CPU with
AVX2, and the tests that need the embedded model never skip unnoticed.

The wheel is built from a copy of the checkout's files (git's list: tracked and
untracked, not ignored), so the checkout gets no `build/` or `*.egg-info`; it is
installed into a fresh virtualenv whose only evalkit is the wheel's. Its dependencies
come from this environment through a `.pth` file (no download: the point is what the
wheel holds, not pip's resolver), and `evalkit report` runs from a folder outside the
checkout with no `EVALKIT_NOTEBOOKS`.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from evalkit.conclusions.grading import grade_run
from evalkit.telling.labelling import TOOL_NOTEBOOKS
from evalkit.telling.reports import NOTEBOOKS
from evalkit.running.runner import run_suite
from evalkit.calls.serve import ScriptedServer

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
    assert {f"evalkit/notebooks/{n}.ipynb" for n in NOTEBOOKS + TOOL_NOTEBOOKS} <= names
    assert "evalkit/templates/judge-pairwise-v2.md" in names and "evalkit/schemas/dataset-v1.json" in names
    # every file of the package in the checkout ships (a new notebook or template left out fails here)
    package = {f for f in _checkout_files() if f.startswith("evalkit/") and "__pycache__" not in f}
    assert package - names == set()
    # the notebooks sit at the top of the checkout (notebooks/) and ship as evalkit/notebooks/
    notebooks = {f"evalkit/{f}" for f in _checkout_files() if f.startswith("notebooks/") and f.endswith(".ipynb")}
    assert len(notebooks) >= len(NOTEBOOKS) and notebooks - names == set()
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
    where = subprocess.run([str(fresh_py), "-c", "import evalkit, evalkit.telling.reports as r; print(evalkit.__file__); "
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


# -- the embedded model's build ----------------------------------------------------------

AMX_INSTRUCTIONS = ("tileloadd", "tileloaddt1", "tdpbssd", "tdpbsud", "tdpbusd", "tdpbuud", "tdpbf16ps",
                    "tdpfp16ps", "ldtilecfg", "sttilecfg", "tilestored", "tilezero", "tilerelease")


@pytest.mark.local_model
def test_llama_cpp_reports_no_avx512_or_amx_feature():
    """tools/install-llama.sh builds ggml without AMX and AVX-512 (a native build crashed
    with SIGSEGV on AMX machines): the library's own feature list names neither."""
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode()
    assert "AVX2 = 1" in info, info  # the portable build still uses AVX2
    assert "AVX512" not in info and "AMX" not in info, info


@pytest.mark.local_model
def test_the_ggml_libraries_hold_no_avx512_or_amx_instruction():
    """Disassembled, the installed ggml libraries use no zmm register (AVX-512) and no
    AMX tile instruction; a native build on an AVX-512 machine had 15,649 zmm lines in
    libggml-cpu.so."""
    import llama_cpp

    objdump = shutil.which("objdump")
    assert objdump, "objdump (binutils, which the C toolchain `make install` needs brings) is not on PATH"
    lib = Path(llama_cpp.__file__).parent / "lib"
    # the wheel holds libX.so, libX.so.0 and libX.so.0.N.M as copies (a wheel has no links): one of each
    libs = {hashlib.sha256(p.read_bytes()).hexdigest(): p for p in sorted(lib.glob("lib*.so*"), reverse=True)}
    libs = set(libs.values())
    assert any(p.name.startswith("libggml-cpu.so") for p in libs), sorted(libs)
    amx = re.compile(rb"\b(" + "|".join(AMX_INSTRUCTIONS).encode() + rb")\b")
    for so in sorted(libs):
        asm = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(so)], capture_output=True, check=True,
                             timeout=300).stdout  # bytes: decoding tens of MB of text is the slow part
        assert len(asm) > 10_000, f"{so}: objdump gave no disassembly"
        for what, found in (("AVX-512 (zmm)", re.compile(rb"%zmm").search(asm)), ("AMX", amx.search(asm))):
            if found:
                line = asm[asm.rfind(b"\n", 0, found.start()) + 1:asm.find(b"\n", found.end())].decode().strip()
                pytest.fail(f"{so.name}: an {what} instruction, e.g. {line}")


# -- the embedded-model tests never skip unnoticed ----------------------------------------

def _pytest_session(probe: Path, plugin_dir: Path, test_body: str, conftest: str = "", **env_extra: str):
    """A pytest session in `probe` with tests/conftest.py's hooks loaded as a plugin
    (from `plugin_dir`) and one `local_model` test whose body is `test_body`."""
    probe.mkdir(exist_ok=True)
    (probe / "test_probe.py").write_text("import pytest\n\n@pytest.mark.local_model\ndef test_probe():\n"
                                         f"    {test_body}\n")
    (probe / "conftest.py").write_text(conftest)
    env = {k: v for k, v in os.environ.items() if k != "EVALKIT_TESTS_WITHOUT_LOCAL_MODEL"}
    # the hooks under test, and no third-party plugin: this environment's (langsmith's
    # alone imports ~2 CPU-s at each start) play no part in what the session reports
    env.update(env_extra, PYTHONPATH=str(plugin_dir), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "evalkit_test_hooks",
                           "-q", "-o", "markers=local_model: the embedded model", str(probe)],
                          capture_output=True, text=True, env=env, cwd=probe, timeout=120)


@pytest.fixture()
def hooks_plugin(tmp_path) -> Path:
    """A folder holding tests/conftest.py as a module, for a pytest session elsewhere."""
    plugin_dir = tmp_path / "plugin"
    plugin_dir.mkdir()
    shutil.copy(ROOT / "tests" / "conftest.py", plugin_dir / "evalkit_test_hooks.py")
    return plugin_dir


def test_a_skipped_embedded_model_test_fails_the_session_unless_opted_out(tmp_path, hooks_plugin):
    proc = _pytest_session(tmp_path / "probe", hooks_plugin, "pytest.skip('no model here')")
    assert proc.returncode == 1, proc.stdout
    assert "need the embedded model were skipped" in proc.stdout and "test_probe" in proc.stdout
    proc = _pytest_session(tmp_path / "probe", hooks_plugin, "pytest.skip('no model here')",
                           EVALKIT_TESTS_WITHOUT_LOCAL_MODEL="1")
    assert proc.returncode == 0, proc.stdout


def test_an_embedded_model_test_without_llama_cpp_fails_saying_what_to_do(tmp_path, hooks_plugin):
    hide = "import sys\nsys.modules['llama_cpp'] = None  # find_spec() now says: not installed\n"
    proc = _pytest_session(tmp_path / "probe", hooks_plugin, "pass", conftest=hide)
    assert proc.returncode == 1, proc.stdout
    assert "needs the embedded model, but llama-cpp-python[server] is not installed" in proc.stdout
    assert "make install" in proc.stdout and "EVALKIT_TESTS_WITHOUT_LOCAL_MODEL=1" in proc.stdout
    proc = _pytest_session(tmp_path / "probe", hooks_plugin, "pass", conftest=hide,
                           EVALKIT_TESTS_WITHOUT_LOCAL_MODEL="1")
    assert proc.returncode == 0 and "1 skipped" in proc.stdout, proc.stdout
