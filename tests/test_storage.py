"""Where durable files live (`raysampler.storage`) and the run directory on top (`raysampler.checkpoints`): local
folders and object storage (a real S3-compatible server) behave alike; writers with a lease epoch keep their files
apart, so that the late writes of a replica that lost its lease change nothing a reader or a new driver sees; a run
checkpointed to object storage resumes in another process."""

from __future__ import annotations

import numpy as np
import pytest

from raysampler.checkpoints import CheckpointError, RunDirectory
from raysampler.runtime.contracts import RunState
from raysampler.storage import LocalStorage, Storage, read_location, remove_location, storage_at


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path, monkeypatch) -> Storage:
    if request.param == "local":
        return storage_at(tmp_path / "store")
    s3 = request.getfixturevalue("s3")
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    return storage_at(f"s3://{s3.new_bucket()}/prefix/")


def test_storage_writes_reads_lists_and_removes_whole_files(root):
    root.write("a/one.bin", b"1" * 10)
    root.write("a/two.bin", b"2")
    root.write("top.bin", b"t")
    root.write("a/two.bin", b"22")  # replaced whole
    assert root.read("a/two.bin") == b"22" and root.exists("top.bin") and not root.exists("a/none")
    assert sorted(root.list("a")) == ["one.bin", "two.bin"] and root.list() == ["top.bin"] and root.list("z") == []
    assert root.size_bytes() == 13 and root.child("a").size_bytes() == 12
    assert read_location(root.child("a").location_of("one.bin")) == b"1" * 10
    with pytest.raises(FileNotFoundError):
        root.read("missing.bin")
    remove_location(root.location_of("top.bin"))
    root.remove("top.bin")  # gone already: no error
    root.child("a").remove_all()
    assert root.size_bytes() == 0 and root.list("a") == []
    np.save(buf := __import__("io").BytesIO(), np.arange(6.0).reshape(2, 3))
    root.write("x.npy", buf.getvalue())
    np.testing.assert_array_equal(root.array("x.npy"), np.arange(6.0).reshape(2, 3))
    assert isinstance(root, LocalStorage) or root.location.startswith("s3://")


def _state(draws_kept: int, rounds: int) -> RunState:
    state = RunState.__new__(RunState)
    object.__setattr__(state, "version", RunState.VERSION)
    object.__setattr__(state, "draws_kept", draws_kept)
    object.__setattr__(state, "rounds_done", rounds)
    return state


def _draws(start: int, n: int, tag: float) -> np.ndarray:
    """n draws of 2 chains, 1 coordinate: the draw index plus a tag naming who wrote it."""
    return (np.arange(start, start + n, dtype=float)[:, None, None] + tag) * np.ones((1, 2, 1))


def test_a_replica_that_lost_its_lease_changes_nothing_anyone_reads(root):
    directory = RunDirectory(root.child("runs", "t", "r1"))
    first = directory.writer(1)
    first.append(0, _draws(0, 10, 0.0))
    first.save_checkpoint(_state(10, 10))
    first.append(10, _draws(10, 5, 0.0))  # written, but its checkpoint never was: the driver froze here

    second = directory.writer(2)  # takes over: resumes from epoch 1's checkpoint, drops what is not part of it
    state = second.rollback()
    assert state is not None and state.draws_kept == 10 and [c.start for c in directory.chunks()] == [0]
    second.append(10, _draws(10, 8, 0.0))
    second.save_checkpoint(_state(18, 18))
    # the first driver thaws and writes on (its own epoch's names), with different numbers than the second's
    first.append(10, _draws(10, 20, 0.5))
    first.save_checkpoint(_state(30, 30))
    np.testing.assert_array_equal(directory.read(0, 18), _draws(0, 18, 0.0))  # the second's, everywhere
    np.testing.assert_array_equal(directory.read_column(0, 18, 3, 0), _draws(0, 18, 0.0)[::3, :, 0])
    third = directory.writer(3)
    assert third.rollback().draws_kept == 18  # type: ignore[union-attr]  # the newest epoch's checkpoint
    assert [(c.start, c.epoch) for c in directory.chunks()] == [(0, 1), (10, 2)]  # the late write is gone too
    np.testing.assert_array_equal(directory.read(0, 18), _draws(0, 18, 0.0))

    refused = directory.writer(4, fence=lambda: (_ for _ in ()).throw(PermissionError("lease lost")))
    with pytest.raises(PermissionError):
        refused.append(18, _draws(18, 1, 0.0))
    with pytest.raises(PermissionError):
        refused.save_checkpoint(_state(19, 19))


def test_the_plain_layout_reads_as_before_and_a_damaged_checkpoint_is_refused(root):
    directory = RunDirectory(root.child("plain"))
    assert directory.rollback() is None and not directory.has_checkpoint()
    directory.append(0, _draws(0, 4, 0.0), {"accept": np.ones((4, 2))})
    directory.append(4, _draws(4, 4, 0.0), {"accept": np.zeros((4, 2))})
    directory.save_checkpoint(_state(8, 8))
    np.testing.assert_array_equal(directory.read(2, 7), _draws(2, 5, 0.0))
    assert directory.read_stats(6)["accept"].tolist() == [[1, 1]] * 4 + [[0, 0]] * 2
    directory.storage.write("checkpoint.pkl", b"garbage")
    with pytest.raises(CheckpointError, match="cannot be read"):
        directory.load_checkpoint()
    directory.delete()
    assert directory.size_bytes() == 0


