"""Round trips by phase, the warm-up that ends by itself and chains="auto" (raysampler/runtime/links.py and the
coordinator): in-process runs, which count the trips a Ray run makes, and `choose_chains` on given links."""

from __future__ import annotations

import numpy as np
import pytest

import raysampler as rs
from raysampler.algorithms import DGLMC
from raysampler.diagnostics import MANY_CHAINS, SETTLED_ACCEPT
from raysampler.enums import StopReason
from raysampler.errors import ArgumentError
from raysampler.options import ExecutionOptions, RunOptions
from raysampler.runtime.links import CHAINS_AUTO_MAX, FAR_RTT_S, LinkStats, choose_chains
from raysampler.sampling import Run

pytestmark = pytest.mark.slow  # a few seconds each: many chains, hundreds of rounds


@pytest.fixture(scope="module")
def data():
    X, y = rs.datasets.load("breast_cancer")
    return rs.shard(X, y, num_shards=4)


MODEL = rs.models.LogisticRegression(prior_scale=1.0)


def _run(data, **kw):
    return rs.sample(MODEL, data, executor="local", progress=False, seed=3, **kw)


def test_an_auto_warm_up_ends_early_with_many_chains_and_equals_that_fixed_warm_up(data):
    auto = _run(data, chains=32, num_rounds=60, burn_in="auto")
    w = auto.run_stats.burn_in
    assert w is not None and w < 200, w  # not the 1,000-round cap: 32 chains from the Laplace start are warm early
    trips = auto.run_stats.trips
    assert (trips.warmup, trips.sampling, trips.capture) == (w, 60, 0) and 0 < trips.setup <= 14, trips
    fixed = _run(data, chains=32, num_rounds=60, burn_in=w)
    np.testing.assert_array_equal(auto.draws, fixed.draws)  # the decision moved the warm-up's end, nothing else


def test_a_pipelined_run_ends_its_warm_up_where_its_fixed_twin_does(data):
    auto = _run(data, chains=32, num_rounds=30, burn_in="auto", pipeline=True)
    w = auto.run_stats.burn_in
    assert w is not None and w < 200
    np.testing.assert_array_equal(auto.draws, _run(data, chains=32, num_rounds=30, burn_in=w, pipeline=True).draws)


def test_a_superchain_started_far_away_is_not_declared_warm_at_the_first_check(data):
    near = _run(data, chains=32, num_rounds=20, burn_in="auto")
    theta = near.draws[:, -1, :]  # 32 points the chains reach
    sd = near.draws.reshape(-1, theta.shape[1]).std(axis=0)
    start = theta.copy()
    start[:8] += 30.0 * sd  # superchain 0 (chains 0-7) 30 posterior sd away
    far = _run(data, chains=32, num_rounds=20, burn_in="auto", init=start)
    assert far.run_stats.burn_in is not None and far.run_stats.burn_in > near.run_stats.burn_in


def test_a_warm_up_captured_midway_resumes_to_the_same_end_and_draws(data):
    options = RunOptions(chains=32, num_rounds=40, burn_in="auto", seed=5)
    local = ExecutionOptions(executor="local")
    with Run(MODEL, data, DGLMC(), options, local) as run:
        whole = np.concatenate([c.theta for c in run.chunks()])
        end = run.stats().burn_in
    with Run(MODEL, data, DGLMC(), options, local) as run:
        chunk = run._handle.run(30)  # 30 warm-up rounds, before its first check
        assert len(chunk.theta) == 0 and chunk.burn_in == options.burn_in  # the cap: not decided yet
        state = run.capture()
    assert state.warmup is not None and state.warmup.burn_in is None and len(state.warmup.draws) == 30
    with Run(MODEL, data, DGLMC(), options, local, resume_from=state) as run:
        resumed = np.concatenate([c.theta for c in run.chunks()])
        assert run.stats().burn_in == end
    np.testing.assert_array_equal(resumed, whole)


