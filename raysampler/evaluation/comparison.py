"""Comparing runs fitted on the same rows by PSIS-LOO: each shard evaluates every model on its rows and returns
their LOO sums and the moments of the paired differences, so the SE of a difference is exact without pointwise
values travelling."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ..enums import Executor
from ..errors import ArgumentError
from ..models.contract import Model
from ..shards import ShardSet
from .fits import DEFAULT_DRAWS, DrawsArg, Fit, executor_of, flat_draws, model_of, shards_of, thin_draws
from .psis import PointwiseLoo, good_k
from .psis_loo import combine_loo, loo_part, loo_rows, r_eff
from .records import LooPart, Moments
from .shard_tasks import ShardRows, ShardSession, run_at_shards
from .stacking import StackingStart, stacking_weights

#: How `compare` weighs the models: pseudo-BMA (exp(elpd), normalised) or stacking of predictive distributions.
WeightMethod = Literal["pseudo-bma", "stacking"]
WEIGHT_METHODS: tuple[WeightMethod, ...] = ("pseudo-bma", "stacking")


@dataclass(frozen=True)
class PairPart:
    """One shard's sums for comparing models on the same rows: each model's `LooPart` and, for every pair (a, b),
    the moments of elpd_a,i − elpd_b,i."""

    loo: tuple[LooPart, ...]
    diffs: dict[tuple[int, int], Moments]

    def __add__(self, o: PairPart) -> PairPart:
        return PairPart(
            tuple(a + b for a, b in zip(self.loo, o.loo)), {k: v + o.diffs[k] for k, v in self.diffs.items()}
        )


@dataclass(frozen=True)
class PairTask:
    """PSIS-LOO of several models on the same rows (each read by its own model), with their paired differences."""

    models: tuple[Model, ...]
    draws: tuple[np.ndarray, ...]
    r_eff: tuple[float, ...]
    good_k: tuple[float, ...]
    names: tuple[tuple[str, ...], ...]

    def pointwise(self, rows: tuple[ShardRows, ...]) -> list[PointwiseLoo]:
        """Each model's pointwise LOO on the same rows (ArgumentError naming the run whose rows differ)."""
        y0 = rows[0].y
        for m, r in enumerate(rows[1:], start=1):
            if r.y.shape != y0.shape or not np.array_equal(r.y, y0):
                raise ArgumentError(
                    ("results", m),
                    f"shards[{r.shard}] of model {m} does not hold the same rows (y) as model 0's: compare needs "
                    "runs on the same rows",
                )
        return [
            loo_rows(m, r, flat_draws(d), re, n)
            for m, r, d, re, n in zip(self.models, rows, self.draws, self.r_eff, self.names)
        ]

    def part(self, rows: tuple[ShardRows, ...], pw: list[PointwiseLoo]) -> PairPart:
        """The shard's record: each model's `LooPart` and the moments of every pair's differences."""
        parts = tuple(loo_part(r, v, g, False) for r, v, g in zip(rows, pw, self.good_k))
        n = len(pw)
        diffs = {(a, b): Moments.of(pw[a].elpd - pw[b].elpd) for a in range(n) for b in range(n) if a != b}
        return PairPart(parts, diffs)

    def run(self, rows: tuple[ShardRows, ...]) -> PairPart:
        return self.part(rows, self.pointwise(rows))


@dataclass(frozen=True)
class ComparisonRow:
    """One model in a comparison, in arviz-stats' columns: rank (0 best), elpd, its SE, p_loo, elpd difference to
    the best and its SE from the paired per-row differences, weight (pseudo-BMA or stacking), and whether any
    Pareto k was high."""

    name: str
    rank: int
    elpd: float
    se: float
    p: float
    elpd_diff: float
    dse: float
    weight: float
    warning: bool


