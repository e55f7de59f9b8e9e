"""evalkit.foundations._jsonschema: jsonschema (and papermill) imported without the IRI grammar, from
any number of threads at once (a report's lanes import papermill while their kernels warm
up)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# Two threads make the first import at once, each held at the point where the first
# has decided whether to block the grammar's package (a line tracer, so the interleaving
# is the same every run): neither may fail, and the package is left importable.
RACE = textwrap.dedent(
    """
    import sys, threading
    assert "jsonschema" not in sys.modules
    import evalkit.foundations._jsonschema as J
    src = open(J.__file__).read().splitlines()
    line = next(i + 1 for i, s in enumerate(src) if s.strip() == "if blocked:")
    barrier = threading.Barrier(2, timeout=1)

    def tracer(frame, event, arg):
        if frame.f_code.co_filename != J.__file__:
            return None
        def local(frame, event, arg):
            if event == "line" and frame.f_lineno == line:
                try:
                    barrier.wait()
                except threading.BrokenBarrierError:
                    pass
            return local
        return local

    got, errors = [], []
    def first_import():
        try:
            got.append(J.jsonschema())
        except BaseException as exc:
            errors.append(repr(exc))

    threading.settrace(tracer)
    threads = [threading.Thread(target=first_import) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    threading.settrace(None)
    assert not errors, errors
    assert all(m is sys.modules["jsonschema"] and hasattr(m, "Draft202012Validator") for m in got), got
    assert sys.modules.get("rfc3987_syntax", "absent") is not None  # not left blocked
    print("ok")
    """
)


def test_the_first_import_from_two_threads_at_once_fails_neither():
    out = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
