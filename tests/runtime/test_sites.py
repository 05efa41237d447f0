"""Shards pinned to sites on a real multi-node Ray (ray.cluster_utils.Cluster: a head with no CPUs and three 1-CPU
nodes labelled raysampler.io/site = a, b, c): each worker runs on its site's node, draws equal the in-process run,
a missing site and a node lost mid-run are failures naming the shard and its site, with the draws kept."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time

import numpy as np
import pandas as pd
import pytest

import raysampler as rs
from raysampler.algorithms import DGLMC
from raysampler.errors import FailureKind
from raysampler.options import ExecutionOptions, RunOptions
from raysampler.sampling import Run

SITES = ("a", "a", "b", "c")  # site a holds two shards


@pytest.fixture(scope="module")
def site_files(tmp_path_factory):
    """breast_cancer split into 4 parquet files in per-site directories, with column names."""
    X, y = rs.datasets.load("breast_cancer")
    root = tmp_path_factory.mktemp("sites")
    names = ["intercept"] + [f"f{j}" for j in range(1, X.shape[1])]
    shards = []
    for i, (Xi, yi) in enumerate(zip(np.array_split(X, 4), np.array_split(y, 4))):
        folder = root / SITES[i]
        folder.mkdir(exist_ok=True)
        path = folder / f"part-{i}.parquet"
        pd.DataFrame(Xi, columns=names).assign(y=yi).to_parquet(path)
        shards.append(rs.Shard(path=str(path), site=SITES[i]))
    return shards, names


KW = dict(chains=2, num_rounds=60, burn_in=20, seed=7, progress=False)
SHORT = KW | dict(num_rounds=10, burn_in=10)  # for tests of placement and names: the draws are not what they check


@pytest.fixture(scope="module")
def granted_link(site_files, tmp_path_factory):
    """`granted/link.parquet`, a symlink to shard 3's file, which lies outside `granted`."""
    shards, _ = site_files
    granted = tmp_path_factory.mktemp("granted")
    (granted / "link.parquet").symlink_to(shards[3].path)
    return granted / "link.parquet"


@pytest.fixture(scope="module")
def site_run(site_cluster, site_files, granted_link):
    """One run at the sites (KW), shared by the tests that check its placement, draws, loo and evaluate: shard 3
    is read through a link between two granted directories (allowed: both ends lie inside a grant)."""
    shards, _ = site_files
    both = (str(granted_link.parent), os.path.dirname(shards[3].path))
    allowed = rs.Shard(path=str(granted_link), site="c", grants=both)
    return rs.sample(rs.models.LogisticRegression(), list(shards[:3]) + [allowed], executor="ray", **KW)


def test_workers_run_on_their_sites_nodes_and_draw_as_in_process(site_cluster, site_files, site_run):
    shards, names = site_files
    res = site_run
    placement = res.run_stats.placement
    assert [p.site for p in placement] == list(SITES)
    for p in placement:
        assert p.node_id == site_cluster.nodes[p.site].node_id, p
    assert placement[0].pid == placement[1].pid  # one 1-CPU node: one worker owns both of a's shards
    assert len({p.pid for p in placement}) == 3
    local = rs.sample(rs.models.LogisticRegression(), [rs.Shard(path=s.path) for s in shards], executor="local", **KW)
    np.testing.assert_array_equal(res.draws, local.draws)


def test_a_site_with_no_live_node_is_an_error_naming_the_shard(site_cluster, site_files, monkeypatch):
    shards, _ = site_files
    monkeypatch.setenv("RAYSAMPLER_SITE_WAIT_S", "1")
    nowhere = list(shards[:2]) + [rs.Shard(path=shards[2].path, site="z")]
    with pytest.raises(rs.SamplingError, match=r"shards\[2\].*site=z") as err:
        rs.sample(rs.models.LogisticRegression(), nowhere, executor="ray", **KW)
    f = err.value.failure
    assert (f.kind, f.shard, f.site) == (FailureKind.SITE_UNAVAILABLE, 2, "z")


