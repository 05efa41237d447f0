"""Group effects at scale: a hierarchical logistic model with 4 sites × `--groups-per-site` hospitals (the built-in
`hospitals` data), default DG-LMC on Ray (one shard per site, split by hospital) against NumPyro NUTS on the pooled
data, measured side by side in one run.

Both sample the same posterior: β ~ N(0, 2.5²), sd ~ HalfNormal(1), r_g = sd·η_g, η_g ~ N(0, 1). NUTS: 4 chains
vectorized, float64, JIT compile excluded (a short first run compiles). ESS/s = min bulk ESS (arviz-stats) over
every reported parameter (β, sd and all r_g), and over the global ones (β, sd) alone, per sampling second; DG-LMC's
setup (joint MAP, tuning, actors) is reported beside it. Accuracy: DG-LMC's means against NUTS' in NUTS posterior
sds, and the ratio of sds.

    python benchmarks/perf/groups.py [--groups-per-site 100] [--rounds 2000] [--nuts-draws 1000]
Results: benchmarks/perf/results/groups.json. Needs the `bench` extra (numpyro, jax).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import _path  # noqa: F401  (puts benchmarks/ on sys.path for harness)
import harness
import numpy as np

import raysampler as rs
from raysampler.models.contract import natural_values

SITES = 4


def run_nuts(X: np.ndarray, y: np.ndarray, chains: int, warmup: int, draws: int, seed: int) -> tuple[dict, float]:
    """NumPyro NUTS on the pooled data: ({"beta", "sd", "r"} draws (chains, draws, ...), sampling seconds)."""
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=1")
    import jax

    jax.config.update("jax_enable_x64", True)
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
        return MCMC(NUTS(model), num_warmup=w, num_samples=d, num_chains=chains, chain_method="vectorized",
                    progress_bar=False, jit_model_args=True)  # fmt: skip

    mcmc(20, 20).run(jax.random.PRNGKey(seed + 1), *args)  # compile
    m = mcmc(warmup, draws)
    t0 = time.perf_counter()
    m.run(jax.random.PRNGKey(seed), *args)
    s = m.get_samples(group_by_chain=True)
    out = {"beta": np.asarray(s["beta"]), "sd": np.asarray(s["sd"])[..., None], "r": np.asarray(s["r"])}
    return out, time.perf_counter() - t0


def ess_all(draws: np.ndarray) -> np.ndarray:
    """Bulk ESS per coordinate of (chains, draws, k)."""
    return np.asarray(rs.Result(draws, [str(j) for j in range(draws.shape[2])]).ess(), dtype=float)


def arguments() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__, __file__, ray=True)
    ap.add_argument("--groups-per-site", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--nuts-warmup", type=int, default=500)
    ap.add_argument("--nuts-draws", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    return ap


def measure(args: argparse.Namespace) -> harness.Report:
    G = SITES * args.groups_per_site
    X, y = rs.datasets.load("hospitals", seed=args.seed, n_groups=G)
    cols = rs.datasets.columns("hospitals", n_groups=G)
    nuts, nuts_s = run_nuts(X, y, args.chains, args.nuts_warmup, args.nuts_draws, args.seed)
    nuts_flat = np.concatenate([nuts["beta"], nuts["sd"], nuts["r"]], axis=-1)
    model = rs.models.LogisticRegression(
        prior_scale=2.5, group_effects=rs.GroupEffects("hospital", sd_prior=rs.priors.HalfNormal(1.0))
    )
    shards = rs.shard(X, y, num_shards=SITES, columns=cols, by="hospital")
    with harness.local_ray(object_store_mb=300, num_cpus=args.cpus):
        t0 = time.perf_counter()
        res = rs.sample(model, shards, chains=args.chains, num_rounds=args.rounds, seed=args.seed, executor="ray",
                        progress=False)  # fmt: skip
        wall = time.perf_counter() - t0
    dg = natural_values(res.param_blocks, res.draws)  # β, sd, r in label order (1..G), as NUTS'
    runs: dict[str, dict[str, Any]] = {}
    for name, draws, secs in (("NUTS (numpyro, pooled)", nuts_flat, nuts_s),
                              ("DG-LMC default, 4 sites (ray)", dg, res.run_stats.sampling_time_s)):  # fmt: skip
        e = ess_all(draws)
        runs[name] = {
            "chains": draws.shape[0],
            "draws": draws.shape[1],
            "seconds": secs,
            "min_ess_all": float(e.min()),
            "min_ess_global": float(e[:4].min()),
            "ess_per_s_all": float(e.min() / secs),
            "ess_per_s_global": float(e[:4].min() / secs),
        }
    ref_mean, ref_sd = nuts_flat.mean(axis=(0, 1)), nuts_flat.std(axis=(0, 1))
    err = np.abs(dg.mean(axis=(0, 1)) - ref_mean) / ref_sd
    ratio = dg.std(axis=(0, 1)) / ref_sd
    dgr = runs["DG-LMC default, 4 sites (ray)"]
    dgr.update(
        setup_s=res.outcome.timings.setup_s,
        wall_s=wall,
        max_mean_err_sd=float(err.max()),
        mean_mean_err_sd=float(err.mean()),
        sd_ratio_min=float(ratio.min()),
        sd_ratio_max=float(ratio.max()),
    )
    nuts_r = runs["NUTS (numpyro, pooled)"]
    for r in runs.values():
        r["x_nuts_all"] = r["ess_per_s_all"] / nuts_r["ess_per_s_all"]
        r["x_nuts_global"] = r["ess_per_s_global"] / nuts_r["ess_per_s_global"]
    table = harness.Table(
        f"Hierarchical logistic, {SITES} sites × {args.groups_per_site} hospitals (n = {len(y)}, {G} group effects): "
        "NUTS vs default DG-LMC",
        [
            "sampler",
            "chains",
            "draws",
            "seconds",
            "min ESS (all)",
            "ESS/s (all)",
            "x NUTS",
            "min ESS (β, sd)",
            "ESS/s (β, sd)",
            "x NUTS",
        ],
        [
            [
                name,
                r["chains"],
                r["draws"],
                f"{r['seconds']:.1f}",
                f"{r['min_ess_all']:.0f}",
                f"{r['ess_per_s_all']:.2f}",
                f"{r['x_nuts_all']:.2f}",
                f"{r['min_ess_global']:.0f}",
                f"{r['ess_per_s_global']:.2f}",
                f"{r['x_nuts_global']:.2f}",
            ]
            for name, r in runs.items()
        ],
        [
            f"DG-LMC setup {dgr['setup_s']:.1f}s excluded (wall {dgr['wall_s']:.1f}s); NUTS compile excluded",
            f"DG-LMC against NUTS: |Δmean|/sd max {dgr['max_mean_err_sd']:.3f}, mean {dgr['mean_mean_err_sd']:.3f}; "
            f"sd ratio {dgr['sd_ratio_min']:.3f}-{dgr['sd_ratio_max']:.3f}",
        ],
    )
    return harness.Report("groups", {"settings": harness.options(args), "runs": runs, "table": table.markdown()},
                          [table])  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    harness.run(arguments(), measure, argv)


if __name__ == "__main__":
    main()
