"""The runtime on real Ray actors: identical draws to the in-process executor, speed balancing, failures."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
from support.problems import FailingLogistic

import raysampler as rs
from raysampler.algorithms import DGLMC
from raysampler.errors import ArgumentError
from raysampler.models.logistic import LogisticRegression
from raysampler.options import ExecutionOptions, RunOptions
from raysampler.runtime.contracts import ROUND_PARTS
from raysampler.runtime.process_groups import PROCESS_WORK, PROCESS_WORK_SPARE, plan_groups, processes_for, shard_work
from raysampler.sampling import Run


@pytest.fixture(scope="module")
def breast_cancer():
    X, y = rs.datasets.load("breast_cancer")
    return X, y


@pytest.fixture
def two_processes(monkeypatch):
    """Shards on two processes (the coordinator's and a worker actor) however small: by default shards this small
    share one process, the coordinator's (`process_groups.processes_for`)."""
    monkeypatch.setenv("RAYSAMPLER_WORKER_PROCESSES", "2")


@pytest.mark.parametrize("processes", [0, 2])
def test_local_and_ray_draw_identical_numbers(ray_session, breast_cancer, monkeypatch, processes):
    """By default shards this small share one process, the coordinator's (no message crosses a channel); in two
    processes each round's one message reaches the actor, which steps its shards as batches (7 shards: two row
    counts) and sends their replies back as one block. Either way the draws are the in-process ones, and the run
    reports each round's parts."""
    monkeypatch.setenv("RAYSAMPLER_WORKER_PROCESSES", str(processes))
    X, y = breast_cancer
    shards = rs.shard(X, y, num_shards=7)
    kw = dict(chains=3, num_rounds=30, burn_in=20, seed=11, progress=False, balance=False)
    model = rs.models.LogisticRegression(prior_scale=1.0)
    local = rs.sample(model, shards, executor="local", **kw)
    on_ray = rs.sample(model, shards, executor="ray", **kw)
    assert local.draws.shape == (3, 30, 31)
    np.testing.assert_array_equal(local.draws, on_ray.draws)
    other = rs.sample(model, shards, executor="local", **{**kw, "seed": 12})
    assert not np.array_equal(other.draws, local.draws)
    stats = on_ray.run_stats
    assert len({p.pid for p in stats.placement}) == stats.breakdown().processes == max(processes, 1)
    assert on_ray.setup.transport == ("socket" if processes else "in-process")
    parts = stats.round_parts
    assert parts.shape == (50, len(ROUND_PARTS)) and np.all(parts[:, :-1] >= 0)
    np.testing.assert_allclose(parts[:, -1], stats.round_time - parts[:, ROUND_PARTS.index("slowest_worker")])
    assert (parts[:, ROUND_PARTS.index("wait")].max() > 0) == bool(processes)


def test_processes_follow_the_cpus_and_the_shards_size():
    """A node gets a worker process per CPU only while each has PROCESS_WORK element-chains to step a round."""
    assert processes_for([10_000] * 4, cap=8) == 1  # small shards: one process
    assert processes_for([PROCESS_WORK] * 4, cap=2) == 2
    assert processes_for([PROCESS_WORK] * 4, cap=8) == 4
    assert processes_for([2 * PROCESS_WORK, PROCESS_WORK // 2], cap=8) == 2
    assert processes_for([None, 5], cap=3) == 2  # a size unknown (a file the worker reads): one per CPU
    # spare CPUs (two per shard or more): a process pays for itself from PROCESS_WORK_SPARE on
    bc32, bc4 = [141_112] * 4, [17_639] * 4  # breast_cancer's four shards with 32 and 4 chains
    assert (processes_for(bc32, cap=16), processes_for(bc32, cap=2), processes_for(bc32, cap=7)) == (4, 1, 1)
    assert processes_for(bc4, cap=16) == 1
    assert processes_for([PROCESS_WORK_SPARE] * 4, cap=8) == 4
    work = [10] * 4 + [PROCESS_WORK] * 2
    assert plan_groups([None] * 4 + ["a", "a"], {"a": 2}, 2, None, work) == [[0, 1, 2, 3], [4], [5]]
    assert plan_groups([None] * 4, {}, 2, None, [10] * 4, processes=2) == [[0, 1], [2, 3]]
    assert plan_groups([None] * 4, {}, 2, None, [10] * 4, processes=4) == [[0, 1], [2, 3]]  # at most the CPUs


def test_a_group_models_shards_are_weighed_by_its_work_per_element():
    """A group-effects model's Newton–MH sweep costs far more per element than a GLM's products, so the same rows
    that fit one process for plain logistic regression get a process per CPU (here the `hospitals` benchmark's)."""
    from raysampler.models.contract import LOCAL_PARAMS_WORK
    from raysampler.reparam import Preconditioner, WhitenedModel
    from raysampler.runtime.host import ShardSource

    sources = [ShardSource(i, (np.zeros((4100, 4)), np.zeros(4100))) for i in range(4)]
    plain = rs.models.LogisticRegression(prior_scale=2.5)
    grouped = rs.models.LogisticRegression(prior_scale=2.5, group_effects=rs.GroupEffects("hospital"))
    assert plain.work_per_element() == 1.0 and grouped.work_per_element() == LOCAL_PARAMS_WORK
    assert WhitenedModel(grouped, Preconditioner.identity(3)).work_per_element() == LOCAL_PARAMS_WORK
    assert shard_work(sources, plain, 4) == [4100 * 4 * 4] * 4
    assert processes_for(shard_work(sources, plain, 4), cap=2) == 1
    assert processes_for(shard_work(sources, grouped, 4), cap=2) == 2
    assert shard_work([ShardSource(0, None)], grouped, 4) == [None]  # a file its worker reads: size unknown


def test_a_group_models_small_shards_are_weighed_by_their_fixed_step_work():
    """A group shard's local step costs ~1.5 ms of NumPy calls whatever its rows, so radon-sized shards (a few hundred
    rows each) get a process per CPU although their elements alone would fit one; a dense GLM's stay in one."""
    from raysampler.models.contract import LOCAL_PARAMS_STEP_WORK
    from raysampler.reparam import Preconditioner, WhitenedModel
    from raysampler.runtime.host import ShardSource

    sources = [ShardSource(i, (np.zeros((250, 4)), np.zeros(250))) for i in range(4)]
    plain = rs.models.LogisticRegression(prior_scale=2.5)
    grouped = rs.models.LogisticRegression(prior_scale=2.5, group_effects=rs.GroupEffects("hospital"))
    assert plain.work_per_step() == 0.0 and grouped.work_per_step() == LOCAL_PARAMS_STEP_WORK
    assert WhitenedModel(grouped, Preconditioner.identity(3)).work_per_step() == LOCAL_PARAMS_STEP_WORK
    for chains in (4, 16):
        assert processes_for(shard_work(sources, plain, chains), cap=2) == 1
        assert processes_for(shard_work(sources, grouped, chains), cap=2) == 2


@pytest.mark.parametrize("kernel", ["lmc", "mala"])
def test_local_and_ray_identical_for_every_local_kernel(ray_session, breast_cancer, kernel):
    X, y = breast_cancer
    shards = rs.shard(X, y, num_shards=2)
    kw = dict(chains=2, num_rounds=30, burn_in=30, seed=3, progress=False, balance=False, local_kernel=kernel)
    model = rs.models.LogisticRegression()
    np.testing.assert_array_equal(
        rs.sample(model, shards, executor="local", **kw).draws, rs.sample(model, shards, executor="ray", **kw).draws
    )


def test_plain_actor_transport_draws_the_same(ray_session, breast_cancer, two_processes):
    """The fallback path (plain Ray actor calls instead of direct channels) moves the same messages: its draws are
    the in-process run's, which the socket path's are too (test_local_and_ray_draw_identical_numbers)."""
    X, y = breast_cancer
    shards = rs.shard(X, y, num_shards=3)
    kw = dict(chains=2, num_rounds=30, burn_in=20, seed=9, progress=False, balance=False)
    model = rs.models.LogisticRegression()
    in_process = rs.sample(model, shards, executor="local", **kw)
    via_actor = rs.sample(model, shards, executor="ray", transport="actor", **kw)
    assert via_actor.setup.transport == "actor" and len({p.pid for p in via_actor.run_stats.placement}) == 2
    np.testing.assert_array_equal(in_process.draws, via_actor.draws)


def test_file_shards_are_read_by_the_workers(ray_session, breast_cancer, tmp_path):
    X, y = breast_cancer
    paths = []
    for i, (Xi, yi) in enumerate(zip(np.array_split(X, 2), np.array_split(y, 2))):
        paths.append(str(tmp_path / f"shard{i}.npz"))
        np.savez(paths[-1], X=Xi, y=yi)
    kw = dict(chains=2, num_rounds=20, burn_in=20, seed=0, progress=False, balance=False)
    from_files = rs.sample(rs.models.LogisticRegression(), rs.shard(paths), executor="ray", **kw)
    in_memory = rs.sample(rs.models.LogisticRegression(), rs.shard(X, y, num_shards=2), executor="local", **kw)
    np.testing.assert_array_equal(from_files.draws, in_memory.draws)


def test_slow_worker_gets_fewer_local_steps_in_proportion_to_its_step_time(ray_session, breast_cancer, two_processes):
    """One worker made 4x slower (test-only hook: it computes 4x as long per step): the balancer sets N_i ∝ 1/τ_i
    from the step times τ_i it measures, so every worker does about the same work per round, N_i·τ_i. τ_i is CPU
    time per step, so a busy machine does not change it; the idle time this saves is wall-clock and depends on the
    machine's load: benchmarks/ measures it, this test does not assert it."""
    X, y = breast_cancer
    X = np.repeat(X, 60, axis=0)  # enough work per step (ms) that timer resolution does not blur τ_i
    y = np.repeat(y, 60)
    shards = rs.shard(X, y, num_shards=2, strategy="random")
    # 80 rounds: four windows of 20 rounds, each measuring τ_i afresh (the N_i asserted come from the last one)
    kw = dict(chains=4, num_rounds=60, burn_in=20, seed=0, progress=False, local_kernel="lmc", executor="ray")
    balanced = rs.sample(rs.models.LogisticRegression(), shards, balance=True, _slowdown={1: 4.0}, **kw)
    n, tau = balanced.run_stats.N, balanced.run_stats.tau
    assert tau[1] / tau[0] > 2.5  # the slow worker is measured slow
    assert n[1] < n[0]  # and does fewer steps
    first = balanced.run_stats.N_history[0]
    assert first[1] < first[0]  # already from the step times measured before sampling (round 0)
    q = (1 / tau) / np.sum(1 / tau)  # [DG-LMC] sec. 3.2.2, from the τ_i the run reports
    expected = np.maximum(1, np.round(q * balanced.setup.n_avg * 2))
    assert np.all(np.abs(n - expected) <= 1)  # ±1: the balancer also weights τ_i by shards per process
    # seconds of work per round: equal N_i would leave the full τ ratio between the workers; the rule's rounding
    # (N_avg = 4 here: 8 steps to share) keeps it under 0.78 × its square root for any τ ratio from 2.5 to 20
    work = n * tau
    assert work.max() / work.min() < np.sqrt(tau.max() / tau.min()), (n, tau)


@dataclasses.dataclass(frozen=True)
class ExplodingLogistic(LogisticRegression):
    """A user model (same methods as the built-ins) whose shard marked by X[0, 1] == 99 diverges for |θ| large."""

    def grad(self, X, y, x):
        g = super().grad(X, y, x)
        if X[0, 1] == 99.0:
            g = g - 1e3 * x  # a wrong sign: LMC runs away exponentially on this shard
        return g


def test_non_finite_chain_stops_with_worker_and_round_and_keeps_draws(breast_cancer):
    X, y = breast_cancer
    X = X.copy()
    shards = rs.shard(X, y, num_shards=3)
    marked = shards[2].X.copy()
    marked[0, 1] = 99.0
    shards = rs.shard([(shards[0].X, shards[0].y), (shards[1].X, shards[1].y), (marked, shards[2].y)])
    with pytest.raises(rs.SamplingError, match=r"worker 2 .*round \d+") as err:
        rs.sample(
            ExplodingLogistic(),
            shards,
            chains=2,
            num_rounds=400,
            burn_in=0,
            executor="local",
            progress=False,
            local_kernel="lmc",
            preconditioner=None,
            rho=0.5,
            gamma=1e-3,
            n_local=5,
            init="zeros",
        )
    e = err.value
    assert e.worker == 2 and e.round > 0
    assert e.result.draws.shape[1] == e.round  # every draw before the failing round is kept
    assert np.all(np.isfinite(e.result.draws))


@pytest.mark.parametrize("executor, bad", [("local", 1), ("ray", 1), ("ray", 2)])
def test_worker_exception_stops_with_shard_and_round_and_keeps_draws(
    ray_session, breast_cancer, executor, bad, two_processes
):
    """On Ray (2 CPUs, 3 shards) shards 0 and 1 are stepped in the coordinator's own process, shard 2 on an actor."""
    X, y = breast_cancer
    parts = [(Xi.copy(), yi) for Xi, yi in zip(np.array_split(X, 3), np.array_split(y, 3))]
    parts[bad][0][0, 1] = 77.0
    with pytest.raises(rs.SamplingError, match=rf"worker {bad} failed in round 0.*cannot be evaluated") as err:
        rs.sample(
            FailingLogistic(),
            rs.shard(parts),
            chains=2,
            num_rounds=50,
            burn_in=0,
            executor=executor,
            progress=False,
            local_kernel="lmc",
            preconditioner=None,
            rho=0.5,
            n_local=2,
            init="zeros",
            balance=False,
        )
    assert err.value.worker == bad and err.value.round == 0 and err.value.result.draws.shape == (2, 0, 31)


def _pids(run: Run) -> tuple[int, list[int]]:
    """(the coordinator actor's process id, each shard's worker process id)."""
    import ray

    coordinator = ray.get(run._handle.actor.__ray_call__.remote(lambda host: os.getpid()))
    return coordinator, [p.pid for p in run.setup.placement]


def test_coordinator_process_hosts_the_first_group_and_draws_the_same(
    ray_session, breast_cancer, monkeypatch, two_processes
):
    """By default the coordinator's process steps the first group of shards (one process fewer to wake per round)
    and channel readers spin before sleeping; RAYSAMPLER_COORDINATOR_SHARDS=0 puts every shard on an actor and
    RAYSAMPLER_SHM_SPIN_US=0 makes readers sleep at once. Same draws either way."""
    X, y = breast_cancer
    shards = rs.shard(X, y, num_shards=4)
    opts = RunOptions(chains=2, num_rounds=40, burn_in=20, seed=5)
    on_ray = ExecutionOptions(executor="ray", balance=False)
    model = rs.models.LogisticRegression()
    draws = []
    for hosts, spin in (("1", "1000"), ("0", "0")):
        monkeypatch.setenv("RAYSAMPLER_COORDINATOR_SHARDS", hosts)
        monkeypatch.setenv("RAYSAMPLER_SHM_SPIN_US", spin)
        with Run(model, shards, DGLMC(), opts, on_ray) as run:
            coordinator, pids = _pids(run)
            for _ in run.chunks():
                pass
            draws.append(run.result().draws)
        assert pids[0] == pids[1] and pids[2] == pids[3] and pids[0] != pids[2]
        assert (pids[0] == coordinator) == (hosts == "1") and pids[2] != coordinator
    np.testing.assert_array_equal(draws[0], draws[1])


def test_a_closed_coordinator_actor_hosts_the_next_run_and_draws_the_same(
    ray_session, breast_cancer, monkeypatch, two_processes
):
    """A run that closed cleanly leaves its coordinator actor to the driver's next run (RAYSAMPLER_WARM_HOSTS, 1 by
    default): the same process, nothing of the last run left in it (no thread, no worker actor: the CPUs are free
    again), as many worker processes and the same draws as on a fresh actor. A kept actor that died meanwhile is
    replaced, and with RAYSAMPLER_WARM_HOSTS=0 none is kept."""
    import threading
    import time

    import ray

    from raysampler.runtime.warm_hosts import WARM_HOSTS

    X, y = breast_cancer
    shards = rs.shard(X, y, num_shards=2)
    opts = RunOptions(chains=2, num_rounds=40, burn_in=20, seed=5)
    on_ray = ExecutionOptions(executor="ray", balance=False)
    model = rs.models.LogisticRegression()

    def one() -> tuple[int, int, np.ndarray]:
        with Run(model, shards, DGLMC(), opts, on_ray) as run:
            pid = ray.get(run._handle.actor.__ray_call__.remote(lambda host: os.getpid()))
            for _ in run.chunks():
                pass
            threads = ray.get(run._handle.actor.__ray_call__.remote(lambda host: threading.active_count()))
            # as many processes as on a fresh actor: the last run's worker CPU was waited for (`_await_release`)
            assert len({p.pid for p in run.setup.placement}) == 2
            return pid, threads, run.result().draws

    WARM_HOSTS.clear()
    first, threads_first, draws = one()
    assert WARM_HOSTS.count() == 1
    for _ in range(2):  # back to back
        second, threads_second, again = one()
        assert second == first and threads_second == threads_first  # the same process, no thread left behind
        np.testing.assert_array_equal(again, draws)
    deadline = time.monotonic() + 10.0  # the worker actor's CPU comes back once Ray has ended its process
    while ray.available_resources().get("CPU", 0) < ray.cluster_resources()["CPU"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ray.available_resources().get("CPU", 0) == ray.cluster_resources()["CPU"]
    (kept,) = [a for idle in WARM_HOSTS._idle.values() for a in idle]
    ray.kill(kept)  # a kept actor lost between runs: the next run starts another
    replaced, _, after_loss = one()
    assert replaced != first
    np.testing.assert_array_equal(after_loss, draws)
    monkeypatch.setenv("RAYSAMPLER_WARM_HOSTS", "0")
    WARM_HOSTS.clear()
    _, _, none_kept = one()
    assert WARM_HOSTS.count() == 0
    np.testing.assert_array_equal(none_kept, draws)


def test_more_actors_than_free_cpus_is_refused_and_the_actor_is_not_kept(ray_session, breast_cancer):
    """max_actors above the free CPUs is refused at the start; that start ran on the actor a clean run kept
    (RAYSAMPLER_WARM_HOSTS), and a failed start kills it rather than keep it (a pool half built may hold worker
    actors that only the actor's death ends)."""
    from raysampler.runtime.warm_hosts import WARM_HOSTS

    X, y = breast_cancer
    WARM_HOSTS.clear()
    kw = dict(executor="ray", num_rounds=5, burn_in=5, chains=2, progress=False)
    rs.sample(rs.models.LogisticRegression(), rs.shard(X, y, num_shards=2), **kw)
    assert WARM_HOSTS.count() == 1
    with pytest.raises(ValueError, match="max_actors"):
        rs.sample(rs.models.LogisticRegression(), rs.shard(X, y, num_shards=4), max_actors=8, **kw)
    assert WARM_HOSTS.count() == 0


def test_balancer_equalises_processes_when_shards_share_one():
    """Groups [0, 1] and [2] on two processes, equal τ: shard 2 gets the steps of shards 0 and 1 together."""
    from raysampler.runtime.balancer import StepBalancer

    bal = StepBalancer(np.array([4, 4, 4]), 4.0, True, every=20, group_size=np.array([2, 2, 1]))
    for t in range(5):
        bal.observe(t, np.array([4e-3, 4e-3, 4e-3]), np.array([4, 4, 4]))
    assert list(bal.n) == [3, 3, 6]  # 2·3τ = 6τ on each process


def test_auto_balance_ignores_uneven_speeds_that_cost_under_a_millisecond_a_round():
    """balance="auto": a 2x speed ratio on microsecond steps is scheduling noise (fixed N kept); the same ratio
    with milliseconds of work per round switches balancing on after AUTO_ESTIMATES full windows."""
    from raysampler.runtime.balancer import AUTO_ESTIMATES, StepBalancer

    def run(tau: float) -> StepBalancer:
        bal = StepBalancer(np.array([4, 4]), 4.0, "auto", every=20, group_size=np.array([1, 1]))
        for t in range(20 * AUTO_ESTIMATES):
            bal.observe(t, np.array([4 * tau, 8 * tau]), np.array([4, 4]))
        return bal

    tiny, slow = run(1e-4), run(1e-3)  # gap per round: 0.4 ms vs 4 ms
    assert not tiny.active and tiny.schedule == [(0, (4, 4))]
    assert slow.active and list(slow.n) == [5, 3]


def test_paper_rules_with_map_curvature_and_zero_start_run():
    X, y = rs.datasets.load("breast_cancer")
    res = rs.sample(
        rs.models.LogisticRegression(),
        rs.shard(X, y, num_shards=2),
        chains=2,
        num_rounds=20,
        burn_in=5,
        executor="local",
        progress=False,
        preconditioner=None,
        curvature="map",
        init="zeros",
    )
    assert np.all(np.isfinite(res.draws)) and res.run_stats.M.max() < 100  # curvature met at the MAP, not the bound


def test_time_budget_stops_cleanly_with_draws(breast_cancer):
    X, y = breast_cancer
    with pytest.warns(UserWarning, match="time_budget_s"):
        res = rs.sample(
            rs.models.LogisticRegression(),
            rs.shard(X, y, num_shards=2),
            chains=2,
            num_rounds=10**7,
            burn_in=10,
            executor="local",
            progress=False,
            time_budget_s=1.5,
        )
    assert 0 < res.num_draws < 10**7 and res.outcome.stopped_by_time_budget
    assert res.outcome.timings.wall_s < 5
    assert np.all(np.isfinite(res.draws))


def test_result_summary_and_arviz(breast_cancer):
    X, y = breast_cancer
    res = rs.sample(
        rs.models.LogisticRegression(),
        rs.shard(X, y, num_shards=2),
        chains=4,
        num_rounds=200,
        burn_in=50,
        executor="local",
        progress=False,
        thin=2,
    )
    assert res.draws.shape == (4, 100, 31)
    table = res.summary()
    for col in ("mean", "sd", "ess_bulk", "ess_tail", "r_hat", "mcse_mean"):
        assert col in table.columns
    assert any(c.startswith("hdi") for c in table.columns)
    np.testing.assert_allclose(table["mean"].to_numpy(dtype=float), res.draws.mean(axis=(0, 1)), rtol=1e-10)
    tree = res.to_arviz()
    assert tree["posterior"]["beta"].shape == (4, 100, 31)  # one variable per model parameter
    assert tree["sample_stats"]["local_accept"].shape == (4, 100)
    for key in ("round_time", "worker_compute_s", "worker_idle_s", "idle_fraction", "N", "tau", "rho", "gamma"):
        assert key in res.stats


def test_pipelined_rounds_draw_the_same_on_both_executors(ray_session, breast_cancer, two_processes):
    """pipeline=True: each round runs as two halves, one per chain group (5 chains: 3 and 2), the actor stepping one
    group while the coordinator updates the other. In-process and on Ray (both transports) the draws are the same
    bits, a replayed N_i schedule included (round 1's N_i is fixed before round 0 ends); an unpipelined run draws the
    same numbers but rounds them over all chains at once, so it agrees to the last bits only."""
    X, y = breast_cancer
    shards = rs.shard(X, y, num_shards=7)
    schedule = ((0, (1,) * 7), (1, (2,) * 7), (40, (1, 2, 1, 2, 1, 2, 1)))
    kw = dict(chains=5, num_rounds=60, burn_in=20, seed=4, progress=False, balance=False, n_local=schedule)
    model = rs.models.LogisticRegression(prior_scale=1.0)
    local = rs.sample(model, shards, executor="local", pipeline=True, **kw)
    for transport in ("socket", "actor"):
        on_ray = rs.sample(model, shards, executor="ray", transport=transport, pipeline=True, **kw)
        np.testing.assert_array_equal(on_ray.draws, local.draws)
        assert on_ray.run_stats.N_schedule == local.run_stats.N_schedule == schedule
    whole = rs.sample(model, shards, executor="local", **kw)
    np.testing.assert_allclose(whole.draws, local.draws, rtol=0, atol=1e-9)
    assert local.sample_stats["local_accept"].shape == (5, 60)


def test_both_halves_of_a_pipelined_round_re_centre_the_same_shards(breast_cancer, monkeypatch):
    """recentre="auto" in a pipelined run: round t + 1's first half is sent before round t's second half is stepped,
    so the decision may not count the burn-in's last round, or the two halves of the first round after it could
    disagree (their batches then split differently and the run failed). Over thresholds that split the shards
    every way, each run completes and both halves of every round carry the same flags."""
    import raysampler.algorithms.dglmc.recentre as dglmc

    X, y = breast_cancer
    shards = rs.shard(X, y, num_shards=4)
    flags: dict[tuple[int, int], tuple[bool, ...]] = {}

    class Spy(DGLMC):
        def round_message(self, state, local_steps, info):
            message = super().round_message(state, local_steps, info)
            flags[(info.t, 0 if info.chains is None or info.chains[0] == 0 else 1)] = tuple(message.recentre)
            return message

    mixed = 0
    for threshold in np.linspace(0.6, 1.0, 21):
        monkeypatch.setattr(dglmc, "RECENTRE_BELOW", float(threshold))
        flags.clear()
        opts = RunOptions(chains=3, num_rounds=4, burn_in=6, seed=5, pipeline=True)
        with Run(LogisticRegression(), shards, Spy(), opts, ExecutionOptions(executor="local")) as run:
            for _ in run.chunks():
                pass
        for t in range(6, 10):
            assert flags[(t, 0)] == flags[(t, 1)], (threshold, t)
        mixed += len(set(flags[(6, 0)])) == 2
    assert mixed >= 2  # the grid does split the shards


def test_a_pipelined_run_resumes_exactly_and_needs_independent_chains(breast_cancer):
    X, y = breast_cancer
    shards = rs.shard(X, y, num_shards=3)
    opts = RunOptions(chains=2, num_rounds=120, burn_in=10, seed=8, pipeline=True)
    model, local = rs.models.LogisticRegression(), ExecutionOptions(executor="local")
    with Run(model, shards, DGLMC(), opts, local) as run:
        chunks = iter(run.chunks(target_chunk_s=0.01))
        next(chunks)
        state = run.capture()
        for _ in chunks:
            pass
        whole = run.result().draws
    with Run(model, shards, DGLMC(), opts, local, resume_from=state) as again:
        for _ in again.chunks():
            pass
        np.testing.assert_array_equal(again.result().draws, whole[:, state.draws_kept :])
    with pytest.raises(ArgumentError, match="pipeline") as err:
        rs.sample(model, shards, executor="local", pipeline=True, chains=2, num_rounds=5, local_kernel="mala")
    assert err.value.path == ("pipeline",)
