"""The anchor a user would pick instead: NumPyro NUTS on the pooled data, against raysampler's default DG-LMC
(b = 4), measured side by side in one run; logistic regression with a N(0, 1) prior on every coefficient.

NUTS: 4 chains, 1000 warm-up + 2000 draws (--nuts-chains, --nuts-warmup, --nuts-draws), chains vectorized or
run one after another (--nuts-chain-method), float64, JIT compile excluded: NumPyro compiles on every run, so
JAX's own compile timings within the timed run are subtracted (`harness.jax_compile_seconds`).
ESS/s = min bulk ESS over the coordinates (arviz-stats) / sampling seconds (DG-LMC's setup, the MAP and
tuning, is reported beside it). Accuracy: breast_cancer against the HMC reference in
tests/data/breast_cancer_reference.npz; covtype_like (no stored reference) against the NUTS draws themselves, as
|Δmean| in posterior sd and as a z-score over both Monte-Carlo standard errors.
Needs the optional packages: pip install numpyro jax (the `bench` extra).

    python benchmarks/perf/nuts.py [--data breast_cancer] [--chains-dglmc 32,4] [--rounds 20000]
    python benchmarks/perf/nuts.py --data covtype_like [--covtype-n 100000] [--chains-dglmc 8] [--rounds 2000]
    python benchmarks/perf/nuts.py --executors ray --worker-processes 0,4   # the default's processes against four
    python benchmarks/perf/nuts.py --executors ray --recentre auto,false    # the re-centred local proposal, and not

NUTS runs on the CPU even where JAX could take a GPU (`harness.numpyro_on_cpu`).
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

REF = harness.REPO_DIR / "tests" / "data" / "breast_cancer_reference.npz"


def run_nuts(
    X: np.ndarray, y: np.ndarray, chains: int, warmup: int, draws: int, seed: int, chain_method: str
) -> tuple[np.ndarray, float]:
    """NumPyro NUTS on logistic regression with prior N(0, I): (draws (chains, draws, d), sampling seconds).

    The data are passed as arguments (jit_model_args): as closure constants a 100k-row X takes XLA minutes to
    compile. "vectorized" chains step together, each iteration as deep as the deepest tree of any chain.
    """
    harness.numpyro_on_cpu()
    import jax
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
    with harness.jax_compile_seconds() as compiled:  # NumPyro compiles again in this run: not sampling time
        t0 = time.perf_counter()
        mcmc.run(jax.random.PRNGKey(seed), Xj, yj)
        samples = np.asarray(mcmc.get_samples(group_by_chain=True)["theta"])
        wall = time.perf_counter() - t0
    return samples, wall - compiled[0]


DEFAULTS = {  # per data set: DG-LMC chain counts (each measured against the same NUTS run) and rounds (burn-in 10%)
    "breast_cancer": ((32, 4), 20000),
    "covtype_like": ((8,), 2000),
}
NUTS_NAME = "NUTS (numpyro, pooled)"


def arguments() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__, __file__, ray=True)
    ap.add_argument("--data", choices=sorted(DEFAULTS), default="breast_cancer")
    ap.add_argument("--covtype-n", type=int, default=100_000)
    ap.add_argument(
        "--chains-dglmc",
        type=lambda v: tuple(int(c) for c in v.split(",")),
        default=None,
        help="DG-LMC chain counts, comma-separated (default: 32,4 on breast_cancer, 8 on covtype_like)",
    )
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument(
        "--executors",
        type=lambda v: tuple(e for e in v.split(",") if e),
        default=("ray", "local"),
        help="DG-LMC executors, comma-separated, of ray and local (default: both)",
    )
    ap.add_argument(
        "--worker-processes",
        type=lambda v: tuple(int(c) for c in v.split(",")),
        default=(0,),
        help="worker processes for the Ray runs, comma-separated, one run each (RAYSAMPLER_WORKER_PROCESSES; "
        "0, the default: as many as the shards' work pays for)",
    )
    ap.add_argument(
        "--recentre",
        type=lambda v: tuple({"auto": "auto", "true": True, "false": False}[c] for c in v.split(",")),
        default=("auto",),
        help="DG-LMC's recentre setting, comma-separated of auto, true and false, one run each (default: auto)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--nuts-warmup", type=int, default=1000)
    ap.add_argument("--nuts-draws", type=int, default=2000)
    ap.add_argument("--nuts-chains", type=int, default=4)
    ap.add_argument("--nuts-chain-method", choices=("vectorized", "sequential"), default="vectorized")
    return ap


def measure(args: argparse.Namespace) -> harness.Report:
    chain_counts = args.chains_dglmc or DEFAULTS[args.data][0]
    rounds = args.rounds or DEFAULTS[args.data][1]
    X, y, model = harness.load_model_data(args.data, covtype_n=args.covtype_n)
    samples, secs = run_nuts(
        X,
        y,
        chains=args.nuts_chains,
        warmup=args.nuts_warmup,
        draws=args.nuts_draws,
        seed=args.seed,
        chain_method=args.nuts_chain_method,
    )
    ref: dict[str, np.ndarray] = dict(np.load(REF)) if args.data == "breast_cancer" else {}
    if not ref:  # no stored reference: the NUTS draws are it
        ref = moments(samples)
    runs = {NUTS_NAME: compare(samples, secs, ref)}
    notes = {NUTS_NAME: "compile excluded"}
    with harness.local_ray(object_store_mb=200, num_cpus=args.cpus):
        shards = rs.shard(X, y, num_shards=4, strategy="random", seed=0)
        processes_of = {e: args.worker_processes if e == "ray" else (0,) for e in args.executors}
        variants = [(e, k, r) for e in args.executors for k in processes_of[e] for r in args.recentre]
        for chains in chain_counts:
            for executor, processes, recentre in variants:
                os.environ["RAYSAMPLER_WORKER_PROCESSES"] = str(processes)
                res = rs.sample(
                    model,
                    shards,
                    chains=chains,
                    num_rounds=rounds,
                    burn_in=rounds // 10,
                    seed=args.seed,
                    executor=executor,
                    progress=False,
                    recentre=recentre,
                )
                chosen = f", {processes} worker processes set" if processes else ""
                chosen += f", recentre={recentre}" if recentre != "auto" else ""
                name = f"DG-LMC default, b=4, {chains} chains ({executor}{chosen})"
                runs[name] = compare(res.draws, res.run_stats.sampling_time_s, ref)
                bd = res.run_stats.breakdown()
                runs[name] |= {"processes": bd.processes, "median_round_ms": 1e3 * bd.round_s}
                notes[name] = (
                    f"setup {res.outcome.timings.setup_s:.1f}s excluded; {bd.processes} process(es), "
                    f"median round {1e3 * bd.round_s:.3f} ms"
                )
                print(f"{name}: {runs[name]['ess_per_s']:.1f} ESS/s", flush=True)
        os.environ.pop("RAYSAMPLER_WORKER_PROCESSES", None)
    nuts = runs[NUTS_NAME]["ess_per_s"]
    for v in runs.values():
        v["fraction_of_nuts"] = v["ess_per_s"] / nuts
    against = "the HMC reference" if args.data == "breast_cancer" else "NUTS"
    table = harness.Table(
        f"NUTS vs default DG-LMC on {args.data} (n = {len(y)}, d = {X.shape[1]}; ESS/s = min bulk ESS / sampling s)",
        ["sampler", "chains", "draws", "seconds", "min ESS", "ESS/s", "max |Δmean|/sd", "max z", "sd ratio"]
        + ["x NUTS ESS/s", "note"],
        [
            [name, r["chains"], r["draws"], f"{r['seconds']:.2f}", f"{r['min_ess']:.0f}", f"{r['ess_per_s']:.1f}"]
            + [f"{r['max_mean_err_sd']:.3f}", f"{r['max_z']:.1f}", f"{r['sd_ratio_min']:.3f}-{r['sd_ratio_max']:.3f}"]
            + [f"{r['fraction_of_nuts']:.2f}", notes[name]]
            for name, r in runs.items()
        ],
        [f"accuracy against {against}; z = |Δmean| / combined MCSE"],
    )
    name = "nuts" if args.data == "breast_cancer" else f"nuts_{args.data}"
    return harness.Report(name, {"settings": harness.options(args), "runs": runs, "table": table.markdown()}, [table])


def moments(draws: np.ndarray) -> dict[str, np.ndarray]:
    """Mean, sd and Monte-Carlo standard error of the mean per coordinate of (chains, draws, d) draws."""
    ess = np.asarray(rs.Result(draws, [str(j) for j in range(draws.shape[2])]).ess(), dtype=float)
    sd = draws.std(axis=(0, 1))
    return {"mean": draws.mean(axis=(0, 1)), "sd": sd, "mcse": sd / np.sqrt(ess), "ess": ess}


def compare(draws: np.ndarray, seconds: float, ref: dict[str, np.ndarray]) -> dict[str, Any]:
    """A sampler's ESS/s and its errors against `ref` (|Δmean| in ref sds, z over both MCSEs, sd ratio)."""
    m = moments(draws)
    ess, err = m["ess"], np.abs(m["mean"] - ref["mean"])
    z = err / np.sqrt(m["mcse"] ** 2 + ref.get("mcse", 0 * m["sd"]) ** 2)
    ratio = m["sd"] / ref["sd"]
    return {
        "chains": draws.shape[0],
        "draws": draws.shape[1],
        "seconds": seconds,
        "min_ess": float(ess.min()),
        "ess_per_s": float(ess.min() / seconds),
        "max_mean_err_sd": float(np.max(err / ref["sd"])),
        "max_z": float(z.max()),
        "sd_ratio_min": float(ratio.min()),
        "sd_ratio_max": float(ratio.max()),
    }


def main(argv: list[str] | None = None) -> None:
    harness.run(arguments(), measure, argv)


if __name__ == "__main__":
    main()
