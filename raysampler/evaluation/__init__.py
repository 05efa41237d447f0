"""Checks of a fit where the data are: predictions, calibration metrics, PSIS-LOO and model comparison.

Every check is a sum over rows, so each shard computes its share where its rows live (a Ray task placed on the
shard's site, or in this process) from the posterior draws it is sent, and returns a few sums as a named record
(`LooPart`, `ClassificationPart`, `RegressionPart`, `PairPart`); the caller adds them up exactly. Rows never leave
their shard: only those sums travel (and, for `loo(pointwise=True)`, one elpd and one Pareto k per row).

Draws: by default at most `DEFAULT_DRAWS` posterior draws, thinned evenly within each chain, so a shard's work and
memory are bounded by S (the log-likelihood is held BLOCK_ROWS rows × S at a time); `draws="all"` uses every stored
draw. On Ray a shard's rows may be cut into ranges, one task each, to use every CPU of its site (`run_at_shards`).

The modules: `fits` (what a check reads of a run), `records` (sums that merge exactly), `shard_tasks` (running a
task where a shard's rows are, once or over several rounds), `newdata` (new rows, read by column name),
`predictions`, `metrics` (held-out metrics), `psis` (Pareto smoothing of a block of rows), `psis_loo`,
`moment_match`, `comparison`, `stacking` and `ppc` (posterior predictive checks: replicated data drawn at the
shards, only bin counts and sums returned; what they give back is in `raysampler.predictive`).
"""

from __future__ import annotations

from ..extras import engine as _requires_engine  # noqa: F401 (the import checks that the engine extra is installed)
from .comparison import WEIGHT_METHODS, Comparison, ComparisonRow, PairPart, PairTask, WeightMethod, compare
from .fits import (
    BLOCK_ROWS,
    DEFAULT_DRAWS,
    DrawsArg,
    Fit,
    executor_of,
    flat_draws,
    model_of,
    shards_of,
    thin_draws,
    uniforms,
)
from .metrics import (
    COVERAGE_PROBS,
    ClassificationMetrics,
    ClassificationPart,
    MetricsTask,
    RegressionMetrics,
    RegressionPart,
    ReliabilityBin,
    class_probabilities,
    evaluate,
    is_classifier,
)
from .moment_match import MatchedRow
from .newdata import NewRows, named_columns, read_new_rows
from .ppc import pp_check, spread_draws
from .predictions import PREDICT_KINDS, RE_FORMULA_NONE, PredictKind, mean_prediction, new_rows, predict
from .psis import FLAT_K, FLAT_SPAN, K_THRESHOLD, PointwiseLoo, Tails, fit_tails, good_k, loo_block, pareto_smooth
from .psis_loo import LooTask, combine_loo, loo, r_eff, site_loo_class
from .records import HighRow, LooPart, Moments, RowRef
from .shard_tasks import ShardRows, ShardSession, ShardTask, on_shard, run_at_shards, split_parts
from .stacking import StackingPart, StackingShare, StackingStart

__all__ = [
    "BLOCK_ROWS",
    "COVERAGE_PROBS",
    "DEFAULT_DRAWS",
    "FLAT_K",
    "FLAT_SPAN",
    "K_THRESHOLD",
    "PREDICT_KINDS",
    "RE_FORMULA_NONE",
    "WEIGHT_METHODS",
    "ClassificationMetrics",
    "ClassificationPart",
    "Comparison",
    "ComparisonRow",
    "DrawsArg",
    "Fit",
    "HighRow",
    "LooPart",
    "LooTask",
    "MatchedRow",
    "MetricsTask",
    "Moments",
    "NewRows",
    "PairPart",
    "PairTask",
    "PointwiseLoo",
    "PredictKind",
    "RegressionMetrics",
    "RegressionPart",
    "ReliabilityBin",
    "RowRef",
    "ShardRows",
    "ShardSession",
    "ShardTask",
    "StackingPart",
    "StackingShare",
    "StackingStart",
    "Tails",
    "WeightMethod",
    "class_probabilities",
    "combine_loo",
    "compare",
    "evaluate",
    "executor_of",
    "fit_tails",
    "flat_draws",
    "good_k",
    "is_classifier",
    "loo",
    "loo_block",
    "mean_prediction",
    "model_of",
    "named_columns",
    "new_rows",
    "on_shard",
    "pareto_smooth",
    "pp_check",
    "predict",
    "r_eff",
    "read_new_rows",
    "run_at_shards",
    "shards_of",
    "site_loo_class",
    "split_parts",
    "spread_draws",
    "thin_draws",
    "uniforms",
]
