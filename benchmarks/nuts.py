"""The anchor a user would pick instead: NumPyro NUTS on the pooled breast_cancer data, against raysampler's
default DG-LMC (b = 4), measured side by side in one run.

NUTS: 4 chains, 1000 warm-up + 2000 draws, float64, JIT compile excluded (a first short run compiles).
ESS/s = min bulk ESS over the 31 coordinates (arviz-stats) / sampling seconds; accuracy against the HMC
reference in tests/data/breast_cancer_reference.npz. Needs the optional packages: pip install numpyro jax

    python benchmarks/nuts.py [--chains-dglmc 32] [--rounds 20000]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import time

import numpy as np
from common import print_table, start_ray, write_json

import raysampler as rs

REF = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "breast_cancer_reference.npz"


def run_nuts(X: np.ndarray, y: np.ndarray, chains: int, warmup: int, draws: int, seed: int) -> tuple[np.ndarray, float]:
    """NumPyro NUTS on logistic regression with prior N(0, I): (draws (chains, draws, d), sampling seconds)."""
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=1")
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS

    def model(X, y):
        theta = numpyro.sample("theta", dist.Normal(jnp.zeros(X.shape[1]), 1.0).to_event(1))
        numpyro.sample("y", dist.Bernoulli(logits=X @ theta), obs=y)

    Xj, yj = jnp.asarray(X), jnp.asarray(y)
    warm = MCMC(
        NUTS(model), num_warmup=20, num_samples=20, num_chains=chains, chain_method="vectorized", progress_bar=False
    )
    warm.run(jax.random.PRNGKey(seed + 1), Xj, yj)  # compile
    mcmc = MCMC(
        NUTS(model),
        num_warmup=warmup,
        num_samples=draws,
        num_chains=chains,
        chain_method="vectorized",
        progress_bar=False,
    )
    t0 = time.perf_counter()
    mcmc.run(jax.random.PRNGKey(seed), Xj, yj)
    samples = np.asarray(mcmc.get_samples(group_by_chain=True)["theta"])
    return samples, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chains-dglmc", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    ref = np.load(REF)
    X, y = rs.datasets.load("breast_cancer")
    rows = []
    out = {}

    def record(name: str, draws: np.ndarray, seconds: float, extra: str = "") -> None:
        res = rs.Result(draws, [str(j) for j in range(draws.shape[2])])
        ess = float(res.ess().min())
        err = float(np.max(np.abs(draws.mean(axis=(0, 1)) - ref["mean"]) / ref["sd"]))
        ratio = draws.std(axis=(0, 1)) / ref["sd"]
        rows.append(
            [
                name,
                draws.shape[0],
                draws.shape[1],
                f"{seconds:.2f}",
                f"{ess:.0f}",
                f"{ess / seconds:.1f}",
                f"{err:.3f}",
                f"{ratio.min():.3f}-{ratio.max():.3f}",
                extra,
            ]
        )
        out[name] = {
            "chains": draws.shape[0],
            "draws": draws.shape[1],
            "seconds": seconds,
            "min_ess": ess,
            "ess_per_s": ess / seconds,
            "max_mean_err_sd": err,
        }

    samples, secs = run_nuts(X, y, chains=4, warmup=1000, draws=2000, seed=args.seed)
    record("NUTS (numpyro, pooled)", samples, secs, "compile excluded")
    start_ray(object_store_mb=200)
    shards = rs.shard(X, y, num_shards=4)
    for executor in ("ray", "local"):
        res = rs.sample(
            rs.models.LogisticRegression(prior_scale=1.0),
            shards,
            chains=args.chains_dglmc,
            num_rounds=args.rounds,
            burn_in=2000,
            seed=args.seed,
            executor=executor,
            progress=False,
        )
        record(
            f"DG-LMC default, b=4 ({executor})",
            res.draws,
            res.stats["sampling_time_s"],
            f"setup {res.stats['setup_time_s']:.1f}s excluded",
        )
    table = print_table(
        "NUTS vs default DG-LMC on breast_cancer (ESS/s = min bulk ESS / sampling seconds)",
        ["sampler", "chains", "draws", "seconds", "min ESS", "ESS/s", "max |Δmean|/sd", "sd ratio", "note"],
        rows,
    )
    nuts = out["NUTS (numpyro, pooled)"]["ess_per_s"]
    for k, v in out.items():
        v["fraction_of_nuts"] = v["ess_per_s"] / nuts
        print(f"{k}: {v['fraction_of_nuts']:.2f}x NUTS ESS/s")
    write_json("nuts", {"runs": out, "table": table})


if __name__ == "__main__":
    main()
