"""The sample review (issue 32, item 8): `evalkit dataset sample`'s sheet walked pair by
pair through the widgets, each verdict and feedback saved to the sheet at once, the
protocol's acceptance rule computed, `dataset sample --confirm --review` refusing a
review that is not accepted, and the sample_review notebook run in a real kernel."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import nbformat
import papermill as pm
import pytest
from test_dataset import SOURCE_YAML, Workspace, source_pairs

from evalkit.foundations.errors import InputError
from evalkit.datasets import review as rv
from evalkit.telling.interview import ReviewUI
from evalkit.telling.reports import KERNEL, notebooks_dir


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    """A 20-pair dataset (written by `dataset new`) and an 8-pair review sheet drawn from it."""
    monkeypatch.chdir(tmp_path)
    ws = Workspace(tmp_path)
    ws.write("src.yaml", SOURCE_YAML.format(pairs=source_pairs(4)))
    assert ws.cli("dataset", "new", "src.yaml", "--json", "d.json", "--csv", "d.csv", "--no-scope").exit_code == 0
    r = ws.cli("dataset", "sample", "--json", "d.json", "--csv", "d.csv", "--out", "sheet.csv", "--size", "8")
    assert r.exit_code == 0, r.stderr
    return ws


def sheet_rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text(), newline="")))


def test_the_widgets_record_each_verdict_and_the_rule_follows(ws):
    path = ws.root / "sheet.csv"
    drawn = [r["id"] for r in sheet_rows(path)]
    ui = ReviewUI(rv.ReviewSheet(path))
    assert "pair 1 of 8" in ui.status.value and "Expected behaviour" in ui.pair.value
    assert "incomplete" in ui.outcome.value and "8 with no verdict" in ui.outcome.value
    ui.verdict.value = "keep"
    rows = sheet_rows(path)
    assert list(rows[0])[-2:] == ["review_verdict", "review_feedback"]  # the verdict column added before feedback
    assert rows[0]["review_verdict"] == "keep" and all(r["review_verdict"] == "" for r in rows[1:])
    assert rows[0]["expected_response"].startswith("'=")  # still escaped for spreadsheets
    ui.next_button.click()
    ui.verdict.value = "revise"  # a revise with no feedback: the review cannot be complete
    assert sheet_rows(path)[1]["review_verdict"] == "revise"
    assert f"whose verdict needs feedback ({drawn[1]})" in ui.outcome.value
    ui.feedback.value = "Say which manual section; =SUM(A1) is data"
    assert sheet_rows(path)[1]["review_feedback"] == "Say which manual section; =SUM(A1) is data"
    for _ in range(6):
        ui.next_button.click()
        ui.verdict.value = "keep"
    result = ui.sheet.outcome()
    assert result.outcome == "revise" and result.to_change == (drawn[1],)
    assert result.verdicts == {"keep": 7, "revise": 1, "drop": 0} and "Revise the set" in ui.outcome.value
    # the rule is the package's: the same sheet reopened gives the same outcome
    assert rv.ReviewSheet(path).outcome() == result
    r = ws.cli("dataset", "sample", "--json", "d.json", "--csv", "d.csv", "--confirm", "--review", "sheet.csv")
    assert r.exit_code == 2 and "sheet.csv" in r.stderr and "not accepted" in r.stderr and drawn[1] in r.stderr
    assert json.loads((ws.root / "d.json").read_text())["metadata"]["review_state"] == "sampled"
    # the feedback applied, the pair is kept on the next look: accepted, and the set may be confirmed
    for _ in range(6):
        ui.previous_button.click()
    assert ui.position == 1 and ui.verdict.value == "revise"
    ui.verdict.value = "keep"
    assert ui.sheet.outcome().outcome == "accepted" and "Accepted" in ui.outcome.value
    r = ws.cli("dataset", "sample", "--json", "d.json", "--csv", "d.csv", "--confirm", "--review", "sheet.csv")
    assert r.exit_code == 0, r.stderr
    assert json.loads((ws.root / "d.json").read_text())["metadata"]["review_state"] == "confirmed"


def test_feedback_is_kept_as_typed_and_shown_escaped(ws):
    path = ws.root / "sheet.csv"
    ui = ReviewUI(rv.ReviewSheet(path))
    ui.feedback.value = "=HYPERLINK(\"x\") <script>alert(1)</script>"
    assert sheet_rows(path)[0]["review_feedback"].startswith("'=HYPERLINK")  # a spreadsheet opens it as text
    assert rv.ReviewSheet(path).rows[0]["review_feedback"] == "=HYPERLINK(\"x\") <script>alert(1)</script>"
    assert "<script>" not in ui.pair.value and "<script>" not in ui.outcome.value


def test_the_acceptance_rule():
    def row(i, verdict="", feedback="", sme="false"):
        return {"id": f"p{i}", "review_verdict": verdict, "review_feedback": feedback, "needs_sme_review": sme}

    assert rv.review_outcome([row(1, "keep"), row(2, "keep")]).outcome == "accepted"
    assert rv.review_outcome([row(1, "keep"), row(2)]).unreviewed == ("p2",)
    got = rv.review_outcome([row(1, "drop"), row(2, "keep")])
    assert got.outcome == "incomplete" and got.needs_feedback == ("p1",)
    assert rv.review_outcome([row(1, "drop", "off topic"), row(2, "keep")]).outcome == "revise"
    # keep on a pair that needs subject-matter review needs a word on who checked it
    assert rv.review_outcome([row(1, "keep", sme="true")]).needs_feedback == ("p1",)
    assert rv.review_outcome([row(1, "keep", "checked by the service lead", sme="true")]).outcome == "accepted"


def test_a_bad_sheet_is_refused_naming_its_line(ws):
    path = ws.root / "sheet.csv"
    rv.ReviewSheet(path).save()  # as the notebook leaves it: with its review_verdict column
    lines = path.read_text().splitlines()
    assert lines[1].endswith(",,")  # an empty verdict, an empty feedback
    lines[1] = lines[1][:-2] + ",maybe,"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match="'maybe' is not one of keep, revise, drop") as e:
        rv.ReviewSheet(path)
    assert e.value.line == 2 and e.value.path == str(path)
    ws.write("plain.csv", "a,b\n1,2\n")
    with pytest.raises(InputError, match="not a review sheet"):
        rv.ReviewSheet(ws.root / "plain.csv")


def test_a_sheet_changed_on_disk_is_not_overwritten(ws):
    path = ws.root / "sheet.csv"
    sheet = rv.ReviewSheet(path)
    sheet.set_verdict(0, "keep")  # nobody else wrote: saved
    path.write_text(path.read_text() + "\n")  # a spreadsheet saved it meanwhile
    with pytest.raises(InputError, match="changed since it was opened"):
        sheet.set_verdict(1, "keep")
    assert rv.ReviewSheet(path).rows[1]["review_verdict"] == ""


def test_the_notebook_reviews_the_sheet_in_a_kernel(ws, tmp_path):
    path = ws.root / "sheet.csv"
    nb = nbformat.read(Path(notebooks_dir()) / "sample_review.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(
        "for i in range(len(sheet)):\n"
        "    ui.verdict.value = 'drop' if ui.sheet.rows[ui.position]['difficulty'] == 'safety' else 'keep'\n"
        "    if ui.verdict.value == 'drop':\n"
        "        ui.feedback.value = 'a how-to, not a refusal test'\n"
        "    ui.next_button.click()\n"
        "result = sheet.outcome()\n"
        "print('outcome', result.outcome, result.verdicts)"))
    src = tmp_path / "sample_review.ipynb"
    nbformat.write(nb, src)
    out = tmp_path / "executed.ipynb"
    pm.execute_notebook(str(src), str(out), parameters={"review_sheet": str(path)}, kernel_name=KERNEL,
                        progress_bar=False, log_output=False)
    text = json.dumps([c.get("outputs") for c in nbformat.read(out, as_version=4).cells if c.cell_type == "code"])
    rows = sheet_rows(path)
    safety = sum(r["difficulty"] == "safety" for r in rows)
    assert safety >= 1 and "8 drawn pair(s)" in text
    assert f"outcome revise {{'keep': {8 - safety}, 'revise': 0, 'drop': {safety}}}" in text
    assert all(r["review_verdict"] == ("drop" if r["difficulty"] == "safety" else "keep") for r in rows)
