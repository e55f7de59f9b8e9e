"""Imports point down: no cycle among evalkit's modules (function-level imports counted),
an import inside a function only where it keeps a heavy import lazy, saying so, and
docs/architecture.md's module map naming every module, each in a layer no import of it
points above."""
from __future__ import annotations

import ast
import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "evalkit"


def module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return dict(_modules(PKG))


@functools.lru_cache(maxsize=None)
def _modules(pkg: Path) -> tuple[tuple[str, Path], ...]:
    """The package's modules, listed once per package folder (the tree does not change
    while the tests run; the cycle check's own test points PKG at another folder)."""
    return tuple((module_name(p), p) for p in sorted(pkg.rglob("*.py")))


def resolve(node: ast.ImportFrom | ast.Import, here: str, is_package: bool,
            known: dict[str, Path] | None = None) -> list[str]:
    """The evalkit modules an import statement names (a package's `from . import x`
    names the submodule x when there is one); `known` is `modules()`, passed in by a
    caller that resolves many statements."""
    known = modules() if known is None else known
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "evalkit"]
    if node.level:
        base = here.split(".") if is_package else here.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    if target.split(".")[0] != "evalkit":
        return []
    out = []
    for alias in node.names:
        sub = f"{target}.{alias.name}"
        out.append(sub if sub in known else target)
    return out


def imports() -> dict[str, set[tuple[str, int, bool]]]:
    """module -> {(imported module, line, inside a function)}: parsed once per package
    folder (`_imports`); each caller gets its own copy to change."""
    return {m: set(edges) for m, edges in _imports(PKG).items()}


@functools.lru_cache(maxsize=None)
def parsed(path: Path) -> tuple[list[str], ast.Module]:
    """A module's lines and syntax tree, read and parsed once for every check here."""
    text = path.read_text(encoding="utf-8")
    return text.splitlines(), ast.parse(text)


@functools.lru_cache(maxsize=None)
def _imports(pkg: Path) -> dict[str, frozenset[tuple[str, int, bool]]]:
    known = dict(_modules(pkg))
    graph: dict[str, frozenset[tuple[str, int, bool]]] = {}
    for name, path in known.items():
        tree = parsed(path)[1]
        edges: set[tuple[str, int, bool]] = set()

        def walk(node: ast.AST, in_function: bool) -> None:
            for child in ast.iter_child_nodes(node):
                inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for target in resolve(child, name, path.name == "__init__.py", known):
                        if target != name:
                            edges.add((target, child.lineno, in_function))
                walk(child, inner)

        walk(tree, False)
        graph[name] = frozenset(edges)
    return graph


def test_the_import_graph_has_no_cycle():
    graph = {m: {t for t, _, _ in edges} for m, edges in imports().items()}
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph.get(m, ())):
            if state.get(t) == 1:
                cycles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_cycle_check_sees_a_cycle(tmp_path, monkeypatch):
    """The check itself: two modules that import each other inside functions are a cycle."""
    pkg = tmp_path / "evalkit"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from . import b  # lazy: test\n")
    (pkg / "b.py").write_text("from .a import f\n")
    monkeypatch.setattr(sys.modules[__name__], "PKG", pkg)
    graph = {m: {t for t, _, _ in e} for m, e in imports().items()}
    assert "evalkit.b" in graph["evalkit.a"] and "evalkit.a" in graph["evalkit.b"]


# Modules other work owns (the run engine, the client, the servers, the privacy scan):
# their imports are held to the cycle rule above, their comments are theirs to write.
COMMENTS_EXEMPT = {
    "evalkit.running.runner", "evalkit.calls.client", "evalkit.calls.ledger", "evalkit.calls.cache",
    "evalkit.calls.serve", "evalkit.foundations.tokens", "evalkit.runfolder._samplewriter", "evalkit.pii.privacy",
    # the privacy scan's parts, split out of evalkit.pii.privacy with their code unchanged
    "evalkit.pii.privacy_detect", "evalkit.pii.privacy_policy", "evalkit.pii.privacy_gate",
    "evalkit.pii.privacy_redact",
}


