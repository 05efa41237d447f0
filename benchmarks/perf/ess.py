"""ESS per second of the default (turn-key) DG-LMC against the paper's rules, in-process and on Ray, with accuracy.

What is measured, side by side in one process (one private 2-CPU Ray; every repeat runs all variants with the
same seed, alternating which executor goes first):

* variants: "default" = rs.sample(model, shards, algorithm="dglmc") with no tuning arguments (Laplace
  preconditioning, ρ from the bias budget, the default local kernel, speed balancing on Ray);
  "paper" = the same with preconditioner=None (ρ_i = 1/M_i, γ_i, N from sec. 3.2 of the paper, LMC steps);
  each with executor="local" and executor="ray". Default burn-in (max(100, rounds/10)).
* problems: breast_cancer (b = 4 contiguous shards, LogisticRegression(prior_scale=1), K = 4 and 32 chains);
  covtype_like (n = 581,012, d = 54, b = 4 shards split with strategy="random" and "contiguous",
  LogisticRegression(), K = 8).
* ESS/s = min over coordinates of the bulk ESS (Result.ess("bulk")) / stats["sampling_time_s"] (rounds only,
  burn-in included); "ESS/s wall" divides by stats["wall_time_s"] instead (setup included: MAP, tuning,
  Ray actors). Ratios default/paper and ray/local are medians of per-repeat ratios.
* accuracy, in units of the reference posterior sd: max_j |mean_j − ref_j| / sd_ref_j, the range of
  sd_j / sd_ref_j, and max_j |mean_j − ref_j| / √(mcse_j² + mcse_ref_j²) (mcse_j = sd_j / √ESS_j), which is
  ≈ N(0, 1)-sized when the error is Monte-Carlo noise only.
  - breast_cancer: reference = tests/data/breast_cancer_reference.npz (pooled-data HMC; mean, sd, mcse_mean).
  - covtype_like: no cheap exact reference; reference = two independent long runs of the default sampler
    (seeds 101, 102, K = 8, random shards), pooled. Reported: their seed-to-seed max |Δmean|/sd (how well the
    reference itself is known), and max |mean − MAP|/sd as the scale of a "just the MAP" answer. The default
    sampler's own ρ-bias (sd inflation ≤ bias_budget = 5 %) is in this reference, so this checks agreement
    with the default, not exactness.
* per run also: ρ (mean over shards), N_i, mean local acceptance (kernels that report it), rounds/s.

Run (the full run takes roughly 20–35 minutes on 2 cores: breast_cancer ≈ 3 min, covtype ≈ 20–30 min, of
which the two reference runs ≈ 5 min and the paper-rule local runs ≈ 7 min;
`--only` runs one problem; `--quick` is a smoke test under a minute):

    python benchmarks/perf/ess.py
    python benchmarks/perf/ess.py --only breast_cancer
    python benchmarks/perf/ess.py --only covtype --strategies random
    python benchmarks/perf/ess.py --quick
    python benchmarks/perf/ess.py --algorithms all --rounds 4000 --chains 4 --covtype-n 100000 --strategies random

`--algorithms all` runs every sampler with its defaults (writes ess_algorithms.json; with `--only covtype`,
ess_algorithms_covtype.json).

Prints the tables and writes benchmarks/perf/results/ess.json (ess_quick.json with --quick).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, dataclass
from typing import Any

import _path  # noqa: F401  (puts benchmarks/ on sys.path for harness)
import harness
import numpy as np

import raysampler as rs

NUM_SHARDS = 4
REFERENCE_NPZ = harness.REPO_DIR / "tests" / "data" / "breast_cancer_reference.npz"
VARIANTS: dict[str, dict[str, Any]] = {"default": {}, "paper": {"preconditioner": None}}
EXECUTORS = ("local", "ray")
COVTYPE_REF_SEEDS = (101, 102)


@dataclass(frozen=True)
class Spec:
    problem: str
    strategy: str
    chains: int
    variant: str
    executor: str
    algorithm: str = "dglmc"

    @property
    def group(self) -> str:
        return f"{self.problem}/{self.strategy} K={self.chains}"

    @property
    def label(self) -> str:
        alg = "" if self.algorithm == "dglmc" else f"{self.algorithm} "
        return f"{self.group} {alg}{self.variant} {self.executor}"


@dataclass
class Reference:
    """A posterior to compare against: mean, sd, mcse of the mean (per coordinate), MAP, and how it was made."""

    mean: np.ndarray
    sd: np.ndarray
    mcse: np.ndarray
    theta_map: np.ndarray | None
    source: str
    info: dict[str, Any]


# ------------------------------------------------------------------------------------------- runs


def sample_once(
    spec: Spec, shards: Any, model: Any, rounds: int, burn_in: int | None, seed: int
) -> tuple[Any | None, str | None]:
    """rs.sample with the spec's settings: (result or partial result, error message or None)."""
    try:
        res = rs.sample(
            model,
            shards,
            algorithm=spec.algorithm,
            chains=spec.chains,
            num_rounds=rounds,
            burn_in=burn_in,
            executor=spec.executor,
            seed=seed,
            progress=False,
            **VARIANTS[spec.variant],
        )
        return res, None
    except rs.SamplingError as exc:
        return exc.result, f"SamplingError: {exc}"
    except Exception as exc:  # a failed variant is a result too; keep benchmarking the others
        return None, f"{type(exc).__name__}: {exc}"


