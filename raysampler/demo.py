"""The main job, end to end: DG-LMC on breast_cancer (4 shards) on a local Ray, draws streamed as they come,
then the posterior summary and the run's statistics.

    python -m raysampler.demo [--executor ray|local] [--chains 32] [--rounds 5000]
"""
from __future__ import annotations

import argparse

import numpy as np

import raysampler as rs


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--executor", choices=["ray", "local"], default="ray")
    ap.add_argument("--chains", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5000)
    ap.add_argument("--burn-in", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    X, y = rs.datasets.load("breast_cancer")
    model = rs.models.LogisticRegression(prior_scale=1.0)
    shards = rs.shard(X, y, num_shards=4)
    print(f"breast_cancer: n={X.shape[0]}, d={X.shape[1]}, {len(shards)} shards; DG-LMC, {args.chains} chains, "
          f"{args.burn_in} burn-in + {args.rounds} rounds on executor={args.executor}")
    shown = {"n": 0}

    def show(chunk) -> None:  # the first few draws, printed as they stream in
        if shown["n"] < 3 and len(chunk.theta):
            for theta in chunk.theta[: 3 - shown["n"]]:
                shown["n"] += 1
                print(f"  draw {shown['n']} (chain 0): " + " ".join(f"{v:+.3f}" for v in theta[0, :6]) + " ...")

    res = rs.sample(model, shards, algorithm="dglmc", chains=args.chains, num_rounds=args.rounds,
                    burn_in=args.burn_in, seed=args.seed, executor=args.executor, progress=True, callback=show)
    table = res.summary()
    with np.printoptions(precision=3):
        print(table.round(3).to_string(max_rows=40))
    st = res.stats
    ess = res.ess().min()
    print(f"\nmin bulk ESS {ess:.0f} in {st['sampling_time_s']:.1f} s of sampling = {ess / st['sampling_time_s']:.0f} ESS/s; "
          f"setup (MAP, Laplace) {st['setup_time_s']:.1f} s; {st['rounds'] / st['sampling_time_s']:.0f} rounds/s")
    print(f"rho_i = {np.round(st['rho'], 4)}, N_i = {st['N']}, tau_i = {np.round(st['tau'] * 1e3, 3)} ms, "
          f"idle fraction = {np.round(st['idle_fraction'], 2)}, local acceptance = "
          f"{res.sample_stats['local_accept'].mean():.2f}")


if __name__ == "__main__":
    main()
