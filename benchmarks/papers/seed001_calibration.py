"""Seed 001 calibration table: accuracy, ECE, Brier score and NLL of the posterior predictive on digits (MLP).

Setting (the seed's slides give the table "Highly heterogeneous dataset" but not its data set, number of clients
or heterogeneity level; the choices below are ours):
  * Data: raysampler.datasets.load("digits") (1797 x [1 | 64 pixels / 16], 10 classes), split by
    sklearn.model_selection.train_test_split(test_size=0.25, stratify=y, random_state=0): 1347 train, 450 test.
  * Clients: b = 10, rs.shard(X_train, y_train, strategy="label_skew", alpha=0.3, seed=0) (Dirichlet(0.3) label
    skew: shards of 37-247 rows seeing 4-10 classes; alpha = 0.1 leaves a client with a single row).
  * Model: rs.models.MLPClassifier(hidden=16, tanh, prior N(0, I)), d = 1226.
  * Samplers (executor="local", CHAINS chains, every chain starts at the MAP; DG-LMC adds a Laplace draw):
      SGLD     "qlsd", variant="sharp", levels=None, memory=False, batch_size=B: the server's step
               θ ← θ − γ(Σ_i (n_i/B)Σ_{j∈S_i}∇U_ij(θ) + ∇U_prior(θ)) + √(2γ)ξ is exactly centralised SGLD with a
               stratified minibatch (B rows per client). ("ula" takes no batch_size; "dsgld" evaluates each
               agent's gradient at its own iterate, not at the average, so it is not the seed's pooled SGLD.)
      QLSD++   "qlsd", variant="pp", levels=8 (package default), memory on, batch_size=B, ref_every=100.
      FALD     "fald", variant="plain", p_comm=0.2 (Geometric local blocks, mean 5 steps), tau=1, batch_size=B,
               client step b·γ, so that the server average moves as LMC with step γ per local step.
      DG-LMC   "dglmc" with the package defaults (MAP, diagonal Laplace whitening, ρ from bias_budget=0.05,
               Laplace-MH local kernel).
    γ = GAMMA = 1e-4 for SGLD/QLSD++ (≈ 0.16/λ_max of ∇²U at the MAP, λ_max ≈ 1556; the package default 0.1/L is
    5.4e-6 because its L is a 12x larger worst-case estimate).
  * MAP: the θ* DG-LMC's setup finds (tuning.find_map on the same shards), as a point-estimate baseline.
Posterior predictive: p̂(y|x) = mean over all kept draws (all chains, thinned) of the per-draw softmax
probabilities, computed with MLPClassifier's own forward pass (model._forward(...).P: the model has no public
predict method). Metrics on the 450 test points:
  acc; ECE with M equal-width bins B_m = {c_{m-1} < p̂(x) ≤ c_m} on the max-probability confidence (M = 15 in the
  table, 10 also stored); Brier = sklearn.metrics.brier_score_loss(y, P, labels=0..9) (multiclass,
  Σ_c (p_c − 1[y=c])² averaged over points, range [0, 2], sklearn >= 1.7); BS_top = mean (1[y = ŷ] − p̂(x))², the
  slides' definition; NLL = sklearn.metrics.log_loss (mean over points).

Usage (results in benchmarks/papers/results/):
  python benchmarks/papers/seed001_calibration.py --smoke             # tiny budgets, nothing written
  python benchmarks/papers/seed001_calibration.py --only sgld qlsdpp  # some -> seed001_calibration_<name>.json
  python benchmarks/papers/seed001_calibration.py --table             # merge the parts -> seed001_calibration.json
"""

from __future__ import annotations

import argparse
import json
import time

import _path  # noqa: F401  (puts benchmarks/ on sys.path for harness)
import harness
import numpy as np
from sklearn.metrics import brier_score_loss, log_loss
from sklearn.model_selection import train_test_split

import raysampler as rs
from raysampler.models.contract import DataSpec

NAME = "seed001_calibration"
TEST_SIZE, SPLIT_SEED = 0.25, 0
B_CLIENTS, ALPHA, SHARD_SEED = 10, 0.3, 0
HIDDEN = 16
CHAINS = 4
BATCH = 32
GAMMA = 1e-4
DRAWS_PER_CHAIN = 200
ECE_BINS = (15, 10)
SEED = 1

