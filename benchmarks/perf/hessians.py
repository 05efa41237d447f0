"""D-ADMMS's per-chain Hessians: the models' batched `hessians` against the per-chain loop they replaced.

D-ADMMS needs ∇²V_i = ∇²U_i + ∇²U_prior/b at each of its K chains in every Newton step of its proximal step and for
its "curvature" noise (`raysampler.algorithms.dadmm.agent_hessians`). It used to stack `model.hessian` chain by chain;
it now calls `model.hessians` once. Two tables, both on one BLAS thread (what workers and the in-process executor run
with), each variant timed alternately in the same process, median of repeats:

* `agent_hessians`: the logistic model as D-ADMMS sees it (whitened by a dense Laplace factor, its prior in φ, b = 4
  shards), per chain (the code before, kept below verbatim) against batched, for K = 4, 16, 32 chains on a
  breast_cancer shard (142 rows, d = 31) and a covtype_like shard (5,000 rows, d = 54); the largest relative
  difference between the two is reported too.
* kernels: X_cᵀ diag(w_k) X_c for K weight vectors, the GLMs' Hessian, by the candidates for `weighted_grams`:
  (X_c ∘ w_k)ᵀX_c per chain (the old code), one batched product (K, d, n) @ (n, d), one wide product
  X_cᵀ [w_1 ∘ X_c | … | w_K ∘ X_c], einsum, and B_kᵀB_k with B_k = √w_k ∘ X_c per chain (a symmetric rank update,
  half the flops: the one chosen), for n up to 20,000, d up to 60, K up to 64.

    python benchmarks/perf/hessians.py [--repeats 15]

Writes benchmarks/perf/results/hessians.json.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import _path  # noqa: F401  (puts benchmarks/ on sys.path for harness)
import harness
import numpy as np
from threadpoolctl import threadpool_limits

import raysampler as rs
from raysampler.algorithms.dadmm import agent_hessians
from raysampler.models import DataSpec
from raysampler.models.common import weighted_grams
from raysampler.reparam import Preconditioner, WhitenedModel

CHAINS = (4, 16, 32)
SHARDS = 4


def per_chain_agent_hessians(model: Any, X: np.ndarray, y: np.ndarray, prior: Any, b: int, x: np.ndarray) -> np.ndarray:
    """`agent_hessians` before the batched `hessians` (verbatim, with the `prior_hessians` of then)."""
    H = np.stack([model.hessian(X, y, xk) for xk in x])
    K, d = x.shape
    P = np.broadcast_to(prior.gaussian.matrix(), (K, d, d)).astype(float)
    if prior.residual is not None:
        extra = prior.residual.hvp(np.repeat(x, d, axis=0), np.tile(np.eye(d), (K, 1))).reshape(K, d, d)
        P = P + 0.5 * (extra + extra.transpose(0, 2, 1))
    return 0.5 * (H + H.transpose(0, 2, 1)) + P / b


def _shard(problem: str, covtype_rows: int) -> tuple[WhitenedModel, np.ndarray, np.ndarray]:
    """One shard of `problem` (b = 4) and the logistic model whitened by the pooled Laplace-like factor at θ = 0."""
    if problem == "breast_cancer":
        X, y = rs.datasets.load("breast_cancer")
        model = rs.models.LogisticRegression(prior_scale=1.0)
    else:
        X, y = rs.datasets.load("covtype_like", n=covtype_rows * SHARDS)
        model = rs.models.LogisticRegression()
    bound = model.bind(DataSpec(n_features=X.shape[1]))
    d = bound.dim
    prior = bound.prior()
    H = bound.hessian(X, y, np.zeros(d)) + np.diag(prior.hessian_diag(np.zeros(d)))
    L = np.linalg.cholesky(np.linalg.inv(H))
    rows = np.array_split(np.arange(X.shape[0]), SHARDS)[0]
    return WhitenedModel(bound, Preconditioner(np.zeros(d), L, "laplace")), X[rows], y[rows]


def _time(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _alternate(variants: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Median seconds per call of each variant, the variants called in turn within every repeat."""
    for fn in variants.values():
        fn()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, fn in variants.items():
            times[name].append(_time(fn))
    return {name: float(np.median(ts)) for name, ts in times.items()}


