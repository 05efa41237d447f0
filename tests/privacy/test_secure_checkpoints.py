"""A secure-sums run's checkpoint on disk holds its sites' worker states sealed; a run whose process is SIGKILLed
continues in another process with `rs.resume` (the sites open their states with their own key, agree new keys) and
ends with exactly the draws of an uninterrupted secure run, its release ledger counting on from the checkpoint's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

import raysampler as rs
from raysampler.checkpoints import RunDirectory
from raysampler.privacy.sealing import KEYS_ENV, SealedState

KW = dict(chains=2, num_rounds=3000, burn_in=100, seed=17, executor="local", progress=False, secure_sums=True)


@pytest.fixture
def file_shards(tmp_path):
    X, y = rs.datasets.load("breast_cancer")
    paths = []
    for i, (Xi, yi) in enumerate(zip(np.array_split(X, 3), np.array_split(y, 3))):
        paths.append(str(tmp_path / f"part-{i}.npz"))
        np.savez(paths[-1], X=Xi, y=yi)
    return paths


def test_a_killed_secure_run_resumes_elsewhere_from_sealed_states_with_identical_draws(
    file_shards, tmp_path, monkeypatch
):
    keys = tmp_path / "site-keys"
    monkeypatch.setenv(KEYS_ENV, str(keys))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        uninterrupted = rs.sample(rs.models.LogisticRegression(), rs.shard(file_shards), **KW).draws
    ckpt = tmp_path / "run"
    script = textwrap.dedent(f"""
        import raysampler as rs
        rs.sample(rs.models.LogisticRegression(), rs.shard({file_shards!r}), checkpoint_dir={str(ckpt)!r}, **{KW!r})
    """)
    env = os.environ | {"PYTHONWARNINGS": "ignore", KEYS_ENV: str(keys)}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env)
    directory = RunDirectory(ckpt)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if directory.has_checkpoint() and directory.load_checkpoint().draws_kept >= 200:
            break
        assert proc.poll() is None, "the run ended before it could be killed"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    state = directory.load_checkpoint()
    assert 0 < state.draws_kept < KW["num_rounds"]
    assert all(isinstance(s.algorithm, SealedState) for s in state.shards)
    at_checkpoint = {r.quantity: r for r in state.ledger.shards[0].releases}["z/rho"].messages
    assert at_checkpoint == state.rounds_done
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        resumed = rs.resume(ckpt)
    np.testing.assert_array_equal(resumed.draws, uninterrupted)
    z = {r.quantity: r for r in resumed.run_stats.ledger.shards[0].releases}["z/rho"]
    assert z.mode == "masked" and z.messages == KW["num_rounds"] + KW["burn_in"]