def test_a_missing_file_on_its_site_names_shard_path_and_host(site_cluster, site_files):
    shards, _ = site_files
    gone = list(shards[:3]) + [rs.Shard(path=shards[3].path + ".missing.parquet", site="c")]
    with pytest.raises(rs.SamplingError) as err:
        rs.sample(rs.models.LogisticRegression(), gone, executor="ray", **KW)
    f = err.value.failure
    assert f.kind == FailureKind.WORKER_ERROR and f.shard == 3 and f.site == "c"
    assert ".missing.parquet" in f.message and "does not exist" in f.message
    assert f.node_id == site_cluster.nodes["c"].node_id


RECOVERY = RunOptions(chains=2, num_rounds=300, burn_in=20, seed=1)
ON_RAY = ExecutionOptions(executor="ray")


@pytest.fixture(scope="module")
def uninterrupted(site_files):
    """The draws of the recovery runs' options run in process without interruption."""
    in_process = [rs.Shard(path=s.path) for s in site_files[0]]
    with Run(rs.models.LogisticRegression(), in_process, DGLMC(), RECOVERY, ExecutionOptions(executor="local")) as run:
        return np.concatenate([c.theta for c in run.chunks()])


def test_node_replaced_mid_run_resumes_and_finishes_identically(site_cluster, site_files, uninterrupted):
    """Site c's node goes away mid-run and a new node labelled c joins: the worker is restarted there, the run rolls
    back to its last checkpoint and its draws equal an uninterrupted run's."""
    shards, _ = site_files
    with Run(rs.models.LogisticRegression(), shards, DGLMC(), RECOVERY, ON_RAY) as run:
        draws = []
        for i, chunk in enumerate(run.chunks(target_chunk_s=0.05)):
            draws.append(chunk.theta)
            # after the first chunk of kept draws: on a quiet machine the run has three or four chunks in all
            # (0.05 s each), so a later cut could fall after its last round and test nothing
            if i == 1:
                site_cluster.cluster.remove_node(site_cluster.nodes["c"])
                site_cluster.add_site_node("c")
        assert run.failure is None and run.restarts == 1, run.failure
        assert run.result().run_stats.placement[3].node_id == site_cluster.nodes["c"].node_id
    np.testing.assert_array_equal(np.concatenate(draws), uninterrupted)


def test_node_lost_for_good_fails_naming_shard_and_site_then_resumes_when_it_returns(
    site_cluster, site_files, uninterrupted, monkeypatch
):
    """Site b's node goes away for good: after RAYSAMPLER_SITE_WAIT_S the run fails naming shard 2 and site b, with
    its draws and its checkpoint kept; once a node of site b is back, resuming from that checkpoint finishes the
    run with exactly the uninterrupted draws."""
    shards, _ = site_files
    monkeypatch.setenv("RAYSAMPLER_SITE_WAIT_S", "2")
    with Run(rs.models.LogisticRegression(), shards, DGLMC(), RECOVERY, ON_RAY) as run:
        draws = []
        for i, chunk in enumerate(run.chunks(target_chunk_s=0.05)):
            draws.append(chunk.theta)
            if i == 1:  # after the first chunk of kept draws (see test_node_replaced_mid_run_...)
                site_cluster.cluster.remove_node(site_cluster.nodes["b"])
        f = run.failure
        assert f is not None and f.kind == FailureKind.SITE_UNAVAILABLE and f.shard == 2 and f.site == "b"
        assert run.restarts == 1 and "did not come back" in f.message
        checkpoint = run.checkpoint
        assert checkpoint.draws_kept == sum(len(d) for d in draws) > 0
    site_cluster.add_site_node("b")
    site_cluster.cluster.wait_for_nodes()
    with Run(rs.models.LogisticRegression(), shards, DGLMC(), RECOVERY, ON_RAY, resume_from=checkpoint) as run:
        draws += [c.theta for c in run.chunks()]
        assert run.failure is None
    np.testing.assert_array_equal(np.concatenate(draws), uninterrupted)