def test_every_import_inside_a_function_says_why():
    """An import inside a function keeps something heavy (or platform-bound) off the
    import path of a fast command; a comment on its line, or on the line above the run
    of import lines it belongs to, says what."""
    bare = []
    for name, path in modules().items():
        if name in COMMENTS_EXEMPT:
            continue
        lines, tree = parsed(path)
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    i = node.lineno - 1  # walk up the run of import lines (blank lines between them too)
                    while i > 0 and (not lines[i - 1].strip() or lines[i - 1].lstrip().startswith(("import ", "from "))):
                        i -= 1
                    run = lines[i : node.end_lineno]  # a wrapped import's comment may sit on a later line
                    above = lines[i - 1].strip() if i > 0 else ""
                    if not any("#" in ln for ln in run) and not above.startswith("#"):
                        bare.append(f"{path.relative_to(PKG.parent)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert not bare, "imports inside functions without a reason:\n" + "\n".join(sorted(set(bare)))


FAST_COMMANDS = {
    "--help": [],
    "lint": [str(PKG.parent / "data" / "factual")],
    "verdict": ["--wins", "10", "--ties", "2", "--losses", "1"],
    "power": ["--win-rate", "0.7", "--alpha", "0.05", "--power", "0.8"],
}

# One interpreter for the checks that need a fresh one: each check runs in a fresh copy of
# it (a fork of a parent that has imported nothing of evalkit), so what one imports is its
# own. A check prints one JSON line [name, result] per thing it found; an exception in a
# check prints [name, "error: <traceback>"].
FRESH_CODE = (
    "import json, os, sys, traceback\n"
    "from click.testing import CliRunner\n"
    "def check(name, fn):\n"
    "    pid = os.fork()\n"
    "    if pid == 0:\n"
    "        try:\n"
    "            fn()\n"
    "        except BaseException:\n"
    "            print(json.dumps([name, 'error: ' + traceback.format_exc()]), flush=True)\n"
    "        finally:\n"
    "            os._exit(0)\n"
    "    os.waitpid(pid, 0)\n"
    # `evalkit --help`, `lint`, `verdict`, `power`: what each imported
    "def fast(args):\n"
    "    from evalkit._cli.main import main\n"
    "    r = CliRunner().invoke(main, args)\n"
    "    heavy = sorted(m for m in ('pandas', 'scipy', 'papermill', 'matplotlib', 'openai') if m in sys.modules)\n"
    "    print(json.dumps([args[0], [r.exit_code, heavy]]), flush=True)\n"
    "for args in json.loads(sys.argv[1]):\n"
    "    check(args[0], lambda: fast(args))\n"
    # the third-party libraries the two checks below both load, loaded once here (after the
    # fast commands, which must not see them); nothing of evalkit is imported in the parent
    "import openai, aiohttp, numpy, pydantic, yaml, regex, tqdm\n"
    # the run's modules without evalkit.running.batch
    "def run():\n"
    "    import evalkit.running.runner, evalkit._cli.run, evalkit._cli.main\n"
    "    print(json.dumps(['run', sorted(m for m in sys.modules if m == 'evalkit.running.batch')]), flush=True)\n"
    "check('run', run)\n"
    # every flat name of evalkit 0.1, each imported by its flat name first
    "def flat():\n"
    "    import importlib, evalkit\n"
    "    bad = [f for f, new in evalkit.MOVED.items()\n"
    "           if importlib.import_module('evalkit.' + f) is not importlib.import_module('evalkit.' + new)]\n"
    "    from evalkit.serve import LocalModelServer\n"
    "    from evalkit.formats.vally import read_vally\n"
    "    import evalkit.formats.vally as v\n"
    "    assert v is sys.modules['evalkit.suites.formats.vally'], 'a second copy of a submodule'\n"
    "    assert LocalModelServer.__module__ == 'evalkit.calls.serve'\n"
    "    for name in ('stats.sign_test', 'stats.pass_hat_k', 'stats.pass_at_k', 'verdicts.two_arm_verdict', 'gates.gate'):\n"
    "        mod, _, attr = name.partition('.')\n"
    "        assert callable(getattr(getattr(evalkit, mod), attr)), name\n"
    "    for name in evalkit.__all__:\n"
    "        getattr(evalkit, name)\n"
    "    print(json.dumps(['flat', bad]), flush=True)\n"
    "check('flat', flat)\n"
)


@pytest.fixture(scope="module")
def fresh() -> dict[str, object]:
    """What each check of FRESH_CODE found, by name (with stderr under "stderr")."""
    out = subprocess.run([sys.executable, "-c", FRESH_CODE, json.dumps([[c, *a] for c, a in FAST_COMMANDS.items()])],
                         capture_output=True, text=True, timeout=180, cwd=PKG.parent)
    lines = [line for line in out.stdout.splitlines() if line.startswith("[\"")]
    found: dict[str, object] = {"stderr": out.stderr[-3000:], "stdout": out.stdout[-500:], "rc": out.returncode}
    for line in lines:
        name, result = json.loads(line)
        found[name] = result
    return found


def test_fast_commands_do_not_load_the_heavy_stack(fresh):
    """`evalkit --help`, `lint`, `verdict` and `power` never import pandas, scipy,
    papermill, matplotlib or openai (measured: benchmarks/results/startup.json). One interpreter for all of them: each
    command runs in a fresh copy of it (a fork), so what one imports is its own."""
    seen = {name: fresh[name] for name in FAST_COMMANDS if name in fresh}
    assert set(seen) == set(FAST_COMMANDS), (fresh["stdout"], fresh["stderr"])
    for name, found in seen.items():
        assert isinstance(found, list), (name, found)
        rc, heavy = found
        assert rc == 0 and heavy == [], (name, rc, heavy, fresh["stderr"])


# --------------------------------------------------------------------------- the module map

ARCHITECTURE = PKG.parent / "docs" / "architecture.md"
LAYER_HEADING = re.compile(r"^### Layer (\d+): .*\(`evalkit/(?:(\w+)/|__init__\.py)`\)$")
MAP_ROW = re.compile(r"^\| `(evalkit(?:\.[\w.]+)?)` \|")


def layer_folders(text: str) -> dict[int, str | None]:
    """Each layer's folder (`### Layer N: title (`evalkit/<folder>/`)`); None for the
    top-level `evalkit/__init__.py`."""
    return {int(m.group(1)): m.group(2) for line in text.splitlines() if (m := LAYER_HEADING.match(line))}


def module_map(text: str) -> dict[str, int]:
    """docs/architecture.md's module map: module -> its layer number. A module listed
    twice is an error (one home per module). A layer folder's own `__init__` belongs to
    its layer without a row."""
    layers: dict[str, int] = {}
    layer: int | None = None
    twice = []
    for line in text.splitlines():
        if m := LAYER_HEADING.match(line):
            layer = int(m.group(1))
            if m.group(2):
                layers[f"evalkit.{m.group(2)}"] = layer
        elif (m := MAP_ROW.match(line)) and layer is not None:
            if m.group(1) in layers:
                twice.append(m.group(1))
            layers[m.group(1)] = layer
    assert not twice, f"listed twice in the module map: {twice}"
    return layers


def map_problems(layers: dict[str, int], graph: dict[str, set[tuple[str, int, bool]]]) -> list[str]:
    """What is wrong with a module map against the package's imports: modules it does not
    list, modules it lists that do not exist, imports that point to a later layer, and
    imports of a name that is no module of the package (a flat name of evalkit 0.1)."""
    problems = [f"{m}: not in the module map" for m in sorted(set(graph) - set(layers))]
    problems += [f"{m}: listed, but no such module" for m in sorted(set(layers) - set(graph))]
    for m, edges in sorted(graph.items()):
        for target, line, _ in sorted(edges):
            if target not in graph:
                problems.append(f"{m} imports {target} at line {line}: no such module (a flat name? evalkit.MOVED)")
            elif m in layers and target in layers and layers[target] > layers[m]:
                problems.append(
                    f"{m} (layer {layers[m]}) imports {target} (layer {layers[target]}) at line {line}: it points up"
                )
    return problems


def test_every_module_sits_in_its_layers_folder():
    """The folders are the layers: a module listed under `### Layer N (evalkit/F/)` is
    `evalkit.F.<name>`, and no module lives outside a layer folder but the public API."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    folders = layer_folders(text)
    assert len(folders) >= 9, folders
    wrong = []
    for module, layer in module_map(text).items():
        folder = folders[layer]
        expected = "evalkit" if folder is None else f"evalkit.{folder}"
        if module != expected and not module.startswith(expected + "."):
            wrong.append(f"{module} is listed in layer {layer} (evalkit/{folder or '__init__.py'})")
    assert not wrong, wrong
    flat = sorted(p.name for p in PKG.glob("*.py") if p.name != "__init__.py")
    assert flat == [], f"modules outside the layer folders: {flat}"


def test_each_layer_folder_says_what_it_holds_and_may_import():
    """Each folder's `__init__` is a docstring saying what lives there and what it may
    import, and nothing else (the public names are re-exported by `evalkit/__init__`)."""
    for folder in layer_folders(ARCHITECTURE.read_text(encoding="utf-8")).values():
        if folder is None:
            continue
        tree = ast.parse((PKG / folder / "__init__.py").read_text(encoding="utf-8"))
        doc = ast.get_docstring(tree) or ""
        assert "May import" in doc, f"evalkit/{folder}/__init__.py: no 'May import' line"
        assert len(tree.body) == 1, f"evalkit/{folder}/__init__.py holds more than its docstring"


def first_docstring_lines() -> dict[str, str]:
    """module -> the first line of its docstring ('' when it has none)."""
    out = {}
    for name, path in modules().items():
        doc = ast.get_docstring(parsed(path)[1]) or ""
        out[name] = doc.strip().splitlines()[0].strip() if doc.strip() else ""
    return out


def test_each_module_says_its_one_concern_in_its_docstrings_first_line():
    """Every module of the map opens with a docstring whose first line says its concern: a
    phrase of at least four words, not shared with another module (one concern, one home)."""
    lines = first_docstring_lines()
    layers = module_map(ARCHITECTURE.read_text(encoding="utf-8"))
    missing = sorted(m for m in layers if len(lines.get(m, "").split()) < 4)
    assert not missing, f"no concern in the docstring's first line: {missing}"
    seen: dict[str, str] = {}
    shared = []
    for m in sorted(layers):
        key = lines[m].lower()
        if key in seen:
            shared.append(f"{seen[key]} and {m}: {lines[m]!r}")
        seen[key] = m
    assert not shared, shared


def test_the_concern_check_sees_a_module_without_a_docstring(tmp_path, monkeypatch):
    """The check itself: a module whose docstring is gone, or says nothing, is reported."""
    import importlib
    mod = importlib.import_module(__name__)
    tree = ast.parse("x = 1\n")
    real = mod.parsed
    monkeypatch.setattr(mod, "parsed", lambda p: ([], tree) if p.name == "metrics.py" else real(p))
    lines = mod.first_docstring_lines()
    assert lines["evalkit.numbers.metrics"] == ""
    with pytest.raises(AssertionError, match="evalkit.numbers.metrics"):
        mod.test_each_module_says_its_one_concern_in_its_docstrings_first_line()


def test_readme_layout_names_every_layer_folder():
    """README's layout table lists each layer folder of docs/architecture.md, and no other."""
    readme = (PKG.parent / "README.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `evalkit/([a-z_]+)/` \|", readme, re.M))
    folders = {f for f in layer_folders(ARCHITECTURE.read_text(encoding="utf-8")).values() if f}
    assert listed == folders, (sorted(folders - listed), sorted(listed - folders))


