"""The default run on one machine: what a user gets who names no chains and no length (`num_rounds="auto"`), against
the same run with 4 chains, side by side in one invocation.

Each case is run by `rs.sample` on a local Ray, default DG-LMC to convergence (min bulk ESS ≥ 400 and R-hat below
1.01, split R-hat for few chains, nested R-hat from 16), seed 0, once with `chains="auto"` (the default) and once
with `chains=4`, `--repeats` times, the order alternating between repeats. Reported: wall time (`rs.sample` called
to result returned, Ray already up), set-up, sampling (the rounds) and the rest (the convergence checks, chunk
hand-over, the result), rounds and warm-up rounds, min bulk ESS over every parameter and min ESS per wall second;
medians over repeats, and the largest difference of the posterior means between the two, in posterior sds.
ESS is over the natural-scale parameters (a group model's β, sd and every group effect r_g = sd·η_g).

`--nuts` adds, for the group cases, NumPyro NUTS on the pooled rows as benchmarks/perf/groups.py runs it (4 chains
vectorised, float64, 500 warm-up and 1,000 draws, compile excluded) and the ratio of the default run's ESS per wall
second (set-up, actor start and convergence checks included) to NUTS's ESS per sampling second.

Cases (4 shards each):
- "breast_cancer": logistic regression, 569 rows, 31 parameters;
- "covtype_like": logistic regression, 4 × 25,000 rows (`--covtype-rows`), 55 parameters;
- "hospitals": the hierarchical logistic model of benchmarks/perf/groups.py, 4 × 100 hospitals (404 parameters);
- "radon_sized": the same model on 4 × 21 hospitals of 1 to 60 patients (n ≈ 1,000, 88 parameters).

    python benchmarks/perf/default_run.py
    python benchmarks/perf/default_run.py --cases breast_cancer,radon_sized --repeats 3
    python benchmarks/perf/default_run.py --cases hospitals,radon_sized --nuts --label default_run_nuts
    python benchmarks/perf/default_run.py --cases breast_cancer --algorithms fald,qlsd,ula --label algorithms

Writes benchmarks/perf/results/default_run.json (`--label` names another).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import _path  # noqa: F401  (puts benchmarks/ on sys.path for harness)
import harness
import numpy as np

import raysampler as rs
from raysampler.models.params import natural_values

CASES = ("breast_cancer", "covtype_like", "hospitals", "radon_sized")
GROUPS = {"hospitals": (100, {}), "radon_sized": (21, {"min_rows": 1, "max_rows": 60, "sizes": "log-uniform"})}
VARIANTS = {"auto": "auto", "4": 4}


def case_data(name: str, covtype_rows: int) -> tuple[Any, Any, np.ndarray, np.ndarray]:
    """(model, shards, X, y) of a case, 4 shards (X, y pooled)."""
    if name == "breast_cancer":
        X, y = rs.datasets.load("breast_cancer")
        return rs.models.LogisticRegression(prior_scale=1.0), rs.shard(X, y, num_shards=4), X, y
    if name == "covtype_like":
        X, y = rs.datasets.load("covtype_like", seed=0, n=4 * covtype_rows)
        return rs.models.LogisticRegression(), rs.shard(X, y, num_shards=4), X, y
    per_site, options = GROUPS[name]
    X, y = rs.datasets.load("hospitals", seed=0, n_groups=4 * per_site, **options)
    cols = rs.datasets.columns("hospitals", n_groups=4 * per_site, **options)
    model = rs.models.LogisticRegression(
        prior_scale=2.5, group_effects=rs.GroupEffects("hospital", sd_prior=rs.priors.HalfNormal(1.0))
    )
    return model, rs.shard(X, y, num_shards=4, columns=cols, by="hospital"), X, y


def nuts_reference(X: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """NUTS on the pooled rows of a group case (benchmarks/perf/groups.py's run): min bulk ESS and ESS/s."""
    import groups

    draws, secs = groups.run_nuts(X, y, 4, 500, 1000, 0)
    flat = np.concatenate([draws["beta"], draws["sd"], draws["r"]], axis=-1)
    ess = groups.ess_all(flat)
    return {"seconds": secs, "min_ess": float(ess.min()), "ess_per_s": float(ess.min()) / secs}


def one(model: Any, shards: Any, chains: int | str, algorithm: str = "dglmc") -> dict[str, Any]:
    """One default run to convergence: its timings, length, ESS and posterior means and sds."""
    t0 = time.perf_counter()
    res = rs.sample(model, shards, algorithm, chains=chains, num_rounds="auto", seed=0, executor="ray", progress=False)
    wall = time.perf_counter() - t0
    st, outcome = res.run_stats, res.outcome
    assert st is not None and outcome is not None and res.setup is not None
    draws = natural_values(res.param_blocks, np.asarray(res.draws, dtype=float))
    ess = np.asarray(rs.Result(draws, [str(j) for j in range(draws.shape[2])]).ess(), dtype=float)
    return {
        "wall_s": wall,
        "setup_s": outcome.timings.setup_s,
        "sampling_s": st.sampling_time_s,
        "other_s": wall - outcome.timings.setup_s - st.sampling_time_s,
        "chains": int(draws.shape[0]),
        "chains_reason": res.setup.chains.reason if res.setup.chains is not None else None,
        "rounds": int(st.rounds),
        "warmup": st.burn_in,
        "min_ess": float(ess.min()),
        "ess_per_wall_s": float(ess.min()) / wall,
        "stop": str(outcome.stop_reason),
        "mean": draws.mean(axis=(0, 1)),
        "sd": draws.std(axis=(0, 1)),
    }


def arguments() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__, __file__, ray=True)
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated, of " + ", ".join(CASES))
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--covtype-rows", type=int, default=25_000)
    ap.add_argument("--label", default="default_run")
    ap.add_argument(
        "--algorithms", default="dglmc", help="comma-separated: each case is run with each (rows 'case · algorithm')"
    )
    ap.add_argument("--nuts", action="store_true", help="NUTS on the pooled rows of the group cases, for reference")
    return ap


