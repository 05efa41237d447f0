"""A grouping factor as the user gives it (`GroupEffects`: the column, its effects, their priors), group labels as
named in parameters, and the checks on the data: no group spans two shards, no text column outside a grouping one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import ArgumentError
from ...priors import (
    LKJ,
    HalfNormal,
    PositivePrior,
    check_positive_prior,
)
from ..contract import (
    DataSpec,
)

PATH = ("model", "group_effects")
#: where a factor's effects live (`GroupEffects.placement`)
PLACEMENTS = ("auto", "local", "global")
#: columns of shard metadata per grouping factor: dense group index, original label, number of groups in the shard
META = 3


@dataclass(frozen=True)
class GroupEffects:
    """Varying effects by `group` (brms `(1 + slopes | group)`, or `(1 + slopes || group)` uncorrelated): for each
    group label g of the data's column `group`, r_g ~ N(0, diag(sd) Ω diag(sd)) on the intercept (when `intercept`)
    and on each column of `slopes`. Each sd has prior `sd_prior` (default HalfNormal(1)). Ω = I unless `correlated`
    (brms' default for `(1 + x | g)`), then Ω has prior `cor_prior` (default LKJ(1), uniform over correlation
    matrices). The group column holds labels (numbers or text), not a feature: it gets no coefficient.

    Reported (brms names): `sd_<group>[<effect>]`, `cor_<group>[<effect a>,<effect b>]` for each pair a < b when
    correlated, and `r_<group>[<label>,<effect>]`.

    `placement` says where the effects live: "local" (each group's effects on the shard holding its rows; a group
    with rows in two shards is refused), "global" (the non-centred effects z_<group>[<label>,<effect>] ~ N(0, I)
    are global parameters beside β, r = diag(sd) L z), or "auto" (the default): global when some level occurs in
    two shards (housing types, years, ward types at every site), local otherwise, decided at set-up from the
    levels each shard reports."""

    group: str
    intercept: bool = True
    slopes: tuple[str, ...] = ()
    sd_prior: PositivePrior = field(default_factory=lambda: HalfNormal(1.0))
    correlated: bool = False
    cor_prior: LKJ = field(default_factory=LKJ)
    placement: str = "auto"

    def __post_init__(self) -> None:
        if not isinstance(self.group, str) or not self.group:
            raise ArgumentError((*PATH, "group"), f"group must be a column name, got {self.group!r}")
        if not isinstance(self.intercept, bool):
            raise ArgumentError((*PATH, "intercept"), f"intercept must be True or False, got {self.intercept!r}")
        slopes = (self.slopes,) if isinstance(self.slopes, str) else self.slopes
        if not all(isinstance(s, str) and s for s in slopes):
            raise ArgumentError((*PATH, "slopes"), f"slopes must be column names, got {self.slopes!r}")
        slopes = tuple(slopes)
        if len(set(slopes)) != len(slopes) or self.group in slopes:
            raise ArgumentError((*PATH, "slopes"), f"slopes must be distinct columns other than the group: {slopes}")
        object.__setattr__(self, "slopes", slopes)
        if not self.intercept and not slopes:
            raise ArgumentError(PATH, f"group effects by {self.group!r} need an intercept or at least one slope")
        try:
            check_positive_prior(self.sd_prior, "sd_prior")
        except ArgumentError as exc:
            raise ArgumentError((*PATH, "sd_prior"), exc.message) from None
        if not isinstance(self.correlated, bool):
            raise ArgumentError((*PATH, "correlated"), f"correlated must be True or False, got {self.correlated!r}")
        if self.correlated and len(self.effects) < 2:
            raise ArgumentError(
                (*PATH, "correlated"),
                f"correlated=True needs at least two effects by {self.group!r} (an intercept and a slope, or two "
                "slopes): one effect has no correlation",
            )
        if self.placement not in PLACEMENTS:
            raise ArgumentError(
                (*PATH, "placement"), f"placement must be one of {', '.join(PLACEMENTS)}, got {self.placement!r}"
            )
        if not isinstance(self.cor_prior, LKJ):
            raise ArgumentError((*PATH, "cor_prior"), f"cor_prior must be rs.priors.LKJ(eta), got {self.cor_prior!r}")

    @property
    def effects(self) -> tuple[str, ...]:
        """The effects' labels: "(Intercept)" first when present, then the slopes."""
        return (("(Intercept)",) if self.intercept else ()) + self.slopes

    @property
    def n_cor(self) -> int:
        """Correlation parameters: q(q − 1)/2 when correlated, else 0."""
        q = len(self.effects)
        return q * (q - 1) // 2 if self.correlated else 0

    @property
    def n_scale(self) -> int:
        """This factor's global parameters: one log sd per effect, plus the correlations."""
        return len(self.effects) + self.n_cor