def agent_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for problem in ("breast_cancer", "covtype_like"):
        wm, X, y = _shard(problem, args.covtype_rows)
        prior = wm.prior()
        for K in CHAINS:
            x = np.random.default_rng(K).standard_normal((K, wm.dim))
            old = per_chain_agent_hessians(wm, X, y, prior, SHARDS, x)
            new = agent_hessians(wm, X, y, prior, SHARDS, x)
            reps = args.repeats * (10 if X.shape[0] < 1000 else 1)
            call = (wm, X, y, prior, SHARDS, x)
            t = _alternate(
                {
                    "per_chain": lambda call=call: per_chain_agent_hessians(*call),
                    "batched": lambda call=call: agent_hessians(*call),
                },
                reps,
            )
            rows.append(
                {
                    "problem": problem,
                    "n": X.shape[0],
                    "d": wm.dim,
                    "K": K,
                    "per_chain_ms": 1e3 * t["per_chain"],
                    "batched_ms": 1e3 * t["batched"],
                    "speedup": t["per_chain"] / t["batched"],
                    "max_rel_diff": float(np.max(np.abs(new - old)) / np.max(np.abs(old))),
                }
            )
            print(f"{problem} K={K}: {rows[-1]['per_chain_ms']:.3f} -> {rows[-1]['batched_ms']:.3f} ms", flush=True)
    return rows


def _loop(Xc: np.ndarray, W: np.ndarray) -> np.ndarray:
    out = []
    for k in range(W.shape[1]):
        G = (Xc * W[:, k, None]).T @ Xc
        out.append(0.5 * (G + G.T))
    return np.stack(out)


def _batched_matmul(Xc: np.ndarray, W: np.ndarray) -> np.ndarray:
    G = (Xc.T[None] * W.T[:, None, :]) @ Xc
    return 0.5 * (G + G.transpose(0, 2, 1))


def _wide(Xc: np.ndarray, W: np.ndarray) -> np.ndarray:
    n, d = Xc.shape
    K = W.shape[1]
    G = (Xc.T @ (W[:, :, None] * Xc[:, None, :]).reshape(n, K * d)).reshape(d, K, d).transpose(1, 0, 2)
    return 0.5 * (G + G.transpose(0, 2, 1))


def _einsum(Xc: np.ndarray, W: np.ndarray) -> np.ndarray:
    G = np.einsum("nk,ni,nj->kij", W, Xc, Xc, optimize=True)
    return 0.5 * (G + G.transpose(0, 2, 1))


KERNELS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "per_chain": _loop,
    "batched_matmul": _batched_matmul,
    "wide_gemm": _wide,
    "einsum": _einsum,
    "sqrt_syrk (weighted_grams)": weighted_grams,
}


def kernel_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    rows = []
    for n, d in ((142, 31), (5000, 54), (20000, 60)):
        Xc = rng.standard_normal((n, d))
        for K in (4, 16, 32, 64):
            W = rng.random((n, K))
            ref = _loop(Xc, W)
            variants = {}
            for name, fn in KERNELS.items():
                if name == "einsum" and n * K > 5000 * 16:
                    continue  # 10-30× the others already at this size; minutes at the largest
                got = fn(Xc, W)
                assert np.max(np.abs(got - ref)) <= 1e-12 * np.max(np.abs(ref)), name
                variants[name] = lambda fn=fn, Xc=Xc, W=W: fn(Xc, W)
            t = _alternate(variants, max(3, args.repeats // (1 if n < 1000 else 3)))
            row: dict[str, Any] = {"n": n, "d": d, "K": K}
            row.update({f"{name}_ms": 1e3 * s for name, s in t.items()})
            rows.append(row)
            print(f"kernels n={n} d={d} K={K}: " + ", ".join(f"{k} {1e3 * v:.2f} ms" for k, v in t.items()), flush=True)
    return rows


def arguments() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__, __file__)
    ap.add_argument("--repeats", type=int, default=15, help="timed calls per variant (×10 on the small shard)")
    ap.add_argument("--covtype-rows", type=int, default=5000, help="rows of the larger shard (default 5000)")
    return ap


def measure(args: argparse.Namespace) -> harness.Report:
    with threadpool_limits(limits=1, user_api="blas"):
        agent = agent_rows(args)
        kernels = kernel_rows(args)
    t1 = harness.Table.of(
        "D-ADMMS agent_hessians: per chain (before) vs batched (one BLAS thread, median ms per call)",
        agent,
        [("problem", "problem"), ("n", "n"), ("d", "d"), ("K", "K"), ("per chain ms", "per_chain_ms")]
        + [("batched ms", "batched_ms"), ("per chain / batched", "speedup"), ("max rel. diff", "max_rel_diff")],
    )
    names = list(KERNELS)
    t2 = harness.Table.of(
        "X_cᵀ diag(w_k) X_c for K weight vectors: candidates (one BLAS thread, median ms per call)",
        kernels,
        [("n", "n"), ("d", "d"), ("K", "K")] + [(name, (lambda r, k=f"{name}_ms": r.get(k))) for name in names],
        notes=["einsum left out where it is already 10-30x slower than the others"],
    )
    payload = {"settings": harness.options(args), "agent_hessians": agent, "kernels": kernels}
    return harness.Report("hessians", payload, [t1, t2])


def main(argv: list[str] | None = None) -> None:
    harness.run(arguments(), measure, argv)


if __name__ == "__main__":
    main()