def test_a_step_size_still_on_its_way_is_not_declared_warm(data, monkeypatch):
    """D-MALA from a step e^46 times too small: its chains alone pass the warm-up rule at an early check while the
    acceptance is still far above the target (dual averaging is still growing the step); the warm-up goes on until
    the acceptance has settled, ends where its fixed twin's draws are the same, and a capture at the chains-only
    end resumes to the same end (the acceptance so far travels in the warm-up's state)."""
    kw = dict(chains=32, num_rounds=20, burn_in="auto", algorithm="dmala", step_size=1e-20, adapt=True)
    with monkeypatch.context() as m:
        m.setattr("raysampler.runtime.coordinator.settled", lambda accepts, target: True)
        chains_only = _run(data, **kw).run_stats.burn_in
    run = _run(data, **kw)
    w = run.run_stats.burn_in
    assert chains_only is not None and w is not None and chains_only < w < 1000, (chains_only, w)
    fixed = _run(data, **{**kw, "burn_in": w})
    np.testing.assert_array_equal(run.draws, fixed.draws)

    alg = rs.algorithms.get_algorithm("dmala", step_size=1e-20, adapt=True)
    options = RunOptions(chains=32, num_rounds=20, burn_in="auto", seed=3)
    local = ExecutionOptions(executor="local")
    with Run(MODEL, data, alg, options, local) as r:
        r._handle.run(chains_only - 1)  # the rounds up to the check the chains alone passed
        state = r.capture()
    assert state.warmup is not None and state.warmup.accept is not None
    window = state.warmup.accept[len(state.warmup.accept) // 2 :]
    assert abs(window.mean() - 0.574) > SETTLED_ACCEPT, window.mean()  # the acceptance then: not on target
    with Run(MODEL, data, alg, options, local, resume_from=state) as r:
        resumed = np.concatenate([c.theta for c in r.chunks()])
        assert r.stats().burn_in == w
    np.testing.assert_array_equal(resumed, run.draws.transpose(1, 0, 2))


def test_chains_auto_is_four_without_a_far_link_and_says_why(data):
    r = _run(data, num_rounds=20, burn_in=10)
    assert r.draws.shape[0] == 4 and r.setup.chains is not None and r.setup.chains.auto
    assert "default 4 chains" in r.setup.chains.reason


def _link(rtt: float | None, channel: str = "tcp") -> LinkStats:
    return LinkStats((0,), "a", "n", channel, rtt, None, None, 0)


@pytest.mark.parametrize(
    "links, elements, rows, expected",
    [
        ((), [1e4], [300], 4),  # in-process: no link
        ((_link(0.1, "shm"),), [1e4], [300], 4),  # a process on the coordinator's node is no far link
        ((_link(FAR_RTT_S / 2),), [1e4], [300], 4),  # a machine room's link
        ((_link(0.1),), [1e4], [300], CHAINS_AUTO_MAX),  # 100 ms against microseconds of compute
        ((_link(0.05),), [1.35e6], [25_000], 32),  # 25,000 × 54 elements: 32 chains' compute (43 ms) fits 50 ms
        ((_link(0.1), _link(0.01)), [1e4, 1e4], [300, 300], CHAINS_AUTO_MAX),  # the slowest link decides
        ((_link(10.0),), [1e3], [10**7], 4),  # 10 million rows: more chains' temporaries would not fit
    ],
)
def test_choose_chains(links, elements, rows, expected):
    choice = choose_chains(4, links, elements, rows)
    assert choice.chains == expected and choice.auto and choice.reason, choice


@pytest.mark.parametrize(
    "links, elements, rows, cap, expected",
    [
        ((), [1e4], [300], None, MANY_CHAINS),  # in-process, a run that stops on convergence: the many-chain rule
        ((_link(0.1, "shm"),), [1e4], [300], None, MANY_CHAINS),
        ((_link(0.02),), [1.35e6], [25_000], None, MANY_CHAINS),  # the floor holds where the link alone chose 8
        ((_link(0.1),), [1e4], [300], None, CHAINS_AUTO_MAX),  # ... and the link doubles from it
        ((_link(0.1),), [1e4], [300], 32, 32),  # a cap (max_chains, the service's quotas) bounds the link's doubling
        ((), [1e4], [300], 8, 4),  # ... and the floor: 8 chains would gain nothing over 4 (split R-hat either way)
        ((), [1e4], [300], 2, 2),  # a cap below the default count lowers it
        ((), [1e3], [500_000], None, 4),  # 16 chains' temporaries of 500,000 rows would not fit: the default
    ],
)
def test_choose_chains_for_a_run_that_stops_on_convergence(links, elements, rows, cap, expected):
    choice = choose_chains(4, links, elements, rows, converges=True, cap=cap)
    assert choice.chains == expected and choice.auto and choice.reason, choice
    assert ("stops on convergence" in choice.reason) == (expected >= MANY_CHAINS), choice.reason


def test_choose_chains_for_a_run_that_ends_at_its_time_budget():
    """A time budget, not the rounds, bounds the run: the many-chain count, within the memory and the cap, and the
    link's doubling from it; a plain fixed-length run keeps the default."""
    choice = choose_chains(4, (), [1e4], [300], budgeted=True)
    assert choice.chains == MANY_CHAINS and "time budget" in choice.reason, choice
    assert choose_chains(4, (_link(0.1),), [1e4], [300], budgeted=True).chains == CHAINS_AUTO_MAX
    assert choose_chains(4, (), [1e4], [300], budgeted=True, cap=8).chains == 4
    assert choose_chains(4, (), [1e3], [500_000], budgeted=True).chains == 4  # 16 chains would not fit
    assert choose_chains(4, (), [1e4], [300]).chains == 4
    # a group model's shards: each step's fixed work (`work_per_step`) dwarfs a chain's, so chains are doubled while
    # their predicted compute stays within it: 32 chains at 0.1 ms each fit 6 ms, 64 do not
    many = choose_chains(4, (), [1e5], [500], budgeted=True, fixed=[6e6])
    assert many.chains == 32 and "whatever its chains" in many.reason, many
    assert choose_chains(4, (), [1e5], [500], budgeted=True, fixed=[6e6], cap=16).chains == MANY_CHAINS
    assert choose_chains(4, (), [1e5], [500], converges=True, fixed=[6e6]).chains == MANY_CHAINS  # budgets only


@pytest.mark.filterwarnings("ignore::raysampler.diagnostics.RunWarning")  # a short budget: the chain count is tested
def test_chains_auto_is_sixteen_in_a_run_with_a_time_budget(data):
    r = _run(data, num_rounds=10**6, burn_in=10, time_budget_s=0.5)
    assert r.draws.shape[0] == MANY_CHAINS and r.setup.chains is not None and r.setup.chains.auto
    assert "time budget" in r.setup.chains.reason
    assert r.outcome is not None and r.outcome.stop_reason == StopReason.TIME_BUDGET


@pytest.mark.filterwarnings("ignore::raysampler.diagnostics.RunWarning")  # 60 rounds: the chain count is tested
def test_chains_auto_is_sixteen_in_a_run_that_stops_on_convergence(data):
    r = _run(data, num_rounds="auto", max_rounds=60, burn_in=10)
    assert r.draws.shape[0] == MANY_CHAINS and r.setup.chains is not None and r.setup.chains.auto
    assert "stops on convergence" in r.setup.chains.reason
    with pytest.raises(ArgumentError, match="max_chains"):
        _run(data, num_rounds="auto", max_chains=0)
    with pytest.raises(ArgumentError, match=r"max_chains only applies with chains='auto' \(chains=8"):
        _run(data, chains=8, num_rounds="auto", max_chains=4)
    capped = _run(data, num_rounds="auto", max_rounds=60, burn_in=10, max_chains=8)
    assert capped.draws.shape[0] == 4  # below the many-chain rule's count: the default


def test_a_convergence_stopped_run_diagnoses_each_set_of_draws_once(data, monkeypatch):
    """The check that stops a run read the draws its result reports: the result reuses that diagnosis (each
    diagnose call reads draws no earlier call read), and it is the run's final verdict."""
    import raysampler.run as run_module

    seen: list[tuple[tuple[int, ...], int | None]] = []
    real = run_module.diagnose

    def counting(draws, max_draws=None, superchains=1):
        seen.append((draws.shape, max_draws))
        return real(draws, max_draws, superchains)

    monkeypatch.setattr(run_module, "diagnose", counting)
    res = _run(data, num_rounds="auto")
    assert res.outcome.stop_reason == StopReason.CONVERGED and len(seen) >= 2
    reads = [(shape, min(shape[1], m)) for shape, m in seen]
    assert len(set(reads)) == len(reads), seen
    assert res.outcome.diagnostics == real(res.draws, run_module.FINAL_DRAWS, 4)