# Fixed budgets: (burn_in, num_rounds). One round = one server step (SGLD, QLSD++), one communication
# (FALD: Geometric(p_comm) local steps, mean 5) or one Gibbs sweep (DG-LMC). thin = num_rounds / DRAWS_PER_CHAIN.
SAMPLERS = {
    "sgld": dict(
        label="SGLD",
        algorithm="qlsd",
        budget=(10_000, 50_000),
        params=dict(variant="sharp", levels=None, memory=False, batch_size=BATCH, step_size=GAMMA),
    ),
    "qlsdpp": dict(
        label="QLSD++",
        algorithm="qlsd",
        budget=(10_000, 50_000),
        params=dict(variant="pp", levels=8, batch_size=BATCH, step_size=GAMMA, ref_every=100),
    ),
    "fald": dict(
        label="FALD",
        algorithm="fald",
        budget=(2_000, 10_000),
        params=dict(variant="plain", p_comm=0.2, tau=1.0, batch_size=BATCH, step_size=B_CLIENTS * GAMMA),
    ),
    "dglmc": dict(label="DG-LMC", algorithm="dglmc", budget=(500, 5_000), params=dict()),
}

# The seed's table (10^2 x ECE / BS / nNLL; "highly heterogeneous" data set, clients and bins not stated).
PAPER = {
    "SGLD": dict(acc=99.1, ece=0.577, bs=1.38, nll=2.86),
    "QLSD": dict(acc=98.8, ece=0.916, bs=1.98, nll=4.15),
    "QLSD PP": dict(acc=98.3, ece=1.57, bs=2.23, nll=4.82),
    "QLSD++": dict(acc=98.8, ece=0.692, bs=1.91, nll=4.11),
    "QLSD++ PP": dict(acc=98.7, ece=0.930, bs=2.18, nll=4.65),
    "FedBe": dict(acc=43.5, ece=7.51, bs=66.6, nll=139),
    "FSGLD": dict(acc=98.5, ece=2.65, bs=2.64, nll=6.19),
}


def load_problem():
    X, y = rs.datasets.load("digits")
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=TEST_SIZE, stratify=y, random_state=SPLIT_SEED)
    shards = rs.shard(Xtr, ytr, num_shards=B_CLIENTS, strategy="label_skew", alpha=ALPHA, seed=SHARD_SEED)
    model = rs.models.MLPClassifier(hidden=HIDDEN)
    bound = model.bind(DataSpec(n_features=X.shape[1], n_classes=int(y.max()) + 1))
    return model, bound, shards, Xte, yte


def class_probs(bound, X, thetas, chunk=64):
    """Per-draw softmax probabilities (n_draws, n, C) from the model's own forward pass."""
    out = [bound._forward(X, thetas[s : s + chunk], need_g=False).P for s in range(0, len(thetas), chunk)]
    return np.concatenate(out)


def ece(P, y, bins):
    """Expected calibration error, `bins` equal-width bins (c_{m-1}, c_m] on the max probability."""
    conf, pred = P.max(axis=1), P.argmax(axis=1)
    correct = (pred == y).astype(float)
    idx = np.clip(np.ceil(conf * bins).astype(int) - 1, 0, bins - 1)
    total = 0.0
    for m in range(bins):
        sel = idx == m
        if sel.any():
            total += sel.mean() * abs(correct[sel].mean() - conf[sel].mean())
    return float(total)


def metrics(P, y):
    C = P.shape[1]
    P = P / P.sum(axis=1, keepdims=True)
    conf, pred = P.max(axis=1), P.argmax(axis=1)
    out = {
        "acc": float(np.mean(pred == y)),
        "brier": float(brier_score_loss(y, P, labels=list(range(C)))),
        "bs_top": float(np.mean(((pred == y) - conf) ** 2)),
        "nll": float(log_loss(y, P, labels=list(range(C)))),
        "mean_conf": float(conf.mean()),
    }
    for m in ECE_BINS:
        out[f"ece{m}"] = ece(P, y, m)
    return out


