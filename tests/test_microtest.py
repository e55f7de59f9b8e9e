"""Micro-test conclusions that cannot mislead: a variant that does not beat the control is
never "best" and the exit status says so; counts name their unit; a re-run says its
answers came from the response cache, and --no-cache draws fresh samples."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from scipy.stats import fisher_exact

import browser_run
from conftest import make_run
from evalkit._cli.main import main
from evalkit.calls.serve import ScriptedServer
from evalkit.conclusions import microtest as M
from evalkit.foundations.records import MicrotestResult


_suite = browser_run.make_microtest_suite
SCRIPT = browser_run.MICRO_SCRIPT


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv("EVALKIT_TEST_KEY", "test-key")


def test_a_worse_variant_is_never_best_and_a_rerun_says_it_came_from_the_cache(tmp_path, env):
    suite, variants = _suite(tmp_path)
    args = ["microtest", str(suite), "--variants", str(variants), "--reps", "5", "--no-progress",
            "--reports-dir", str(tmp_path / "reports")]
    with ScriptedServer(SCRIPT) as srv:
        first = CliRunner().invoke(main, args + ["--base-url", srv.base_url])
        assert first.exit_code == 1, first.output  # the guidance does not help: scripts can tell
        assert "Best variant" not in first.output
        assert "No variant beats the control (the least flagged, quote, in 10 of 10: one-sided p = 1" in first.output
        assert "of 10 samples: 2 cases x 5 repetitions per case" in first.output
        assert "from the response cache" not in first.output
        sent = srv.stats["requests"]
        again = CliRunner().invoke(main, args + ["--base-url", srv.base_url])
        assert again.exit_code == 1
        assert "note: 20 of 20 samples came from the response cache" in again.output and "--no-cache" in again.output
        assert srv.stats["requests"] == sent  # replayed: nothing was sent
        fresh = CliRunner().invoke(main, args + ["--base-url", srv.base_url, "--no-cache"])
        assert fresh.exit_code == 1 and "from the response cache" not in fresh.output
        assert srv.stats["requests"] == 2 * sent
    run = Path(next(ln.split(": ", 1)[1] for ln in first.output.splitlines() if ln.startswith("run folder: ")))
    page = (tmp_path / "reports" / run.name / "micro_test.html").read_text(encoding="utf-8")
    shown = [int(x) for x in __import__("re").findall(r"quote / task-0 / repetition (\d+)", page)]
    assert shown == sorted(shown) == [1, 2, 3, 4, 5]  # flagged outputs in repetition order


# -- a winner only when the test says so (issue 41) ---------------------------------------

def _counts(rng, rate, cases=12, reps=5):
    """One arm's simulated (flagged, samples) per case, each case's flag rate `rate` (a
    number, or one per case)."""
    rates = np.broadcast_to(rate, (cases,))
    return {f"c{i}": (int(rng.binomial(reps, rates[i])), reps) for i in range(cases)}


def _named(seeds, control, variants, **kw):
    """The share of seeds in which the micro-test names a winner."""
    named = 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        rate = control(rng) if callable(control) else control
        tests = M.variant_tests(_counts(rng, rate, **kw), {f"v{j}": _counts(rng, rate if v is None else v, **kw)
                                                           for j, v in enumerate(variants)})
        named += any(t[1] <= M.ALPHA for t in tests.values())
    return named / seeds


def test_under_no_effect_a_winner_is_named_at_most_alpha_of_the_time():
    # 2,000 seeds each: the Monte Carlo error of a share near 0.05 is sqrt(.05 * .95 / 2000) = 0.0049
    mc = 3 * (M.ALPHA * (1 - M.ALPHA) / 2000) ** 0.5
    same = _named(2000, 0.7, [None])  # the case: every arm truly 70%, 12 cases x 5 repetitions
    three = _named(2000, 0.7, [None, None, None])  # Holm across three variants
    mixed = _named(2000, lambda rng: rng.uniform(0.05, 0.95, 12), [None, None])  # cases differ, arms do not
    print(f"\nfalse-winner rate under no effect: one variant {same:.4f}, three {three:.4f}, mixed cases {mixed:.4f}")
    assert max(same, three, mixed) <= M.ALPHA + mc


def test_a_real_effect_is_named_in_99_percent_of_seeds():
    # control flagged 70%, the variant 10%, 12 cases x 5 repetitions (beside a useless variant: Holm across two)
    assert _named(1000, 0.7, [0.1]) >= 0.99
    assert _named(1000, 0.7, [0.1, None]) >= 0.99


def test_the_test_is_fishers_exact_for_one_case_and_counts_cases_by_direction():
    for (kc, nc), (kv, nv) in [((4, 5), (0, 5)), ((5, 5), (2, 5)), ((1, 6), (3, 5)), ((0, 5), (0, 5))]:
        p, fewer, more, same = M.variant_p({"a": (kc, nc)}, {"a": (kv, nv)})
        assert p == pytest.approx(fisher_exact([[kv, nv - kv], [kc, nc - kc]], alternative="less").pvalue)
        assert (fewer, more, same) == (kv * nc < kc * nv, kv * nc > kc * nv, kv * nc == kc * nv)
    # paired by case: a case only one arm ran is not compared
    assert M.variant_p({"a": (5, 5), "b": (5, 5)}, {"a": (0, 5)})[1:] == (1, 0, 0)


def _microtest_run(tmp_path, flags: dict[str, list[int]], reps=5):
    """A micro-test run folder: per arm, the flagged repetitions of each case (failing
    grades are the flags)."""
    outcomes = {(f"c{i}", arm): [j >= k for j in range(reps)] for arm, ks in flags.items() for i, k in enumerate(ks)}
    return make_run(tmp_path, "micro", outcomes, k=reps)


def test_noise_is_no_winner_and_the_record_carries_p_and_adjusted_p(tmp_path):
    # issue 41: control 43/60 flagged, gamma 35/60 (12 cases x 5 repetitions, every arm truly 70%) was
    # "Best variant: gamma", exit 0, with no test
    ctrl = [4, 4, 4, 3, 4, 3, 4, 4, 3, 4, 3, 3]  # 43
    gamma = [3, 3, 2, 3, 4, 3, 2, 3, 3, 3, 3, 3]  # 35
    beta = [4, 3, 4, 4, 4, 3, 4, 3, 3, 3, 4, 4]  # 43
    res = M.analyse(_microtest_run(tmp_path, {"control": ctrl, "gamma": gamma, "beta": beta}))
    assert (res.arms["control"].flagged, res.arms["gamma"].flagged) == (43, 35)
    assert res.kind == "no-improvement" and res.best is None and "Best variant" not in res.conclusion
    g = res.arms["gamma"]
    assert g.p_value is not None and 0.05 < g.p_value < g.p_adjusted <= 1
    assert (g.cases_fewer, g.cases_more, g.cases_same) == (6, 0, 6)
    assert res.arms["control"].p_value is None and res.test == M.TEST and res.alpha == M.ALPHA
    assert "No variant beats the control (the least flagged, gamma, in 35 of 60" in res.conclusion
    assert "within chance" in res.conclusion and "Holm-adjusted" in res.conclusion
    back = MicrotestResult.from_json(res.to_json())
    assert back == res and back.to_json()["arms"]["gamma"]["p_adjusted"] == g.p_adjusted


def test_a_variant_significantly_below_the_control_is_best(tmp_path):
    res = M.analyse(_microtest_run(tmp_path, {"control": [4] * 12, "firm": [0] * 12, "soft": [2] * 12}))
    assert res.kind == "pass" and res.best == "firm"
    assert res.arms["firm"].p_adjusted < res.arms["soft"].p_adjusted <= M.ALPHA
    assert "Best variant: firm, flagged in 0 of 60" in res.conclusion and "significantly less" in res.conclusion
    # a result written before the test existed still loads, without p
    old = {k: v for k, v in res.to_json().items() if k not in ("test", "alpha")}
    old["arms"] = {a: {k: x for k, x in v.items() if not k.startswith(("p_", "cases_"))} for a, v in old["arms"].items()}
    assert MicrotestResult.from_json(old).arms["firm"].p_value is None