def describe_draws(result: Any) -> dict[str, Any]:
    """Per-coordinate mean, sd, bulk ESS, mcse of the mean; min ESS; the MAP the run tuned around."""
    draws = result.draws
    if draws.shape[1] < 4:
        return {"min_ess": float("nan")}
    flat = draws.reshape(-1, draws.shape[2])
    ess = np.asarray(result.ess("bulk"), dtype=float)
    sd = flat.std(axis=0, ddof=1)
    theta_map = result.setup.plan.theta_map if result.setup is not None else None
    return {
        "mean": flat.mean(axis=0),
        "sd": sd,
        "ess": ess,
        "mcse": sd / np.sqrt(np.maximum(ess, 1.0)),
        "min_ess": float(np.min(ess)),
        "median_ess": float(np.median(ess)),
        "draws": int(flat.shape[0]),
        "theta_map": None if theta_map is None else np.asarray(theta_map, dtype=float),
    }


def run_spec(spec: Spec, shards: Any, model: Any, rounds: int, burn_in: int | None, seed: int) -> dict[str, Any]:
    result, error = sample_once(spec, shards, model, rounds, burn_in, seed)
    out: dict[str, Any] = {"spec": asdict(spec), "seed": seed, "error": error}
    if result is None:
        return out
    out.update(harness.run_metrics(result))
    out.update(describe_draws(result))
    out["ess_per_s"] = out["min_ess"] / out["sampling_time_s"] if out["sampling_time_s"] > 0 else float("nan")
    out["ess_per_s_wall"] = out["min_ess"] / out["wall_time_s"] if out["wall_time_s"] > 0 else float("nan")
    return out


def accuracy(run: dict[str, Any], ref: Reference) -> dict[str, float]:
    """Errors of one run against a reference, in reference sds."""
    if "mean" not in run:
        return {}
    mean, sd, mcse = (np.asarray(run[k]) for k in ("mean", "sd", "mcse"))
    err = np.abs(mean - ref.mean)
    out = {
        "max_err_sd": float(np.max(err / ref.sd)),
        "sd_ratio_min": float(np.min(sd / ref.sd)),
        "sd_ratio_max": float(np.max(sd / ref.sd)),
        "max_z": float(np.max(err / np.sqrt(mcse**2 + ref.mcse**2))),
    }
    if ref.theta_map is not None:
        out["max_from_map_sd"] = float(np.max(np.abs(mean - ref.theta_map) / ref.sd))
    return out


# ------------------------------------------------------------------------------------- references


def breast_cancer_reference(theta_map: np.ndarray | None) -> Reference:
    ref = np.load(REFERENCE_NPZ)
    info = {k: ref[k].tolist() for k in ("chains", "draws", "accept_rate") if k in ref}
    return Reference(ref["mean"], ref["sd"], ref["mcse_mean"], theta_map, str(REFERENCE_NPZ.name), info)


