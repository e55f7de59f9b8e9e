"""Numbers: pure statistics, one definition per metric, power plans.

`stats` holds the pure functions (pass@k, pass^k, intervals, paired tests, power,
agreement, prediction-powered means), `detectable` the smallest drop a gate can see (no
scipy, so `lint` stays fast), `metrics` defines each number evalkit shows once, and `plans` holds power
plans, the pre-registered `plan.json` and a verdict held against it.

May import: `evalkit.foundations`.
"""
