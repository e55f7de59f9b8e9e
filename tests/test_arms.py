"""Arms that differ by model, price and parameters (config.json -> arms[i]): one run
against one scripted server sends each arm's requests with its own model and
parameters, charges each at its own price on the one ledger (checked by hand below),
replays each arm's answers from the response cache and never another model's; lint
names the arm and the key of bad arm input (exit 2); `compare` on three arms gives
Holm-corrected verdicts equal to statsmodels' `multipletests(method="holm")` over the
exact sign test's p-values (scipy's `binomtest`), and `power --arms N` plans each pair
at alpha / m."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from scipy.stats import binomtest
from statsmodels.stats.multitest import multipletests

from evalkit._cli.main import main
from evalkit.calls.ledger import spend_by_arm
from evalkit.running.runner import derive_seed, run_suite
from evalkit.runfolder.runload import load_run
from evalkit.runfolder.runs import iter_jsonl
from evalkit.calls.serve import ScriptedServer

from conftest import make_run, write_engine_suite

# Fixed usage per answer, so every cost is a hand computation: 10 tokens in, 2 out.
SCRIPT = {"rules": [{"match": "country", "texts": ["Paris", "Lima", "Rome"],
                     "usage": {"prompt_tokens": 10, "completion_tokens": 2}}]}
ARMS = [
    {"name": "base"},  # the suite's model m-old at the suite's price 1 / 2 per Mtok
    {"name": "new", "generator": {"model": "m-new"}, "price": {"in_per_mtok": 3.0, "out_per_mtok": 7.0},
     "max_tokens_out": 4, "temperature": 0.1},
    {"name": "topp", "top_p": 0.5, "seed": 99},  # the suite's model, other parameters
]
N_CASES, K = 3, 2


def arm_suite(root: Path, arms: list[dict] = ARMS, **config) -> Path:
    cases = [{"id": f"c{i}", "input": f"capital of country {i}?", "expected": "Paris", "tags": ["t"]}
             for i in range(N_CASES)]
    return write_engine_suite(root, cases, generator={"model": "m-old", "api_key_env": "EVALKIT_API_KEY"},
                              k=K, arms=arms, **config)


def lint(path: Path):
    return CliRunner().invoke(main, ["lint", str(path)])


def test_each_arm_sends_its_model_pays_its_price_and_replays_its_own_answers(tmp_path):
    suite = arm_suite(tmp_path / "suite")
    seeds = {}  # the derived seed of each (case, arm, index): which arm a logged request is
    for c in range(N_CASES):
        for arm, base in (("base", 1234), ("new", 1234), ("topp", 99)):
            for i in range(K):
                seeds[derive_seed(base, f"c{c}", arm, i)] = arm
    with ScriptedServer(SCRIPT) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        sent = list(srv.requests)
    assert res.complete and len(sent) == N_CASES * 3 * K
    by_arm: dict[str, list[dict]] = {}
    for body in sent:  # the server's log: each request with its arm's model and parameters
        by_arm.setdefault(seeds[body["seed"]], []).append(body)
    assert {a: len(b) for a, b in by_arm.items()} == {"base": 6, "new": 6, "topp": 6}
    assert {b["model"] for b in by_arm["base"]} == {"m-old"} and {b["model"] for b in by_arm["topp"]} == {"m-old"}
    assert {b["model"] for b in by_arm["new"]} == {"m-new"}
    assert {b["max_tokens"] for b in by_arm["new"]} == {4} and {b["max_tokens"] for b in by_arm["base"]} == {8}
    assert {b["temperature"] for b in by_arm["new"]} == {0.1} and {b["temperature"] for b in by_arm["base"]} == {0.8}
    assert {b.get("top_p") for b in by_arm["topp"]} == {0.5} and "top_p" not in by_arm["base"][0]

    # By hand: 10 tokens in, 2 out per call. base and topp at 1 / 2 USD per Mtok, new at 3 / 7.
    old_call, new_call = (10 * 1.0 + 2 * 2.0) / 1e6, (10 * 3.0 + 2 * 7.0) / 1e6
    run = load_run(res.path)
    for row in run.samples.itertuples():
        assert row.cost_usd == pytest.approx(new_call if row.arm == "new" else old_call)
        assert row.model == ("m-new" if row.arm == "new" else "m-old")
    per_arm = run.summary["per_arm"]
    assert per_arm["new"]["paid_usd"] == pytest.approx(6 * new_call)
    assert per_arm["base"]["paid_usd"] == pytest.approx(6 * old_call) == per_arm["topp"]["paid_usd"]
    assert per_arm["new"]["paid_per_case_usd"] == pytest.approx(6 * new_call / N_CASES)
    assert per_arm["new"]["model"] == "m-new" and per_arm["base"]["model"] == "m-old"
    assert res.spend_usd == pytest.approx(6 * new_call + 12 * old_call)
    # Each reservation at its arm's own worst case: 64 tokens in (the suite's ceiling) and
    # the arm's max_tokens_out (new: 4, the others: 8), at the arm's price.
    reserved = {(e["key"].split("/")[1], e["model"], round(e["amount_usd"] * 1e6, 9))
                for e in iter_jsonl(res.path / "ledger.jsonl") if e["event"] == "reserve"}
    assert reserved == {("base", "m-old", 64 * 1 + 8 * 2), ("topp", "m-old", 64 * 1 + 8 * 2),
                        ("new", "m-new", 64 * 3 + 4 * 7)}
    meta = json.loads((res.path / "config.json").read_text())
    assert meta["arm_settings"]["new"]["model"] == "m-new" and meta["arm_settings"]["topp"]["top_p"] == 0.5
    assert meta["arm_settings"]["new"]["host"] == "127.0.0.1"

    # A second run replays every arm from the cache: nothing sent, each arm's own answer,
    # each arm's avoided cost at its own price.
    with ScriptedServer(SCRIPT) as srv:
        run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        n = len(srv.requests)  # answers are keyed by the server that gave them: fill the cache here
        again = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        assert len(srv.requests) == n
    second = load_run(again.path)
    assert again.complete and again.spend_usd == 0 and second.samples.cached.all()
    first = {(r.case_id, r.arm, r.index): (r.output, r.model) for r in run.samples.itertuples()}
    assert {(r.case_id, r.arm, r.index): (r.output, r.model) for r in second.samples.itertuples()} == first
    spend = spend_by_arm(again.path / "ledger.jsonl")
    assert spend["new"]["avoided_usd"] == pytest.approx(6 * new_call)
    assert spend["base"]["avoided_usd"] == pytest.approx(6 * old_call)
    assert second.summary["per_arm"]["new"]["avoided_usd"] == pytest.approx(6 * new_call)


def test_the_cache_is_keyed_by_the_effective_request_not_the_arm_spelling(tmp_path):
    plain = arm_suite(tmp_path / "a", arms=[{"name": "x"}])
    same = arm_suite(tmp_path / "b", arms=[{"name": "x", "generator": {"model": "m-old"},
                                            "price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0}}])
    other = arm_suite(tmp_path / "c", arms=[{"name": "x", "generator": {"model": "m-other"},
                                             "price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0}}])
    with ScriptedServer(SCRIPT) as srv:
        run_suite(plain, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        assert len(srv.requests) == N_CASES * K
        # The arm naming the suite's own model and price: the same effective request, replayed.
        r = run_suite(same, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        assert len(srv.requests) == N_CASES * K and r.spend_usd == 0
        # Another model with everything else equal: never another model's answers.
        r = run_suite(other, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        assert len(srv.requests) == 2 * N_CASES * K
        assert {b["model"] for b in srv.requests[N_CASES * K :]} == {"m-other"}
    assert not load_run(r.path).samples.cached.any()


def test_an_arm_on_a_model_the_server_refuses_fails_its_own_samples_only(tmp_path):
    suite = arm_suite(tmp_path / "suite", arms=ARMS[:2])
    with ScriptedServer({**SCRIPT, "model": "m-old"}) as srv:  # 404 model_not_found for m-new
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
    assert not res.complete and res.per_arm["base"] == {**res.per_arm["base"], "samples": 6, "errors": 0}
    assert res.per_arm["new"]["samples"] == 0 and res.per_arm["new"]["errors"] == 6


@pytest.mark.parametrize("arm, where, words", [
    ({"name": "new", "generator": {"model": "m-new"}, "temprature": 0.2}, "$.arms[1].temprature",
     ["unknown key 'temprature'", "arm 'new'", "did you mean 'temperature'"]),
    ({"name": "new", "generator": {"model": "m-new"}}, "$.arms[1].price",
     ["arm 'new'", "'price'", "m-new"]),
    ({"name": "new", "generator": {"model": "judge-m"}, "price": {"in_per_mtok": 1, "out_per_mtok": 1}},
     "$.arms[1].generator.model", ["arm 'new'", "judge model 'judge-m'"]),
    ({"name": "new", "price": {"in_per_mtok": 1, "out_per_mtok": 9000}, "max_tokens_out": 200000},
     "$.arms[1].max_tokens_out",
     ["arm 'new'", "over cost_cap_usd"]),
    ({"name": "new", "temperature": 3}, "$.arms[1].temperature", ["arm 'new'", "at most 2"]),
    ({"name": "new", "prompt": "missing.txt"}, "$.arms[1].prompt", ["arm 'new'", "'missing.txt' not found"]),
])
def test_bad_arm_input_exits_2_naming_the_arm_and_the_key(tmp_path, arm, where, words):
    suite = arm_suite(tmp_path / "suite", arms=[{"name": "base"}, arm],
                      judge={"model": "judge-m", "api_key_env": "EVALKIT_API_KEY"})
    out = lint(suite)
    assert out.exit_code == 2, out.output
    line = next(ln for ln in out.output.splitlines() if where + ":" in ln)
    for w in words:
        assert w in line, line


def test_an_arms_own_prompt_and_price_lint_clean(tmp_path):
    suite = arm_suite(tmp_path / "suite", arms=[{"name": "base"}, {"name": "terse", "prompt": "terse.txt"}])
    (suite / "terse.txt").write_text("Q: ${input}\nOne word:")
    out = lint(suite)
    assert out.exit_code == 0, out.output
    with ScriptedServer(SCRIPT) as srv:
        run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        prompts = {b["prompt"] for b in srv.requests}
    assert "Q: capital of country 0?\nOne word:" in prompts and "Q: capital of country 0?\nA:" in prompts


def three_arm_run(root: Path) -> Path:
    """16 cases, k 1, the cases each arm passes: `b` beats `a` 12 to 1, `c` beats `a` 10
    to 2 (p = 0.039 uncorrected, above 0.05 once Holm-corrected), `c` against `b` 1 to 4."""
    passes = {"a": {14, 15}, "b": set(range(12)) | {15}, "c": set(range(7)) | {10, 11, 12}}
    outcomes = {(f"c{i:02d}", arm): [i in passed] for i in range(16) for arm, passed in passes.items()}
    return make_run(root, "three", outcomes, k=1)


def test_compare_on_three_arms_is_holm_corrected_as_statsmodels(tmp_path):
    run = three_arm_run(tmp_path)
    grades = {(g["case_id"], g["arm"]): g["passed"] for g in iter_jsonl(run / "grades.jsonl")}
    cases = sorted({c for c, _ in grades})
    pairs = [("a", "b"), ("a", "c"), ("b", "c")]
    raw = []
    for x, y in pairs:  # by hand: a win when the treatment passes and the baseline fails
        w = sum(grades[(c, y)] and not grades[(c, x)] for c in cases)
        lo = sum(grades[(c, x)] and not grades[(c, y)] for c in cases)
        raw.append((w, lo, binomtest(w, w + lo, 0.5).pvalue))
    reject, adjusted, _, _ = multipletests([p for *_, p in raw], alpha=0.05, method="holm")
    out = CliRunner().invoke(main, ["compare", str(run), "--json"])
    assert out.exit_code == 0, out.output
    got = json.loads(out.output)
    assert [(r["baseline"], r["treatment"]) for r in got["pairs"]] == pairs
    for row, (w, lo, p), q, rej in zip(got["pairs"], raw, adjusted, reject, strict=True):
        assert (row["wins"], row["losses"]) == (w, lo)
        assert row["p_value"] == pytest.approx(p, rel=1e-12)
        assert row["p_adjusted"] == pytest.approx(q, rel=1e-12)
        assert (row["kind"] in ("pass", "regression")) == bool(rej)
    # the uncorrected a-vs-c is significant (p < 0.05), the corrected one is not
    assert raw[1][2] < 0.05 < adjusted[1] and got["pairs"][1]["kind"] == "no-improvement"
    md = tmp_path / "pair.md"
    text = CliRunner().invoke(main, ["compare", str(run), "--baseline", "a", "--treatment", "c", "--markdown", str(md),
                                     "--fail-on", "no-improvement"])
    assert "Holm" in text.output and "a vs c (Holm-corrected verdict)" in text.output
    assert text.exit_code == 1 and "NO-IMPROVEMENT" in md.read_text().upper()  # the corrected verdict, not p = 0.039
    assert CliRunner().invoke(main, ["compare", str(run), "--junit", str(tmp_path / "j.xml")]).exit_code == 2
    control = json.loads(CliRunner().invoke(main, ["compare", str(run), "--control", "b", "--json"]).output)
    assert [(r["baseline"], r["treatment"]) for r in control["pairs"]] == [("b", "a"), ("b", "c")]
    _, adj2, _, _ = multipletests([raw[0][2], raw[2][2]], method="holm")  # b vs a: the same two-sided p
    assert [r["p_adjusted"] for r in control["pairs"]] == pytest.approx(list(adj2), rel=1e-12)
    recorded = json.loads((run / "verdicts.json").read_text())
    assert {(v["baseline_arm"], v["treatment_arm"]) for v in recorded["comparisons"]} >= set(pairs)


def test_power_with_more_arms_plans_each_pair_at_alpha_over_m(tmp_path):
    two = json.loads(CliRunner().invoke(main, ["power", "--win-rate", "0.8", "--alpha", "0.05", "--power", "0.8",
                                                "--json"]).output)
    three = json.loads(CliRunner().invoke(main, ["power", "--win-rate", "0.8", "--alpha", "0.05", "--power", "0.8",
                                                  "--arms", "3", "--json"]).output)
    at_third = json.loads(CliRunner().invoke(main, ["power", "--win-rate", "0.8", "--alpha", str(0.05 / 3),
                                                     "--power", "0.8", "--json"]).output)
    ctrl = json.loads(CliRunner().invoke(main, ["power", "--win-rate", "0.8", "--alpha", "0.05", "--power", "0.8",
                                                 "--arms", "3", "--control", "--json"]).output)
    assert three["comparisons"] == 3 and three["correction"] == "holm" and three["alpha"] == 0.05
    assert three["n_discordant"] == at_third["n_discordant"] > two["n_discordant"]
    assert ctrl["comparisons"] == 2 and two["n_discordant"] < ctrl["n_discordant"] <= three["n_discordant"]


def test_the_skill_comparison_page_of_three_arms_shows_the_matrix_and_each_arms_model(tmp_path, monkeypatch):
    from evalkit.telling import reports
    from evalkit.telling.report_index import build_index

    run = three_arm_run(tmp_path)
    meta = json.loads((run / "config.json").read_text())
    meta["arm_settings"] = {"a": {"model": "m-old", "host": "api.example.com", "temperature": 0.8},
                            "b": {"model": "m-new <b>", "host": "api.example.com", "temperature": 0.8,
                                  "overrides": ["generator", "price"]},
                            "c": {"model": "m-old", "host": "127.0.0.1", "temperature": 0.2,
                                  "overrides": ["temperature"]}}
    (run / "config.json").write_text(json.dumps(meta))
    rep = reports.report_run(run, tmp_path / "reports", notebooks=["skill_comparison"])
    assert rep.ok, [nb.error for nb in rep.notebooks]
    page = (rep.out_dir / "skill_comparison.html").read_text(encoding="utf-8")
    assert "Every pair of arms" in page and "Holm-corrected across the pairs" in page
    recorded = json.loads((run / "verdicts.json").read_text())["arm_comparisons"]
    for row in recorded["pairs"]:  # the matrix on the page is the one verdicts.json holds
        assert row["kind"] in page
    _, adjusted, _, _ = multipletests([r["p_value"] for r in recorded["pairs"]], method="holm")
    assert [r["p_adjusted"] for r in recorded["pairs"]] == pytest.approx(list(adjusted), rel=1e-12)
    # the header: each arm's model (escaped), host and parameters
    assert "m-new &lt;b&gt;" in page and "api.example.com" in page and "ek-arms" in page
    out = CliRunner().invoke(main, ["report", str(run), "--only", "skill_comparison", "--pair", "b,c",
                                    "--reports-dir", str(tmp_path / "reports")])
    assert out.exit_code == 0, out.output
    page = (rep.out_dir / "skill_comparison.html").read_text(encoding="utf-8")
    assert "c against b" in page and "Every pair of arms" in page  # the pair asked for, in full, and the matrix
    def no_kernel(*args, **kwargs):
        raise AssertionError("a kernel was started for a --pair that is refused")

    monkeypatch.setattr(reports, "_Lanes", no_kernel)  # the pair is checked before any kernel starts
    bad = CliRunner().invoke(main, ["report", str(run), "--only", "skill_comparison", "--pair", "b,zz",
                                    "--reports-dir", str(tmp_path / "reports")])
    monkeypatch.undo()
    assert bad.exit_code == 2 and "zz" in bad.output and "is not an arm of the run" in bad.output, bad.output
    index = build_index(tmp_path / "reports").read_text(encoding="utf-8")
    assert "suite unit (1 run(s))" in index and "(m-new &lt;b&gt;)" in index and "(m-old)" in index


def test_the_upgrade_gate_an_arm_on_the_new_model_against_the_baseline_of_the_old(tmp_path):
    # two cases cannot see a 3-point drop: the gate warns of that instead of failing (h26); the
    # scripted answers are drawn per sample, so the arms differ by noise alone: this suite asks for
    # the noise guard (issue 41: the default gate fails on the observed drop)
    suite = arm_suite(tmp_path / "suite", arms=[{"name": "baseline"}],
                      gate={"on_underpowered": "warn", "require_significance": True})
    cli = CliRunner()
    with ScriptedServer(SCRIPT) as srv:
        first = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        assert cli.invoke(main, ["grade", str(first.path)]).exit_code == 0
        accepted = cli.invoke(main, ["baseline", "accept", str(first.path), "--arm", "baseline"])
        assert accepted.exit_code == 0, accepted.output
        # today's model pinned in `baseline`; an arm with the new one added, run, graded, gated
        cfg = json.loads((suite / "config.json").read_text())
        cfg["arms"].append({"name": "new", "generator": {"model": "m-new"},
                            "price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0}})
        (suite / "config.json").write_text(json.dumps(cfg))
        second = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        assert {b["model"] for b in srv.requests[N_CASES * K:]} == {"m-new"}  # baseline replayed from the cache
    assert cli.invoke(main, ["grade", str(second.path)]).exit_code == 0
    out = cli.invoke(main, ["gate", str(second.path), "--baseline", str(suite / "baseline.json"), "--arm", "new",
                            "--json"])
    assert out.exit_code in (0, 1), out.output
    res = json.loads(out.output)
    assert res["arm"] == "new"
    assert any("arm new (model m-new, host 127.0.0.1) against the baseline accepted on arm baseline (model m-old)"
               in n for n in res["notes"]), res["notes"]
    # answers of one distribution (the scripted server ignores the model): the new model passes the gate
    assert res["passed"] and out.exit_code == 0


def test_an_agent_arm_runs_its_own_model_and_its_own_program_argv(tmp_path):
    from test_agents import AGENTS
    from test_agents import write_suite as write_agent_suite

    cases = [{"id": "a", "input": {"question": "q"}, "tags": ["golden"], "checks": [{"kind": "contains", "value": "x"}]}]
    unit = {"kind": "command", "argv": ["{python}", str(AGENTS / "plain_http.py")]}  # one model call, then its text
    arms = [{"name": "baseline"},
            {"name": "new", "generator": {"model": "m-new"}, "price": {"in_per_mtok": 3.0, "out_per_mtok": 7.0}},
            {"name": "broken", "unit": {"argv": ["{python}", str(AGENTS / "plain_http.py"), "--exit", "5"]}}]
    suite = write_agent_suite(tmp_path / "suite", cases, unit, k=1, arms=arms)
    with ScriptedServer({"default": {"text": "x"}}) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        models = sorted(b["model"] for b in srv.requests)
    assert models == ["m-new", "scripted", "scripted"]  # each program's call went out with its arm's model
    done = {r["arm"]: r for r in iter_jsonl(res.path / "results.jsonl")}
    assert set(done) == {"baseline", "new"} and done["new"]["model"] == "m-new"
    errors = {e["arm"]: e["error"] for e in iter_jsonl(res.path / "errors.jsonl")}
    assert set(errors) == {"broken"} and "5" in errors["broken"]  # its own argv: exit status 5


def test_twin_command_arms_send_each_agent_call_once_and_the_twin_replays_it_at_its_own_price(tmp_path):
    from test_agents import AGENTS
    from test_agents import write_suite as write_agent_suite

    # Two command arms with one effective request (a price is not in a request): concurrency 4,
    # so a case's samples of both arms are in flight together through the metering proxy.
    cases = [{"id": f"q{i}", "input": {"question": f"q{i}"}, "tags": ["golden"],
              "checks": [{"kind": "contains", "value": "x"}]} for i in range(2)]
    unit = {"kind": "command", "argv": ["{python}", str(AGENTS / "plain_http.py")]}  # one model call, then its text
    arms = [{"name": "base"}, {"name": "dear", "price": {"in_per_mtok": 3.0, "out_per_mtok": 7.0}}]
    suite = write_agent_suite(tmp_path / "suite", cases, unit, k=2, arms=arms)
    script = {"default": {"text": "x", "usage": {"prompt_tokens": 10, "completion_tokens": 2}}}
    with ScriptedServer(script) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        sent = list(srv.requests)
    assert res.complete, res.reason
    assert len(sent) == 2 * 2  # base's call of each (case, index), once; dear's are the same requests
    done = {(r["case_id"], r["arm"], r["index"]): r for r in iter_jsonl(res.path / "results.jsonl")}
    assert len(done) == 8 and all(r["output"].strip() == "x" for r in done.values())
    # By hand: 10 tokens in, 2 out per call. base at 1 / 2 USD per Mtok: $0.000014; dear at
    # 3 / 7: 30 + 14 = $0.000044. Of each (case, index), the arm whose call went first paid its
    # own price and the other replayed the answer: $0 paid, its own price avoided.
    own = {"base": (10 * 1.0 + 2 * 2.0) / 1e6, "dear": (10 * 3.0 + 2 * 7.0) / 1e6}
    paid = {"base": 0.0, "dear": 0.0}
    for c in range(2):
        for i in range(2):
            pair = {arm: done[(f"q{c}", arm, i)] for arm in own}
            assert sorted((r["cost_usd"] == 0, r["cost_avoided_usd"] > 0) for r in pair.values()) == [
                (False, False), (True, True)]
            for arm, r in pair.items():
                assert (r["cost_usd"] or r["cost_avoided_usd"]) == pytest.approx(own[arm])
                paid[arm] += r["cost_usd"]
    assert {a: res.per_arm[a]["paid_usd"] for a in own} == pytest.approx(paid)
    assert sum(res.per_arm[a]["paid_usd"] + res.per_arm[a]["avoided_usd"] for a in own) == pytest.approx(
        4 * own["base"] + 4 * own["dear"])
    assert res.spend_usd == pytest.approx(sum(paid.values()))
    # Across runs: dear alone replays base's calls from the response cache, nothing sent.
    with ScriptedServer(script) as srv:
        run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False, arms=["base"])
        n = len(srv.requests)  # answers are keyed by the server that gave them: fill the cache here
        alone = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False, arms=["dear"])
        assert n == 4 and len(srv.requests) == n
    assert alone.complete and alone.spend_usd == 0
    assert alone.per_arm["dear"]["avoided_usd"] == pytest.approx(4 * own["dear"])


def test_a_secret_in_an_arms_own_system_or_prompt_file_refuses_the_run_naming_the_file(tmp_path, monkeypatch):
    # The privacy gate scans what reaches the model: an arm's own `system` and `prompt`
    # files are sent as its requests are, so they are scanned as the suite's templates are.
    monkeypatch.setenv("EVALKIT_API_KEY", "test-key")
    key = "ghp_" + "Q7wZ2kR9xN4mV1bT8cY3hJ6fL0pD5sGaE2uK"  # a GitHub token's shape (36 characters after ghp_)
    suite = arm_suite(tmp_path / "suite", mode="chat", arms=[
        {"name": "base"}, {"name": "sys", "system": "arm-system.txt"}, {"name": "own", "prompt": "arm-prompt.txt"}])
    (suite / "arm-system.txt").write_text(f"You answer in one word.\nThe deploy token is {key}\n")
    (suite / "arm-prompt.txt").write_text("Q: ${input}\nOne word:")
    with ScriptedServer(SCRIPT) as srv:
        res = CliRunner().invoke(main, ["run", str(suite), "--base-url", srv.base_url, "--k", "1", "--no-progress"])
        assert srv.stats["requests"] == 0  # refused before any call
    assert res.exit_code == 2, res.output
    found = [ln for ln in res.stderr.splitlines() if "privacy:" in ln and "[api_key]" in ln]
    assert len(found) == 1 and f"{suite / 'arm-system.txt'}:2" in found[0], res.stderr
    assert key not in res.output  # the value itself is never repeated
    assert not (suite / "runs").exists()
    # The same secret moved to the arm's own prompt file: found there.
    (suite / "arm-system.txt").write_text("You answer in one word.\n")
    (suite / "arm-prompt.txt").write_text(f"token {key}\nQ: ${{input}}\nOne word:")
    res = CliRunner().invoke(main, ["run", str(suite), "--base-url", "http://127.0.0.1:9/v1", "--k", "1",
                                    "--no-progress"])
    assert res.exit_code == 2 and f"{suite / 'arm-prompt.txt'}:1" in res.stderr, res.output


TWINS = [
    {"name": "base"},
    {"name": "copy", "generator": {"model": "m-old"}},  # the suite's model spelled out: the same requests
    {"name": "other", "generator": {"model": "m-other"}, "price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0}},
]


def test_two_arms_that_differ_only_by_name_share_each_request_and_other_models_never_do(tmp_path):
    suite = arm_suite(tmp_path / "suite", arms=TWINS)  # concurrency 4: twins' keys are in flight together
    with ScriptedServer(SCRIPT) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        sent = list(srv.requests)
    assert res.complete
    # The server's log: base's and other's requests, each once; copy's are base's, never sent again.
    assert len(sent) == 2 * N_CASES * K
    assert sorted(b["model"] for b in sent) == ["m-old"] * (N_CASES * K) + ["m-other"] * (N_CASES * K)
    assert len({json.dumps(b, sort_keys=True) for b in sent}) == len(sent)
    run = load_run(res.path)
    rows = {(r.case_id, r.arm, r.index): r for r in run.samples.itertuples()}
    for c in range(N_CASES):
        for i in range(K):
            base, copy, other = (rows[(f"c{c}", a, i)] for a in ("base", "copy", "other"))
            assert copy.output == base.output and copy.seed == base.seed and copy.request_hash == base.request_hash
            assert copy.cached and not base.cached and not other.cached  # the twin replayed, at $0
            assert other.model == "m-other" and other.request_hash != base.request_hash
    # By hand: 10 tokens in, 2 out per call at 1 / 2 USD per Mtok = $0.000014; 6 calls for base,
    # 6 for other, none for copy, whose 6 answers are counted as avoided.
    call = (10 * 1.0 + 2 * 2.0) / 1e6
    assert res.per_arm["copy"]["paid_usd"] == 0 and res.per_arm["copy"]["avoided_usd"] == pytest.approx(6 * call)
    assert res.per_arm["base"]["paid_usd"] == pytest.approx(6 * call) == res.per_arm["other"]["paid_usd"]
    assert res.spend_usd == pytest.approx(12 * call)
    meta = json.loads((res.path / "config.json").read_text())
    assert meta["seed_names"] == {"base": "base", "copy": "base", "other": "other"}
    # Across runs, from the response cache: the twin alone replays base's answers, nothing is sent.
    with ScriptedServer(SCRIPT) as srv:
        run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False, arms=["base"])
        n = len(srv.requests)  # answers are keyed by the server that gave them: fill the cache here
        alone = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False, arms=["copy"])
        assert n == N_CASES * K and len(srv.requests) == n
    assert alone.complete and alone.spend_usd == 0 and load_run(alone.path).samples.cached.all()


def test_twins_at_different_prices_share_the_answer_and_each_avoids_its_own_price(tmp_path):
    # "dear" sends base's very requests (the price is not part of a request) at another price:
    # it replays base's answers, and what it avoided is its own price times the tokens.
    arms = [{"name": "base"}, {"name": "dear", "price": {"in_per_mtok": 3.0, "out_per_mtok": 7.0}}]
    suite = arm_suite(tmp_path / "suite", arms=arms)
    with ScriptedServer(SCRIPT) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        assert res.complete and len(srv.requests) == N_CASES * K  # base's, each once
    # By hand: 10 tokens in, 2 out per answer. base at 1 / 2 USD per Mtok: 10 + 4 = $0.000014;
    # dear at 3 / 7: 30 + 14 = $0.000044 (not base's $0.000014).
    base_call, dear_call = (10 * 1.0 + 2 * 2.0) / 1e6, (10 * 3.0 + 2 * 7.0) / 1e6
    run = load_run(res.path)
    for r in run.samples.itertuples():
        if r.arm == "dear":
            assert r.cached and r.cost_usd == 0 and r.cost_avoided_usd == pytest.approx(dear_call)
        else:
            assert not r.cached and r.cost_usd == pytest.approx(base_call) and r.cost_avoided_usd == 0
    assert res.per_arm["dear"]["paid_usd"] == 0 and res.per_arm["dear"]["avoided_usd"] == pytest.approx(6 * dear_call)
    assert res.per_arm["base"]["paid_usd"] == pytest.approx(6 * base_call) and res.spend_usd == pytest.approx(6 * base_call)
    # Across runs, from the response cache: each arm's replay avoids its own price.
    with ScriptedServer(SCRIPT) as srv:
        run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        n = len(srv.requests)  # answers are keyed by the server that gave them: fill the cache here
        again = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        assert len(srv.requests) == n
    spend = spend_by_arm(again.path / "ledger.jsonl")
    assert spend["dear"]["avoided_usd"] == pytest.approx(6 * dear_call)
    assert spend["base"]["avoided_usd"] == pytest.approx(6 * base_call)


def test_arms_with_another_seed_or_without_the_cache_do_not_share(tmp_path):
    arms = [{"name": "base"}, {"name": "reseeded", "seed": 99}, {"name": "copy"}]
    suite = arm_suite(tmp_path / "suite", arms=arms)
    with ScriptedServer(SCRIPT) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False, cache=False)
        # No response cache: every sample is its own call, twins included (nothing to replay from).
        assert res.complete and len(srv.requests) == 3 * N_CASES * K
    seeds = {(r.arm, r.case_id, r.index): r.seed for r in load_run(res.path).samples.itertuples()}
    assert all(seeds[("copy", c, i)] == seeds[("base", c, i)] != seeds[("reseeded", c, i)]
               for (_, c, i) in seeds)


def test_a_run_folder_from_before_seed_names_resumes_with_each_arms_own_seeds(tmp_path):
    # A run stopped part way (a watch that reports once the server has had 3 requests: the
    # calls in flight finish, no further key starts); its config.json then loses
    # `seed_names`, as a folder written before they existed has none.
    suite = arm_suite(tmp_path / "suite", arms=TWINS[:2])
    with ScriptedServer(SCRIPT) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False,
                        watch=lambda: "stopped by the test" if len(srv.requests) >= 3 else None)
    assert not res.complete
    before = {(r.case_id, r.arm, r.index) for r in load_run(res.path).samples.itertuples()}
    assert 0 < len(before) < 2 * N_CASES * K
    meta_path = res.path / "config.json"
    meta = json.loads(meta_path.read_text())
    del meta["seed_names"]
    meta_path.write_text(json.dumps(meta))
    with ScriptedServer(SCRIPT) as srv:
        again = run_suite(suite, base_url=srv.base_url, resume=res.path, progress=False)
    assert again.complete
    rows = list(iter_jsonl(res.path / "results.jsonl"))
    keys = [(r["case_id"], r["arm"], int(r["index"])) for r in rows]
    assert len(keys) == len(set(keys)) == 2 * N_CASES * K  # no key made twice
    for r in rows:  # the seeds the run started with: each arm's own name
        if (r["case_id"], r["arm"], int(r["index"])) not in before:
            assert r["seed"] == derive_seed(1234, r["case_id"], r["arm"], int(r["index"]))
