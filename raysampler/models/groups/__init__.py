"""Group-level effects (hierarchical GLMs) whose per-group parameters are local to the shard holding the group's rows.

A GLM with group effects has linear predictor η_j = x_jᵀβ + Σ_f z_{f,j}ᵀ r_{f, g_f(j)}: for each grouping factor f
(`GroupEffects`), row j's group g_f(j) (a label column of the data: numbers or text) and its effect columns z_{f,j}
(1 for the intercept, then the slope columns). r_{f,g} ~ N(0, Σ_f) with Σ_f = diag(sd_f) Ω_f diag(sd_f): Ω_f = I, or
with `correlated=True` a correlation matrix with an LKJ prior; each sd with prior `sd_prior`.

Layout. The global parameters θ (the coordinator's) are (β, the family's own parameters ψ, then per factor its
scales s_f = (τ_f = log sd_f, and when correlated the partial correlations y_f of Ω_f's Cholesky factor L_f,
`contract.cholesky_factor`)); the local parameters of a shard are the non-centred η_{f,g} ~ N(0, I),
r_{f,g} = M_f η_{f,g} with M_f = diag(sd_f) L_f, one per group of the shard's rows, g-major within a factor, factors
in order. A shard's potential takes x = (θ, η) of shape (K, d + l_i), global first:
U_i(θ, η) = −log p(y_i | X_i, β, ψ, r(s, η)) + ½‖η‖². Marginally over each shard's η this is the shard's marginal
likelihood, so sampling (θ, η_1..η_b) targets the hierarchical posterior whenever no group of a local factor spans
two shards (`check_groups_disjoint`; `rs.shard(..., by=group)` splits data that way).

Spanning factors. A factor whose levels occur at several shards (housing type at every site) cannot keep its
effects local: a level's effect would be sampled twice. Its non-centred η_f (G_f·q_f, all its levels over all
shards, g-major) is then part of θ, after every factor's scales, with its N(0, I) prior in the global prior (once,
not per shard), r = M_f η_f as for local factors; every shard's potential reads the rows' levels against the whole
list. The set-up decides which factors span from the labels each shard reports (`spanning_factors`, metadata
only) and binds the model again with them (`DataSpec.spanning`); `GroupEffects.placement` may force either way.
Crossed designs mix both. With a spanning factor the curvature blocks come from dense Hessians (the contract's
default), exact but a pass per coordinate.

Modules: `spec` (the user's `GroupEffects`, labels, data checks), `scales` (the scale matrices and their
derivatives), `index` (a shard's rows by group), `model` (`HierarchicalGLM`).

Computation: groups as indices. `shard_data` keeps each row's group index, not a column per group: X becomes
[family design | effect columns z_f | meta], the family design being the coefficient columns and the family's
per-row input (offset, trials, noise sd), meta three columns per factor (dense group index in the shard, the
original label, the shard's group count). Every round's potential, gradient and Hessian-vector product is one pass
over the rows: the rows' group parts enter the linear predictor by a gather (a sparse product with one entry per row
and effect), the family's per-row derivatives (`common.RowTerms`) leave to the groups by segment sums, so a round
costs O(n·(d + e)) for e effects per group, whatever the number of groups. Groups are independent given θ, so with
one grouping factor ∇²_ηη U_i is block diagonal, one e × e block per group (`local_curvature`, `EtaHessian`):
conditional modes, Newton steps, log-determinants and the conditional shift of the set-up and of DG-LMC's kernels
are done block by block, batched and exact. (With several grouping factors the groups of different factors share
rows, and η is one dense block.)
"""

from __future__ import annotations

from .model import HierarchicalGLM, bind_hierarchical
from .spec import (
    GroupEffects,
    check_groups_disjoint,
    group_label,
    normalise_group_effects,
    refuse_text_columns,
    spanning_factors,
)

__all__ = [
    "GroupEffects",
    "HierarchicalGLM",
    "bind_hierarchical",
    "check_groups_disjoint",
    "group_label",
    "normalise_group_effects",
    "refuse_text_columns",
    "spanning_factors",
]
