"""A group model at rows for checks of the fit (LOO, predictions, pp_check, R²): x = (θ, r) from a run's draws,
each group's effects r by its brms name, a group the run never saw drawn from its population (brms'
`allow_new_levels`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .scales import scale_at
from .spec import META
from .view import GroupModelView

#: the functions below take a `model.HierarchicalGLM`, seen through the members they read (model.py imports this
#: module, not back)
GroupModel = GroupModelView


def evaluation_x(
    model: GroupModel, X: np.ndarray, y: np.ndarray, draws: np.ndarray, names: Sequence[str], seed: int
) -> np.ndarray:
    """(θ, r) (S, d + l) for the groups of these rows from a run's draws (θ as sampled, the effects r as
    reported): each group's r from the draws by its brms name
    `r_<group>[label,effect]`; a group the run never saw gets r = M z, z ~ N(0, I) per draw from a stream
    seeded by (seed, factor, label): a new group drawn from the population. Codes absent from X get 0. With a
    spanning factor, the η of X's groups follow (`spanning_eval`); zeroing x past `dim` leaves the population-
    level predictor either way."""
    if not names:
        raise ValueError("evaluation_x needs the draws' parameter names (the group effects are picked by name)")
    d = model.dim
    S = draws.shape[0]
    col = {n: j for j, n in enumerate(names)}
    w = model._widths[1]
    counts = model._local_counts(X)
    out = np.zeros((S, d + model.local_dim(X, y)))
    out[:, :d] = draws[:, :d]
    start = d
    for f, (ge, G) in enumerate(zip(model.factors, counts)):
        if model.global_levels[f] is not None:  # a spanning factor's r comes from θ's η (`_linear`)
            continue
        q = len(ge.effects)
        s0 = model.scale_starts[f]
        code, lab = X[:, w + META * f].astype(np.intp), X[:, w + META * f + 1]
        present, first = np.unique(code, return_index=True)
        M = None
        for g, row in zip(present.tolist(), first.tolist()):
            label = model.label(f, float(lab[row]))
            cols = [col.get(f"r_{ge.group}[{label},{e}]", -1) for e in ge.effects]
            at = start + g * q
            if min(cols) >= 0:
                out[:, at : at + q] = draws[:, cols]
                continue
            if M is None:
                M = scale_at(ge, draws[:, s0 : s0 + ge.n_scale], 0).M
            key = int(np.float64(lab[row]).view(np.uint64))
            z = np.random.default_rng([seed, f, key]).standard_normal((S, q))
            out[:, at : at + q] = np.einsum("kab,kb->ka", M, z)
        start += G * q
    return spanning_eval(model, X, draws, seed, out)


def spanning_eval(model: GroupModel, X: np.ndarray, draws: np.ndarray, seed: int, x: np.ndarray) -> np.ndarray:
    """x (S, d + l) with, per spanning factor, the η of X's own groups appended (`_eval_index`'s layout): a
    level the set-up saw has its η from θ, a new one z ~ N(0, I) per draw from the stream `evaluation_x` uses
    for a local factor's new group (so r = M z: a new group drawn from the population)."""
    if not model.has_spanning:
        return x
    w = model._widths[1]
    S = draws.shape[0]
    parts = [x]
    for f, (ge, levels, at) in enumerate(zip(model.factors, model.global_levels, model.global_starts)):
        if levels is None or at is None:
            continue
        q = len(ge.effects)
        where = {name: i for i, name in enumerate(levels)}
        G_x = model._dense_count(X, f)
        eta = np.zeros((S, G_x * q))
        code, lab = X[:, w + META * f].astype(np.intp), X[:, w + META * f + 1]
        present, first = np.unique(code, return_index=True)
        for g, row in zip(present.tolist(), first.tolist()):
            known = where.get(model.label(f, float(lab[row])))
            if known is not None:
                eta[:, g * q : (g + 1) * q] = draws[:, at + known * q : at + (known + 1) * q]
            else:
                key = int(np.float64(lab[row]).view(np.uint64))
                eta[:, g * q : (g + 1) * q] = np.random.default_rng([seed, f, key]).standard_normal((S, q))
        parts.append(eta)
    return np.concatenate(parts, axis=1)


def unseen_groups(
    model: GroupModel, X: np.ndarray, names: Sequence[str], text: Mapping[float, str] | None = None
) -> list[tuple[str, str]]:
    """(grouping column, label) of every group of the rows X (as `shard_data` gives them) whose effects the
    draws' parameter `names` do not hold: a level the run never saw, which `evaluation_x` draws from its
    population (brms' `allow_new_levels`). `text` names the `label_code`s of text labels the run never saw."""
    have = set(names)
    w = model._widths[1]
    out = []
    for f, ge in enumerate(model.factors):
        known = set(model.global_levels[f] or ())
        for value in np.unique(X[:, w + META * f + 1]).tolist():
            label = model.label(f, float(value))
            if label not in known and f"r_{ge.group}[{label},{ge.effects[0]}]" not in have:
                out.append((ge.group, (text or {}).get(float(value), label)))
    return out
