"""Labelling that people will do: drawing judged items into a label file, a person
labelling them one at a time (`LabelSession`, and the widgets over it), the notebook
executed with its parameters, and unfilled lines that never block grading."""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import papermill as pm
import pytest
from click.testing import CliRunner
from test_compare import FAIR, two_arm_run

from evalkit.telling import labelling
from evalkit._cli.main import main
from evalkit.foundations.errors import InputError
from evalkit.conclusions.grading import grade_run
from evalkit.checking.judge import load_human_labels, text_sha256
from evalkit.telling.reports import KERNEL, notebooks_dir
from evalkit.calls.serve import ScriptedServer


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """A run of 8 judged cases x 2 arms x k=2, graded by the fair judge (uncalibrated)."""
    root = tmp_path_factory.mktemp("labelling")
    suite, run = two_arm_run(root)
    with ScriptedServer(FAIR) as srv:
        grade_run(run, judge_base_url=srv.base_url)
    return suite, run


def test_draw_is_seeded_and_carries_what_a_labeller_reads(graded):
    suite, run = graded
    a = labelling.draw_items(run, 20, seed=1)
    assert a == [dict(x, drawn=a[0]["drawn"]) for x in labelling.draw_items(run, 20, seed=1)]
    assert [x["item"] for x in a] != [x["item"] for x in labelling.draw_items(run, 20, seed=2)]
    assert len(a) == 20 and len({x["item"] for x in a}) == 20
    results = {(d["case_id"], d["arm"], d["index"]): d["output"]
               for d in map(json.loads, (run / "results.jsonl").read_text().splitlines())}
    rubric = (suite / "judge" / "rubric-v1.md").read_text()
    for x in a:
        assert x["score"] is None and x["rater"] is None and "judge_score" not in x
        assert x["output"] == results[(x["case_id"], x["arm"], x["index"])]
        assert x["output_sha256"] == text_sha256(x["output"]) and x["rubric"] == rubric
        assert x["criteria"] == "Says GOOD" and x["input"].startswith("Task ") and x["run"] == run.name
        assert x["threshold"] == 4 and x["judge_version"] == "v1" and len(x["prompt_sha256"]) == 64
    assert len(labelling.draw_items(run, 100)) == 32  # every judged sample, no more
    with pytest.raises(InputError):
        labelling.draw_items(run.parent, 5)


def test_cli_writes_the_file_refuses_to_overwrite_and_prepares_the_notebook(graded, tmp_path):
    _, run = graded
    to = tmp_path / "labels.jsonl"
    runner = CliRunner()
    res = runner.invoke(main, ["judge", "sample", str(run), "-n", "5", "--to", str(to)])
    assert res.exit_code == 0 and f"evalkit judge label {to}" in res.stdout
    lines = [json.loads(ln) for ln in to.read_text().splitlines()]
    assert len(lines) == 5 and list(lines[0])[:4] == ["item", "score", "rater", "note"]
    assert runner.invoke(main, ["judge", "sample", str(run), "-n", "5", "--to", str(to)]).exit_code == 2
    assert runner.invoke(main, ["judge", "sample", str(run), "-n", "5", "--to", str(to), "--force"]).exit_code == 0
    printed = runner.invoke(main, ["judge", "sample", str(run), "-n", "5"])
    assert [json.loads(ln)["item"] for ln in printed.stdout.splitlines()] == [d["item"] for d in lines]
    res = runner.invoke(main, ["judge", "label", str(to), "--rater", "ana"])
    assert res.exit_code == 0, res.output
    nb = nbformat.read(tmp_path / "labels-label-ana.ipynb", as_version=4)
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])][0].source
    assert str(to.resolve()) in injected and "'ana'" in injected.replace('"', "'")
    assert all(c.get("outputs", []) == [] for c in nb.cells if c.cell_type == "code")  # prepared, not run


def test_a_session_saves_every_score_at_once_and_reopens_where_the_person_stopped(graded, tmp_path):
    _, run = graded
    to = labelling.write_label_file(labelling.draw_items(run, 6), tmp_path / "l.jsonl")
    s = labelling.LabelSession(to, rater="ana")
    assert s.progress() == (0, 6) and s.position == 0
    s.set_score(4)
    s.next_unlabelled()
    s.set_score(2)
    s.set_note("misses the point")
    on_disk = load_human_labels(to)
    assert [(lab.score, lab.rater) for lab in on_disk[:2]] == [(4, "ana"), (2, "ana")]
    assert json.loads(to.read_text().splitlines()[1])["note"] == "misses the point"
    assert not list(tmp_path.glob("*.tmp*"))  # written through a temporary file and a rename
    again = labelling.LabelSession(to, rater="ana")
    assert again.progress() == (2, 6) and again.position == 2  # opens on the first unlabelled item
    with pytest.raises(ValueError):
        again.set_score(7)
    # a second person labels every item too: the unlabelled lines, and a copy of each labelled one
    bo = labelling.LabelSession(to, rater="bo")
    assert bo.progress() == (0, 6) and bo.position == 0
    bo.set_score(5)
    labels = load_human_labels(to)
    assert len(labels) == 8 and sorted((lab.rater or "-", lab.score or 0) for lab in labels if lab.filled) == \
        [("ana", 2), ("ana", 4), ("bo", 5)]
    assert labelling.LabelSession(to, rater="ana").progress() == (2, 6)  # the first person's labels stay hers
    bo = labelling.LabelSession(to, rater="bo")
    # someone else changed the file since this session read it: refused, nothing lost
    to.write_text(to.read_text() + "\n")
    with pytest.raises(InputError, match="changed since this session opened it"):
        bo.set_score(3)
    s.go(5)
    with pytest.raises(IndexError):
        s.go(6)


