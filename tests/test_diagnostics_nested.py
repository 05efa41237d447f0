"""Nested R-hat (Margossian et al. 2024), the many-chains convergence rule built on it, the warm-up rule, and the
superchains' shared starts: against a loop-by-loop transcription of the paper's formulas, its limits, and seeded
AR(1) chains whose stationary behaviour is known."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from raysampler.algorithms.mcmc import DualAveraging, dual_averaging
from raysampler.diagnostics import (
    MANY_CHAINS,
    RHAT_WARN,
    SETTLED_ACCEPT,
    WARM_RHAT,
    Diagnostics,
    WarningKind,
    diagnose,
    nested_rank,
    nested_rhat,
    settled,
    superchain_ids,
    superchains_for,
    warm,
)


def nested_rhat_by_loops(draws: np.ndarray, superchains: int) -> np.ndarray:
    """The paper's sec. 2 formulas written out term by term, one parameter at a time (slow, on purpose)."""
    chains, n, d = draws.shape
    K, M = superchains, chains // superchains
    out = np.empty(d)
    for p in range(d):
        theta = [[[float(draws[k * M + m, i, p]) for i in range(n)] for m in range(M)] for k in range(K)]
        chain_mean = [[sum(theta[k][m]) / n for m in range(M)] for k in range(K)]
        super_mean = [sum(chain_mean[k]) / M for k in range(K)]
        overall = sum(super_mean) / K
        B = sum((super_mean[k] - overall) ** 2 for k in range(K)) / (K - 1)
        W = 0.0
        for k in range(K):
            between = 0.0 if M == 1 else sum((chain_mean[k][m] - super_mean[k]) ** 2 for m in range(M)) / (M - 1)
            within = 0.0
            if n > 1:
                within = sum(sum((t - chain_mean[k][m]) ** 2 for t in theta[k][m]) / (n - 1) for m in range(M)) / M
            W += (between + within) / K
        out[p] = math.sqrt(1.0 + B / W)
    return out


def ar1(seed: int, start: np.ndarray, n: int, rho: float) -> np.ndarray:
    """n draws (chains, n, d) of unit-variance AR(1) chains from `start` (chains, d)."""
    rng = np.random.default_rng(seed)
    out = np.empty((start.shape[0], n, start.shape[1]))
    x = start
    for t in range(n):
        x = rho * x + math.sqrt(1 - rho**2) * rng.standard_normal(x.shape)
        out[:, t] = x
    return out


def stationary_starts(seed: int, chains: int, d: int) -> np.ndarray:
    """Starts drawn from the stationary N(0, 1), shared by the chains of a superchain as the nested design has it."""
    x = np.random.default_rng(seed).standard_normal((chains, d))
    k = superchains_for(chains)
    return x if k == 1 else x[superchain_ids(chains, k) * (chains // k)]


# --- superchains -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("chains", "superchains"),
    [(1, 1), (4, 1), (15, 1), (16, 4), (17, 1), (18, 1), (20, 4), (25, 5), (32, 4), (49, 7), (50, 5), (64, 4)],
)
def test_superchains_for_many_chains_only_and_equal_sizes_of_at_least_four(chains, superchains):
    assert superchains_for(chains) == superchains
    if superchains > 1:
        assert chains >= MANY_CHAINS and chains % superchains == 0 and chains // superchains >= 4


def test_chains_are_grouped_contiguously():
    np.testing.assert_array_equal(superchain_ids(8, 2), [0, 0, 0, 0, 1, 1, 1, 1])
    with pytest.raises(ValueError, match="equal superchains"):
        superchain_ids(18, 4)


# --- nested R-hat: the definition and its limits ---------------------------------------------------------------


@pytest.mark.parametrize(("K", "M", "n"), [(3, 4, 7), (2, 5, 2), (4, 1, 9), (5, 3, 1), (2, 2, 30)])
def test_nested_rhat_is_the_papers_formula(K, M, n):
    rng = np.random.default_rng(K * 100 + M * 10 + n)
    draws = rng.standard_normal((K * M, n, 3)) + rng.standard_normal((K * M, 1, 3))  # chains with their own means
    np.testing.assert_allclose(nested_rhat(draws, K), nested_rhat_by_loops(draws, K), rtol=1e-12)


def test_nested_rhat_agrees_with_arviz_stats_identity_method():
    """An independent implementation (arviz-stats' `rhat_nested`, method "identity": raw draws, no split)."""
    import arviz_stats as azs

    draws = np.random.default_rng(7).standard_normal((12, 9, 4))
    draws[:4] += 0.4
    ours = nested_rhat(draws, 3)
    theirs = np.asarray(azs.rhat_nested(draws, superchain_ids=superchain_ids(12, 3), method="identity"))
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)