def measure(args: argparse.Namespace) -> harness.Report:
    cases = [c for c in args.cases.split(",") if c]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        raise SystemExit(f"unknown cases {unknown}; valid: {', '.join(CASES)}")
    algorithms = [a for a in args.algorithms.split(",") if a]
    runs: list[dict[str, Any]] = []
    nuts: dict[str, dict[str, Any]] = {}
    labels: list[str] = []
    with harness.local_ray(object_store_mb=400, num_cpus=args.cpus):
        for name in cases:
            model, shards, X, y = case_data(name, args.covtype_rows)
            if args.nuts and name in GROUPS:
                nuts[name] = nuts_reference(X, y)
                print(f"  {name} NUTS: {nuts[name]['seconds']:.1f} s, {nuts[name]['ess_per_s']:.1f} ESS/s", flush=True)
            for algorithm in algorithms:
                label = name if algorithm == "dglmc" else f"{name} · {algorithm}"
                labels.append(label)
                for rep in range(args.repeats):
                    order = list(VARIANTS) if rep % 2 == 0 else list(VARIANTS)[::-1]
                    for variant in order:
                        r = one(model, shards, VARIANTS[variant], algorithm)
                        runs.append({"case": label, "variant": variant, "repeat": rep, **r})
                        print(
                            f"  {label} chains={variant} repeat {rep + 1}: {r['chains']} chains, {r['rounds']} "
                            f"rounds, {r['wall_s']:.2f} s, min ESS {r['min_ess']:.0f}",
                            flush=True,
                        )
    rows = [
        row(label, variant, runs) + _vs_nuts(label, variant, runs, nuts, args.nuts)
        for label in labels
        for variant in VARIANTS
    ]
    table = harness.Table(
        'The default run on one machine (num_rounds="auto", seed 0, local Ray; medians over repeats)',
        ["case", "chains asked", "chains", "wall s", "set-up s", "sampling s", "other s", "rounds", "warm-up"]
        + ["min ESS", "ESS/wall s", "wall vs 4 chains", "max |Δmean|/sd vs 4 chains"]
        + (["NUTS ESS/s", "× NUTS"] if args.nuts else []),
        rows,
        [
            "other s: wall − set-up − sampling (the convergence checks, the chunks' hand-over, the result)",
            "ESS/wall s: min bulk ESS over every parameter per second of rs.sample's wall time",
            "max |Δmean|/sd: the largest difference of a posterior mean between the two runs of the first repeat, "
            "in the 4-chain run's posterior sds",
            f"{args.repeats} repeats, the order of the two alternating; {args.cpus} CPUs",
        ]
        + (
            [
                "NUTS: NumPyro on the pooled rows (4 chains vectorised, 500 warm-up, 1,000 draws, compile excluded), "
                "min bulk ESS per sampling second; × NUTS: the default run's ESS per wall second against it"
            ]
            if args.nuts
            else []
        ),
    )
    for r in runs:
        r.pop("mean"), r.pop("sd")
    payload = {"settings": harness.options(args), "ess_scale": "natural", "runs": runs, "nuts": nuts}
    payload["table"] = table.markdown()
    return harness.Report(args.label, payload, [table])


def row(name: str, variant: str, runs: list[dict[str, Any]]) -> list[Any]:
    mine = [r for r in runs if r["case"] == name and r["variant"] == variant]
    four = [r for r in runs if r["case"] == name and r["variant"] == "4"]

    def med(key: str, of: list[dict[str, Any]] = mine) -> float:
        return harness.median(r[key] for r in of)

    first, base = mine[0], four[0]
    shift = float(np.max(np.abs(first["mean"] - base["mean"]) / base["sd"]))
    return [
        name,
        variant,
        first["chains"],
        med("wall_s"),
        med("setup_s"),
        med("sampling_s"),
        med("other_s"),
        first["rounds"],
        first["warmup"],
        first["min_ess"],
        med("ess_per_wall_s"),
        med("wall_s") / med("wall_s", four),
        shift,
    ]


def _vs_nuts(
    name: str, variant: str, runs: list[dict[str, Any]], nuts: dict[str, dict[str, Any]], on: bool
) -> list[Any]:
    if not on:
        return []
    if name not in nuts:
        return [None, None]
    mine = harness.median(r["ess_per_wall_s"] for r in runs if r["case"] == name and r["variant"] == variant)
    return [nuts[name]["ess_per_s"], mine / nuts[name]["ess_per_s"]]


def main(argv: list[str] | None = None) -> None:
    harness.run(arguments(), measure, argv)


if __name__ == "__main__":
    main()
