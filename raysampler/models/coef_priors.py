"""Priors per coefficient from a formula: brms' `prior(normal(0, 1), class = b, coef = floor)` and its class
`Intercept`, spelt as keys of a formula model's `priors` beside the kinds (`formula.PRIOR_KINDS`):

    priors={"b": Normal(0, 2.5), "b_floor": Normal(0, 1), "Intercept": Normal(0, 10)}

`b_<name>` is the coefficient the design names `<name>` (as in the draws: "floor", "C(region)[T.north]",
"(Intercept)"); `Intercept` is the intercept's (brms' class; in an ordinal family it stays the first threshold's, the
design having no intercept there). The names are checked once the design is known (at set-up, before any
sampling), since a categorical column's coefficients come from the levels the sites hold.

The family's coefficient prior is one spec over every coefficient with one value per coefficient where they
differ (`Normal(mean, scale)` or `StudentT(nu, mean, scale)` with vectors), so the coefficients named here take the
kind of the "b" prior (the family's default where "b" is not given): a Normal among Student-t priors, or the
reverse, is refused naming the key."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ArgumentError
from ..priors import CoefPrior, check_coef_prior

#: the key prefix of a coefficient's own prior
COEF_KEY = "b_"
#: brms' class of the intercept's prior
INTERCEPT_KEY = "Intercept"
#: the design's name of the intercept column
INTERCEPT = "(Intercept)"


def coefficient_keys(priors: Mapping[str, Any], ordinal: bool) -> dict[str, str]:
    """The keys of `priors` that name one coefficient, each mapped to that coefficient's name in the design:
    `b_<name>` → `<name>`, and `Intercept` → "(Intercept)" outside the ordinal families."""
    out = {k: k[len(COEF_KEY) :] for k in priors if isinstance(k, str) and k.startswith(COEF_KEY) and len(k) > 2}
    if not ordinal and INTERCEPT_KEY in priors:
        out[INTERCEPT_KEY] = INTERCEPT
    for key in out:
        check_coef_prior(priors[key], argname=f"priors[{key!r}]")
    return out


def compose(base: CoefPrior, priors: Mapping[str, Any], keys: Mapping[str, str], labels: Sequence[str]) -> CoefPrior:
    """The coefficient prior over `labels` (the design's coefficients, in order): `base` (a scalar spec, or one
    value per coefficient) where no key names a coefficient, each named coefficient's own prior where one does.
    Errors name the key: a coefficient the design does not have, two keys for one coefficient, a prior of another
    kind than `base`'s, or a vector where one coefficient's value belongs."""
    position = {name: j for j, name in enumerate(labels)}
    own: dict[int, tuple[str, CoefPrior]] = {}
    for key, name in keys.items():
        if name not in position:
            raise ArgumentError(
                ("model", "priors", key),
                f"priors[{key!r}]: the formula has no coefficient {name!r}; its coefficients are "
                + ", ".join(repr(c) for c in labels),
            )
        spec = priors[key]
        if type(spec) is not type(base):
            raise ArgumentError(
                ("model", "priors", key),
                f"priors[{key!r}]: a {type(spec).__name__} prior among {type(base).__name__} ones: a formula's "
                f"coefficient priors are of one kind (the 'b' prior's, here {base!r})",
            )
        if spec.size is not None:
            raise ArgumentError(
                ("model", "priors", key), f"priors[{key!r}]: one coefficient's prior takes scalars, got {spec!r}"
            )
        j = position[name]
        if j in own:
            raise ArgumentError(
                ("model", "priors", key), f"priors[{key!r}]: coefficient {name!r} already has priors[{own[j][0]!r}]"
            )
        own[j] = (key, spec)
    if not own:
        return base
    values: dict[str, tuple[float, ...]] = {}
    for f in dataclasses.fields(base):
        column = []
        for j in range(len(labels)):
            value = getattr(own[j][1] if j in own else base, f.name)
            column.append(float(value[j] if isinstance(value, tuple) else value))
        values[f.name] = tuple(column)
    return type(base)(**values)
