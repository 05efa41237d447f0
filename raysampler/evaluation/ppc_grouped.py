"""Grouped posterior predictive statistics at the sites (bayesplot's `ppc_stat_grouped`, brms' `pp_check(type =
"stat_grouped", group = ...)`): the replicated data sets of `ppc.ReplicateTask`, summarised per label of a column
of the data, so each shard sends one `CurveSums` per group it holds and never a row.

The grouping column is read from the shard's table as loaded (every column of the data: a formula's columns, or the
columns of a model that names them), so any column may group, a grouping factor of the group effects or another
(a ward, a year). Text labels come back as given, numbers as numbers. The statistics are those the sums determine
exactly (mean, sd, var, min, max, prop_zero); a grouped quantile would need the bins refined per group, and is
refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ArgumentError
from ..models.contract import Model
from ..predictive import PpcStatGrouped
from ..shards import label_code
from .conditional import RawColumns
from .fits import BLOCK_ROWS, DEFAULT_DRAWS, DrawsArg, Fit, executor_of, model_of, shards_of
from .ppc import CurveSums, ReplicateTask, response_name, spread_draws
from .shard_tasks import ShardRows, run_at_shards

#: The statistics a grouped check offers: those the per-group sums determine exactly.
GROUPED_STATS: tuple[str, ...] = ("mean", "sd", "var", "min", "max", "prop_zero")


@dataclass(frozen=True)
class GroupedSums:
    """Per label of the grouping column (its raw value: a number or a text label's `label_code`), the `CurveSums`
    of the observed y and each replicated data set over that group's rows."""

    sums: dict[float, CurveSums]

    def __add__(self, o: GroupedSums) -> GroupedSums:
        out = dict(self.sums)
        for key, value in o.sums.items():
            out[key] = out[key] + value if key in out else value
        return GroupedSums(out)


@dataclass(frozen=True)
class GroupedTask:
    """`ReplicateTask`'s curves at a shard's rows, summed per value of the table's column at `position`."""

    replicate: ReplicateTask
    position: int

    @property
    def models(self) -> tuple[Any, ...]:
        return (self.replicate.model, RawColumns())

    def run(self, rows: tuple[ShardRows, ...]) -> GroupedSums:
        fitted, raw = rows
        labels = raw.X[:, self.position]
        out: dict[float, CurveSums] = {}
        for a in range(0, fitted.X.shape[0], BLOCK_ROWS):
            b = min(fitted.X.shape[0], a + BLOCK_ROWS)
            curves = self.replicate.curves(fitted, a, b)
            block = labels[a:b]
            for key in np.unique(block):
                part = CurveSums.of(curves[block == key])
                k = float(key)
                out[k] = out[k] + part if k in out else part
        return GroupedSums(out)


def data_columns(model: Model) -> tuple[str, ...] | None:
    """The columns of the data as loaded (a formula's every column, or the names a model reads), or None."""
    design = getattr(model, "design", None)
    if design is not None:
        return tuple(design.columns)
    source = getattr(model, "source", None)
    for reader in (source, model):
        cols = getattr(reader, "columns", None)
        if cols:
            return tuple(cols)
    return None


def _text_labels(model: Model, column: str) -> dict[float, str]:
    """label_code → label for the text labels the run knows of `column` (a category's levels, a grouping column's
    labels)."""
    known: list[str] = []
    design = getattr(model, "design", None)
    if design is not None and column in getattr(design, "text", ()):
        known += list(dict(design.levels).get(column, ()))
    known += list(dict(getattr(model, "levels", None) or ()).get(column, ()))
    return {label_code(v): v for v in known}


def _label(value: float, text: dict[float, str]) -> Any:
    if value in text:
        return text[value]
    return int(value) if float(value).is_integer() else float(value)


def pp_check_grouped(
    result: Fit,
    group: str,
    stat: str = "mean",
    *,
    draws: DrawsArg | None = None,
    seed: int = 0,
    executor: Any = None,
) -> PpcStatGrouped:
    """The statistic `stat` of the observed y and of each replicated data set, per label of the data's column
    `group`, computed where the rows are (module docstring). Errors name the argument (group, stat)."""
    model = model_of(result, "predict_draw")
    if model.target_kind == "vector":
        raise ArgumentError(("result",), "pp_check needs a scalar target; this model's observations are vectors")
    if stat not in GROUPED_STATS:
        raise ArgumentError(
            ("stat",),
            f"a grouped check's stat must be one of {list(GROUPED_STATS)} (sums per group; no grouped quantiles), "
            f"got {stat!r}",
        )
    cols = data_columns(model)
    if cols is None or not isinstance(group, str) or group not in cols:
        raise ArgumentError(
            ("group",),
            f"group must name a column of the run's data{f' {list(cols)}' if cols else ''}, got {group!r}",
        )
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**63:
        raise ArgumentError(("seed",), f"seed must be an integer >= 0, got {seed!r}")
    theta = spread_draws(result.draws, draws if draws is not None else DEFAULT_DRAWS)
    task = GroupedTask(ReplicateTask(model, theta, tuple(result.param_names), int(seed)), cols.index(group))
    jobs = [(s, s) for s in shards_of(result)]  # the shard read once, seen by the model and as loaded
    parts = run_at_shards(task, jobs, executor_of(result, executor))
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    if not total.sums:
        raise ArgumentError(("result",), "the run's shards hold no rows")
    text = _text_labels(model, group)
    keys = sorted(total.sums, key=lambda k: (k not in text, text.get(k, ""), k))
    values = np.stack([total.sums[k].stat(stat) for k in keys])  # (G, 1 + S)
    return PpcStatGrouped(
        stat,
        group,
        tuple(_label(k, text) for k in keys),
        values[:, 0],
        values[:, 1:],
        np.array([total.sums[k].n for k in keys]),
        response=response_name(model),
    )