def covtype_reference(shards: Any, model: Any, chains: int, rounds: int, executor: str) -> Reference:
    """Two independent long runs of the default sampler, pooled; records their seed-to-seed disagreement."""
    runs = []
    for seed in COVTYPE_REF_SEEDS:
        spec = Spec("covtype_like", "random", chains, "default", executor)
        t0 = time.perf_counter()
        run = run_spec(spec, shards, model, rounds, None, seed)
        if run.get("error") or "mean" not in run:
            raise RuntimeError(f"covtype reference run (seed {seed}) failed: {run.get('error')}")
        print(
            f"  covtype reference seed {seed}: {run['rounds']} rounds, min ESS {run['min_ess']:.0f}, "
            f"{time.perf_counter() - t0:.0f} s",
            flush=True,
        )
        runs.append(run)
    a, b = runs
    mean = 0.5 * (a["mean"] + b["mean"])
    # pooled variance of the two halves (equal sizes): within-run variances plus the spread of the means
    sd = np.sqrt(0.5 * (a["sd"] ** 2 + b["sd"] ** 2) + 0.25 * (a["mean"] - b["mean"]) ** 2)
    mcse = sd / np.sqrt(a["ess"] + b["ess"])
    theta_map = a["theta_map"]
    info = {
        "seeds": COVTYPE_REF_SEEDS,
        "chains": chains,
        "rounds": rounds,
        "executor": executor,
        "min_ess": [a["min_ess"], b["min_ess"]],
        "seed_to_seed_max_err_sd": float(np.max(np.abs(a["mean"] - b["mean"]) / sd)),
        "seed_to_seed_max_z": float(np.max(np.abs(a["mean"] - b["mean"]) / np.sqrt(a["mcse"] ** 2 + b["mcse"] ** 2))),
        "ref_from_map_max_sd": float(np.max(np.abs(mean - theta_map) / sd)) if theta_map is not None else None,
        "runs": [{k: v for k, v in r.items() if k not in ("draws",)} for r in runs],
    }
    return Reference(
        mean, sd, mcse, theta_map, "two default runs, seeds " + ", ".join(map(str, COVTYPE_REF_SEEDS)), info
    )


# ------------------------------------------------------------------------------------------- main


def _algorithms(text: str) -> list[str]:
    """--algorithms: comma-separated sampler names, or "all"."""
    samplers = sorted(set(rs.algorithms.ALGORITHMS) - {"admm"})  # admm is an optimiser, not a sampler
    names = samplers if text == "all" else text.split(",")
    unknown = sorted(set(names) - set(samplers))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {unknown}; valid: {samplers} or all")
    return names


def arguments() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__, __file__, ray=True)
    ap.add_argument("--quick", action="store_true", help="smoke test: few rounds, small covtype, random shards only")
    ap.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="rounds after burn-in for every run (default: breast_cancer 20000, covtype 600; quick: 400, 100)",
    )
    ap.add_argument("--only", choices=("breast_cancer", "covtype", "covtype_like"), default=None)
    ap.add_argument("--repeats", type=int, default=1, help="repeats with seeds seed, seed+1, ... (default 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chains", default="4,32", help="breast_cancer chain counts (default 4,32)")
    ap.add_argument("--covtype-chains", type=int, default=8)
    ap.add_argument(
        "--strategies", default=None, help="covtype sharding strategies (default random,contiguous; quick: random)"
    )
    ap.add_argument("--covtype-n", type=int, default=None, help="covtype_like rows (default 581012; quick 20000)")
    ap.add_argument(
        "--ref-rounds", type=int, default=None, help="rounds of each covtype reference run (default 2000; quick 300)"
    )
    ap.add_argument(
        "--algorithms",
        type=_algorithms,
        default="dglmc",
        help='comma-separated algorithms, or "all" for every sampler (default dglmc); algorithms other '
        'than dglmc run with their defaults only (no "paper" variant)',
    )
    ap.add_argument("--executors", default=",".join(EXECUTORS), help="comma-separated: local,ray (default both)")
    ap.add_argument(
        "--ref-executor",
        choices=EXECUTORS,
        default=None,
        help="executor of the covtype reference runs (default ray; quick local)",
    )
    return ap