def test_columns_differing_between_shards_are_refused(site_cluster, site_files, tmp_path):
    shards, names = site_files
    X, y = rs.datasets.load("breast_cancer")
    other = tmp_path / "other.parquet"
    pd.DataFrame(X[:50], columns=[n + "_x" for n in names]).assign(y=y[:50]).to_parquet(other)
    with pytest.raises(ValueError, match=r"shards\[3\].*columns"):
        rs.sample(
            rs.models.LogisticRegression(),
            list(shards[:3]) + [rs.Shard(path=str(other), site="c")],
            executor="ray",
            **KW,
        )
    assert os.path.exists(other)


def test_a_worker_refuses_a_path_outside_its_grants_before_reading_it(site_files, granted_link, site_run):
    """The worker checks the grants on its node, symlinks resolved: a link inside the grant to a file outside it is
    a failure of kind `access` whose message states the rule and names no file; the draws stay empty. A link
    between two granted directories is fine: the shared run reads shard 3 through one."""
    shards, _ = site_files
    granted = granted_link.parent
    sneaky = rs.Shard(path=str(granted_link), site="c", grants=(str(granted),))
    with pytest.raises(rs.SamplingError) as err:
        rs.sample(rs.models.LogisticRegression(), list(shards[:3]) + [sneaky], executor="ray", **KW)
    f = err.value.failure
    assert (f.kind, f.shard, f.site) == (FailureKind.ACCESS, 3, "c"), f
    assert "granted" in f.message and "parquet" not in f.message and f.traceback is None, f
    assert site_run.data[3].path == str(granted_link)
    assert site_run.draws.shape[:2] == (KW["chains"], KW["num_rounds"])


def test_a_probe_waits_for_a_site_node_that_joins(site_cluster, site_files):
    """A site whose node is still joining is waited for (up to the wait given), not refused at once."""
    from concurrent.futures import ThreadPoolExecutor

    from raysampler.runtime.sites import probe_shards

    shards, _ = site_files
    late = rs.Shard(path=shards[0].path, site="late")
    with ThreadPoolExecutor(1) as pool:
        asked = pool.submit(probe_shards, [late], wait_s=300)
        time.sleep(1.0)
        assert not asked.done()  # still waiting for the site
        site_cluster.add_site_node("late")  # Ray starts nodes from the main thread only
        try:
            (probe,) = asked.result(timeout=300)
            assert probe is not None and probe.ok, probe
            assert probe.node_id == site_cluster.nodes["late"].node_id
        finally:
            site_cluster.cluster.remove_node(site_cluster.nodes.pop("late"))
    (missing,) = probe_shards([rs.Shard(path=shards[0].path, site="never")], wait_s=1)
    assert missing is not None and not missing.ok and "waited 1 s" in (missing.error or ""), missing


def test_a_busy_site_node_is_waited_for_up_to_the_startup_timeout_then_named(site_cluster, site_files, monkeypatch):
    """A live site node slow to answer (its raylet frozen for a while, as a node whose cores are all busy is) is
    waited for up to RAYSAMPLER_STARTUP_TIMEOUT_S, the bound on a worker process starting on a node; past it the
    probe says the node is live, how long it waited and the setting."""
    from ray._private import ray_constants

    from raysampler.runtime.sites import probe_shards

    shards, _ = site_files
    shard = rs.Shard(path=shards[2].path, site="c")
    (raylet,) = site_cluster.nodes["c"].all_processes[ray_constants.PROCESS_TYPE_RAYLET]
    timer = _stall(raylet.process.pid, 3.0)
    t0 = time.monotonic()
    (probe,) = probe_shards([shard], timeout_s=60)
    assert probe is not None and probe.ok and time.monotonic() - t0 > 2.5, probe
    timer.join()
    monkeypatch.setenv("RAYSAMPLER_STARTUP_TIMEOUT_S", "1.5")
    timer = _stall(raylet.process.pid, 4.0)
    try:
        (late,) = probe_shards([shard])
    finally:
        timer.join()
    assert late is not None and not late.ok and late.error is not None, late
    assert "live but did not answer within 2 s" in late.error and "RAYSAMPLER_STARTUP_TIMEOUT_S=1.5" in late.error
    (again,) = probe_shards([shard], timeout_s=60)
    assert again is not None and again.ok, again