def test_one_chain_per_superchain_is_the_classic_rhat_without_its_n_minus_1_over_n():
    """M = 1: nR̂² = 1 + B/W while the classic (not split) R̂² = (N − 1)/N + B/W, so R̂² = nR̂² − 1/N."""
    import arviz_stats as azs

    rng = np.random.default_rng(3)
    draws = rng.standard_normal((6, 11, 2)) + 0.5 * rng.standard_normal((6, 1, 2))
    classic = np.asarray(azs.rhat(draws, method="identity"))
    np.testing.assert_allclose(nested_rhat(draws, 6) ** 2 - 1 / 11, classic**2, rtol=1e-12)
    assert np.all(nested_rhat(draws, 6) >= 1.0)


def test_identical_chains_give_exactly_one():
    series = np.random.default_rng(1).standard_normal((1, 20, 3))
    assert np.all(nested_rhat(np.repeat(series, 8, axis=0), 4) == 1.0)


def test_a_superchain_far_away_gives_a_large_value():
    draws = np.random.default_rng(2).standard_normal((16, 10, 2))
    draws[:4, :, 0] += 10.0  # superchain 0, parameter 0 only
    r = nested_rhat(draws, 4)
    assert r[0] > 4.0 and r[1] < 1.1


def test_degenerate_cases():
    one = np.random.default_rng(4).standard_normal((4, 1, 2))  # M = 1 and N = 1: no within-superchain variance
    assert np.all(np.isinf(nested_rhat(one, 4)))
    assert np.all(np.isnan(nested_rhat(np.ones((8, 5, 2)), 4)))  # constant draws
    n1 = np.random.default_rng(5).standard_normal((16, 1, 2))  # N = 1, M = 4: the between-chain term alone
    np.testing.assert_allclose(nested_rhat(n1, 4), nested_rhat_by_loops(n1, 4), rtol=1e-12)
    with pytest.raises(ValueError, match="equal superchains"):
        nested_rhat(np.zeros((18, 5, 1)), 4)
    with pytest.raises(ValueError, match="equal superchains"):
        nested_rhat(np.zeros((8, 5, 1)), 1)


def test_stationary_many_short_chains_sit_near_one_within_the_threshold():
    """Independent N(0, 1) draws, 64 chains of 50: nR̂² − 1 ≈ 1 / (M·N) (the variance of a superchain's mean over
    the posterior's), here 1/800, and every parameter's nR̂ stays below 1 + δ = 1.01."""
    rng = np.random.default_rng(11)
    values = np.array([nested_rhat(rng.standard_normal((64, 50, 10)), 4) for _ in range(40)])
    assert values.max() < RHAT_WARN
    mean_excess = float(np.mean(values**2 - 1))
    assert 0.8 / 800 < mean_excess < 1.2 / 800, mean_excess  # 400 values, relative sd of their mean ≈ 4 %


def test_rank_normalised_nested_rhat():
    rng = np.random.default_rng(6)
    draws = rng.standard_normal((16, 40, 3))
    assert np.all(nested_rank(draws, 4) >= nested_rhat(draws, 4) - 0.01)
    bulk_invariant = np.exp(draws)  # an increasing transform: the same ranks, the same bulk term
    from raysampler.diagnostics import _normal_scores

    np.testing.assert_array_equal(_normal_scores(bulk_invariant), _normal_scores(draws))
    heavy = rng.standard_cauchy((16, 40, 3))  # stationary but without a variance: the ranks still behave
    assert nested_rank(heavy, 4).max() < 1.1
    spread = draws.copy()
    spread[:4] *= 0.2  # superchain 0 not spread out yet (same centre): only the folded term sees it
    assert nested_rank(spread, 4).max() > 1.2 and nested_rhat(spread, 4).max() < 1.1
    with_nan = draws.copy()
    with_nan[0, 0, 1] = np.nan
    assert np.isnan(nested_rank(with_nan, 4)[1]) and np.all(np.isfinite(nested_rank(with_nan, 4)[[0, 2]]))


