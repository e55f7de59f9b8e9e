"""tools/trace_layers.py: the call sites where a run's calls go back up a layer, found by
tracing real runs on the scripted server (a command unit's run, which no longer goes up,
and a batch run, whose client settles through the batch's closure)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "trace_layers.py"


def load_tool():
    spec = importlib.util.spec_from_file_location("trace_layers", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["trace_layers"] = module  # its dataclass resolves its module by name
    spec.loader.exec_module(module)
    return module


def test_layers_come_from_the_architecture_page_in_its_order():
    tool = load_tool()
    layers = tool.layer_folders((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    assert layers["foundations"] == 1 and layers["calls"] < layers["running"] < layers["conclusions"]
    assert layers[None] == max(layers.values())  # evalkit/__init__.py: the top


def test_a_command_units_run_no_longer_goes_up_and_a_batch_run_goes_up_once(tmp_path):
    """A command unit's run asks the stop signal and holds twin calls in `calls/` itself
    (`StopSignal`, `InFlight`): no call goes back up to the engine, where on 0cdc4ee the
    session asked `_Engine.should_stop` and waited on `_Engine._hold`. A batch run still
    goes up once, the client settling through the batch's `charge` closure (twice when a
    poll backs off: the pause asks the batch's sink whether to stop): the tracer sees a
    callback when there is one."""
    tool = load_tool()
    layers = tool.layer_folders((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    assert tool.trace(layers, tmp_path / "command", ["command"]) == set()
    sites = tool.trace(layers, tmp_path / "batch", ["batch"])
    up = {(s.caller.split(":")[1], s.callee.split(":")[1]) for s in sites}
    assert ("ModelClient._settle", "_Batches._line.<locals>.charge") in up
    # and, when a poll of the batch backs off, the client's pause asks the batch's sink
    assert up <= {("ModelClient._settle", "_Batches._line.<locals>.charge"), ("pause", "_RunSink.halted")}
    assert all(s.caller_layer == layers["calls"] and s.callee_layer == layers["running"] for s in sites)


def test_the_command_line_prints_the_count_and_refuses_an_unknown_scenario():
    bad = subprocess.run([sys.executable, str(TOOL), "nope"], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "trace_layers.py" in bad.stderr