def normalise_group_effects(value: Any) -> tuple[GroupEffects, ...] | None:
    """None, one `GroupEffects` or a sequence of them → None or a non-empty tuple with distinct groups."""
    if value is None:
        return None
    items = (value,) if isinstance(value, GroupEffects) else value
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence) or not items:
        raise ArgumentError(PATH, f"group_effects must be rs.GroupEffects(...) or a tuple of them, got {value!r}")
    if not all(isinstance(g, GroupEffects) for g in items):
        raise ArgumentError(PATH, f"group_effects must be rs.GroupEffects(...) or a tuple of them, got {value!r}")
    groups = [g.group for g in items]
    if len(set(groups)) != len(groups):
        raise ArgumentError(PATH, f"group_effects: each grouping column may appear once, got {groups}")
    return tuple(items)


def group_label(value: float) -> str:
    """A numeric group label as named in parameters: integral values without a decimal point (12.0 → "12")."""
    v = float(value)
    return str(int(v)) if v.is_integer() and abs(v) < 2**53 else repr(v)


def check_groups_disjoint(labels: Sequence[Sequence[str]], group: str) -> None:
    """Raise ArgumentError if a label of grouping column `group` occurs in two shards (`labels[i]`: shard i's labels,
    as named, or numbers): a group's effects are local to one shard, so its rows must be in one shard."""
    owner: dict[str, int] = {}
    for i, labs in enumerate(labels):
        for v in dict.fromkeys(v if isinstance(v, str) else group_label(v) for v in np.asarray(labs).tolist()):
            j = owner.setdefault(v, i)
            if j != i:
                raise ArgumentError(
                    PATH,
                    f"group {group}={v} has rows in shards {j} and {i}: each group's effects are local "
                    f"to the shard holding its rows, so a group must lie in one shard. Reshard with "
                    f"rs.shard(X, y, ..., by={group!r}) (keeps each group in one shard, balanced by rows), "
                    "or leave the factor's placement at 'auto' (or 'global'): its effects are then global",
                )


def spanning_factors(
    factors: Sequence[GroupEffects], labels: Sequence[Sequence[Sequence[str]]]
) -> dict[str, tuple[str, ...]]:
    """The factors whose effects are global, each with its levels over all shards (numbers in numeric order, then
    text): those with placement "global", and with "auto" those having a level in two shards. `labels[i][f]`:
    shard i's labels of factor f, as named (metadata the shards report). A "local" factor with a level in two
    shards is refused (`check_groups_disjoint`)."""
    from ..params import _label_key as label_sort_key

    out: dict[str, tuple[str, ...]] = {}
    for f, ge in enumerate(factors):
        per = [list(dict.fromkeys(str(v) for v in lab[f])) for lab in labels]
        seen: dict[str, int] = {}
        for part in per:
            for v in part:
                seen[v] = seen.get(v, 0) + 1
        spans = any(c > 1 for c in seen.values())
        if ge.placement == "global" or (ge.placement == "auto" and spans):
            out[ge.group] = tuple(sorted(seen, key=label_sort_key))
        elif spans:
            check_groups_disjoint(per, ge.group)
    return out


def refuse_text_columns(spec: DataSpec, groups: Any) -> None:
    """ArgumentError if a column of text labels (`DataSpec.levels`) would be read as a number: text can only name
    groups (`groups`: the grouping columns of the model's group effects)."""
    for col, labels in spec.text_levels().items():
        if col not in groups:
            example = f" (e.g. {labels[0]!r})" if labels else ""
            raise ArgumentError(
                ("model", "group_effects") if groups else ("model",),
                f"column {col!r} holds text labels{example}: text can only name groups "
                f"(group_effects=rs.GroupEffects({col!r})); a feature, offset or trials column must hold numbers",
            )