def test_the_widgets_call_the_session(graded, tmp_path):
    _, run = graded
    to = labelling.write_label_file(labelling.draw_items(run, 3), tmp_path / "w.jsonl")
    ui = labelling.LabelUI(labelling.LabelSession(to, rater="cy"))
    assert "Output to score" in ui.left.value and "Rubric" in ui.right.value and "item 1 of 3" in ui.status.value
    ui.score.value = 5  # a click on "5": saved, then on to the next unlabelled item
    assert load_human_labels(to)[0].score == 5 and ui.session.position == 1 and ui.progress.value == 1
    ui.previous_button.click()
    assert ui.score.value == 5 and ui.session.position == 0
    ui.clear_button.click()
    assert load_human_labels(to)[0].score is None and ui.progress.value == 0
    ui.unlabelled_button.click()
    ui.note.value = "<script>alert(1)</script>"  # a note is data: saved as is, shown escaped
    assert json.loads(to.read_text().splitlines()[ui.session.position])["note"] == "<script>alert(1)</script>"


def test_untrusted_text_is_escaped_in_the_panels():
    left, right = labelling.item_panels({"input": "<b>hi</b>", "output": "<img src=x onerror=alert(1)>",
                                         "criteria": "<i>c</i>", "rubric": "r & r", "threshold": 4})
    assert "<img" not in left and "&lt;img src=x" in left and "&lt;b&gt;hi" in left
    assert "<i>c</i>" not in right and "r &amp; r" in right


def test_the_notebook_labels_twenty_items_run_with_papermill(graded, tmp_path):
    """The notebook as a person runs it: executed with its parameters, then the
    widgets it shows clicked in the same kernel, one score per item."""
    _, run = graded
    to = labelling.write_label_file(labelling.draw_items(run, 20), tmp_path / "nb.jsonl")
    nb = nbformat.read(Path(notebooks_dir()) / "label_judge.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(
        "for _ in range(len(session)):\n"
        "    ui.score.value = 5 if ui.session.current['output'].startswith('GOOD') else 3\n"
        "print('labelled', session.progress())"))
    src = tmp_path / "label_judge.ipynb"
    nbformat.write(nb, src)
    out = tmp_path / "executed.ipynb"
    pm.execute_notebook(str(src), str(out), parameters={"labels_file": str(to), "rater": "dee"},
                        kernel_name=KERNEL, progress_bar=False, log_output=False)
    done = nbformat.read(out, as_version=4)
    text = json.dumps([c.get("outputs") for c in done.cells if c.cell_type == "code"])
    assert "labelled (20, 20)" in text and "20 item(s)" in text
    labels = load_human_labels(to)
    assert len(labels) == 20 and all(lab.rater == "dee" and lab.score in (3, 5) for lab in labels)
    assert all((lab.score == 5) == (lab.item.startswith("c7/") or "/treatment/" in lab.item) for lab in labels)


def test_unfilled_label_lines_are_skipped_with_a_count_never_an_error(graded, tmp_path):
    _, run = graded
    to = labelling.write_label_file(labelling.draw_items(run, 20), tmp_path / "empty.jsonl")
    with ScriptedServer(FAIR) as srv:
        res = CliRunner().invoke(main, ["grade", str(run), "--judge-base-url", srv.base_url, "--labels", str(to)])
    assert res.exit_code == 1, res.output  # held (uncalibrated), not bad input
    summary = json.loads((run / "grades-summary.json").read_text())
    assert summary["human_agreement"]["labels"]["unfilled"] == 20
    assert "20 not labelled yet (skipped)" in res.stdout


def test_a_by_case_draw_takes_whole_cases_uniformly_and_records_how_it_was_drawn(graded, tmp_path):
    """`--by-case`: n cases drawn (seeded) among the judged cases, every judge-scored
    sample of each (both arms, k = 2: 4 lines a case), each line's `draw` "case"; a
    sample draw says "sample"; a line with another draw is refused naming it."""
    from evalkit.checking.judge import parse_human_labels

    _, run = graded
    a = labelling.draw_items(run, 3, seed=1, by_case=True)
    cases = {x["case_id"] for x in a}
    assert len(cases) == 3 and len(a) == 12 and {x["draw"] for x in a} == {"case"}
    assert sorted((x["case_id"], x["arm"], x["index"]) for x in a) == sorted(
        (c, arm, i) for c in cases for arm in ("baseline", "treatment") for i in range(2))
    assert cases != {x["case_id"] for x in labelling.draw_items(run, 3, seed=2, by_case=True)}
    assert len(labelling.draw_items(run, 100, by_case=True)) == 32  # every case, every judged sample
    assert {x["draw"] for x in labelling.draw_items(run, 5)} == {"sample"}
    # uniform over cases: over 200 seeds each of the 8 cases is drawn about 200 x 3/8 = 75 times
    from collections import Counter

    counts = Counter(x["case_id"] for s in range(200) for x in labelling.draw_items(run, 3, seed=s, by_case=True)
                     if x["arm"] == "baseline" and x["index"] == 0)
    assert len(counts) == 8 and all(45 <= v <= 105 for v in counts.values()), counts
    to = tmp_path / "by-case.jsonl"
    res = CliRunner().invoke(main, ["judge", "sample", str(run), "-n", "2", "--by-case", "--to", str(to)])
    assert res.exit_code == 0 and "wrote 8 item(s)" in res.stdout
    labels = parse_human_labels(to.read_text(), to)
    assert len(labels) == 8 and {lab.draw for lab in labels} == {"case"}
    bad = to.read_text().replace('"draw": "case"', '"draw": "half"', 1)
    with pytest.raises(InputError, match=r"draw must be one of") as e:
        parse_human_labels(bad, to)
    assert "$.draw" in str(e.value) and "by-case.jsonl" in str(e.value)
