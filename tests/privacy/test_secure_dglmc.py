"""DG-LMC with secure sums end to end (in-process): the draws are bit-identical to a plain run with the same
fixed-point rounding and agree with the float run's to the rounding; the coordinator's side holds only masked terms
(whose sum alone is the true sum) and sealed worker states; a site flags its own non-finite term; the run resumes
from a captured state with new keys and the same draws; algorithms that route per-site values are refused."""

from __future__ import annotations

import dataclasses
import itertools
import pickle
import warnings

import numpy as np
import pytest
from support.problems import PLAIN

import raysampler as rs
from raysampler.algorithms import DGLMC
from raysampler.algorithms.dglmc import coordinator as dglmc_coordinator
from raysampler.errors import ArgumentError, FailureKind
from raysampler.models.logistic import LogisticRegression
from raysampler.options import ExecutionOptions, RunOptions
from raysampler.privacy import fixed_point as fp
from raysampler.privacy.sealing import SealedState
from raysampler.privacy.site import SecureSite
from raysampler.runtime.host import ShardHost
from raysampler.sampling import Run

pytestmark = pytest.mark.usefixtures("site_keys")
KW = dict(chains=4, num_rounds=60, burn_in=20, seed=7, executor="local", progress=False)
LOCAL = ExecutionOptions(executor="local", balance=False)


@dataclasses.dataclass(frozen=True)
class DivergingLogistic(LogisticRegression):
    """Its shard marked by X[0, 1] == 99 pushes LMC away exponentially (as in tests/runtime/test_failures.py)."""

    def grad(self, X, y, x):
        g = super().grad(X, y, x)
        return g - 1e3 * x if X[0, 1] == 99.0 else g