def test_loo_and_evaluate_run_at_the_sites_and_equal_the_in_process_sums(site_files, site_run, monkeypatch):
    """The per-shard work of loo and evaluate runs as Ray tasks on each site's node (a site with no node is waited
    for, then a failure naming the shard) and sums to what the same checks give in-process."""
    shards, _ = site_files
    res = site_run
    here = [rs.Shard(path=s.path) for s in shards]
    on_sites, local = res.loo(pointwise=True), res.loo(executor="local")
    np.testing.assert_allclose([on_sites.elpd, on_sites.se, on_sites.p], [local.elpd, local.se, local.p], rtol=1e-12)
    assert (on_sites.k_flat, on_sites.k_ok, on_sites.k_high) == (local.k_flat, local.k_ok, local.k_high)
    # stacking keeps each shard's pointwise elpd in an actor on its site between the optimiser's calls
    pair = {"a": res, "b": dataclasses.replace(res, draws=res.draws[:, ::-1])}
    stacked = rs.compare(pair, method="stacking")
    here_stacked = rs.compare({n: dataclasses.replace(r, data=rs.shard(here)) for n, r in pair.items()},
                              method="stacking", executor="local")  # fmt: skip
    np.testing.assert_allclose([r.weight for r in stacked.rows], [r.weight for r in here_stacked.rows], atol=1e-9)
    held = list(shards[2:])
    assert rs.evaluate(res, held) == rs.evaluate(res, here[2:], executor="local")
    monkeypatch.setenv("RAYSAMPLER_SITE_WAIT_S", "1")
    with pytest.raises(rs.errors.WorkerFailed) as err:
        rs.evaluate(res, [rs.Shard(path=shards[0].path, site="z")])
    assert err.value.failure.kind == FailureKind.SITE_UNAVAILABLE and err.value.failure.shard == 0


@pytest.fixture(scope="module")
def site_d(site_cluster):
    """A site node d with 2 CPUs (a site with cores to split its file over), for the tests that use one."""
    node = site_cluster.cluster.add_node(num_cpus=2, labels={"raysampler.io/site": "d"}, object_store_memory=80 * 2**20)
    yield node
    site_cluster.cluster.remove_node(node)


def test_a_site_splits_its_groups_over_its_cores(site_d, tmp_path):
    """A site node with 2 CPUs holding one file of 10 hospitals: with group effects the file is split at the site into
    2 part shards of whole hospitals (counted there: the driver reads no row), each in a worker process of its own on
    that node; site a's 1-CPU node keeps its file whole; every hospital is reported once; parts=1 keeps d's whole."""
    X, y = rs.datasets.load("hospitals", seed=3, n_groups=14)
    cols = list(rs.datasets.columns("hospitals", n_groups=14))
    files = []
    for site, keep in (("a", X[:, 3] <= 4), ("d", X[:, 3] > 4)):
        (tmp_path / site).mkdir()
        path = tmp_path / site / "hospitals.parquet"
        pd.DataFrame(X[keep], columns=cols).assign(y=y[keep]).to_parquet(path)
        files.append(rs.Shard(path=str(path), site=site))
    model = rs.models.LogisticRegression(prior_scale=2.5, group_effects=rs.GroupEffects("hospital"))
    res = rs.sample(model, files, executor="ray", **SHORT)
    placement = res.run_stats.placement
    assert [p.site for p in placement] == ["a", "d", "d"]
    assert placement[1].node_id == placement[2].node_id == site_d.node_id and placement[1].pid != placement[2].pid
    assert sorted(res.param_names[4:]) == sorted(f"r_hospital[{g},(Intercept)]" for g in range(1, 15))
    whole = [files[0], rs.Shard(path=files[1].path, site="d", parts=1)]
    assert [p.site for p in rs.sample(model, whole, executor="ray", **SHORT).run_stats.placement] == ["a", "d"]


