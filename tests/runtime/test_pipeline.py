"""Chains in flight: a round as two chain groups (`pipeline`), the groups' cut, and pipeline="auto"'s choice."""

from __future__ import annotations

import numpy as np
import pytest

import raysampler as rs
from raysampler.errors import ArgumentError
from raysampler.runtime.links import (
    FAR_RTT_S,
    PIPELINE_AUTO_MIN_CHAINS,
    PIPELINE_COMPUTE_SHARE,
    PIPELINE_MIN_COMPUTE_S,
    PIPELINE_PROBE_ROUNDS,
    chain_groups,
    choose_pipeline,
    decide_pipeline,
)


@pytest.fixture(scope="module")
def data():
    X, y = rs.datasets.load("breast_cancer")
    return X, y


@pytest.mark.parametrize("chains", range(2, 130))
def test_the_groups_cover_the_chains_and_cut_on_a_panel_from_six_chains(chains):
    groups = chain_groups(chains)
    (a0, a1), (b0, b1) = groups
    assert a0 == 0 and a1 == b0 and b1 == chains and a1 >= 1 and b1 - b0 >= 1
    if chains >= 6:
        assert a1 >= 2 and chains - a1 >= 2, groups  # a lone chain would take BLAS's matrix-vector path
        assert a1 % (8 if chains >= 16 else 4) == 0, groups
        assert abs(a1 - chains / 2) <= (8 if chains >= 16 else 4), groups  # near half: both groups hide work


def test_auto_stays_off_without_a_far_link_few_chains_or_a_run_that_cannot_split():
    assert not choose_pipeline(None, 64, None, None).on  # in-process: no link
    near = choose_pipeline(None, 64, FAR_RTT_S / 2, None)
    assert not near.on and not near.pending and near.auto and "RTT" in near.reason
    few = choose_pipeline(None, PIPELINE_AUTO_MIN_CHAINS - 1, 0.1, None)
    assert not few.on and not few.pending and "chains" in few.reason  # below 6 the halves would change the bits
    refused = choose_pipeline(None, 64, 0.1, "not available with privacy= (the DP mode)")
    assert not refused.on and not refused.pending and "DP mode" in refused.reason


def test_auto_decides_from_the_measured_compute_against_the_rtt():
    pending = choose_pipeline(None, 8, 0.05, None)
    assert pending.pending and not pending.on and pending.groups == ((0, 4), (4, 8))
    on = decide_pipeline(pending, 0.05, 0.029)  # covtype_like at 50 ms: 8 chains, ~29 ms of compute
    assert on.on and on.auto and not on.pending and on.compute_s == 0.029
    assert "two chain groups (4 and 4)" in on.reason
    assert decide_pipeline(pending, 0.1, 0.5).on  # compute beyond the RTT: still half of it hidden
    little = decide_pipeline(pending, 0.1, PIPELINE_COMPUTE_SHARE * 0.1 * 0.9)
    assert not little.on and not little.pending and "nothing worth hiding" in little.reason
    assert not decide_pipeline(pending, FAR_RTT_S, PIPELINE_MIN_COMPUTE_S * 0.9).on


def test_asked_is_kept_and_says_so():
    on = choose_pipeline(True, 12, None, None)
    assert on.on and not on.auto and on.groups == ((0, 8), (8, 12)) and on.reason == "as asked"
    assert not choose_pipeline(False, 12, 0.1, None).on


