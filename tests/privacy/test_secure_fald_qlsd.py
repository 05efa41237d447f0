"""FALD, QLSD and ULA with secure sums (in-process): the server of each needs only sums over the clients
(FALD's Σ_i X^i and Σ_i G_i, QLSD's Σ_i q_i, ULA's Σ_i ∇U_i), so each client sends them as one fixed-point term its
site masks. The draws are bit-identical to a plain run with the same rounding and streams (FALD's and ULA's agree
with the float run's to the rounding); what the server's step receives are masked terms whose total alone is the
true one; the ledger lists them masked."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

import raysampler as rs
from raysampler.algorithms import fald as fald_module
from raysampler.algorithms import gradient as gradient_module
from raysampler.algorithms import qlsd as qlsd_module
from raysampler.privacy import fixed_point as fp
from raysampler.privacy.site import SecureSite

pytestmark = pytest.mark.usefixtures("site_keys")
KW = dict(chains=4, num_rounds=50, burn_in=15, seed=11, executor="local", progress=False)

CASES = [
    ("fald", {}),
    ("fald", {"variant": "star"}),
    ("fald", {"variant": "vr_star", "batch_size": 50, "tau": 0.5}),
    ("qlsd", {}),
    ("qlsd", {"variant": "pp", "batch_size": 40}),
    ("qlsd", {"variant": "sharp", "levels": None}),
    ("ula", {}),
]
IDS = [
    "fald-plain",
    "fald-star",
    "fald-vr_star-minibatch",
    "qlsd-star",
    "qlsd-pp-minibatch",
    "qlsd-uncompressed",
    "ula",
]


def _sample(data, algorithm, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rs.sample(rs.models.LogisticRegression(), data, algorithm=algorithm, **{**KW, **kw})


@pytest.mark.parametrize(("algorithm", "params"), CASES, ids=IDS)
def test_secure_draws_equal_the_fixed_point_run_bit_for_bit_and_the_float_run_to_the_rounding(data, algorithm, params):
    secure = _sample(data, algorithm, secure_sums=True, **params)
    fixed = _sample(data, algorithm, fixed_point=True, keyed_noise=True, **params)
    plain = _sample(data, algorithm, keyed_noise=True, **params)
    np.testing.assert_array_equal(secure.draws, fixed.draws)
    assert not np.array_equal(secure.draws, plain.draws)  # rounded to 2⁻³², not the float sums
    if algorithm != "qlsd":
        np.testing.assert_allclose(secure.draws, plain.draws, rtol=0, atol=1e-6)
        assert np.abs(secure.draws.mean(axis=(0, 1)) - plain.draws.mean(axis=(0, 1))).max() < 1e-8
    # QLSD's quantiser is discontinuous: once a rounding moves an entry across a level, the chains part from the
    # float run's for good (the same law, other draws), so only the fixed-point run is compared number for number
    quantity = {"fald": "x,grad", "qlsd": "q", "ula": "grad"}[algorithm]
    for site in secure.run_stats.ledger.shards:
        masked = [r.quantity for r in site.releases if r.mode == "masked"]
        in_clear = [r.quantity for r in site.releases if r.mode == "plain"]
        assert masked == [quantity] and "status" in in_clear
        assert not {"x", "g", "grad", "q", "x,grad", "sq_error"} & set(in_clear)  # no site value in the clear
    plain_modes = {r.quantity: r.mode for r in plain.run_stats.ledger.shards[0].releases}
    assert plain_modes.get({"fald": "x", "qlsd": "q", "ula": "grad"}[algorithm]) == "plain"


@pytest.mark.parametrize(
    ("algorithm", "cls"), [("fald", fald_module.FALD), ("qlsd", qlsd_module.QLSD), ("ula", gradient_module.ULA)]
)
def test_the_server_receives_only_masked_terms_whose_total_alone_is_the_true_one(data, monkeypatch, algorithm, cls):
    """Spies at both ends: each site's true fixed-point term before its mask (`SecureSite.mask`) and what the
    algorithm's server step receives. No received term is near its site's true one, no strict subset of them adds up
    to the true partial sum, their total is the true total."""
    true_terms, received = [], []
    mask = SecureSite.mask

    def spy_mask(self, replies):
        true_terms.append([np.array(r.summed, copy=True) for r in replies])
        return mask(self, replies)

    step = cls.coordinator_step

    def spy_step(self, state, replies, noise, info):
        assert all(getattr(r, f, None) is None for r in replies for f in ("x", "g", "q", "grad", "sq_error"))
        received.append([np.array(r.summed, copy=True) for r in replies])
        return step(self, state, replies, noise, info)

    monkeypatch.setattr(SecureSite, "mask", spy_mask)
    monkeypatch.setattr(cls, "coordinator_step", spy_step)
    params = {"variant": "star"} if algorithm == "fald" else {}
    _sample(data, algorithm, secure_sums=True, num_rounds=20, burn_in=5, **params)
    # in-process every shard's host is one process: one mask call per round over the 4 shards
    truth = np.stack([np.stack(t) for t in true_terms])  # (rounds, b, K, w)
    got = np.stack([np.stack(g) for g in received])
    assert truth.shape == got.shape and truth.shape[:2] == (25, 4)
    np.testing.assert_array_equal(fp.total(got.transpose(1, 0, 2, 3)), fp.total(truth.transpose(1, 0, 2, 3)))
    for i in range(4):
        t, g = fp.decode(truth[:, i]).ravel(), fp.decode(got[:, i]).ravel()
        assert np.abs(g - t).min() > 1.0
        assert abs(np.corrcoef(t, g)[0, 1]) < 0.1
    for k in range(1, 4):
        for subset in itertools.combinations(range(4), k):
            part = list(subset)
            assert not np.any(
                fp.total(truth[:, part].transpose(1, 0, 2, 3)) == fp.total(got[:, part].transpose(1, 0, 2, 3))
            ), subset


def test_a_fixed_point_term_out_of_range_is_the_sites_own_flag():
    """A term beyond 2³¹/b (or non-finite) is sent as zeros with the party's NaN flag, which the coordinator's
    non-finite check reads: the run stops naming the shard, as with DG-LMC."""
    ok = fp.encode_term((np.ones((2, 3)), np.zeros((2, 3))), 4)
    assert ok.words.shape == (2, 6) and ok.status.tolist() == [0.0]
    bad = fp.encode_term((np.full((2, 3), 1e9),), 4)
    assert np.isnan(bad.status).all() and not bad.words.any()
    sums = fp.decode_sum([ok.words, ok.words], (3, 3))
    np.testing.assert_array_equal(sums[0], 2.0)
    np.testing.assert_array_equal(sums[1], 0.0)


def test_qlsd_clients_keep_their_memory_as_the_server_adds_it():
    """With memory, the server's H = Σ_i h_i by construction (H += α Σ_i q_i, h_i += α q_i): in a fixed-point run the
    clients update h_i with q_i rounded as they send it, so the server's H, updated from the decoded sum, stays
    their sum to float rounding, round after round."""
    from raysampler.options import ExecutionOptions, RunOptions
    from raysampler.sampling import Run

    X, y = rs.datasets.load("breast_cancer")
    shards = rs.shard(X, y, num_shards=3)
    opts = RunOptions(chains=2, num_rounds=40, burn_in=10, seed=3)
    with Run(rs.models.LogisticRegression(), shards, qlsd_module.QLSD(fixed_point=True), opts,
             ExecutionOptions(executor="local", balance=False)) as run:  # fmt: skip
        for _ in run.chunks():
            pass
        server_H = run._handle.host.coordinator.state.H
        clients_h = sum(s.h for s in run._handle.host.pool.host.states)
    assert np.abs(server_H).max() > 1.0  # the memory is in use
    np.testing.assert_allclose(server_H, clients_h, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "algorithm",
    [fald_module.FALD(variant="star"), qlsd_module.QLSD(), gradient_module.ULA()],
    ids=["fald", "qlsd", "ula"],
)
def test_a_secure_run_resumes_from_its_captured_state_with_the_same_draws(data, algorithm):
    """The workers' states (memories, control variates, stream positions) travel sealed; the resume agrees new keys,
    and the draws after it are the uninterrupted run's."""
    import pickle

    from raysampler.options import ExecutionOptions, RunOptions
    from raysampler.privacy.sealing import SealedState
    from raysampler.sampling import Run

    opts = RunOptions(chains=2, num_rounds=40, burn_in=10, seed=5, secure_sums=True)
    local = ExecutionOptions(executor="local", balance=False)
    model = rs.models.LogisticRegression()
    with Run(model, data, algorithm, opts, local) as run:
        whole = np.concatenate([c.theta for c in run.chunks()])
    with Run(model, data, algorithm, opts, local) as run:
        first = next(run.chunks(target_chunk_s=0.001)).theta
        state = pickle.loads(pickle.dumps(run.capture()))
    assert all(isinstance(s.algorithm, SealedState) for s in state.shards)
    with Run(model, data, algorithm, opts, local, resume_from=state) as resumed:
        rest = np.concatenate([c.theta for c in resumed.chunks()])
    assert 0 < len(first) < len(whole) and len(rest) > 0  # a resume mid-run
    np.testing.assert_array_equal(np.concatenate([first, rest]), whole)


