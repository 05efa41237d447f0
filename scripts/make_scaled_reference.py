"""Long exact-MCMC reference for the badly scaled, correlated logistic posterior (`scaled_logistic`, prior
N(0, 100² I)): MALA with exact Metropolis correction on the pooled data (one shard), in Laplace-whitened
coordinates, many chains. Writes posterior means, sds, their Monte-Carlo standard errors (arviz-stats ESS) and the
ESS to tests/data/scaled_logistic_reference.npz.

    python scripts/make_scaled_reference.py [--draws 30000 --chains 16]
"""

from __future__ import annotations

import argparse
import pathlib
import time
import warnings

import numpy as np

import raysampler as rs

OUT = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "scaled_logistic_reference.npz"
PRIOR_SCALE = 100.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=30000)
    ap.add_argument("--chains", type=int, default=16)
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args()
    X, y = rs.datasets.load("scaled_logistic")
    t0 = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = rs.sample(
            rs.models.LogisticRegression(prior_scale=PRIOR_SCALE),
            rs.shard(X, y, num_shards=1),
            "mala",
            chains=args.chains,
            num_rounds=args.draws,
            burn_in=2000,
            seed=args.seed,
            executor="local",
            progress=False,
        )
    ess = res.ess("bulk")
    diag = res.outcome.diagnostics
    mean, sd = res.draws.mean(axis=(0, 1)), res.draws.std(axis=(0, 1))
    np.savez(
        OUT,
        mean=mean,
        sd=sd,
        mcse_mean=sd / np.sqrt(ess),
        ess_bulk=ess,
        chains=args.chains,
        draws=args.draws,
        max_rhat=diag.max_rhat,
        prior_scale=PRIOR_SCALE,
    )
    print(
        f"{OUT}: min ESS {ess.min():.0f}, max R-hat {diag.max_rhat:.4f}, max mcse/sd {np.max(1 / np.sqrt(ess)):.4f}"
        f" ({time.time() - t0:.0f} s)"
    )


if __name__ == "__main__":
    main()