@pytest.mark.filterwarnings("ignore:max R-hat", "ignore:min bulk ESS")  # a short run: its draws are what matters
def test_a_run_checkpointed_to_object_storage_resumes_in_another_process(s3, monkeypatch, tmp_path):
    """rs.sample(checkpoint_dir="s3://...") stops after part of its rounds (as a machine lost); rs.resume on the same
    URI, in a fresh interpreter, gives exactly the draws of an uninterrupted run."""
    import subprocess
    import sys
    import textwrap

    import raysampler as rs

    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    where = f"s3://{s3.new_bucket()}/runs/r1/"
    X, y = rs.datasets.load("breast_cancer")
    files = []
    for i, (Xi, yi) in enumerate(zip(np.array_split(X, 2), np.array_split(y, 2))):
        files.append(tmp_path / f"part-{i}.npz")
        np.savez(files[-1], X=Xi, y=yi)
    kw = dict(chains=2, num_rounds=200, burn_in=20, seed=7, executor="local", progress=False)
    full = rs.sample(rs.models.LogisticRegression(), [str(f) for f in files], **kw)
    stop = {"after": 0}

    def stop_early(chunk) -> None:
        stop["after"] += len(chunk.theta)
        if stop["after"] >= 60:
            raise KeyboardInterrupt  # the machine goes away mid-run

    with pytest.raises(KeyboardInterrupt):
        rs.sample(
            rs.models.LogisticRegression(), [str(f) for f in files], checkpoint_dir=where, callback=stop_early, **kw
        )
    script = textwrap.dedent(f"""
        import numpy as np, raysampler as rs
        res = rs.resume({where!r}, progress=False)
        np.save({str(tmp_path / "resumed.npy")!r}, res.draws)
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300)
    np.testing.assert_array_equal(np.load(tmp_path / "resumed.npy"), full.draws)


def test_every_npy_header_is_parsed_under_the_lock(root, tmp_path, monkeypatch):
    """numpy parses .npy headers with ast.literal_eval, which CPython 3.11 cannot run in two threads at once (the
    service's draws streams failed with "AST constructor recursion depth mismatch" under load): draws, their stats
    and shard .npz files are read with `storage.NPY_LOCK` held."""
    import ast

    from raysampler.shards import read_data_file
    from raysampler.storage import NPY_LOCK

    parsed = []
    real = ast.literal_eval

    def checked(text):
        parsed.append(NPY_LOCK.locked())
        return real(text)

    run = RunDirectory(root.child("run-lock"))
    run.append(0, np.ones((3, 2, 4)), {"accept": np.ones((3, 2))})
    np.savez(tmp_path / "shard.npz", X=np.ones((5, 2)), y=np.zeros(5))
    monkeypatch.setattr(ast, "literal_eval", checked)
    assert run.read(0, 3).shape == (3, 2, 4)
    assert run.read_stats(3)["accept"].shape == (3, 2)
    assert read_data_file(str(tmp_path / "shard.npz"))[0].shape == (5, 2)
    assert len(parsed) >= 4 and all(parsed), parsed


def test_npy_data_are_read_after_the_lock_is_released():
    """Only a header's parse holds `NPY_LOCK`: an array's bytes are read with it free, so that one large read (an
    uploaded data set, a shard file) does not hold up every draws stream. `read_npy` gives what np.load gives."""
    import io

    from raysampler.storage import NPY_LOCK, read_npy, read_npz

    held = []

    class Probe(io.BytesIO):
        def readinto(self, b):  # numpy's header reads use read(); the data come through readinto
            held.append(NPY_LOCK.locked())
            return super().readinto(b)

    cases = [
        np.arange(300_000.0).reshape(1000, 300),
        np.asfortranarray(np.arange(12).reshape(3, 4)),
        np.arange(24, dtype=np.float32).reshape(2, 3, 4).transpose(2, 0, 1),
        np.arange(6, dtype=">i4").reshape(2, 3),
        np.array(3.5),
        np.zeros((0, 3)),
        np.array([True, False]),
        np.array(["St Mary", "b"]),
        np.zeros(2, dtype=[("a", "<f8"), ("b", "<i2")]),
    ]
    for a in cases:
        buf = Probe()
        np.save(buf, a)
        buf.seek(0)
        got = read_npy(buf)
        assert got.dtype == a.dtype and got.shape == a.shape and np.array_equal(got, a) and got.flags.writeable
    assert held and not any(held), held
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object))
    buf.seek(0)
    with pytest.raises(ValueError, match="allow_pickle"):
        read_npy(buf)
    buf = io.BytesIO()
    np.savez_compressed(buf, X=cases[0], y=cases[3])
    assert {k: v.shape for k, v in read_npz(buf.getvalue()).items()} == {"X": (1000, 300), "y": (2, 3)}
    assert list(read_npz(buf.getvalue(), ["y"])) == ["y"]