def test_a_formula_with_text_hospitals_at_labelled_sites(site_d, tmp_path):
    """`y ~ age + severity + (1 | hospital)` on parquet files at two labelled sites whose hospital column holds names
    (issue 31): the design is built at each site, site d's 2 CPUs split its file into parts of whole hospitals, and
    the effects are named by the hospitals' names as given, each once; the same rows in process give the same names."""
    X, y = rs.datasets.load("hospitals", seed=3, n_groups=8)
    cols = list(rs.datasets.columns("hospitals", n_groups=8))
    names = ["St Mary", "Royal Free", "Guy's", "King's College", "Homerton", "Whittington", "Barts", "UCLH"]
    frame = pd.DataFrame(X, columns=cols).assign(y=y)
    frame["hospital"] = [names[int(h) - 1] for h in frame.hospital]
    files = []
    for site, keep in (("a", frame.hospital.isin(names[:3])), ("d", ~frame.hospital.isin(names[:3]))):
        (tmp_path / site).mkdir()
        path = tmp_path / site / "hospitals.parquet"
        frame[keep].drop(columns="(Intercept)").to_parquet(path, index=False)
        files.append(rs.Shard(path=str(path), site=site))
    model = rs.models.from_formula("y ~ age + severity + (1 | hospital)", family="bernoulli")
    res = rs.sample(model, files, executor="ray", **SHORT)
    assert [p.site for p in res.run_stats.placement] == ["a", "d", "d"]  # d's file in two parts
    assert res.run_stats.placement[1].node_id == site_d.node_id
    effects = sorted(n for n in res.param_names if n.startswith("r_hospital"))
    assert effects == sorted(f"r_hospital[{h},(Intercept)]" for h in names)
    assert res.param_names[3] == "sd_hospital[(Intercept)]"
    local = rs.sample(
        model, rs.shard(frame.drop(columns="(Intercept)"), num_shards=2, by="hospital"), executor="local", **SHORT
    )
    assert sorted(n for n in local.param_names if n.startswith("r_hospital")) == effects


def _stall(pid: int, seconds: float) -> threading.Timer:
    """The worker process `pid` stops answering for `seconds` (SIGSTOP, then SIGCONT): a stalled link, as its
    coordinator sees it."""
    os.kill(pid, signal.SIGSTOP)
    timer = threading.Timer(seconds, os.kill, (pid, signal.SIGCONT))
    timer.start()
    return timer


def _draws_with_a_stall(run: Run, seconds: float, wait: bool = True) -> list[np.ndarray]:
    """The run's chunks of draws, shard 2's worker stalled for `seconds` after the second, the first of kept draws
    (a later one could be the run's last on a quiet machine; waited out if `wait`)."""
    draws, timer = [], None
    for i, chunk in enumerate(run.chunks(target_chunk_s=0.05)):
        draws.append(chunk.theta)
        if i == 1:
            timer = _stall(run.setup.placement[2].pid, seconds)
    assert timer is not None
    if wait:
        timer.join()
    return draws


def test_a_link_stalled_within_the_deadline_is_waited_for_and_the_draws_are_unchanged(
    site_cluster, site_files, uninterrupted, monkeypatch
):
    shards, _ = site_files
    monkeypatch.setenv("RAYSAMPLER_LINK_DEADLINE_S", "20")
    with Run(rs.models.LogisticRegression(), shards, DGLMC(), RECOVERY, ON_RAY) as run:
        draws = _draws_with_a_stall(run, 3.0)
        assert run.failure is None and run.restarts == 0, run.failure
        assert max(run.stats().round_time) >= 2.5  # the stalled round waited for the link
    np.testing.assert_array_equal(np.concatenate(draws), uninterrupted)


def test_a_link_stalled_past_the_deadline_fails_the_run_as_site_unavailable_and_resume_continues(
    site_cluster, site_files, uninterrupted, monkeypatch
):
    shards, _ = site_files
    monkeypatch.setenv("RAYSAMPLER_LINK_DEADLINE_S", "1.5")
    with Run(rs.models.LogisticRegression(), shards, DGLMC(), RECOVERY, ON_RAY) as run:
        draws = _draws_with_a_stall(run, 5.0, wait=False)
        f = run.failure
        assert f is not None and f.kind == FailureKind.SITE_UNAVAILABLE and f.shard == 2 and f.site == "b", f
        assert "RAYSAMPLER_LINK_DEADLINE_S" in f.message and run.restarts == 0
        checkpoint = run.checkpoint
        assert checkpoint is not None and checkpoint.draws_kept == sum(len(d) for d in draws) > 0
    time.sleep(5.0)  # the worker answers again
    monkeypatch.delenv("RAYSAMPLER_LINK_DEADLINE_S")
    with Run(rs.models.LogisticRegression(), shards, DGLMC(), RECOVERY, ON_RAY, resume_from=checkpoint) as run:
        draws += [c.theta for c in run.chunks()]
        assert run.failure is None
    np.testing.assert_array_equal(np.concatenate(draws), uninterrupted)


