"""Group effects at scale: a hierarchical logistic model with 4 sites × G hospitals (the built-in `hospitals` data),
default DG-LMC on Ray (one shard per site, split by hospital) against NumPyro NUTS on the pooled data, measured side
by side in one run, for each case:

- "hospitals": 4 × 100 hospitals of 10-90 patients (n = 19,814, 404 parameters), as before;
- "easy": 4 × 60 well-identified hospitals of 40-98 patients (n ≈ 16,500), where NUTS mixes well;
- "large": 4 × 1,000 hospitals (n ≈ 200,000, 4,004 parameters): DG-LMC's set-up and ESS/s;
- "unequal": 4 × 60 hospitals of unequal sizes, 15 to 200 patients, log-uniform (n ≈ 16,500, 244 parameters): many
  small hospitals and a few large ones, as registries have;
- "one_large": the same with one very large hospital (its last, 4,000 patients) at one site;
- "radon_sized": 4 × 21 hospitals of 1 to 60 patients, log-uniform (n ≈ 1,000, 88 parameters), radon's size
  (919 homes, 85 counties): hundreds of rows and dozens of groups, where the round's fixed cost dominates.

`--time-budget S` runs DG-LMC as a user with a deadline does: rounds without end (`num_rounds` 10⁶) stopped by
`time_budget_s=S`, with `--burn-in` rounds first (default: DG-LMC's own), ESS/s over the sampling seconds.

Both sample the same posterior: β ~ N(0, 2.5²), sd ~ HalfNormal(1), r_g = sd·η_g, η_g ~ N(0, 1). NUTS: 4 chains
vectorized, float64, JIT compile excluded (JAX's compile timings in the timed run subtracted), warm-up included in its
time. DG-LMC: its defaults, `--chains` chains (several values: one DG-LMC run each; K chains cost one matrix product),
burn-in included in its sampling time, set-up (the marginal mode, tuning, actors) reported beside it. ESS/s = min bulk
ESS (arviz-stats) over every reported parameter (β, sd and all r_g) per second. Accuracy: DG-LMC's means against NUTS'
in NUTS posterior sds, and the ratio of sds. Per round: DG-LMC's wall time and its workers' compute time.

    python benchmarks/perf/groups.py [--cases hospitals,easy,large] [--chains 4,16] [--rounds 2000]
    python benchmarks/perf/groups.py --cases large --chains 4 --site-cpus 4 --nuts-chain-method parallel
    python benchmarks/perf/groups.py --cases unequal --chains 4 --time-budget 150 --burn-in 500

The second form is the 16-core comparison: each site a Ray node of its own with 4 CPUs, its hospitals in a parquet
file there, split at the site over its cores (`Shard(parts="auto")`); NUTS' chains each on a core of their own.
Results: benchmarks/perf/results/groups.json. Needs the `bench` extra (numpyro, jax).
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _path  # noqa: F401  (puts benchmarks/ on sys.path for harness)
import harness
import numpy as np

import raysampler as rs
from raysampler.models.contract import natural_values

SITES = 4
#: the cases: hospitals per site and the data set's other options
CASES: dict[str, dict[str, Any]] = {
    "hospitals": {"per_site": 100, "options": {}},
    "easy": {"per_site": 60, "options": {"min_rows": 40, "max_rows": 98}},
    # NUTS on 200k rows and 4,004 parameters takes long on 2 cores: fewer NUTS iterations and DG-LMC rounds (ESS/s
    # is a rate, so the comparison stands; `--large-full` keeps the command line's)
    "large": {"per_site": 1000, "options": {}, "nuts": (200, 200), "rounds": 400},
    "unequal": {"per_site": 60, "options": {"min_rows": 15, "max_rows": 200, "sizes": "log-uniform"}},
    "one_large": {
        "per_site": 60,
        "options": {"min_rows": 15, "max_rows": 200, "sizes": "log-uniform", "large_group": 4000},
    },
    # radon's size (919 homes in 85 counties, 1 to 116 homes each, most with a handful): 4 × 21 hospitals of 1 to
    # 60 patients, log-uniform (n ≈ 1,000), where the round's fixed cost, not its rows, sets DG-LMC's speed
    "radon_sized": {"per_site": 21, "options": {"min_rows": 1, "max_rows": 60, "sizes": "log-uniform"}},
}


def run_nuts(
    X: np.ndarray,
    y: np.ndarray,
    chains: int,
    warmup: int,
    draws: int,
    seed: int,
    chain_method: str = "vectorized",
) -> tuple[dict, float]:
    """NumPyro NUTS on the pooled data: ({"beta", "sd", "r"} draws (chains, draws, ...), sampling seconds).
    "parallel" runs each chain on its own XLA CPU device (a thread each), so chains do not wait for the deepest tree."""
    harness.numpyro_on_cpu(chains if chain_method == "parallel" else 1)
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS

    labels, code = np.unique(X[:, 3], return_inverse=True)
    G = labels.size

    def model(Xc, code, y):
        beta = numpyro.sample("beta", dist.Normal(0.0, 2.5).expand([3]).to_event(1))
        sd = numpyro.sample("sd", dist.HalfNormal(1.0))
        eta = numpyro.sample("eta", dist.Normal(0.0, 1.0).expand([G]).to_event(1))
        r = numpyro.deterministic("r", sd * eta)
        numpyro.sample("y", dist.Bernoulli(logits=Xc @ beta + r[code]), obs=y)

    args = (jnp.asarray(X[:, :3]), jnp.asarray(code), jnp.asarray(y))

    def mcmc(w: int, d: int) -> Any:
        return MCMC(NUTS(model), num_warmup=w, num_samples=d, num_chains=chains, chain_method=chain_method,
                    progress_bar=False, jit_model_args=True)  # fmt: skip

    mcmc(20, 20).run(jax.random.PRNGKey(seed + 1), *args)  # compile
    m = mcmc(warmup, draws)
    with harness.jax_compile_seconds() as compiled:  # NumPyro compiles again in this run: not sampling time
        t0 = time.perf_counter()
        m.run(jax.random.PRNGKey(seed), *args)
        s = m.get_samples(group_by_chain=True)
        out = {"beta": np.asarray(s["beta"]), "sd": np.asarray(s["sd"])[..., None], "r": np.asarray(s["r"])}
        wall = time.perf_counter() - t0
    return out, wall - compiled[0]


@contextlib.contextmanager
def placed(shards: list[rs.Shard], cols: list[str], args: argparse.Namespace) -> Iterator[list[rs.Shard]]:
    """Where DG-LMC runs: a local Ray with `--cpus` CPUs and the shards in memory or, with `--site-cpus`, one
    simulated site node per shard, its rows in a parquet file there, split at the site over its cores."""
    if not args.site_cpus:
        with harness.local_ray(object_store_mb=300, num_cpus=args.cpus):
            yield shards
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    with (
        tempfile.TemporaryDirectory(prefix="rs-groups-") as tmp,
        harness.site_cluster([args.site_cpus] * len(shards)) as sites,
    ):
        files = []
        for shard, site in zip(shards, sites):
            assert shard.X is not None and shard.y is not None
            path = Path(tmp) / f"{site}.parquet"
            pq.write_table(pa.table({"y": shard.y} | {c: shard.X[:, j] for j, c in enumerate(cols)}), path)
            files.append(rs.Shard(path=str(path), site=site, parts="auto"))
        yield files


def ess_all(draws: np.ndarray) -> np.ndarray:
    """Bulk ESS per coordinate of (chains, draws, k)."""
    return np.asarray(rs.Result(draws, [str(j) for j in range(draws.shape[2])]).ess(), dtype=float)


def arguments() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__, __file__, ray=True)
    ap.add_argument("--cases", default="hospitals,easy", help=f"comma-separated, of {', '.join(CASES)}")
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--chains", default="4,16", help="DG-LMC chains, comma-separated (one run each)")
    ap.add_argument("--nuts-chains", type=int, default=4)
    ap.add_argument("--nuts-warmup", type=int, default=500)
    ap.add_argument("--nuts-draws", type=int, default=1000)
    ap.add_argument("--nuts-chain-method", choices=("vectorized", "parallel"), default="vectorized")
    ap.add_argument(
        "--site-cpus",
        type=int,
        default=0,
        help="DG-LMC on simulated site nodes of this many CPUs each (a Ray cluster on this machine), each site's rows "
        "in a parquet file at the site, split there over its cores (Shard(parts='auto')); 0 (default): one local Ray "
        "with --cpus CPUs and the shards in memory",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--time-budget",
        type=float,
        default=0.0,
        help="DG-LMC stopped by time_budget_s (seconds) instead of --rounds (0: --rounds)",
    )
    ap.add_argument("--burn-in", type=int, default=None, help="DG-LMC's burn-in rounds (default: its own)")
    ap.add_argument("--large-full", action="store_true", help="the large case with the given NUTS draws and rounds")
    return ap


def summary(draws: np.ndarray, secs: float) -> dict[str, Any]:
    e = ess_all(draws)
    return {
        "chains": draws.shape[0],
        "draws": draws.shape[1],
        "seconds": secs,
        "min_ess_all": float(e.min()),
        "min_ess_global": float(e[:4].min()),
        "ess_per_s_all": float(e.min() / secs),
        "ess_per_s_global": float(e[:4].min() / secs),
    }


def measure_case(name: str, args: argparse.Namespace) -> tuple[dict[str, Any], harness.Table]:
    case = CASES[name]
    G = SITES * case["per_site"]
    X, y = rs.datasets.load("hospitals", seed=args.seed, n_groups=G, **case["options"])
    cols = rs.datasets.columns("hospitals", n_groups=G, **case["options"])
    full = args.large_full or "nuts" not in case
    warmup, draws = (args.nuts_warmup, args.nuts_draws) if full else case["nuts"]
    rounds = args.rounds if full else case["rounds"]
    nuts, nuts_s = run_nuts(X, y, args.nuts_chains, warmup, draws, args.seed, args.nuts_chain_method)
    nuts_flat = np.concatenate([nuts["beta"], nuts["sd"], nuts["r"]], axis=-1)
    runs: dict[str, dict[str, Any]] = {"NUTS (numpyro, pooled)": summary(nuts_flat, nuts_s)}
    print(f"{name}: NUTS {nuts_s:.1f} s, {runs['NUTS (numpyro, pooled)']['ess_per_s_all']:.3f} ESS/s", flush=True)
    ref_mean, ref_sd = nuts_flat.mean(axis=(0, 1)), nuts_flat.std(axis=(0, 1))
    model = rs.models.LogisticRegression(
        prior_scale=2.5, group_effects=rs.GroupEffects("hospital", sd_prior=rs.priors.HalfNormal(1.0))
    )
    shards = rs.shard(X, y, num_shards=SITES, columns=cols, by="hospital")
    with placed(shards, cols, args) as run_shards:  # one Ray (or cluster) for every chain count
        for chains in [int(c) for c in str(args.chains).split(",")]:
            length: dict[str, Any] = {"num_rounds": rounds}
            if args.time_budget:  # a user's deadline: rounds without end, stopped by the budget
                length = {"num_rounds": 1_000_000, "time_budget_s": args.time_budget}
            if args.burn_in is not None:
                length["burn_in"] = args.burn_in
            t0 = time.perf_counter()
            res = rs.sample(model, run_shards, chains=chains, seed=args.seed, executor="ray", progress=False, **length)
            wall = time.perf_counter() - t0
            dg = natural_values(res.param_blocks, res.draws)  # β, sd, r in label order (1..G), as NUTS'
            stats = res.run_stats
            r = summary(dg, stats.sampling_time_s)
            err = np.abs(dg.mean(axis=(0, 1)) - ref_mean) / ref_sd
            ratio = dg.std(axis=(0, 1)) / ref_sd
            r.update(
                setup_s=res.outcome.timings.setup_s,
                wall_s=wall,
                rounds=int(stats.rounds),
                round_ms=1000.0 * stats.sampling_time_s / stats.rounds,
                processes=len({p.pid for p in stats.placement}),
                worker_compute_ms=(1000.0 * np.asarray(stats.worker_compute_s) / stats.rounds).tolist(),
                max_mean_err_sd=float(err.max()),
                mean_mean_err_sd=float(err.mean()),
                sd_ratio_min=float(ratio.min()),
                sd_ratio_max=float(ratio.max()),
            )
            runs[f"DG-LMC default, {chains} chains, 4 sites (ray)"] = r
            print(f"{name}: DG-LMC {chains} chains {r['seconds']:.1f} s, {r['ess_per_s_all']:.3f} ESS/s", flush=True)
    nuts_r = runs["NUTS (numpyro, pooled)"]
    for r in runs.values():
        r["x_nuts_all"] = r["ess_per_s_all"] / nuts_r["ess_per_s_all"]
    where = (f"{SITES} site nodes of {args.site_cpus} CPUs, each site's file split at the site" if args.site_cpus
             else f"a local Ray of {args.cpus} CPUs")  # fmt: skip
    length = (f"stopped by time_budget_s={args.time_budget:g}" if args.time_budget else f"{rounds} rounds") + (
        f", burn-in {args.burn_in}" if args.burn_in is not None else ""
    )
    notes = [f"n = {len(y)}, {G} group effects; NUTS {args.nuts_chains} chains ({args.nuts_chain_method}), warm-up "
             f"{warmup} (timed), compile excluded; DG-LMC on {where}, {length}"]  # fmt: skip
    for k, r in runs.items():
        if "setup_s" in r:
            notes.append(
                f"{k}: set-up {r['setup_s']:.1f} s (excluded), {r['processes']} worker processes, "
                f"{r['round_ms']:.1f} ms per round (workers' compute "
                f"{', '.join(f'{v:.1f}' for v in r['worker_compute_ms'])} ms); against NUTS |Δmean|/sd max "
                f"{r['max_mean_err_sd']:.3f}, sd ratio {r['sd_ratio_min']:.3f}-{r['sd_ratio_max']:.3f}"
            )
    table = harness.Table(
        f"{name}: hierarchical logistic, {SITES} sites × {case['per_site']} hospitals (n = {len(y)}): NUTS vs DG-LMC",
        ["sampler", "chains", "draws", "seconds", "min ESS (all)", "ESS/s (all)", "x NUTS", "set-up s"],
        [_row(k, r) for k, r in runs.items()],
        notes,
    )
    return {"n": len(y), "groups": G, "runs": runs, "table": table.markdown()}, table


def _row(name: str, r: dict[str, Any]) -> list[Any]:
    setup = f"{r['setup_s']:.1f}" if "setup_s" in r else "-"
    return [name, r["chains"], r["draws"], f"{r['seconds']:.1f}", f"{r['min_ess_all']:.0f}",
            f"{r['ess_per_s_all']:.2f}", f"{r['x_nuts_all']:.2f}", setup]  # fmt: skip


def measure(args: argparse.Namespace) -> harness.Report:
    cases: dict[str, Any] = {}
    tables = []
    for name in str(args.cases).split(","):
        cases[name], table = measure_case(name, args)
        tables.append(table)
    return harness.Report("groups", {"settings": harness.options(args), "cases": cases}, tables)


def main(argv: list[str] | None = None) -> None:
    harness.run(arguments(), measure, argv)


if __name__ == "__main__":
    main()