@dataclass(frozen=True)
class Comparison:
    """`compare`'s result: rows best first, each model's `SiteLoo`, and how the weights were found."""

    rows: tuple[ComparisonRow, ...]
    loo: Mapping[str, Any]
    method: WeightMethod = "pseudo-bma"

    def table(self) -> Any:
        """The rows as a pandas DataFrame indexed by name, columns as arviz-stats' `compare`."""
        import pandas as pd

        cols = ["rank", "elpd", "p", "elpd_diff", "weight", "se", "dse", "warning"]
        return pd.DataFrame(
            [[getattr(r, c) for c in cols] for r in self.rows], index=[r.name for r in self.rows], columns=cols
        )


def compare(
    results: Mapping[str, Fit],
    *,
    executor: Executor | str | None = None,
    draws: DrawsArg = DEFAULT_DRAWS,
    method: WeightMethod = "pseudo-bma",
    shards: Mapping[str, ShardSet] | None = None,
) -> Comparison:
    """Rank runs fitted on the same rows by PSIS-LOO elpd. Each shard computes every model's elpd on its rows and
    the sums of the paired differences, so the SE of a difference is exact without pointwise values travelling.
    Weights: `method="pseudo-bma"` (exp(elpd) normalised), or "stacking" (Yao et al. 2018: the shards keep their
    pointwise elpd while the optimiser asks each for its share of the objective, `stacking.py`)."""
    if not isinstance(results, Mapping) or len(results) < 2:
        raise ArgumentError(("results",), "compare needs a mapping of at least two named results")
    if method not in WEIGHT_METHODS:
        raise ArgumentError(("method",), f"method must be one of {', '.join(WEIGHT_METHODS)}, got {method!r}")
    names = list(results)
    res = [results[n] for n in names]
    models = tuple(model_of(r, "log_likelihood") for r in res)
    datas = [shards[n] if shards is not None and n in shards else shards_of(r) for n, r in zip(names, res)]
    for n, d in zip(names[1:], datas[1:]):
        if len(d) != len(datas[0]):
            raise ArgumentError(
                ("results", n),
                f"run {n!r} has {len(d)} shards, {names[0]!r} has {len(datas[0])}: compare needs the same rows",
            )
    thinned = tuple(thin_draws(r.draws, draws) for r in res)
    S = [t.shape[0] * t.shape[1] for t in thinned]
    task = PairTask(
        models,
        thinned,
        tuple(r_eff(t, r.param_blocks) for t, r in zip(thinned, res)),
        tuple(good_k(s) for s in S),
        tuple(tuple(r.param_names) for r in res),
    )
    jobs = [tuple(d[i] for d in datas) for i in range(len(datas[0]))]
    exe = executor_of(res[0], executor)
    if method == "stacking":
        with ShardSession(models, jobs, exe) as session:
            parts: list[PairPart] = session.run(StackingStart(task))
            loos = {n: combine_loo([p.loo[m] for p in parts], S[m], False) for m, n in enumerate(names)}
            order = sorted(range(len(names)), key=lambda m: -loos[names[m]].elpd)
            w = stacking_weights(session, order)
    else:
        parts = run_at_shards(task, jobs, exe)
        loos = {n: combine_loo([p.loo[m] for p in parts], S[m], False) for m, n in enumerate(names)}
        order = sorted(range(len(names)), key=lambda m: -loos[names[m]].elpd)
        elpds = np.array([loos[n].elpd for n in names])
        w = np.exp(elpds - elpds.max())
        w /= w.sum()
    best = order[0]
    rows = []
    for rank, m in enumerate(order):
        diff = Moments()
        if m != best:
            for p in parts:
                diff = diff + p.diffs[(best, m)]
        lo = loos[names[m]]
        rows.append(
            ComparisonRow(
                names[m],
                rank,
                lo.elpd,
                lo.se,
                lo.p,
                diff.total if m != best else 0.0,
                diff.se if m != best else 0.0,
                float(w[m]),
                bool(lo.warning),
            )
        )
    return Comparison(tuple(rows), loos, method)
