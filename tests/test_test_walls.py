"""tools/test_walls.py and the order tests/conftest.py gives the files: the seconds each
test file took, summed from a JUnit XML, longest first; the collected tests sorted by
that table, each file's tests together and in their order, a file it lacks last."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import conftest

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "test_walls.py"

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="5">
<testcase classname="tests.test_short" name="test_one" time="0.250"/>
<testcase classname="tests.test_long" name="test_a" time="1.500"/>
<testcase classname="tests.test_long.TestGroup" name="test_b" time="2.125"/>
<testcase classname="tests.test_short" name="test_two" time="0.250"/>
<testcase classname="elsewhere.test_x" name="test_c" time="9.000"/>
<testcase classname="tests.sub.test_deep" name="test_d" time="0.300"/>
</testsuite></testsuites>
"""


def test_the_seconds_per_file_are_summed_from_the_junit_xml_longest_first(tmp_path):
    (tmp_path / "walls.xml").write_text(JUNIT)
    out = tmp_path / "walls.json"
    done = subprocess.run([sys.executable, str(TOOL), str(tmp_path / "walls.xml"), str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    walls = json.loads(out.read_text())["seconds_per_file"]
    assert list(walls.items()) == [("tests/test_long.py", 3.6), ("tests/test_short.py", 0.5),  # 3.625 to 0.1 s
                                   ("tests/sub/test_deep.py", 0.3)]
    assert f"{out}: 3 files, 4 s in all" in done.stdout


def test_a_file_that_is_not_junit_is_exit_2_naming_it_and_writes_nothing(tmp_path):
    (tmp_path / "walls.xml").write_text("<testsuites><testcase")
    out = tmp_path / "walls.json"
    done = subprocess.run([sys.executable, str(TOOL), str(tmp_path / "walls.xml"), str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 2 and f"{tmp_path / 'walls.xml'}: not a JUnit XML file" in done.stderr
    assert not out.exists() and not list(tmp_path.glob("*.tmp"))


def test_collected_tests_run_longest_file_first_each_file_together_and_in_order():
    walls = json.loads(conftest.WALLS.read_text())["seconds_per_file"]
    longest, shortest = max(walls, key=walls.get), min(walls, key=walls.get)
    ids = [f"{shortest}::t1", "tests/test_not_in_the_table.py::t1", f"{longest}::t1", f"{shortest}::t2",
           f"{longest}::t2", "tests/test_not_in_the_table.py::t2"]
    items = [SimpleNamespace(nodeid=i) for i in ids]
    conftest.pytest_collection_modifyitems(None, items)
    assert [i.nodeid for i in items] == [f"{longest}::t1", f"{longest}::t2", f"{shortest}::t1", f"{shortest}::t2",
                                         "tests/test_not_in_the_table.py::t1", "tests/test_not_in_the_table.py::t2"]