def test_every_flat_name_of_evalkit_0_1_still_imports_as_the_same_module(fresh):
    """`import evalkit.stats`, `from evalkit.serve import LocalModelServer` (README) and
    every other flat name answer with the module at its new path, one object, not a copy;
    the documented names `evalkit.stats.sign_test` and friends resolve (in a fresh
    interpreter: FRESH_CODE's `flat`)."""
    assert fresh.get("flat") == [], (fresh.get("flat"), fresh["stdout"], fresh["stderr"])
    # `python -m` a flat name runs the module at its new path (runpy asks the alias for its code)
    for flat in ("evalkit.cli", "evalkit.demo"):
        out = subprocess.run([sys.executable, "-m", flat, "--help"], capture_output=True, text=True, timeout=120,
                             cwd=PKG.parent)
        assert out.returncode == 0 and "usage" in out.stdout.lower(), (flat, out.stdout[-500:], out.stderr[-2000:])


def test_every_name_of_the_old_loader_module_still_imports_from_its_old_paths():
    """`from evalkit.suites.loader import lint_suite` (docs/contracts.md before the suites
    split) and `from evalkit.loader import ...` (0.1) still work: both paths answer with
    `evalkit.intake.lint`, which holds every name the old module had."""
    import importlib

    from evalkit.intake import lint
    from evalkit.suites import reader

    names = ("load_suite", "lint_suite", "import_suite", "write_native_suite", "write_imported",
             "dataset_to_suite", "analyze_paths")
    for old in ("evalkit.suites.loader", "evalkit.loader"):
        module = importlib.import_module(old)
        assert module is lint, old
        assert all(getattr(module, n) is getattr(lint, n) for n in names), old
    assert lint.load_suite is reader.load_suite