@pytest.mark.parametrize("algorithm", ["fald", "ula"])
def test_a_site_flags_its_own_term_out_of_range(algorithm):
    """A diverging shard's term leaves the fixed point's range: it is never sent, but the site's own flag is, and
    the run stops NON_FINITE naming that shard, as a plain run does on its non-finite reply."""
    import dataclasses

    from raysampler.errors import FailureKind
    from raysampler.models.logistic import LogisticRegression

    @dataclasses.dataclass(frozen=True)
    class Diverging(LogisticRegression):
        def grad(self, X, y, x):
            g = super().grad(X, y, x)
            return g - 1e3 * x if X[0, 1] == 99.0 else g

    X, y = rs.datasets.load("breast_cancer")
    parts = [(Xi.copy(), yi) for Xi, yi in zip(np.array_split(X, 3), np.array_split(y, 3))]
    parts[1][0][0, 1] = 99.0
    with warnings.catch_warnings(), pytest.raises(rs.SamplingError) as err:
        warnings.simplefilter("ignore")
        rs.sample(Diverging(), rs.shard(parts), algorithm=algorithm, secure_sums=True, step_size=5e-3,
                  preconditioner=None, **{**KW, "num_rounds": 400, "burn_in": 0})  # fmt: skip
    f = err.value.failure
    assert f.kind == FailureKind.NON_FINITE and f.shard == 1 and f.round > 0
