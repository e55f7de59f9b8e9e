"""The public statistics on real, third-party results (../shared/data, see its README).

tau-bench: pass@k and pass^k, k = 1..4, for gpt-4o on 50 airline tasks x 4 trials,
checked against brute-force enumeration of k-subsets of each task's trials.
PandaLM: agreement of the gpt-3.5-turbo judge (and the PandaLM-7B judge) with the human
majority, under the source's convention (a judge's "Tie" or unparseable answer counts
as "0", a tie), and agreement among the three human annotators; kappa and
Krippendorff's alpha checked against independent computations here.

These tests skip only where ../shared/data does not exist at all; where it exists, a
missing or changed file fails them.
"""
from __future__ import annotations

import itertools
import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

from evalkit.numbers import stats as S

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
if not DATA.exists():  # only a checkout without the shared data may skip
    pytest.skip(f"{DATA} not present", allow_module_level=True)

TAU = DATA / "tau-bench" / "gpt-4o-airline.trials.jsonl"
PANDA = DATA / "pandalm"


def _tau_trials() -> dict[int, list[bool]]:
    trials: dict[int, dict[int, bool]] = defaultdict(dict)
    for line in TAU.read_text().splitlines():
        row = json.loads(line)
        assert row["trial"] not in trials[row["task_id"]], f"duplicate trial {row}"
        trials[row["task_id"]][row["trial"]] = abs(row["reward"] - 1.0) < 1e-6
    return {t: [v[i] for i in sorted(v)] for t, v in trials.items()}


def test_tau_bench_pass_at_k_and_pass_hat_k():
    tasks = _tau_trials()
    assert len(tasks) == 50 and all(len(v) == 4 for v in tasks.values())
    counts = [(len(v), sum(v)) for v in tasks.values()]
    print("\ntau-bench gpt-4o airline, 50 tasks x 4 trials")
    print(" k  pass@k (se)        pass^k (se)        plug-in (c/n)^k")
    previous_hat = 1.0
    for k in range(1, 5):
        at = S.suite_pass_at_k(counts, k)
        hat = S.suite_pass_hat_k(counts, k)
        # Independent: enumerate every k-subset of each task's trials.
        at_case = [np.mean([any(s) for s in itertools.combinations(v, k)]) for v in tasks.values()]
        hat_case = [np.mean([all(s) for s in itertools.combinations(v, k)]) for v in tasks.values()]
        assert at.value == pytest.approx(np.mean(at_case), abs=1e-12)
        assert hat.value == pytest.approx(np.mean(hat_case), abs=1e-12)
        assert at.se == pytest.approx(np.std(at_case, ddof=1) / np.sqrt(50), abs=1e-12)
        assert hat.se == pytest.approx(np.std(hat_case, ddof=1) / np.sqrt(50), abs=1e-12)
        assert at.n == hat.n == 50
        plugin = np.mean([S.plugin_pass_hat_k(n, c, k) for n, c in counts])
        assert plugin >= hat.value - 1e-12  # the plug-in is biased upward (Jensen)
        assert hat.value <= previous_hat  # pass^k cannot grow with k
        previous_hat = hat.value
        print(f" {k}  {at.value:.4f} ({at.se:.4f})   {hat.value:.4f} ({hat.se:.4f})   {plugin:.4f}")
    # At k = n = 4 the estimators are the per-task booleans "any"/"all" of the 4 trials.
    assert S.suite_pass_hat_k(counts, 4).value == np.mean([all(v) for v in tasks.values()])
    assert S.suite_pass_at_k(counts, 4).value == np.mean([any(v) for v in tasks.values()])
    with pytest.raises(ValueError, match="k=5 is larger than the n=4"):
        S.suite_pass_at_k(counts, 5)


def _panda() -> tuple[list[int], list[list[int]], list[int], list[int], Counter]:
    humans = sorted(json.loads((PANDA / "testset-v1.json").read_text()), key=lambda r: r["idx"])
    gpt = {r["idx"]: r["gpt_result"] for r in json.loads((PANDA / "gpt-3.5-turbo-testset-v1.json").read_text())}
    panda = {r["idx"]: r["pandalm_result"] for r in json.loads((PANDA / "pandalm-7b-testset-v1.json").read_text())}
    assert len(humans) == len(gpt) == len(panda) == 999
    raters = [[int(r[f"annotator{i}"]) for r in humans] for i in (1, 2, 3)]
    majority = []
    for votes in zip(*raters):
        label, n = Counter(votes).most_common(1)[0]
        assert n >= 2, f"no majority among {votes}"  # the source data always has one
        majority.append(label)

    def judge_label(x: object) -> int:
        # The source's convention: "1"/"2" as given, "Tie" or anything unparseable -> 0.
        return int(str(x)) if str(x) in ("0", "1", "2") else 0

    raw = Counter(str(gpt[r["idx"]]) for r in humans)
    return (
        majority,
        raters,
        [judge_label(gpt[r["idx"]]) for r in humans],
        [judge_label(panda[r["idx"]]) for r in humans],
        raw,
    )


