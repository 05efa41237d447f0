"""QLSD / QLSD++ (docs/algorithms.md): quantiser properties, the exact ULA law without compression, memory and
variance reduction with compression, local = Ray, parameter checks.

Model: five shards of 2-D Gaussian observations (as tests/test_baselines_exact.py), prior N(0, I) held by the
server. Without quantisation and with full gradients QLSD *is* ULA: θ' = (I − γΛ)θ + γ(Σ P_i m_i + P0 m0) + √(2γ)ξ.
With quantisation the update stays mean-unbiased given the past (E[C(v)] = v, the memory and the QLSD++ control
variate are unbiased too) and ∇U is affine, so the stationary mean is still exactly Λ⁻¹(Σ P_i m_i + P0 m0), the
posterior mean: the bias allowance for the mean is 0 — quantisation only inflates the covariance.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from support.problems import ula_law
from support.stats_helpers import Z, assert_moments, ess, tolerance_scale

import raysampler as rs
from raysampler.algorithms import get_algorithm
from raysampler.algorithms.qlsd import QLSD, bits, omega, quantize
from raysampler.testing import exact

SIGMA1 = np.array([[1.0, 0.5], [0.5, 2.0]])
SIZES = (3, 5, 4, 6, 2)
P0, M0 = np.eye(2), np.zeros(2)
#: 96,000 draws as 64 chains of 1,500 rounds: an in-process round costs about the same for 16 or 64 chains (one
#: vectorised step), so the same ESS comes from a quarter of the rounds
CHAINS, ROUNDS, BURN = 64, 1500, 500


def _make(offsets, seed=11):
    rng = np.random.default_rng(seed)
    ys = [
        np.array([0.8, -0.5]) + off + rng.multivariate_normal(np.zeros(2), SIGMA1, size=n)
        for n, off in zip(SIZES, offsets)
    ]
    shards = rs.shard([(np.zeros((len(y), 0)), y) for y in ys])
    model = rs.models.Gaussian(prior_scale=1.0, noise_cov=SIGMA1.tolist())
    prec = np.linalg.inv(SIGMA1)
    return shards, model, [n * prec for n in SIZES], [y.mean(axis=0) for y in ys]


@pytest.fixture(scope="module")
def problem():
    return _make([np.zeros(2)] * len(SIZES))


@pytest.fixture(scope="module")
def hetero():
    """Strongly heterogeneous shards (means shifted by ±4): local gradients stay large at the posterior mode."""
    offs = [
        np.array([4.0, 0.0]),
        np.array([-4.0, 0.0]),
        np.array([0.0, 4.0]),
        np.array([0.0, -4.0]),
        np.array([4.0, 4.0]),
    ]
    return _make(offs)


def _L(P):
    return sum(np.linalg.eigvalsh(Pi).max() for Pi in P) + 1.0


def _run(prob, chains=CHAINS, rounds=ROUNDS, burn=BURN, seed=0, executor="local", **params):
    shards, model, _, _ = prob
    return rs.sample(
        model,
        shards,
        "qlsd",
        chains=chains,
        num_rounds=rounds,
        burn_in=burn,
        seed=seed,
        executor=executor,
        progress=False,
        preconditioner=None,
        init="zeros",
        **params,
    )


# --- quantiser ---------------------------------------------------------------------------------------------


def test_quantizer_unbiased_and_variance_bound():
    rng = np.random.default_rng(0)
    v = np.array([[0.3, -1.2, 0.05, 2.0, 0.0, -0.7]])
    d, n = v.shape[1], 40000
    for s in (1, 2, 8):
        V = np.repeat(v, n, axis=0)
        C = quantize(V, s, rng.random(V.shape))
        # only the values l/s and (l+1)/s times ‖v‖ with the sign of v_j appear
        mean, se = C.mean(axis=0), C.std(axis=0) / math.sqrt(n)
        assert np.all(np.abs(mean - v[0]) <= Z * se + 1e-12), (s, mean, v)
        err = np.sum((C - V) ** 2, axis=1)
        bound = omega(d, s) * np.sum(v**2)
        assert err.mean() <= bound + Z * err.std() / math.sqrt(n), (s, err.mean(), bound)
        levels = np.abs(C) * s / np.linalg.norm(v)
        np.testing.assert_allclose(levels, np.round(levels), atol=1e-9)


def test_quantizer_zero_identity_and_rows():
    rng = np.random.default_rng(1)
    v = np.vstack([np.zeros(3), [1.0, -2.0, 0.5]])
    C = quantize(v, 4, rng.random(v.shape))
    np.testing.assert_array_equal(C[0], 0.0)  # C(0) = 0 (no NaN from 0/0)
    assert np.all(np.isfinite(C))
    np.testing.assert_array_equal(quantize(v, None, None), v)  # no compression
    np.testing.assert_array_equal(quantize(v, 0, None), v)
    # u decides each coordinate: u = 0 rounds up every non-integer level, u → 1 rounds down
    up, down = quantize(v[1:], 1, np.zeros((1, 3))), quantize(v[1:], 1, np.full((1, 3), 1 - 1e-12))
    nrm = np.linalg.norm(v[1])
    np.testing.assert_allclose(up, nrm * np.sign(v[1:]))
    np.testing.assert_allclose(down, 0.0)


def test_bits_and_omega_formulas():
    assert bits(10, 8) == pytest.approx(32 + 10 * (1 + math.log2(9)))
    assert bits(4, 1) == 32 + 4 * 2
    assert bits(5, None) == 160
    assert omega(100, 2) == pytest.approx(min(100 / 4, 10 / 2))
    assert omega(2, 8) == pytest.approx(2 / 64)
    assert omega(7, None) == 0.0


# --- no compression = ULA ----------------------------------------------------------------------------------


def test_uncompressed_qlsd_is_ula_bitwise(problem):
    shards, model, P, m = problem
    kw = dict(
        chains=3,
        num_rounds=50,
        burn_in=5,
        seed=2,
        executor="local",
        progress=False,
        preconditioner=None,
        init="zeros",
        step_size=0.02,
    )
    ula = rs.sample(model, shards, "ula", **kw)
    q = rs.sample(model, shards, "qlsd", variant="sharp", levels=None, **kw)
    np.testing.assert_array_equal(q.draws, ula.draws)
    # with memory and α = 1 the sum is rearranged (q + H) but the maths is the same
    qm = rs.sample(model, shards, "qlsd", variant="star", levels=None, **kw)
    np.testing.assert_allclose(qm.draws, ula.draws, rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(q.sample_stats["bits"], 5 * 32 * 2)


def test_uncompressed_qlsd_matches_ula_law(problem):
    _, _, P, m = problem
    gamma = 0.8 / _L(P)
    res = _run(problem, variant="sharp", levels=None, step_size=gamma)
    law = ula_law(P, m, gamma)
    assert_moments(res.draws, *law)
    other = ula_law(P, m, gamma / 10)
    tol = tolerance_scale(res.draws, law[1])
    sd, sd_o = np.sqrt(np.diag(law[1])), np.sqrt(np.diag(other[1]))
    assert np.max(np.abs(sd - sd_o)) > 1.5 * tol or np.max(np.abs(law[0] - other[0])) > 1.5 * tol


# --- with compression --------------------------------------------------------------------------------------


def test_memory_reduces_compression_error(hetero):
    _, _, P, m = hetero
    gamma = 0.2 / _L(P)
    kw = dict(chains=4, rounds=300, burn=100, levels=1, step_size=gamma)
    plain = _run(hetero, variant="sharp", **kw)
    mem = _run(hetero, variant="star", **kw)
    for r in (plain, mem):
        assert np.all(np.isfinite(r.draws))
        np.testing.assert_array_equal(r.sample_stats["bits"], 5 * bits(2, 1))
    e_plain, e_mem = plain.sample_stats["sq_error"].mean(), mem.sample_stats["sq_error"].mean()
    assert e_mem < 0.5 * e_plain, (e_mem, e_plain)  # measured: ≈ 1.0 vs ≈ 330


@pytest.mark.parametrize("variant", ["sharp", "pp"])
def test_compressed_mean_is_posterior_mean(hetero, variant):
    _, _, P, m = hetero
    post_mean, post_cov = exact.gaussian_posterior(P, m, P0, M0)
    gamma = 0.3 / _L(P)
    res = _run(
        hetero, chains=32, rounds=1000, burn=400, variant=variant, levels=2, batch_size=2, ref_every=20, step_size=gamma
    )
    assert np.all(np.isfinite(res.draws))
    bias_allowance = 0.0  # exact for affine ∇U: every compressed/minibatch gradient is conditionally unbiased
    for j in range(2):
        x = res.draws[..., j]
        tol = Z * x.std() / math.sqrt(ess(x)) + bias_allowance
        assert abs(x.mean() - post_mean[j]) < tol, (variant, j, x.mean(), post_mean[j], tol)
    # quantisation + minibatches add variance: the spread is at least the posterior's (up to MC error)
    assert np.all(res.draws.reshape(-1, 2).var(axis=0) > 0.8 * np.diag(post_cov))


def test_pp_variance_reduction_beats_sharp(hetero):
    """QLSD++'s control variate removes the minibatch noise near the anchor: its draws spread less than QLSD#'s."""
    _, _, P, m = hetero
    gamma = 0.3 / _L(P)
    kw = dict(chains=32, rounds=750, burn=300, levels=8, batch_size=1, step_size=gamma, seed=3)
    sharp = _run(hetero, variant="sharp", **kw)
    pp = _run(hetero, variant="pp", ref_every=5, **kw)
    assert pp.draws.reshape(-1, 2).var(axis=0).sum() < sharp.draws.reshape(-1, 2).var(axis=0).sum()


def test_deterministic_per_seed(hetero):
    a = _run(hetero, chains=2, rounds=30, burn=3, variant="pp", levels=2, batch_size=2, ref_every=4, seed=5)
    b = _run(hetero, chains=2, rounds=30, burn=3, variant="pp", levels=2, batch_size=2, ref_every=4, seed=5)
    np.testing.assert_array_equal(a.draws, b.draws)


def test_local_and_ray_draws_identical(hetero, ray_session):
    kw = dict(chains=3, rounds=12, burn=3, seed=7, variant="pp", levels=2, batch_size=2, ref_every=4, step_size=0.01)
    local = _run(hetero, **kw)
    on_ray = _run(hetero, executor="ray", **kw)
    np.testing.assert_array_equal(local.draws, on_ray.draws)
    np.testing.assert_array_equal(local.sample_stats["sq_error"], on_ray.sample_stats["sq_error"])


# --- parameters --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "params, name",
    [
        ({"levels": 0}, "levels"),
        ({"levels": -2}, "levels"),
        ({"levels": 1.5}, "levels"),
        ({"step_size": 0.0}, "step_size"),
        ({"step_size": -1.0}, "step_size"),
        ({"variant": "plusplus"}, "variant"),
        ({"ref_every": 0}, "ref_every"),
        ({"ref_every": 2.5}, "ref_every"),
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": 1.5}, "alpha"),
        ({"batch_size": 0}, "batch_size"),
        ({"memory": "yes"}, "memory"),
        ({"init": "random"}, "init"),
    ],
)
def test_bad_params_name_themselves(params, name):
    with pytest.raises(ValueError, match=name):
        get_algorithm("qlsd", **params)


def test_defaults_and_registry():
    alg = get_algorithm("qlsd")
    assert isinstance(alg, QLSD) and alg.name == "qlsd"
    assert (alg.variant, alg.levels, alg.ref_every, alg.batch_size) == ("star", 8, 100, None)
    assert alg._uses_memory() and not QLSD(variant="sharp")._uses_memory()
    assert QLSD(variant="sharp", memory=True)._uses_memory()