def run_one(key, smoke=False):
    spec = SAMPLERS[key]
    model, bound, shards, Xte, yte = load_problem()
    burn, rounds = spec["budget"]
    if smoke:
        burn, rounds = max(20, burn // 500), max(40, rounds // 500)
    thin = max(1, rounds // DRAWS_PER_CHAIN)
    t0 = time.perf_counter()
    res = rs.sample(
        model,
        shards,
        spec["algorithm"],
        chains=CHAINS,
        num_rounds=rounds,
        burn_in=burn,
        thin=thin,
        seed=SEED,
        executor="local",
        progress=False,
        **spec["params"],
    )
    wall = time.perf_counter() - t0
    draws = res.draws  # (chains, draws, d)
    P = class_probs(bound, Xte, draws.reshape(-1, draws.shape[-1]))
    P = P.reshape(draws.shape[0], draws.shape[1], *P.shape[1:])
    out = {
        "label": spec["label"],
        "algorithm": spec["algorithm"],
        "params": spec["params"],
        "burn_in": burn,
        "num_rounds": rounds,
        "thin": thin,
        "chains": CHAINS,
        "draws_per_chain": draws.shape[1],
        "wall_s": wall,
        "run": harness.run_metrics(res),
        "bayes": metrics(P.mean(axis=(0, 1)), yte),
        "per_chain": [metrics(P[c].mean(axis=0), yte) for c in range(P.shape[0])],
        "last_draw": metrics(P[0, -1], yte),
    }
    plan = res.setup.plan.as_dict()
    out["plan"] = {k: v for k, v in plan.items() if k != "theta_map" and (np.size(v) <= 20 if v is not None else True)}
    ss = res.sample_stats
    if "bits" in ss:
        out["bits_per_round_per_chain"] = float(np.mean(ss["bits"]))
    if "local_steps" in ss:
        out["mean_local_steps"] = float(np.mean(ss["local_steps"]))
    if key == "dglmc" and plan.get("theta_map") is not None:  # the MAP baseline, from the same shards
        out["map"] = metrics(class_probs(bound, Xte, np.asarray(plan["theta_map"])[None])[0], yte)
    # how far the chains moved from their start (in units of the pooled across-draw sd)
    spread = draws.reshape(-1, draws.shape[-1]).std(axis=0)
    out["draw_sd_median"] = float(np.median(spread))
    b = out["bayes"]
    print(
        f"{spec['label']}: acc {b['acc']:.4f} ECE15 {b['ece15']:.4f} Brier {b['brier']:.4f} BS_top {b['bs_top']:.4f} "
        f"NLL {b['nll']:.4f} | {wall:.0f} s, {out['run']['ms_per_round']:.2f} ms/round, median draw sd "
        f"{out['draw_sd_median']:.3f}",
        flush=True,
    )
    return out


COLUMNS = ["method", "acc %", "ECE", "Brier(sk)", "BS_top", "NLL", "wall s"]


def row(label, m, wall_s):
    """A table row: 10^2 x the metrics `m`, and the wall time."""
    return [label, *(100 * m[k] for k in ("acc", "ece15", "brier", "bs_top", "nll")), wall_s]


def arguments() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__, __file__)
    ap.add_argument("--only", nargs="*", choices=list(SAMPLERS), default=None)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--table", action="store_true")
    return ap


def measure(args: argparse.Namespace) -> harness.Report:
    if args.table:
        return merge(args)
    rows = []
    for key in args.only or list(SAMPLERS):
        out = run_one(key, smoke=args.smoke)
        if not args.smoke:  # each sampler's part as soon as it is done (a full run takes hours)
            harness.write_json(args, f"{NAME}_{key}", {"result": out})
        rows.append(row(out["label"], out["bayes"], out["wall_s"]))
    title = "Seed 001 calibration on digits, this run (10^2 x metrics; ECE 15 bins)"
    return harness.Report(None, {}, [harness.Table(title, COLUMNS, rows)])


def merge(args: argparse.Namespace) -> harness.Report:
    """--table: the samplers' parts (results/seed001_calibration_<name>.json) → seed001_calibration.json + table."""
    parts = {}
    for key in SAMPLERS:
        path = harness.results_dir(args) / f"{NAME}_{key}.json"
        if path.exists():
            parts[key] = json.loads(path.read_text())["result"]
    rows = []
    if "dglmc" in parts and "map" in parts["dglmc"]:
        rows.append(row("MAP (point estimate)", parts["dglmc"]["map"], None))
    rows += [row(r["label"], r["bayes"], r["wall_s"]) for r in parts.values()]
    setting = {
        "test_size": TEST_SIZE,
        "split_seed": SPLIT_SEED,
        "clients": B_CLIENTS,
        "alpha": ALPHA,
        "shard_seed": SHARD_SEED,
        "hidden": HIDDEN,
        "chains": CHAINS,
        "batch_size": BATCH,
        "gamma": GAMMA,
        "ece_bins": ECE_BINS,
        "seed": SEED,
    }
    table = harness.Table("Seed 001 calibration on digits (10^2 x metrics; ECE 15 bins)", COLUMNS, rows)
    return harness.Report(NAME, {"paper": PAPER, "parts": parts, "setting": setting}, [table])


def main(argv: list[str] | None = None) -> None:
    harness.run(arguments(), measure, argv)


if __name__ == "__main__":
    main()