@dataclass(frozen=True)
class Plan:
    """The options with the defaults of a full or a --quick run filled in (the JSON's "settings")."""

    quick: bool
    problems: list[str]
    algorithms: list[str]
    executors: tuple[str, ...]
    repeats: int
    seed: int
    rounds: dict[str, int]
    num_shards: int
    breast_cancer_chains: list[int]
    covtype_chains: int
    covtype_n: int
    strategies: list[str]
    covtype_ref_rounds: int
    covtype_ref_executor: str

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Plan:
        quick = args.quick
        problems = ["breast_cancer", "covtype_like"]
        if args.only:
            problems = ["covtype_like" if args.only.startswith("covtype") else "breast_cancer"]
        return cls(
            quick=quick,
            problems=problems,
            algorithms=args.algorithms,
            executors=tuple(e for e in EXECUTORS if e in args.executors.split(",")),
            repeats=args.repeats,
            seed=args.seed,
            rounds={
                "breast_cancer": args.rounds or (400 if quick else 20000),
                "covtype_like": args.rounds or (100 if quick else 600),
            },
            num_shards=NUM_SHARDS,
            breast_cancer_chains=[int(k) for k in args.chains.split(",")],
            covtype_chains=args.covtype_chains,
            covtype_n=args.covtype_n or (20_000 if quick else rs.datasets.COVTYPE_N_ROWS),
            strategies=(args.strategies or ("random" if quick else "random,contiguous")).split(","),
            covtype_ref_rounds=args.ref_rounds or (300 if quick else 2000),
            covtype_ref_executor=args.ref_executor or ("local" if quick else "ray"),
        )


def measure(args: argparse.Namespace) -> harness.Report:
    plan = Plan.from_args(args)
    data, groups = load_problems(plan)
    covtype_mb = plan.covtype_n * 55 * 8 / 2**20 if "covtype_like" in plan.problems else 0
    print(
        f"ESS benchmark: b={NUM_SHARDS}, repeats={plan.repeats}, rounds={plan.rounds}, covtype n={plan.covtype_n}, "
        f"strategies={plan.strategies}, covtype reference: 2 x {plan.covtype_ref_rounds} rounds on "
        f"{plan.covtype_ref_executor}",
        flush=True,
    )
    t_start = time.perf_counter()
    with harness.local_ray(object_store_mb=int(200 + 2.5 * covtype_mb), num_cpus=args.cpus):
        refs, raw = run_all(plan, data, groups, t_start)
    if "breast_cancer" in plan.problems and "breast_cancer" not in refs:
        refs["breast_cancer"] = breast_cancer_reference(None)
    for run in raw:
        ref = refs.get(run["spec"]["problem"])
        run["accuracy"] = accuracy(run, ref) if ref is not None else {}
    rows, ratios = summarise(raw)
    name = "ess" if plan.algorithms == ["dglmc"] else "ess_algorithms"
    if name == "ess_algorithms" and plan.problems == ["covtype_like"]:
        name += "_covtype"
    payload = {
        "settings": asdict(plan) | {"total_time_s": time.perf_counter() - t_start},
        "summary": rows,
        "ratios": ratios,
        "references": {
            k: {
                "source": r.source,
                "info": r.info,
                "mean": r.mean,
                "sd": r.sd,
                "mcse": r.mcse,
                "theta_map": r.theta_map,
            }
            for k, r in refs.items()
        },
        "runs": raw,
    }
    return harness.Report(name + "_quick" if plan.quick else name, payload, report(rows, ratios, refs))


Data = dict[tuple[str, str], tuple[Any, Any]]  # (problem, strategy) → (shards, model)


def load_problems(plan: Plan) -> tuple[Data, list[tuple[str, str, int]]]:
    """Shards and model per (problem, strategy), and the (problem, strategy, chains) groups to run."""
    data: Data = {}
    groups: list[tuple[str, str, int]] = []
    if "breast_cancer" in plan.problems:
        X, y, model = harness.load_model_data("breast_cancer")
        data["breast_cancer", "contiguous"] = (rs.shard(X, y, num_shards=NUM_SHARDS), model)
        groups += [("breast_cancer", "contiguous", k) for k in plan.breast_cancer_chains]
    if "covtype_like" in plan.problems:
        X, y, model = harness.load_model_data("covtype_like", covtype_n=plan.covtype_n)
        for s in dict.fromkeys([*plan.strategies, "random"]):  # the reference runs on random shards
            data["covtype_like", s] = (rs.shard(X, y, num_shards=NUM_SHARDS, strategy=s, seed=0), model)
        groups += [("covtype_like", s, plan.covtype_chains) for s in plan.strategies]
    return data, groups


