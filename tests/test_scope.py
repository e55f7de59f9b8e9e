"""The scoping interview (issue 32, item 8): the scope file written one answer at a
time through the widgets, 'unknown' recorded explicitly, the summary confirmed; `evalkit
dataset new --scope` refusing an unconfirmed or malformed scope (exit 2, naming the file
and what is missing), and the scoping_interview notebook run in a real kernel."""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import papermill as pm
import pytest
from test_dataset import SOURCE_YAML, Workspace, source_pairs

from evalkit._cli.main import main
from evalkit.foundations.errors import InputError
from evalkit.datasets import scope as sc
from evalkit.telling.interview import InterviewUI
from evalkit.telling.reports import KERNEL, notebooks_dir

# What the field-service team answered; None: they did not know (recorded as unknown).
ANSWERS: dict[str, str | None] = {
    "system_name": "Field service assistant",
    "purpose": "Answers field technicians' repair questions from the service manual and books jobs.",
    "user_populations": "Field technician\nDispatcher\n\nNew hire\nDispatcher",
    "grounding_sources": "manual.txt",
    "tools": "lookup_job",
    "response_format": "Plain text, at most five numbered steps.",
    "risks": "Unsafe repair advice\nLeaking customer addresses",
    "refusal_requirements": "Refuse to bypass safety interlocks and point to the lock-out procedure.",
    "prohibited_content": None,
    "approach": "Pro-code",
    "evaluation_cadence": "on every pull request and nightly",
    "destination": "evals/field-service/",
    "reviewers": "Service lead",
    "revisit": None,
}


def on_disk(path: Path) -> dict:
    return json.loads(path.read_text())


def test_the_widgets_save_each_answer_record_unknown_and_confirm_at_the_end(tmp_path):
    path = tmp_path / "scope.json"
    ui = InterviewUI(sc.Interview(path))
    assert not path.exists() and "question 1 of 14" in ui.question.value and ui.confirm_button.disabled
    ui.save_button.click()  # nothing typed: no answer recorded, the reason shown
    assert "nothing typed" in ui.message.value and not path.exists()
    ui.answer.value = "Field service assistant"
    ui.save_button.click()
    assert list(on_disk(path)["answers"]) == ["system_name"] and ui.progress.value == 1
    assert not list(tmp_path.glob("*.tmp*"))  # through a temporary file and a rename
    # a second session on the same file opens on the first unanswered area
    again = InterviewUI(sc.Interview(path))
    assert again.interview.current.key == "purpose"
    answer_all_from(again, path, start="purpose")
    d = on_disk(path)
    assert d["answers"]["user_populations"]["value"] == ["Field technician", "Dispatcher", "New hire"]
    assert d["answers"]["prohibited_content"] == {"unknown": True, "at": d["answers"]["prohibited_content"]["at"]}
    assert "Every question is asked" in again.question.value and not again.confirm_button.disabled
    assert "unknown" in again.summary.value and "Service lead" in again.summary.value
    again.confirm_button.click()
    d = on_disk(path)
    assert d["confirmed"] is True and d["confirmed_at"] and again.confirm_button.disabled
    assert sc.require_confirmed(path).unknowns() == ["prohibited_content", "revisit"]
    # going back and changing an answer withdraws the confirmation
    again.back_button.click()
    assert again.interview.current.key == "revisit"
    again.answer.value = "after the next product release"
    again.save_button.click()
    assert on_disk(path)["confirmed"] is False and on_disk(path)["answers"]["revisit"]["value"].startswith("after")
    with pytest.raises(InputError, match="not confirmed"):
        sc.require_confirmed(path)


def answer_all_from(ui: InterviewUI, path: Path, start: str) -> None:
    keys = list(ANSWERS)
    for key in keys[keys.index(start):]:
        text = ANSWERS[key]
        assert ui.interview.current.key == key
        if text is None:
            ui.unknown_button.click()
            assert on_disk(path)["answers"][key]["unknown"] is True
        else:
            ui.answer.value = text
            ui.save_button.click()
            assert key in on_disk(path)["answers"] and "unknown" not in on_disk(path)["answers"][key]
        assert ui.message.value == "" and on_disk(path)["confirmed"] is False