PINNED = ("pa", "pb", "pc")  # sites whose nodes pin each other's identities; pd pins a wrong one for pa
SECURE = dict(chains=2, num_rounds=20, burn_in=10, seed=7, progress=False, secure_sums=True)


@pytest.fixture(scope="module")
def pinned_sites(site_cluster, tmp_path_factory):
    """Nodes for sites pa, pb, pc and pd, each site's secret a key file in one folder (the driver reads it too, for
    the in-process reference), each node's environment pinning the others' identities (RAYSAMPLER_SITE_PEERS), as a
    deployment pins them; pd's pins name an identity for pa that pa's secret does not give. Yields the key folder."""
    from raysampler.privacy import identity, sealing

    keys = tmp_path_factory.mktemp("site-keys")
    for s in (*PINNED, "pd"):
        (keys / f"{s}.key").write_bytes(f"the secret of {s}".encode())
        (keys / f"{s}.key").chmod(0o600)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(sealing.KEYS_ENV, str(keys))
        mp.delenv(sealing.SECRET_ENV, raising=False)
        right = {s: identity.identity_public(s) for s in (*PINNED, "pd")}
        mp.setenv(sealing.SECRET_ENV, "not pa's secret")
        wrong = identity.identity_public("pa")
    pins = ",".join(f"{s}={k}" for s, k in right.items())
    env = {sealing.KEYS_ENV: str(keys), identity.PEERS_ENV: pins}
    nodes = {s: site_cluster.add_site_node(s, env=env) for s in PINNED}
    nodes["pd"] = site_cluster.add_site_node("pd", env=env | {identity.PEERS_ENV: pins.replace(right["pa"], wrong)})
    site_cluster.cluster.wait_for_nodes()
    yield keys
    for s, node in nodes.items():  # the cluster may serve the next module (conftest.CLUSTER_MODULES)
        site_cluster.cluster.remove_node(node)
        del site_cluster.nodes[s]


def _at(sites: tuple[str, ...]) -> list[rs.Shard]:
    X, y = rs.datasets.load("breast_cancer")
    return [dataclasses.replace(s, site=site) for s, site in zip(rs.shard(X, y, num_shards=len(sites)), sites)]


@pytest.mark.filterwarnings("ignore::raysampler.diagnostics.RunWarning")  # 20 rounds: the draws are compared
def test_sites_on_nodes_of_their_own_check_each_others_pinned_keys(site_cluster, pinned_sites, monkeypatch):
    """Secure sums across nodes whose own environments pin the sites' identities: each site's worker checks the keys
    the coordinator relayed before it agrees any pairwise key. A pinned run gives the in-process run's draws; a node
    whose pin for pa does not match pa's secret refuses pa's key, and the run stops naming the shard and the site."""
    from raysampler.privacy import identity, sealing

    model = rs.models.LogisticRegression(prior_scale=1.0)
    pinned = rs.sample(model, _at(PINNED), executor="ray", **SECURE)
    placement = pinned.run_stats.placement
    assert [p.node_id for p in placement] == [site_cluster.nodes[s].node_id for s in PINNED]
    monkeypatch.setenv(sealing.KEYS_ENV, str(pinned_sites))  # the same secrets, no pins, in this process
    monkeypatch.delenv(sealing.SECRET_ENV, raising=False)
    local = rs.sample(model, _at(PINNED), executor="local", **SECURE)
    np.testing.assert_array_equal(pinned.draws, local.draws)
    with pytest.raises(identity.UnverifiedKey, match=r"site 'pd' refused .*shard 0: .* not signed by site 'pa'"):
        rs.sample(model, _at(("pa", "pb", "pd")), executor="ray", **SECURE)