def run_all(
    plan: Plan, data: Data, groups: list[tuple[str, str, int]], t_start: float
) -> tuple[dict[str, Reference], list[dict[str, Any]]]:
    """The covtype reference, then every (repeat, group, algorithm, variant, executor) run."""
    refs: dict[str, Reference] = {}
    raw: list[dict[str, Any]] = []
    if "covtype_like" in plan.problems:
        shards, model = data["covtype_like", "random"]
        refs["covtype_like"] = covtype_reference(
            shards, model, plan.covtype_chains, plan.covtype_ref_rounds, plan.covtype_ref_executor
        )
    variants = [(a, v) for a in plan.algorithms for v in (VARIANTS if a == "dglmc" else ["default"])]
    for rep in range(plan.repeats):
        for problem, strategy, chains in groups:
            shards, model = data[problem, strategy]
            for algorithm, variant in variants:
                for executor in plan.executors if rep % 2 == 0 else plan.executors[::-1]:
                    spec = Spec(problem, strategy, chains, variant, executor, algorithm)
                    run = run_spec(spec, shards, model, plan.rounds[problem], None, plan.seed + rep)
                    run["repeat"] = rep
                    if problem == "breast_cancer" and "breast_cancer" not in refs and run.get("theta_map") is not None:
                        refs["breast_cancer"] = breast_cancer_reference(run["theta_map"])
                    raw.append(run)
                    print(f"  repeat {rep + 1}/{plan.repeats} {spec.label}: {_progress(run, t_start)}", flush=True)
    return refs, raw


def _progress(run: dict[str, Any], t_start: float) -> str:
    done = "no result"
    if "min_ess" in run:
        done = f"{run['rounds_per_s']:.1f} rounds/s, min ESS {run['min_ess']:.1f}, ESS/s {run['ess_per_s']:.2f}"
    error = f"  ERROR {run['error']}" if run["error"] else ""
    return f"{done}{error}  [{time.perf_counter() - t_start:.0f} s]"


# --------------------------------------------------------------------------------------- summary

_NUMERIC = ("rounds_per_s", "min_ess", "ess_per_s", "ess_per_s_wall", "sampling_time_s", "setup_time_s", "local_accept")
_ACCURACY = ("max_err_sd", "sd_ratio_min", "sd_ratio_max", "max_z", "max_from_map_sd")