def test_confirming_with_an_area_left_is_refused():
    s = sc.Scope().with_answer("system_name", sc.Answer("X", False, "t"))
    with pytest.raises(InputError, match="no answer .* yet for purpose, user_populations"):
        s.confirm()
    assert s.missing()[0] == "purpose" and not s.confirmed


def scope_file(ws: Workspace, *, confirm: bool = True, leave_out: tuple[str, ...] = (), **changes: str) -> Path:
    s = sc.Scope()
    for key, text in {**ANSWERS, **changes}.items():
        if key in leave_out:
            continue
        s = s.with_answer(key, sc.Answer(None, True, "t") if text is None else sc.Answer(sc.parse_answer(key, text)))
    if confirm:
        s = s.confirm()
    path = ws.root / "scope.json"
    sc.save_scope(path, s)
    return path


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    monkeypatch.chdir(tmp_path)
    ws = Workspace(tmp_path)
    ws.write("src.yaml", SOURCE_YAML.format(pairs=source_pairs()))
    return ws


def new(ws: Workspace):
    return ws.cli("dataset", "new", "src.yaml", "--json", "d.json", "--csv", "d.csv", "--scope", "scope.json")


def test_dataset_new_refuses_before_the_scope_is_confirmed(ws):
    scope_file(ws, confirm=False, leave_out=("tools", "revisit"))
    r = new(ws)
    assert r.exit_code == 2 and r.stdout == ""
    assert "scope.json" in r.stderr and "not confirmed" in r.stderr and "tools, revisit" in r.stderr
    assert not (ws.root / "d.json").exists() and not (ws.root / "d.csv").exists()
    scope_file(ws, confirm=False)  # every area answered, the summary not confirmed yet
    r = new(ws)
    assert r.exit_code == 2 and "summary was not confirmed" in r.stderr and not (ws.root / "d.json").exists()
    r = ws.cli("dataset", "new", "src.yaml", "--json", "d.json", "--csv", "d.csv", "--scope", "absent.json")
    assert r.exit_code == 2 and "absent.json" in r.stderr and "no scope file" in r.stderr


def test_dataset_new_generates_from_a_confirmed_scope(ws):
    scope_file(ws)
    ws.write("src.yaml", SOURCE_YAML.format(pairs=source_pairs()).replace("  system_name: Field service assistant\n", ""))
    r = new(ws)
    assert r.exit_code == 0, r.stderr
    assert "metadata.system_name: taken from the confirmed scope" in r.stderr
    assert "scope: prohibited_content is unknown: safety pairs cannot be aimed" in r.stderr
    assert "revisit is unknown" not in r.stderr  # only the areas the categories depend on
    md = on_disk(ws.root / "d.json")["metadata"]
    assert md["system_name"] == "Field service assistant" and md["approach"] == "pro-code"


def test_dataset_new_refuses_a_source_that_contradicts_the_scope(ws):
    scope_file(ws, user_populations="Field technician\nDispatcher")
    r = new(ws)
    assert r.exit_code == 2 and "src.yaml" in r.stderr and "$.metadata.user_populations" in r.stderr
    assert not (ws.root / "d.json").exists()


@pytest.mark.parametrize("doc, where", [
    ({"evalkit_scope": 1, "answers": {"tools": {"value": "lookup_job", "at": ""}}}, "$.answers.tools.value"),
    ({"evalkit_scope": 1, "answers": {"colour": {"value": "red"}}}, "$.answers.colour"),
    ({"evalkit_scope": 1, "answers": {"purpose": {"unknown": "yes"}}}, "$.answers.purpose.unknown"),
    ({"evalkit_scope": 1, "answers": {"purpose": {"value": ""}}}, "$.answers.purpose.value"),
    ({"evalkit_scope": 1, "answers": {}, "confirmed": True}, "$.confirmed"),
    ({"evalkit_scope": 2, "answers": {}}, "$.evalkit_scope"),
    ([], "$"),
])
def test_a_malformed_scope_file_is_exit_2_naming_the_json_path(ws, doc, where):
    ws.write("scope.json", json.dumps(doc))
    r = new(ws)
    assert r.exit_code == 2 and "scope.json" in r.stderr and where in r.stderr, r.stderr
    assert not (ws.root / "d.json").exists()