def test_the_flat_name_table_covers_every_module_of_evalkit_0_1():
    """evalkit.MOVED names a home for each flat module of 0.1 (tests/data/runs/v0.1 era),
    and each home exists."""
    import evalkit

    known = set(modules())
    missing = sorted(f for f, new in evalkit.MOVED.items() if f"evalkit.{new}" not in known)
    assert not missing, missing
    assert len(evalkit.MOVED) >= 60


def test_the_module_map_lists_every_module_and_imports_point_down_its_layers():
    """docs/architecture.md names every module of the package, only those, each once, and
    every import (function-level ones too) goes to the same layer or one above it."""
    layers = module_map(ARCHITECTURE.read_text(encoding="utf-8"))
    assert len(layers) > 40, "the module map was not found (### Layer N: headings, | `evalkit.x` | rows)"
    assert map_problems(layers, imports()) == []


def test_the_module_map_check_sees_a_missing_an_extra_and_an_upward_module():
    """The check itself, on a doctored map: a module left out, one that does not exist,
    and one moved below a module it imports are each reported."""
    layers = module_map(ARCHITECTURE.read_text(encoding="utf-8"))
    graph = imports()
    doctored = {m: n for m, n in layers.items() if m != "evalkit.numbers.metrics"}
    doctored["evalkit.nosuch"] = 1
    graph = {**graph, "evalkit.numbers.plans": graph["evalkit.numbers.plans"] | {("evalkit.stats", 1, False)}}
    doctored["evalkit.foundations.records"] = max(layers.values())  # everything that imports records now points up
    problems = map_problems(doctored, graph)
    assert "evalkit.numbers.metrics: not in the module map" in problems
    assert "evalkit.nosuch: listed, but no such module" in problems
    assert any(p.startswith("evalkit.numbers.plans imports evalkit.stats at line 1: no such module") for p in problems)
    assert any(p.startswith("evalkit.numbers.stats (layer 2) imports evalkit.foundations.records") for p in problems), problems
    row = "| `evalkit.numbers.stats` | again |"
    with pytest.raises(AssertionError, match="listed twice"):
        module_map(f"### Layer 1: a (`evalkit/numbers/`)\n\n{row}\n{row}\n")