def test_auto_probes_then_turns_on_mid_run_and_changes_no_draw(data, monkeypatch):
    """A far link (its RTT stood in for) and compute worth hiding (the thresholds set to zero): the first
    PIPELINE_PROBE_ROUNDS rounds run whole, then the rest as two chain groups, and the draws are the unpipelined
    run's bits, across chunks (a short time budget per chunk is not needed: the probe falls mid-chunk)."""
    from raysampler.runtime import links, setup_choices

    X, y = data
    kw = dict(chains=8, num_rounds=30, burn_in=10, seed=2, progress=False, balance=False)
    model = rs.models.LogisticRegression(prior_scale=1.0)
    parts = rs.shard(X, y, num_shards=4)
    whole = rs.sample(model, parts, executor="local", pipeline=False, **kw)
    monkeypatch.setattr(setup_choices, "far_rtt", lambda _links: 0.05)
    monkeypatch.setattr(links, "PIPELINE_COMPUTE_SHARE", 0.0)
    monkeypatch.setattr(links, "PIPELINE_MIN_COMPUTE_S", 0.0)
    auto = rs.sample(model, parts, executor="local", **kw)
    assert auto.setup.pipeline is not None and auto.setup.pipeline.pending  # the set-up's choice: pending
    choice = auto.run_stats.pipeline
    assert choice is not None and choice.on and choice.auto and choice.compute_s is not None, choice
    trips = auto.run_stats.trips  # the probe's rounds are one trip each, the rest two (one per chain group)
    rounds = kw["num_rounds"] + kw["burn_in"]
    assert trips.warmup + trips.sampling == PIPELINE_PROBE_ROUNDS + 2 * (rounds - PIPELINE_PROBE_ROUNDS), trips
    np.testing.assert_array_equal(auto.draws, whole.draws)
    monkeypatch.setattr(links, "PIPELINE_MIN_COMPUTE_S", 10.0)  # nothing worth hiding: stays off
    off = rs.sample(model, parts, executor="local", **kw)
    assert off.run_stats.pipeline is not None and not off.run_stats.pipeline.on
    assert "nothing worth hiding" in off.run_stats.pipeline.reason
    np.testing.assert_array_equal(off.draws, whole.draws)


@pytest.mark.parametrize(
    "shards, chains, kernel",
    [(4, 6, "laplace_mh"), (7, 12, "laplace_mh"), (3, 17, "laplace_mh"), (4, 24, "lmc"), (7, 6, "lmc")],
)
def test_a_pipelined_run_draws_the_unpipelined_runs_bits(data, shards, chains, kernel):
    """Each chain group draws the numbers it draws in a whole round and, cut on a panel, rounds its products as the
    whole round does: same seed, same bits (N_i balancing off: its decisions apply a round later when pipelined)."""
    X, y = data
    kw = dict(chains=chains, num_rounds=30, burn_in=10, seed=4, progress=False, balance=False, local_kernel=kernel)
    model = rs.models.LogisticRegression(prior_scale=1.0)
    parts = rs.shard(X, y, num_shards=shards)
    piped = rs.sample(model, parts, executor="local", pipeline=True, **kw)
    whole = rs.sample(model, parts, executor="local", pipeline=False, **kw)
    assert piped.setup.pipeline is not None and piped.setup.pipeline.on
    np.testing.assert_array_equal(piped.draws, whole.draws)
    # the acceptance rate is a mean over each half's shards and steps: summed in another order, equal to rounding
    assert piped.sample_stats.keys() == whole.sample_stats.keys()
    for k in piped.sample_stats:
        np.testing.assert_allclose(piped.sample_stats[k], whole.sample_stats[k], rtol=0, atol=1e-12)


def test_auto_on_one_machine_is_off_says_why_and_changes_no_draw(data):
    X, y = data
    kw = dict(chains=8, num_rounds=20, burn_in=10, seed=1, progress=False)
    model = rs.models.LogisticRegression(prior_scale=1.0)
    parts = rs.shard(X, y, num_shards=4)
    auto = rs.sample(model, parts, executor="local", **kw)
    choice = auto.setup.pipeline
    assert choice is not None and choice.auto and not choice.on and not choice.pending
    assert "no far link" in choice.reason
    np.testing.assert_array_equal(auto.draws, rs.sample(model, parts, executor="local", pipeline=False, **kw).draws)


def test_pipeline_names_the_argument_when_refused(data):
    X, y = data
    parts = rs.shard(X, y, num_shards=2)
    model = rs.models.LogisticRegression(prior_scale=1.0)
    with pytest.raises(ArgumentError, match='pipeline must be True, False or "auto"') as err:
        rs.sample(model, parts, executor="local", pipeline="yes", chains=2, num_rounds=5)  # type: ignore[arg-type]
    assert err.value.path == ("pipeline",)
    # auto with a kernel whose chains do not step as one batch: off, with the reason
    r = rs.sample(
        model, parts, executor="local", chains=2, num_rounds=5, burn_in=2, local_kernel="mala", progress=False
    )
    assert r.setup.pipeline is not None and not r.setup.pipeline.on and "independently" in r.setup.pipeline.reason