def test_a_scope_file_that_is_not_json_names_its_line(ws):
    ws.write("scope.json", '{\n  "evalkit_scope": 1,\n  "answers": {,}\n}\n')
    r = new(ws)
    assert r.exit_code == 2 and "scope.json:3" in r.stderr and "not JSON" in r.stderr


def test_the_scope_round_trips():
    s = sc.Scope()
    for key, text in ANSWERS.items():
        s = s.with_answer(key, sc.Answer(None, True, "t") if text is None else sc.Answer(sc.parse_answer(key, text), at="t"))
    s = s.confirm("2026-01-01T00:00:00+00:00")
    assert sc.Scope.from_json(json.loads(json.dumps(s.to_json()))) == s


def test_the_notebook_runs_the_interview_in_a_kernel(tmp_path):
    """The notebook as a person runs it: executed with papermill, then its widgets
    answered and clicked in the same kernel, the summary confirmed."""
    path = tmp_path / "scope.json"
    nb = nbformat.read(Path(notebooks_dir()) / "scoping_interview.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(
        f"answers = {ANSWERS!r}\n"
        "for key, text in answers.items():\n"
        "    assert ui.interview.current.key == key\n"
        "    if text is None:\n"
        "        ui.unknown_button.click()\n"
        "    else:\n"
        "        ui.answer.value = text\n"
        "        ui.save_button.click()\n"
        "ui.confirm_button.click()\n"
        "print('confirmed', scope.load_scope(scope_file).confirmed, ui.message.value == '')"))
    src = tmp_path / "scoping_interview.ipynb"
    nbformat.write(nb, src)
    out = tmp_path / "executed.ipynb"
    pm.execute_notebook(str(src), str(out), parameters={"scope_file": str(path)}, kernel_name=KERNEL,
                        progress_bar=False, log_output=False)
    text = json.dumps([c.get("outputs") for c in nbformat.read(out, as_version=4).cells if c.cell_type == "code"])
    assert "confirmed True True" in text and "0 of 14 area(s) answered" in text
    assert "not confirmed; no answer yet for system_name" in text  # the status cell ran before the answers
    scope = sc.require_confirmed(path)
    assert scope.value("tools") == ("lookup_job",) and scope.unknowns() == ["prohibited_content", "revisit"]


def test_no_hostile_scope_or_sheet_path_gets_a_traceback(ws):
    from test_cli_hostile import HOSTILE

    scope_file(ws)
    failures = []
    for arg in HOSTILE:
        for args in (["dataset", "new", "src.yaml", "--json", "d.json", "--csv", "d.csv", "--scope", arg],
                     ["dataset", "guide", "--scope", arg, "--suite", "evals/x", "--out", "g.md"],
                     ["dataset", "guide", "--scope", "scope.json", "--suite", "evals/x", "--out", arg],
                     ["dataset", "sample", "--json", "d.json", "--csv", "d.csv", "--confirm", "--review", arg]):
            res = ws.runner.invoke(main, args)
            crashed = res.exception is not None and not isinstance(res.exception, SystemExit)
            if crashed or "Traceback" in res.output or res.exit_code not in (1, 2):
                failures.append((args[1], arg[:20], res.exit_code, repr(res.exception)[:160]))
    assert not failures, failures
    assert not (ws.root / "d.json").exists()


def test_a_scope_file_changed_by_someone_else_is_not_overwritten(tmp_path):
    path = tmp_path / "scope.json"
    iv = sc.Interview(path)
    iv.answer("Field service assistant")
    other = sc.Interview(path)
    other.answer("Their purpose")
    with pytest.raises(InputError, match="changed since this interview opened it"):
        iv.answer("My purpose")
    assert on_disk(path)["answers"]["purpose"]["value"] == "Their purpose" and iv.current.key == "purpose"
