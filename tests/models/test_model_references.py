"""The cached long-run references (scripts/make_model_references.py) are converged and target exactly the model
posteriors the tests will build from the cached CSV files: under the posterior, E[∇U(θ)] = 0 and E[(θ − μ)∇U(θ)ᵀ] = I
(integration by parts), checked on the stored thinned draws within Monte-Carlo error."""

from __future__ import annotations

import numpy as np
import pytest
from support.reference_problems import PROBLEMS, reference
from support.stats_helpers import Z, ess


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_reference_is_converged_and_matches_the_model(name):
    problem = PROBLEMS[name]
    X, y, columns = problem.load()
    model = problem.bound()
    model.validate(X, y)
    ref = reference(name)
    assert ref.names == model.param_names() and len(ref.mean) == model.dim
    assert ref.ess_bulk.min() >= 4000 and ref.rhat.max() < 1.01
    assert np.all(np.diff(ref.quantiles, axis=0) > 0) and np.allclose(ref.quantiles[2], ref.mean, atol=0.5 * ref.sd)
    draws = ref.thinned  # (chains, draws, d)
    flat = draws.reshape(-1, model.dim)
    prior = model.prior()
    G = (model.grad(X, y, flat) + prior.grad(flat)).reshape(draws.shape)
    for j in range(model.dim):
        g = G[..., j]
        se = g.std() / np.sqrt(ess(g))
        assert abs(g.mean()) < Z * se, f"{name}: E[dU/dθ_{j}] = {g.mean():.4f} ± {se:.4f}"
        s = (draws[..., j] - draws[..., j].mean()) * G[..., j]
        se = s.std() / np.sqrt(ess(s))
        assert abs(s.mean() - 1.0) < Z * se, f"{name}: E[(θ_{j} − μ) dU/dθ_{j}] = {s.mean():.4f} ± {se:.4f}"


def test_problems_read_offset_and_trials_from_named_columns():
    nb = PROBLEMS["negative_binomial"].bound()
    assert nb.param_names() == ["beta[(Intercept)]", "beta[x1]", "beta[x2]", "phi"]
    assert PROBLEMS["binomial_trials"].bound().param_names()[0] == "beta[(Intercept)]"
    assert PROBLEMS["poisson_offset"].load()[2][-1] == "log_exposure"