# --- the convergence rule ----------------------------------------------------------------------------------------


def test_few_chains_contract_is_unchanged():
    assert Diagnostics(400.0, 1.0099, 1000, 4).converged(400, 1.01)
    assert not Diagnostics(399.9, 1.0, 1000, 4).converged(400, 1.01)
    assert not Diagnostics(1e4, 1.01, 1000, 4).converged(400, 1.01)
    d = Diagnostics(1e4, 1.02, 1000, 4)
    assert d.rule == "split_rhat" and d.rule_rhat == 1.02 and [w.kind for w in d.warnings()] == [WarningKind.RHAT]
    assert "max R-hat is 1.020" in str(d.warnings()[0])
    assert d.as_dict() == {
        "min_ess_bulk": 1e4,
        "max_rhat": 1.02,
        "draws": 1000,
        "chains": 4,
        "rule": "split_rhat",
        "superchains": 1,
        "max_nested_rhat": None,
    }


def test_many_chains_are_judged_by_nested_rhat_and_say_so():
    d = Diagnostics(450.0, 1.08, 100, 64, superchains=4, max_nested_rhat=1.006)
    assert d.rule == "nested_rhat" and d.rule_rhat == 1.006
    assert d.converged(400, 1.01) and not d.converged(500, 1.01)
    assert not Diagnostics(450.0, 1.0, 100, 64, superchains=4, max_nested_rhat=1.011).converged(400, 1.01)
    assert d.warnings() == []  # ESS is held to 100 per superchain, the split R-hat of short chains is not read
    assert d.fraction(400, 1.01) == 1.0 and Diagnostics(200.0, 1.08, 100, 4).fraction(400, 1.01) < 0.5
    assert d.as_dict()["rule"] == "nested_rhat" and d.as_dict()["max_nested_rhat"] == 1.006
    bad = Diagnostics(300.0, 1.3, 100, 64, superchains=4, max_nested_rhat=1.05)
    rhat, ess = bad.warnings()
    assert rhat.kind == WarningKind.RHAT and "nested R-hat is 1.050" in str(rhat) and "4 superchains of 16" in str(rhat)
    assert ess.kind == WarningKind.ESS and "100 per superchain × 4 superchains" in str(ess)
    assert not Diagnostics(450.0, 1.0, 100, 64, superchains=4, max_nested_rhat=math.inf).converged(400, 1.01)


def test_diagnose_computes_nested_rhat_with_superchains():
    draws = ar1(0, stationary_starts(0, 64, 5), 100, 0.7)
    plain, nested = diagnose(draws), diagnose(draws, superchains=4)
    assert plain is not None and nested is not None
    assert plain.max_nested_rhat is None and plain.superchains == 1 and plain.rule == "split_rhat"
    assert nested.max_nested_rhat == pytest.approx(float(nested_rank(draws, 4).max()), rel=1e-12)
    assert (nested.min_ess_bulk, nested.max_rhat) == (plain.min_ess_bulk, plain.max_rhat)
    # 64 short stationary chains: ESS well over 400, split R-hat not yet under 1.01, nested R-hat is
    assert nested.min_ess_bulk > 400 and nested.max_rhat > 1.01 and nested.converged(400, 1.01)
    thinned = diagnose(draws, 40, superchains=4)
    assert thinned is not None and thinned.draws == 100 and thinned.max_nested_rhat is not None


