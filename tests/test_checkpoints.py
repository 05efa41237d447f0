"""Checkpointed runs: `rs.sample(..., checkpoint_dir=...)` stores every chunk of draws with its checkpoint; a run
whose process is SIGKILLed continues in another process with `rs.resume` and ends with exactly the draws of an
uninterrupted run; an unusable checkpoint is a clear error, never a silent restart from round 0."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

import raysampler as rs
from raysampler.checkpoints import CheckpointError, RunDirectory

KW = dict(chains=2, num_rounds=3000, burn_in=100, seed=17, executor="local", progress=False)


@pytest.fixture(scope="module")
def file_shards(tmp_path_factory):
    X, y = rs.datasets.load("breast_cancer")
    root = tmp_path_factory.mktemp("ckpt-data")
    paths = []
    for i, (Xi, yi) in enumerate(zip(np.array_split(X, 3), np.array_split(y, 3))):
        paths.append(str(root / f"part-{i}.npz"))
        np.savez(paths[-1], X=Xi, y=yi)
    return paths


@pytest.fixture(scope="module")
def uninterrupted(file_shards):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rs.sample(rs.models.LogisticRegression(), rs.shard(file_shards), "mala", **KW).draws


def test_killed_process_resumes_elsewhere_with_identical_draws(file_shards, uninterrupted, tmp_path):
    ckpt = tmp_path / "run"
    script = textwrap.dedent(f"""
        import raysampler as rs
        rs.sample(rs.models.LogisticRegression(), rs.shard({file_shards!r}), "mala", checkpoint_dir={str(ckpt)!r},
                  **{KW!r})
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], env=os.environ | {"PYTHONWARNINGS": "ignore"})
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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        resumed = rs.resume(ckpt)
    assert resumed.draws.shape == uninterrupted.shape
    np.testing.assert_array_equal(resumed.draws, uninterrupted)


def test_unusable_checkpoints_are_clear_errors(file_shards, tmp_path):
    ckpt = tmp_path / "run"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rs.sample(
            rs.models.LogisticRegression(),
            rs.shard(file_shards),
            "ula",
            checkpoint_dir=ckpt,
            **{**KW, "num_rounds": 50},
        )
    with pytest.raises(ValueError, match="holds a run already"):
        rs.sample(rs.models.LogisticRegression(), rs.shard(file_shards), "ula", checkpoint_dir=ckpt, **KW)
    (ckpt / "checkpoint.pkl").write_bytes(b"not a pickle")
    with pytest.raises(CheckpointError, match="cannot be read"):
        rs.resume(ckpt)
    (ckpt / "checkpoint.pkl").write_bytes(pickle.dumps({"round": 3}))
    with pytest.raises(CheckpointError, match="version"):
        rs.resume(ckpt)
    with pytest.raises(CheckpointError, match="holds no run"):
        rs.resume(tmp_path / "empty")


def test_in_memory_shards_must_be_given_again_and_checkpoints_hold_no_data(tmp_path):
    X, y = rs.datasets.load("breast_cancer")
    shards = rs.shard(X, y, num_shards=2)
    sizes = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = rs.sample(
            rs.models.LogisticRegression(), shards, "ula", checkpoint_dir=tmp_path / "a", **{**KW, "num_rounds": 80}
        )
        big = rs.shard(np.repeat(X, 20, axis=0), np.repeat(y, 20), num_shards=2)  # 20x the rows
        rs.sample(rs.models.LogisticRegression(), big, "ula", checkpoint_dir=tmp_path / "b", **{**KW, "num_rounds": 80})
    for name in ("a", "b"):
        sizes.append(sum((tmp_path / name / f).stat().st_size for f in ("manifest.pkl", "checkpoint.pkl")))
    assert sizes[1] < 1.1 * sizes[0] and sizes[1] < X.nbytes  # state only: the same size whatever the data
    with pytest.raises(ValueError, match="shards"):
        rs.resume(tmp_path / "a")
    again = rs.resume(tmp_path / "a", shards=shards)  # already finished: nothing more to do
    np.testing.assert_array_equal(again.draws, first.draws)
