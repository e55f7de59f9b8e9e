"""Imports point down: no cycle among evalkit's modules (function-level imports counted),
and an import inside a function only where it keeps a heavy import lazy, saying so."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "evalkit"


def module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def resolve(node: ast.ImportFrom | ast.Import, here: str, is_package: bool) -> list[str]:
    """The evalkit modules an import statement names (a package's `from . import x`
    names the submodule x when there is one)."""
    known = modules()
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
    """module -> {(imported module, line, inside a function)}"""
    graph: dict[str, set[tuple[str, int, bool]]] = {}
    for name, path in modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        edges: set[tuple[str, int, bool]] = set()

        def walk(node: ast.AST, in_function: bool) -> None:
            for child in ast.iter_child_nodes(node):
                inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for target in resolve(child, name, path.name == "__init__.py"):
                        if target != name:
                            edges.add((target, child.lineno, in_function))
                walk(child, inner)

        walk(tree, False)
        graph[name] = edges
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
    "evalkit.runner", "evalkit.client", "evalkit.ledger", "evalkit.cache", "evalkit.serve",
    "evalkit.tokens", "evalkit._samplewriter", "evalkit.privacy",
}


def test_every_import_inside_a_function_says_why():
    """An import inside a function keeps something heavy (or platform-bound) off the
    import path of a fast command; a comment on its line, or on the line above the run
    of import lines it belongs to, says what."""
    bare = []
    for name, path in modules().items():
        if name in COMMENTS_EXEMPT:
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        tree = ast.parse("\n".join(lines))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    i = node.lineno - 1  # walk up the run of import lines (blank lines between them too)
                    while i > 0 and (not lines[i - 1].strip() or lines[i - 1].lstrip().startswith(("import ", "from "))):
                        i -= 1
                    run = lines[i : node.lineno]
                    above = lines[i - 1].strip() if i > 0 else ""
                    if not any("#" in ln for ln in run) and not above.startswith("#"):
                        bare.append(f"{path.relative_to(PKG.parent)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert not bare, "imports inside functions without a reason:\n" + "\n".join(sorted(set(bare)))


def test_fast_commands_do_not_load_the_heavy_stack():
    """`evalkit --help` and `evalkit lint` never import pandas, scipy, papermill or
    matplotlib (measured: docs/architecture.md)."""
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from evalkit.cli import main\n"
        "r = CliRunner().invoke(main, sys.argv[1:])\n"
        "heavy = sorted(m for m in ('pandas', 'scipy', 'papermill', 'matplotlib', 'openai') if m in sys.modules)\n"
        "print(r.exit_code, ','.join(heavy))\n"
    )
    root = PKG.parent
    for args in (["--help"], ["lint", str(root / "data" / "factual")]):
        out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60, cwd=root)
        code_, _, heavy = out.stdout.strip().rpartition("\n")[2].partition(" ")
        assert code_ == "0" and heavy == "", (args, out.stdout[-500:], out.stderr[-2000:])