def test_a_run_loads_evalkit_batch_only_when_it_sends_or_left_batches(fresh):
    """The runner and `evalkit run` import `evalkit.running.batch` only for a run with
    --batch or a run folder with batches.json (openai's own types load with `import
    openai`, which every run that calls a model needs): checked in a fresh interpreter
    that has imported nothing of evalkit (FRESH_CODE's `run`)."""
    assert fresh.get("run") == [], (fresh.get("run"), fresh["stdout"], fresh["stderr"])


COMMAND_CODE = (
    "import json, sys\n"
    "from click.testing import CliRunner\n"
    "from evalkit._cli.main import main\n"
    "r = CliRunner().invoke(main, json.loads(sys.argv[1]))\n"
    "print(json.dumps([r.exit_code, sorted(m for m in json.loads(sys.argv[2]) if m in sys.modules)]))\n"
)


def _loaded(args: list[str], watch: tuple[str, ...]) -> list[object]:
    """[exit status, which of `watch` are imported] after `evalkit ARGS` in a fresh interpreter."""
    out = subprocess.run([sys.executable, "-c", COMMAND_CODE, json.dumps(args), json.dumps(watch)],
                         capture_output=True, text=True, timeout=120, cwd=PKG.parent)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def test_grading_and_comparing_a_run_no_case_of_which_is_judged_load_no_model_client_nor_scipy(tmp_path):
    """`evalkit grade` of a run whose cases a program decides imports neither openai nor
    the runner: they were half of its CPU (measured on a 2-core machine: 1.1 CPU-s before,
    0.57 after); `evalkit compare` of it no scipy (its intervals' normal quantile comes
    from the standard library: 1.1 CPU-s before, 0.49 after). A judged case loads the
    client when it is judged. Each checked in a fresh interpreter."""
    from conftest import write_engine_suite

    from evalkit.calls.serve import ScriptedServer
    from evalkit.running.runner import run_suite

    cases = [{"id": f"c{i}", "input": f"capital {i}?", "expected": "Paris", "tags": ["t"]} for i in range(6)]
    suite = write_engine_suite(tmp_path / "suite", cases, k=3)
    with ScriptedServer({"rules": [{"match": "capital", "texts": ["Paris", "Lima", "Rome"]}]}) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
    assert res.complete
    client = ("openai", "aiohttp", "evalkit.calls.client", "evalkit.running.runner")
    assert _loaded(["grade", str(res.path)], client) == [0, []]
    assert _loaded(["compare", str(res.path), "--baseline", "base", "--treatment", "guided"],
                   ("scipy", *client)) == [0, []]