def _sample(data, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rs.sample(rs.models.LogisticRegression(), data, **{**KW, **kw})


@pytest.mark.parametrize(
    "kw",
    [{}, {"local_kernel": "mala"}, {"local_kernel": "lmc", "pipeline": True}],
    ids=["laplace_mh-batched", "mala-one-reply-per-shard", "lmc-pipelined"],
)
def test_secure_draws_equal_the_fixed_point_plain_run_bit_for_bit_and_the_float_run_to_the_rounding(data, kw):
    secure = _sample(data, secure_sums=True, **kw)
    # the plain runs with the same site-keyed streams (a secure run's default: `RunOptions.keyed_noise`)
    fixed = _sample(data, fixed_point=True, keyed_noise=True, **kw)
    plain = _sample(data, keyed_noise=True, **kw)
    np.testing.assert_array_equal(secure.draws, fixed.draws)
    assert not np.array_equal(secure.draws, plain.draws)  # rounded to 2⁻³², not the float sum
    np.testing.assert_allclose(secure.draws, plain.draws, rtol=0, atol=1e-7)
    assert np.abs(secure.draws.mean(axis=(0, 1)) - plain.draws.mean(axis=(0, 1))).max() < 1e-9


def test_with_group_effects_the_global_part_goes_masked_and_the_draws_are_the_fixed_point_runs():
    """A site's group effects are its own output (plain in the ledger); z_i's global part goes masked."""
    rng = np.random.default_rng(0)
    n = 120
    X = np.column_stack([np.ones(n), rng.normal(size=n), rng.integers(0, 6, n) + 100.0])
    y = (rng.normal(size=n) + 0.5 * X[:, 1] > 0).astype(float)
    shards = rs.shard(X, y, num_shards=2, columns=["(Intercept)", "age", "hospital"], by="hospital")
    model = rs.models.LogisticRegression(group_effects=rs.GroupEffects("hospital", slopes=("age",)))
    kw = {**KW, "chains": 2, "num_rounds": 40, "burn_in": 10}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        secure = rs.sample(model, shards, secure_sums=True, **kw)
        fixed = rs.sample(model, shards, fixed_point=True, keyed_noise=True, **kw)
    np.testing.assert_array_equal(secure.draws, fixed.draws)
    modes = {r.quantity: r.mode for r in secure.run_stats.ledger.shards[0].releases}
    assert modes["z/rho"] == "masked" and modes["local_params"] == "plain" and "z" not in modes


def test_the_coordinator_holds_only_masked_terms_whose_total_alone_is_the_true_sum(data, monkeypatch):
    """Spies at both ends: each site's true fixed-point term z_i/ρ_i before its mask (`SecureSite.mask`), and what
    DG-LMC's θ | z step receives (`coordinator_step`). Every received term is unrelated to the site's true one, no
    strict subset of them adds up to the true partial sum, their total is the true total; the captured run state
    holds sealed worker states only, none of whose z_i bytes appear in it."""
    true_terms, received = [], []
    mask = SecureSite.mask

    def spy_mask(self, replies):
        true_terms.append(np.array(replies.summed, copy=True))
        return mask(self, replies)

    step = dglmc_coordinator.coordinator_step

    def spy_step(state, replies, noise, info):
        assert replies.z is None  # no z_i in the clear
        received.append(np.array(replies.summed, copy=True))
        return step(state, replies, noise, info)

    monkeypatch.setattr(SecureSite, "mask", spy_mask)
    monkeypatch.setattr(dglmc_coordinator, "coordinator_step", spy_step)
    opts = RunOptions(chains=4, num_rounds=30, burn_in=10, seed=7, secure_sums=True)
    with Run(rs.models.LogisticRegression(), data, DGLMC(), opts, LOCAL) as run:
        for _ in run.chunks():
            pass
        state = run.capture()
        host = run._handle.host.pool.host  # the sites' side, in this process
        worker_z = [np.asarray(s.chains.z) for s in host.states]

    assert len(received) == len(true_terms) == 40
    truth, got = np.stack(true_terms), np.stack(received)  # (rounds, b, K, d)
    assert got.shape[1] == 4
    np.testing.assert_array_equal(fp.total(got.transpose(1, 0, 2, 3)), fp.total(truth.transpose(1, 0, 2, 3)))
    for i in range(4):
        t, g = fp.decode(truth[:, i]).ravel(), fp.decode(got[:, i]).ravel()
        assert np.abs(g - t).min() > 1.0  # no entry of any received term is near its true value
        assert abs(np.corrcoef(t, g)[0, 1]) < 0.1
    for k in range(1, 4):
        for subset in itertools.combinations(range(4), k):
            part = list(subset)
            partial_true = fp.total(truth[:, part].transpose(1, 0, 2, 3))
            partial_got = fp.total(got[:, part].transpose(1, 0, 2, 3))
            assert not np.any(partial_true == partial_got), subset
    assert all(isinstance(s.algorithm, SealedState) for s in state.shards)
    blob = pickle.dumps(state)
    for z in worker_z:
        for row in z.reshape(-1, z.shape[-1]):
            assert row[:2].tobytes() not in blob
    for term in truth[-1]:  # the last round's true terms, in fixed point, are nowhere in it either
        assert term.reshape(-1)[:2].tobytes() not in blob


def test_a_plain_runs_captured_state_does_hold_z_in_the_clear(data):
    """The check above can fail: without secure sums the worker states' z_i bytes are in the captured state."""
    opts = RunOptions(chains=4, num_rounds=5, burn_in=5, seed=7)
    with Run(rs.models.LogisticRegression(), data, DGLMC(), opts, LOCAL) as run:
        for _ in run.chunks():
            pass
        blob = pickle.dumps(run.capture())
        z = np.asarray(run._handle.host.pool.host.states[0].chains.z)
    assert z.reshape(-1, z.shape[-1])[0][:2].tobytes() in blob


def test_a_secure_run_resumes_from_its_sealed_state_with_new_keys_and_the_same_draws(data, monkeypatch):
    opts = RunOptions(chains=4, num_rounds=40, burn_in=10, seed=3, secure_sums=True)
    model = rs.models.LogisticRegression()
    with Run(model, data, DGLMC(), opts, LOCAL) as run:
        whole = np.concatenate([c.theta for c in run.chunks()])
    agreed = []
    agree = SecureSite.agree
    monkeypatch.setattr(
        SecureSite, "agree", lambda self, publics: (agreed.append(tuple(publics)), agree(self, publics))
    )
    with Run(model, data, DGLMC(), opts, LOCAL) as run:
        chunks = run.chunks()
        first = next(chunks).theta
        state = pickle.loads(pickle.dumps(run.capture()))
    with Run(model, data, DGLMC(), opts, LOCAL, resume_from=state) as resumed:
        rest = np.concatenate([c.theta for c in resumed.chunks()])
    assert 0 < len(first) < len(whole) and len(rest) > 0  # a resume mid-run
    np.testing.assert_array_equal(np.concatenate([first, rest]), whole)
    assert len(agreed) == 2 and agreed[0] != agreed[1]  # the resume agreed new keys


def test_a_site_flags_its_own_non_finite_term(data):
    """A diverging shard's z_i never reaches the coordinator, but its own flag does: the run stops NON_FINITE
    naming that shard, as a plain run does."""
    X, y = rs.datasets.load("breast_cancer")
    parts = [(Xi.copy(), yi) for Xi, yi in zip(np.array_split(X, 3), np.array_split(y, 3))]
    parts[1][0][0, 1] = 99.0
    with pytest.raises(rs.SamplingError) as err:
        rs.sample(
            DivergingLogistic(),
            rs.shard(parts),
            chains=2,
            num_rounds=400,
            burn_in=0,
            executor="local",
            progress=False,
            secure_sums=True,
            **{**PLAIN, "gamma": 1e-3, "n_local": 5},
        )
    f = err.value.failure
    assert f.kind == FailureKind.NON_FINITE and f.shard == 1 and f.round > 0


@pytest.mark.parametrize(
    ("algorithm", "why"),
    [
        ("dadmms", "routes each site's own values"),
        ("dsgld", "routes each site's own values"),
        ("dmala", "routes each site's own values"),
        ("mala", "beyond the range of the fixed-point terms"),
    ],
)
def test_secure_sums_are_refused_naming_the_algorithm(data, algorithm, why):
    with pytest.raises(ArgumentError) as err:
        rs.sample(rs.models.LogisticRegression(), data, algorithm=algorithm, secure_sums=True, **KW)
    assert err.value.path == ("secure_sums",)
    assert repr(algorithm) in str(err.value) and why in str(err.value)


def test_the_ledger_counts_the_messages_the_sites_actually_sent(data, monkeypatch):
    """Every reply leaving a host (the seam: `ShardHost.step`) counted by shard and field, against the ledger."""
    sent: dict[tuple[int, str], list[int]] = {}
    step = ShardHost.step

    def spy(self, messages):
        replies, times = step(self, messages)
        for f, value in zip(replies._fields, replies):
            if value is not None:
                for j, shard in enumerate(self.shard_ids):
                    row = sent.setdefault((shard, f), [0, 0])
                    row[0] += 1
                    row[1] += value[j].nbytes
        for shard in self.shard_ids:
            row = sent.setdefault((shard, "step_time"), [0, 0])
            row[0] += 1
            row[1] += 8
        return replies, times

    monkeypatch.setattr(ShardHost, "step", spy)
    res = _sample(data, secure_sums=True)
    names = dict(DGLMC.release_names, step_time="step_time")
    for site in res.run_stats.ledger.shards:
        rounds = {r.quantity: r for r in site.releases if not r.quantity.startswith(("setup:", "checkpoint:"))}
        mine = {names[f]: v for (shard, f), v in sent.items() if shard == site.shard}
        assert set(rounds) == set(mine) == {"z/rho", "local_accept", "status", "step_time"}
        for q, (n, nbytes) in mine.items():
            assert (rounds[q].messages, rounds[q].bytes) == (n, nbytes) == (80, rounds[q].bytes), q
        assert rounds["z/rho"].mode == "masked" and rounds["z/rho"].shape == (4, 31)
        assert all(r.mode == "plain" for q, r in rounds.items() if q != "z/rho")
        assert any(r.quantity.startswith("setup:") for r in site.releases)
        by_mode = site.bytes_by_mode()
        assert by_mode["masked"] == rounds["z/rho"].bytes and site.total_bytes == sum(by_mode.values())


def test_keyed_streams_depend_on_the_site_secret_not_on_the_seed_alone_and_are_sealed(data, monkeypatch):
    """A secure run's worker streams come from the seed and the site's secret (`RunOptions.keyed_noise`): the seed
    alone does not give them (the coordinator cannot replay a site's proposals), the same secret gives the same
    draws, another secret other draws; a captured state holds no stream position in the clear; turning the keyed
    streams off under secure sums or the DP mode is refused naming keyed_noise."""
    kw = {"chains": 2, "num_rounds": 20, "burn_in": 5}
    monkeypatch.setenv("RAYSAMPLER_SITE_SECRET", "site secret one")
    keyed = _sample(data, keyed_noise=True, **kw)
    again = _sample(data, keyed_noise=True, **kw)
    plain = _sample(data, **kw)
    np.testing.assert_array_equal(keyed.draws, again.draws)
    assert np.abs(keyed.draws - plain.draws).max() > 1e-3  # other numbers: the seed's streams are not the site's
    monkeypatch.setenv("RAYSAMPLER_SITE_SECRET", "site secret two")
    assert np.abs(_sample(data, keyed_noise=True, **kw).draws - keyed.draws).max() > 1e-3
    opts = RunOptions(chains=2, num_rounds=10, burn_in=5, seed=7, keyed_noise=True)
    with Run(rs.models.LogisticRegression(), data, DGLMC(), opts, LOCAL) as run:
        for _ in run.chunks():
            pass
        state = run.capture()
    assert all(s.noise is None and isinstance(s.algorithm, SealedState) for s in state.shards)
    with pytest.raises(ArgumentError) as err:
        _sample(data, secure_sums=True, keyed_noise=False, **kw)
    assert err.value.path == ("keyed_noise",)
    with pytest.raises(ArgumentError) as err:
        _sample(data, privacy=rs.DP(epsilon=1.0, delta=1e-5, clip=1.0), keyed_noise=False, **kw)
    assert err.value.path == ("keyed_noise",)