def summarise(raw: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One row per spec (medians over repeats) and the side-by-side ratios (medians of per-repeat ratios)."""
    by_spec: dict[str, list[dict[str, Any]]] = {}
    for run in raw:
        by_spec.setdefault(Spec(**run["spec"]).label, []).append(run)
    rows = []
    for label, runs in by_spec.items():
        first = runs[0]
        row = {
            "label": label,
            **first["spec"],
            "kernel": first.get("local_kernel"),
            "transport": first.get("transport"),
            "rho": float(np.mean(first["rho"])) if first.get("rho") else None,
            "N": first.get("N"),
            "errors": [r["error"] for r in runs if r["error"]],
        }
        row.update({k: harness.median(r.get(k) for r in runs) for k in _NUMERIC})
        row.update({k: harness.median(r["accuracy"].get(k) for r in runs) for k in _ACCURACY})
        rows.append(row)

    def ratio(num: dict[str, Any], den: dict[str, Any]) -> float:
        a, b = num.get("ess_per_s"), den.get("ess_per_s")
        return a / b if a is not None and b and np.isfinite(a) and np.isfinite(b) else float("nan")

    index = {(Spec(**r["spec"]).label, r["repeat"]): r for r in raw}
    repeats = sorted({r["repeat"] for r in raw})
    ratios = []

    def per_repeat(num_label: str, den_label: str) -> float:
        return harness.median(
            ratio(index[num_label, k], index[den_label, k])
            for k in repeats
            if (num_label, k) in index and (den_label, k) in index
        )

    for group in dict.fromkeys(Spec(**r["spec"]).group for r in raw):
        for executor in EXECUTORS:
            ratios.append(
                {
                    "group": group,
                    "ratio": "default / paper ESS/s",
                    "fixed": executor,
                    "value": per_repeat(f"{group} default {executor}", f"{group} paper {executor}"),
                }
            )
        for variant in VARIANTS:
            ratios.append(
                {
                    "group": group,
                    "ratio": "ray / local ESS/s",
                    "fixed": variant,
                    "value": per_repeat(f"{group} {variant} ray", f"{group} {variant} local"),
                }
            )
    return rows, ratios


def report(rows: list[dict[str, Any]], ratios: list[dict[str, Any]], refs: dict[str, Reference]) -> list[harness.Table]:
    main = harness.Table.of(
        "ESS per second (medians over repeats); errors in reference sds",
        rows,
        [
            ("problem/shards", lambda r: f"{r['problem']}/{r['strategy']}"),
            ("K", "chains"),
            ("algorithm", "algorithm"),
            ("variant", "variant"),
            ("exec", "executor"),
            ("kernel", "kernel"),
            ("rho", "rho"),
            ("N", lambda r: "-" if r["N"] is None else "/".join(map(str, r["N"]))),
            ("accept", "local_accept"),
            ("rounds/s", "rounds_per_s"),
            ("min ESS", "min_ess"),
            ("ESS/s", "ess_per_s"),
            ("ESS/s wall", "ess_per_s_wall"),
            ("max|dmean|/sd", "max_err_sd"),
            (
                "sd ratio",
                lambda r: f"{r['sd_ratio_min']:.2f}-{r['sd_ratio_max']:.2f}" if np.isfinite(r["sd_ratio_min"]) else "-",
            ),
            ("max z", "max_z"),
            ("|mean-MAP|/sd", "max_from_map_sd"),
            ("error", lambda r: "; ".join(r["errors"])[:60] or "-"),
        ],
        [
            "ESS = min over coordinates of bulk ESS; ESS/s over sampling time (rounds incl. burn-in), "
            "ESS/s wall over the whole call (setup included).",
            "default = turn-key DG-LMC; paper = preconditioner=None (the paper's rho, gamma, N, LMC steps). "
            "rho = mean over shards (sampler coordinates); N = final N_i.",
            "max z = max |mean - ref| / sqrt(mcse^2 + mcse_ref^2): about 2-3.5 over d coordinates if the error is "
            "Monte-Carlo noise only.",
            "ray transport: " + ", ".join(sorted({str(r["transport"]) for r in rows if r["executor"] == "ray"})),
        ],
    )
    side_by_side = harness.Table(
        "Side-by-side ratios (medians of per-repeat ratios)",
        ["problem/shards K", "ratio", "at", "value"],
        [[r["group"], r["ratio"], r["fixed"], r["value"]] for r in ratios],
    )
    ref_rows = []
    for name, ref in refs.items():
        i = ref.info
        if name == "covtype_like":
            size = f"{i['chains']} chains x {i['rounds']} rounds on {i['executor']}"
            ref_rows.append([name, ref.source, size])
            ref_rows[-1] += [i["seed_to_seed_max_err_sd"], i["seed_to_seed_max_z"], i["ref_from_map_max_sd"]]
        else:
            from_map = float(np.max(np.abs(ref.mean - ref.theta_map) / ref.sd)) if ref.theta_map is not None else None
            ref_rows.append(
                [name, ref.source, f"{i.get('chains')} chains x {i.get('draws')} draws", None, None, from_map]
            )
    references = harness.Table(
        "References",
        ["problem", "source", "size", "seed-to-seed max|dmean|/sd", "seed-to-seed max z", "max|ref-MAP|/sd"],
        ref_rows,
    )
    return [main, side_by_side, references]


def main(argv: list[str] | None = None) -> None:
    harness.run(arguments(), measure, argv)


if __name__ == "__main__":
    main()
