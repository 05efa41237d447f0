"""Moment matching at the shards (`result.loo(moment_match=True)`, raysampler/evaluation/moment_match.py) against
exact leave-one-out predictive densities: a linear regression with known noise, where p(y_i | y_−i) is Gaussian in
closed form, and a small logistic regression whose posteriors without each row are integrated on a fine grid (a
refit without the row, without Monte-Carlo error). The draws are exact posterior draws (so that only the importance
sampling is tested), the tolerance two Monte-Carlo SEs of the matched elpd_i."""

from __future__ import annotations

import numpy as np
import pytest
from support.loo_problems import linear_problem, logistic_problem

import raysampler as rs
from raysampler.errors import ArgumentError
from raysampler.models.contract import DataSpec


@pytest.mark.parametrize("problem", [linear_problem, logistic_problem])
def test_moment_matching_lands_within_two_mcse_of_exact_loo(problem):
    result, exact = problem()
    plain = result.loo(pointwise=True, draws="all")
    lo = result.loo(pointwise=True, draws="all", moment_match=True)
    assert plain.k_high >= 1 and len(lo.moment_matched) == plain.k_high
    for m in lo.moment_matched:
        want = exact(m.ref.index)
        assert m.k_psis >= 0.7 and m.used and m.k_after < 0.7 and m.maps >= 1
        assert abs(m.elpd_after - want) < 2 * m.mcse_after, (m, want)
        assert abs(m.elpd_psis - want) > abs(m.elpd_after - want)  # matching helped
        j = m.ref.index
        assert lo.elpd_i.values[j] == m.elpd_after and lo.pareto_k.values[j] == m.k_after
    # the rows it did not touch keep their PSIS values; the sums are those of the pointwise values
    touched = [m.ref.index for m in lo.moment_matched]
    rest = np.setdiff1d(np.arange(plain.n_data_points), touched)
    np.testing.assert_array_equal(lo.elpd_i.values[rest], plain.elpd_i.values[rest])
    np.testing.assert_allclose(lo.elpd, lo.elpd_i.values.sum(), rtol=1e-12)
    assert lo.k_high == 0 and lo.high_k_rows == () and lo.k_ok == plain.k_ok + plain.k_high
    assert "Moment matching" in str(lo)


def test_without_high_k_rows_moment_matching_changes_nothing():
    result, _ = linear_problem()
    keep = [i for i in range(40) if i != 7]
    X = np.concatenate([s.X for s in result.data])[keep]
    y = np.concatenate([s.y for s in result.data])[keep]
    model = result.model.bind(DataSpec(2, n_rows=39))
    mean, cov = model.posterior([(X, y)])
    draws = np.random.default_rng(3).multivariate_normal(mean, cov, size=(2, 500))
    res = rs.Result(draws, model.param_names(), model=model, data=rs.shard(X, y, num_shards=2), executor="local")
    plain, mm = res.loo(), res.loo(moment_match=True)
    assert plain.k_high == 0 and mm.moment_matched == ()
    assert (mm.elpd, mm.se, mm.p) == (plain.elpd, plain.se, plain.p)


def test_models_that_cannot_be_moment_matched_are_refused_by_argument():
    result, _ = linear_problem()
    with pytest.raises(ArgumentError) as err:
        result.loo(moment_match="yes")
    assert err.value.path == ("moment_match",)
    grouped = rs.models.LogisticRegression(group_effects=rs.GroupEffects("g"))
    import dataclasses

    with pytest.raises(ArgumentError, match="group effects") as err:
        dataclasses.replace(result, model=grouped).loo(moment_match=True)
    assert err.value.path == ("moment_match",)
