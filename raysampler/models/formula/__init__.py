"""Models written as formulas: `from_formula("y ~ x1 + C(region) + (1 + x1 | hospital)", family="bernoulli")`.

The formula is read by `formulae` (bambi's formula library, which knows brms' group terms); nothing here parses it.
A `FormulaModel` maps it onto the built-in families and `GroupEffects`:

- the common terms (intercept, numbers, categories, interactions, `I(...)`, `offset(...)`) make the coefficient
  design; an `offset(...)` term becomes the family's offset; `p(successes, trials)` on the left the binomial's trials;
  `y | cens(censored)` on the left the survival families' censoring indicator (taken off before formulae reads it);
- each group term `(1 + x | g)` becomes `GroupEffects("g", intercept=True, slopes=("x",), correlated=True)` (its
  slopes must be columns of the common design, as in brms' usual `y ~ x + (1 + x | g)`). As in brms, the effects of
  one term written with `|` are correlated (an LKJ prior on their correlation) and those written with `||`, or in
  separate terms `(1 | g) + (0 + x | g)`, are not. formulae reads both bars alike, so `_bars` notes which terms
  had two before formulae parses the formula with one.

Where the rows are. The design matrix is built at each site from its own rows (`BoundFormula.shard_data`); the
driver and the service never see a row. What must agree across sites is the coding of categories: at set-up every
shard reports the distinct values of the columns the formula reads as categories (`category_values`: metadata, no
rows), the coordinator joins them (`join_categories`), and every site codes its rows against that union, in a fixed
order (numbers ascending, text sorted, or the order `levels=` gives; the first level is the reference). A level
named in `levels=` that no shard has is an error naming it.

formulae's stateful transforms (`center`, `scale`, `standardize`, splines `bs`/`cr`/`cc`/`tp`, `poly`) learn from
the rows they see (means, quantile knots); at a site that is the site's rows only, so the design would differ
between sites: they are refused, naming the term.
"""

from .design import SIGMA_PREFIX, Design, interaction_labels
from .model import BoundFormula, FormulaModel, from_formula
from .terms import FORMULA_FAMILIES, PRIOR_KINDS, Terms, factor_columns, join_categories, read_formula, value_label

__all__ = [
    "FORMULA_FAMILIES",
    "PRIOR_KINDS",
    "SIGMA_PREFIX",
    "BoundFormula",
    "Design",
    "FormulaModel",
    "Terms",
    "factor_columns",
    "from_formula",
    "interaction_labels",
    "join_categories",
    "read_formula",
    "value_label",
]
