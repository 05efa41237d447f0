"""The anchor a user would pick instead: NumPyro NUTS on the pooled data, against raysampler's default DG-LMC
(b = 4), measured side by side in one run; logistic regression with a N(0, 1) prior on every coefficient.

NUTS: 4 chains, 1000 warm-up + 2000 draws (--nuts-chains, --nuts-warmup, --nuts-draws), chains vectorized or
run one after another (--nuts-chain-method), float64, JIT compile excluded (a first short run compiles).
ESS/s = min bulk ESS over the coordinates (arviz-stats) / sampling seconds (DG-LMC's setup, the MAP and
tuning, is reported beside it). Accuracy: breast_cancer against the HMC reference in
tests/data/breast_cancer_reference.npz; covtype_like (no stored reference) against the NUTS draws themselves, as
|Δmean| in posterior sd and as a z-score over both Monte-Carlo standard errors.
Needs the optional packages: pip install numpyro jax (the `bench` extra).

    python benchmarks/nuts.py [--data breast_cancer] [--chains-dglmc 32] [--rounds 20000]
    python benchmarks/nuts.py --data covtype_like [--covtype-n 100000] [--chains-dglmc 8] [--rounds 2000]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import time

import numpy as np
from common import load_model_data, print_table, start_ray, write_json

import raysampler as rs

REF = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "breast_cancer_reference.npz"


def run_nuts(
    X: np.ndarray, y: np.ndarray, chains: int, warmup: int, draws: int, seed: int, chain_method: str
) -> tuple[np.ndarray, float]:
    """NumPyro NUTS on logistic regression with prior N(0, I): (draws (chains, draws, d), sampling seconds).

    The data are passed as arguments (jit_model_args): as closure constants a 100k-row X takes XLA minutes to
    compile. "vectorized" chains step together, each iteration as deep as the deepest tree of any chain.
    """
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
        NUTS(model),
        num_warmup=20,
        num_samples=20,
        num_chains=chains,
        chain_method=chain_method,
        progress_bar=False,
        jit_model_args=True,
    )
    warm.run(jax.random.PRNGKey(seed + 1), Xj, yj)  # compile
    mcmc = MCMC(
        NUTS(model),
        num_warmup=warmup,
        num_samples=draws,
        num_chains=chains,
        chain_method=chain_method,
        progress_bar=False,
        jit_model_args=True,
    )
    t0 = time.perf_counter()
    mcmc.run(jax.random.PRNGKey(seed), Xj, yj)
    samples = np.asarray(mcmc.get_samples(group_by_chain=True)["theta"])
    return samples, time.perf_counter() - t0


DEFAULTS = {  # per data set: DG-LMC chains and rounds (burn-in 10%)
    "breast_cancer": (32, 20000),
    "covtype_like": (8, 2000),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", choices=sorted(DEFAULTS), default="breast_cancer")
    ap.add_argument("--covtype-n", type=int, default=100_000)
    ap.add_argument("--chains-dglmc", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--nuts-warmup", type=int, default=1000)
    ap.add_argument("--nuts-draws", type=int, default=2000)
    ap.add_argument("--nuts-chains", type=int, default=4)
    ap.add_argument("--nuts-chain-method", choices=("vectorized", "sequential"), default="vectorized")
    args = ap.parse_args()
    chains = args.chains_dglmc or DEFAULTS[args.data][0]
    rounds = args.rounds or DEFAULTS[args.data][1]
    X, y, model = load_model_data(args.data, covtype_n=args.covtype_n)
    rows: list[list[str]] = []
    out: dict[str, dict[str, float]] = {}
    ref: dict[str, np.ndarray] = dict(np.load(REF)) if args.data == "breast_cancer" else {}

    def record(name: str, draws: np.ndarray, seconds: float, extra: str = "") -> None:
        res = rs.Result(draws, [str(j) for j in range(draws.shape[2])])
        ess = np.asarray(res.ess(), dtype=float)
        mean, sd = draws.mean(axis=(0, 1)), draws.std(axis=(0, 1))
        if not ref:  # the first sampler recorded (NUTS) is the reference
            ref.update(mean=mean, sd=sd, mcse=sd / np.sqrt(ess))
        err = float(np.max(np.abs(mean - ref["mean"]) / ref["sd"]))
        z = np.abs(mean - ref["mean"]) / np.sqrt((sd / np.sqrt(ess)) ** 2 + ref.get("mcse", 0 * sd) ** 2)
        ratio = sd / ref["sd"]
        rows.append(
            [
                name,
                str(draws.shape[0]),
                str(draws.shape[1]),
                f"{seconds:.2f}",
                f"{ess.min():.0f}",
                f"{ess.min() / seconds:.1f}",
                f"{err:.3f}",
                f"{z.max():.1f}",
                f"{ratio.min():.3f}-{ratio.max():.3f}",
                extra,
            ]
        )
        out[name] = {
            "chains": draws.shape[0],
            "draws": draws.shape[1],
            "seconds": seconds,
            "min_ess": float(ess.min()),
            "ess_per_s": float(ess.min() / seconds),
            "max_mean_err_sd": err,
            "max_z": float(z.max()),
        }

    samples, secs = run_nuts(
        X,
        y,
        chains=args.nuts_chains,
        warmup=args.nuts_warmup,
        draws=args.nuts_draws,
        seed=args.seed,
        chain_method=args.nuts_chain_method,
    )
    record("NUTS (numpyro, pooled)", samples, secs, "compile excluded")
    start_ray(object_store_mb=200)
    shards = rs.shard(X, y, num_shards=4, strategy="random", seed=0)
    for executor in ("ray", "local"):
        res = rs.sample(
            model,
            shards,
            chains=chains,
            num_rounds=rounds,
            burn_in=rounds // 10,
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
    against = "the HMC reference" if args.data == "breast_cancer" else "NUTS"
    table = print_table(
        f"NUTS vs default DG-LMC on {args.data} (n = {len(y)}, d = {X.shape[1]}; ESS/s = min bulk ESS / sampling s)",
        ["sampler", "chains", "draws", "seconds", "min ESS", "ESS/s", "max |Δmean|/sd", "max z", "sd ratio", "note"],
        rows,
        [f"accuracy against {against}; z = |Δmean| / combined MCSE"],
    )
    nuts = out["NUTS (numpyro, pooled)"]["ess_per_s"]
    for k, v in out.items():
        v["fraction_of_nuts"] = v["ess_per_s"] / nuts
        print(f"{k}: {v['fraction_of_nuts']:.2f}x NUTS ESS/s")
    name = "nuts" if args.data == "breast_cancer" else f"nuts_{args.data}"
    write_json(name, {"settings": vars(args), "runs": out, "table": table})


if __name__ == "__main__":
    main()