def test_diagnose_gives_arviz_stats_ess_and_rhat_and_nested_rank():
    """diagnose shares one rank normalisation between its three statistics: its min bulk ESS and max R-hat are
    arviz-stats' bulk ESS and rank R-hat of the draws, and its nested R-hat is `nested_rank`'s, at odd and even
    lengths (the middle draw of an odd count left out, as arviz-stats' split does), with ties and a constant
    parameter. A parameter with a non-finite draw has no ESS or R-hat (arviz-stats would rank an infinity as the
    largest draw and give finite numbers), so such draws are never judged converged."""
    import arviz_stats as azs

    rng = np.random.default_rng(2)
    for t in range(24):
        chains, n, d = int(rng.choice([4, 16, 32])), int(rng.integers(8, 200)), int(rng.integers(1, 6))
        x = rng.normal(size=(chains, n, d)).cumsum(axis=1) * rng.uniform(0.05, 0.5) + rng.normal(size=(chains, n, d))
        if t % 3 == 0:
            x *= rng.uniform(0.2, 5, size=(chains, 1, 1))  # spreads that differ: the tail (folded) term is the larger
        if t % 4 == 0:
            x = np.round(x, 1)  # ties
        if t % 6 == 1:
            x[:, :, 0] = 2.0  # a constant parameter
        k = superchains_for(chains)
        if t % 6 == 2:
            xb = x.copy()
            xb[0, 3, -1] = np.inf
            broken = diagnose(xb, superchains=k)
            assert broken is not None and broken.min_ess_bulk == -np.inf and broken.max_rhat == np.inf
            assert not broken.converged(1.0, 10.0)
        got = diagnose(x, superchains=k)
        assert got is not None
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            ess = np.asarray(azs.ess(x, method="bulk"), dtype=float)
            rhat = np.asarray(azs.rhat(x, method="rank"), dtype=float)
        want_ess = float(np.min(np.where(np.isfinite(ess), ess, -np.inf)))
        want_rhat = float(np.max(np.where(np.isfinite(rhat), rhat, np.inf)))
        assert got.min_ess_bulk == pytest.approx(want_ess, rel=1e-12), t
        assert got.max_rhat == pytest.approx(want_rhat, rel=1e-12), t
        if k > 1:
            even = np.delete(x, n // 2, axis=1) if n % 2 else x
            nested = nested_rank(even, k)
            want = float(np.max(np.where(np.isfinite(nested), nested, np.inf)))
            assert got.max_nested_rhat == pytest.approx(want, rel=1e-12), t


# --- the warm-up rule --------------------------------------------------------------------------------------------


def test_stationary_chains_are_warm_at_50_draws_few_and_many():
    """Started at stationarity, AR(1) with ρ = 0.3 (4 chains) or ρ = 0.7 (64 chains): warm at the first look."""
    assert warm(ar1(0, stationary_starts(0, 4, 1), 50, 0.3), 1)
    assert warm(ar1(0, stationary_starts(0, 64, 5), 50, 0.7), superchains_for(64))
    # not a lucky seed: the rule's false alarm rate on these chains (split R-hat on 8 half-chains of 12 draws is
    # noisy; nested R-hat on 4 superchains of 16 chains is not)
    few = np.mean([warm(ar1(s, stationary_starts(s, 4, 1), 50, 0.3), 1) for s in range(40)])
    many = np.mean([warm(ar1(s, stationary_starts(s, 64, 5), 50, 0.7), 4) for s in range(20)])
    assert few >= 0.8 and many == 1.0, (few, many)


def test_a_chain_started_20_sd_away_is_not_warm_few_chains():
    starts = stationary_starts(1, 4, 2)
    starts[0] += 20.0
    draws = ar1(1, starts, 113, 0.95)
    assert not any(warm(draws[:, :n], 1) for n in (50, 75, 113))
    assert not warm(draws[:, :7], 1)  # too few draws to say


def test_a_superchain_started_20_sd_away_is_not_warm_many_chains():
    """The same slow chains (ρ = 0.95) with and without superchain 0 (16 chains) shifted 20 sd: nested R-hat of
    the later half tells them apart at 50 and 75 draws."""
    K = superchains_for(64)
    for seed in range(10):
        starts = stationary_starts(seed, 64, 2)
        assert warm(ar1(seed, starts, 50, 0.95), K) or seed != 0  # unshifted: warm (seed 0 at least)
        starts[:16] += 20.0
        shifted = ar1(seed, starts, 75, 0.95)
        assert not warm(shifted[:, :50], K) and not warm(shifted, K), seed
    unshifted = np.mean([warm(ar1(s, stationary_starts(s, 64, 2), 50, 0.95), K) for s in range(10)])
    assert unshifted >= 0.8, unshifted


def dual_averaged_acceptance(seed: int, log_h0: float, rounds: int, target: float = 0.574) -> np.ndarray:
    """The per-round mean acceptance of dual averaging (the samplers' own `dual_averaging`) on a kernel whose
    acceptance at step h is exp(−h), observed with noise (a round's mean over a few chains): (rounds,)."""
    rng = np.random.default_rng(seed)
    log_h, da, out = log_h0, DualAveraging.start(log_h0), []
    for _ in range(rounds):
        accept = float(np.clip(math.exp(-math.exp(log_h)) + 0.05 * rng.normal(), 0.0, 1.0))
        out.append(accept)
        log_h, da = dual_averaging(da, accept, target, log_h0)
    return np.array(out)


def test_a_step_size_started_near_its_value_has_settled_at_the_first_check():
    good = math.log(-math.log(0.574))  # exp(−h) = 0.574
    assert all(settled(dual_averaged_acceptance(s, good, 50), 0.574) for s in range(10))


def test_a_step_size_started_far_off_has_not_settled_while_its_acceptance_is_on_one_side():
    """From a step e^60 times too large the acceptance is 0 until dual averaging has come down, then climbs back
    to the target from below for hundreds of rounds: unsettled at the first checks, settled in the end."""
    far = dual_averaged_acceptance(0, 60.0, 1000)
    assert not any(settled(far[:n], 0.574) for n in (50, 75, 113)), far[:113].round(2)
    assert settled(far, 0.574)


def test_settled_refuses_a_window_that_crosses_the_target_and_short_or_broken_series():
    off = 1.5 * SETTLED_ACCEPT
    crossing = np.r_[np.full(50, 0.574), np.full(25, 0.574 + off), np.full(25, 0.574 - off)]
    assert abs(crossing[50:].mean() - 0.574) < 1e-12 and not settled(crossing, 0.574)  # its whole is on target
    assert settled(np.full(100, 0.574 + 0.9 * SETTLED_ACCEPT), 0.574)
    assert not settled(np.full(7, 0.574), 0.574)
    assert not settled(np.r_[np.full(90, 0.574), np.nan, np.full(9, 0.574)], 0.574)


def test_warm_threshold_is_looser_than_the_sampling_rule():
    assert RHAT_WARN < WARM_RHAT <= 1.1


# --- the superchains' shared starts ------------------------------------------------------------------------------


def _laplace(d: int):
    from raysampler.reparam import Preconditioner
    from raysampler.tuning.laplace import Laplace

    rng = np.random.default_rng(9)
    theta_map = rng.standard_normal(d)
    L = np.tril(rng.standard_normal((d, d))) + 3 * np.eye(d)
    return Laplace(theta_map, Preconditioner(theta_map, L, "laplace"), None, None, None, None, None)


@pytest.mark.parametrize("chains", [4, 8, 15, 18])
def test_starts_below_many_chains_are_todays_independent_draws(chains):
    from raysampler.streams import ChainNoise
    from raysampler.tuning.laplace import initial_points

    lap, d = _laplace(3), 3
    phi = lap.precond.to_phi(lap.theta_map[None, :])
    expected = phi + ChainNoise(5, chains, 0, d).normal(1)[0]  # the rule before superchains, bit for bit
    np.testing.assert_array_equal(initial_points("map", lap, chains, d, ChainNoise(5, chains, 0, d)), expected)


@pytest.mark.parametrize("chains", [16, 64, 25])
def test_the_chains_of_a_superchain_share_its_first_chains_start(chains):
    from raysampler.streams import ChainNoise
    from raysampler.tuning.laplace import initial_points

    lap, d = _laplace(3), 3
    K = superchains_for(chains)
    M = chains // K
    independent = initial_points("map", lap, 8, d, ChainNoise(5, 8, 0, d))  # the first chains' own draws
    noise = ChainNoise(5, chains, 0, d)
    starts = initial_points("map", lap, chains, d, noise)
    for k in range(K):
        np.testing.assert_array_equal(starts[k * M : (k + 1) * M], np.repeat(starts[k * M][None], M, axis=0))
    assert len({tuple(starts[k * M]) for k in range(K)}) == K
    np.testing.assert_array_equal(starts[0], independent[0])  # superchain 0 starts where chain 0 did
    # every chain's stream gave its one draw: what follows is what follows independent starts
    after = ChainNoise(5, chains, 0, d)
    after.normal(1)
    np.testing.assert_array_equal(noise.normal(2), after.normal(2))


def test_other_starts_are_untouched_by_superchains():
    from raysampler.tuning.laplace import initial_points

    lap, d = _laplace(2), 2
    np.testing.assert_array_equal(
        initial_points("map", lap, 64, d), np.repeat(lap.precond.to_phi(lap.theta_map[None]), 64, 0)
    )
    arr = np.random.default_rng(0).standard_normal((64, d))
    np.testing.assert_allclose(lap.precond.to_theta(initial_points(arr, lap, 64, d)), arr)


def test_split_rank_rhat_gives_arviz_stats_numbers():
    """The warm-up rule's own split R-hat (numpy and scipy only, for the coordinator's process) equals arviz-stats'
    rank R-hat: odd and even lengths, 2 to 8 chains, ties, chains apart and not."""
    import arviz_stats as azs

    from raysampler.diagnostics import split_rank_rhat

    rng = np.random.default_rng(1)
    for t in range(60):
        chains, n, d = int(rng.integers(2, 9)), int(rng.integers(8, 300)), int(rng.integers(1, 5))
        x = rng.normal(size=(chains, n, d)) * rng.uniform(0.1, 3, size=(chains, 1, 1))
        x += rng.normal(size=(chains, 1, 1)) * rng.uniform(0, 1)
        if t % 5 == 0:
            x = np.round(x, 1)  # ties
        np.testing.assert_allclose(split_rank_rhat(x), np.asarray(azs.rhat(x, method="rank")), rtol=1e-13)


def test_average_ranks_are_scipys():
    import scipy.stats

    from raysampler.diagnostics import _average_ranks

    rng = np.random.default_rng(0)
    for _ in range(30):
        a = np.round(rng.normal(size=(int(rng.integers(1, 400)), int(rng.integers(1, 6)))), int(rng.integers(0, 3)))
        np.testing.assert_array_equal(_average_ranks(a), scipy.stats.rankdata(a, axis=0, method="average"))


def test_ess_mean_is_arviz_stats_mean_ess():
    """`ess_mean`, every parameter at once, against arviz-stats' ess(method="mean") parameter by parameter: AR(1)
    chains from strongly antithetic to slow, chains that disagree, one chain, short chains (the sequence's first
    pairs only), ties, a constant parameter and a non-finite draw."""
    import arviz_stats as azs

    from raysampler.diagnostics import ess_mean

    rng = np.random.default_rng(1)
    for trial in range(300):
        chains, n, d = int(rng.integers(1, 9)), int(rng.integers(4, 300)), int(rng.integers(1, 6))
        phi = rng.uniform(-0.95, 0.99, d)
        e = rng.standard_normal((chains, n, d))
        x = np.zeros((chains, n, d))
        x[:, 0] = e[:, 0]
        for t in range(1, n):
            x[:, t] = phi * x[:, t - 1] + e[:, t]
        x += rng.normal(0, rng.uniform(0, 2), (chains, 1, d))
        if trial % 7 == 0:
            x[..., 0] = 3.0
        if trial % 11 == 0:
            x[0, 0, -1] = np.nan
        if trial % 13 == 0:
            x = np.round(x, 1)
        expected = np.asarray(azs.ess(x, method="mean"), dtype=float)
        got = ess_mean(x)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
        np.testing.assert_allclose(got, expected, rtol=1e-11)