def _kappa_from_pairs(a: list[int], b: list[int]) -> tuple[float, np.ndarray]:
    cats = sorted(set(a) | set(b))
    table = np.zeros((len(cats), len(cats)))
    for (x, y), n in Counter(zip(a, b)).items():
        table[cats.index(x), cats.index(y)] = n
    p = table / table.sum()
    po, pe = np.trace(p), float(p.sum(1) @ p.sum(0))
    return (po - pe) / (1 - pe), table


def _nominal_alpha(ratings: list[list[int]]) -> float:
    # Krippendorff 2011: alpha = 1 - (n - 1) * sum_c o_cc' / (sum_c n_c (n - n_c))
    # written with disagreement counts, for complete nominal data.
    values = sorted({v for r in ratings for v in r})
    o = np.zeros((len(values), len(values)))
    m = len(ratings)
    for unit in zip(*ratings):
        for i, j in itertools.permutations(range(m), 2):
            o[values.index(unit[i]), values.index(unit[j])] += 1 / (m - 1)
    nc = o.sum(1)
    n = nc.sum()
    disagree = o.sum() - np.trace(o)
    return 1 - (n - 1) * disagree / (n * n - (nc**2).sum())


def test_pandalm_judge_against_human_majority_and_humans_among_themselves():
    majority, raters, gpt, panda, raw = _panda()
    assert raw["Tie"] > 0 and set(raw) - {"0", "1", "2", "Tie"}, "the judge has ties and malformed answers"
    print(f"\nPandaLM test set: 999 items; gpt-3.5 raw answers {dict(raw)}")
    for name, judge in (("gpt-3.5-turbo", gpt), ("pandalm-7b", panda)):
        ag = S.agreement(majority, judge, labels=[0, 1, 2])
        kappa, table = _kappa_from_pairs(majority, judge)
        assert np.array_equal(np.array(ag.confusion), table)
        assert ag.exact == pytest.approx(np.trace(table) / 999)
        assert ag.kappa == pytest.approx(kappa, abs=1e-12)
        alpha = S.krippendorff_alpha([majority, judge], level="nominal")
        assert alpha == pytest.approx(_nominal_alpha([majority, judge]), abs=1e-12)
        assert 0.3 < ag.kappa < 0.9  # a real, imperfect judge
        print(
            f"{name} vs human majority: exact {ag.exact:.4f}, kappa {ag.kappa:.4f} "
            f"[{ag.kappa_low:.3f}, {ag.kappa_high:.3f}], Krippendorff alpha (nominal) {alpha:.4f}"
        )
        print(f"  confusion (rows human 0/1/2, cols judge 0/1/2): {ag.confusion}")

    pairs = {}
    for i, j in itertools.combinations(range(3), 2):
        ag = S.agreement(raters[i], raters[j], labels=[0, 1, 2])
        kappa, _ = _kappa_from_pairs(raters[i], raters[j])
        assert ag.kappa == pytest.approx(kappa, abs=1e-12)
        pairs[(i + 1, j + 1)] = ag
        print(f"annotator{i + 1} vs annotator{j + 1}: exact {ag.exact:.4f}, kappa {ag.kappa:.4f}")
    alpha3 = S.krippendorff_alpha(raters, level="nominal")
    assert alpha3 == pytest.approx(_nominal_alpha(raters), abs=1e-12)
    print(f"three annotators: Krippendorff alpha (nominal) {alpha3:.4f}")
    # Humans agree with each other more than the judge agrees with their majority.
    gpt_kappa = S.agreement(majority, gpt, labels=[0, 1, 2]).kappa
    assert min(a.kappa for a in pairs.values()) > gpt_kappa


def test_pandalm_prediction_powered_rate_equals_ppi_python():
    """PandaLM's public labels as a judged rate: the share of items where people prefer
    response 1, estimated from the gpt-3.5 judge on all 999 items corrected by n seeded
    human-labelled ones; held to ppi-python to 1e-9 and, adjusted, covering the rate of
    all 999 human labels."""
    import ppi_py

    majority, _, gpt, _, _ = _panda()
    y_all = np.array([m == 1 for m in majority], dtype=float)
    yhat_all = np.array([g == 1 for g in gpt], dtype=float)
    truth = float(y_all.mean())
    rng = np.random.default_rng(999)
    for n in (40, 100, 300):
        idx = rng.choice(999, n, replace=False)
        Y, Yh = y_all[idx], yhat_all[idx]
        e = S.ppi_mean(Y, Yh, yhat_all)
        assert e.value == pytest.approx(float(np.squeeze(ppi_py.ppi_mean_pointestimate(Y, Yh, yhat_all))), abs=1e-9)
        low, high = ppi_py.ppi_mean_ci(Y, Yh, yhat_all, alpha=0.05)
        assert (e.low, e.high) == pytest.approx((float(np.squeeze(low)), float(np.squeeze(high))), abs=1e-9)
        adj = S.ppi_mean(Y, Yh, yhat_all, adjust=1.0)
        assert adj.low <= truth <= adj.high
        print(
            f"PandaLM n={n}: judge-only {yhat_all.mean():.4f}, corrected {e.value:.4f} [{adj.low:.4f}, {adj.high:.4f}] "
            f"lam {e.lam:.3f}; human rate of all 999 {truth:.4f}"
        )
