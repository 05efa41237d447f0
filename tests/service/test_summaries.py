"""Posterior summaries that scale (issue 24): the fast table equals arviz-stats' own `summary`; the cache computes a
key once (concurrent requests wait for it), keeps a finished run's table next to its draws, and forgets a run on
resume and delete."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from raysampler.models.contract import ParamBlock
from raysampler.result import Result
from raysampler.service.summaries import SUMMARY_FILE_PREFIX, SummaryCache, SummaryTable, summary_table


def _reference(theta: np.ndarray, blocks: tuple[ParamBlock, ...] | None, ci_prob: float):
    names = [f"x{j}" for j in range(theta.shape[2])]
    return Result(theta, names, {}, layout=blocks or ()).summary(ci_prob=ci_prob)


@pytest.mark.parametrize(
    "case",
    ["random_walk", "ties", "one_chain", "non_finite", "blocks", "ci_0.5"],
)
def test_table_equals_arviz_stats_summary(case):
    rng = np.random.default_rng(7)
    theta = rng.normal(size=(4, 120, 3)).cumsum(axis=1)
    blocks, ci = None, 0.94
    if case == "ties":  # repeated values (a rejecting sampler): average ranks
        theta = np.round(rng.normal(size=(3, 100, 2)), 1)
    elif case == "one_chain":  # R-hat is undefined
        theta = rng.normal(size=(1, 100, 2))
    elif case == "non_finite":
        theta[1, 5, 0] = np.nan
    elif case == "blocks":  # natural scale: σ = exp(log σ), labelled beta[a], beta[b], sigma
        blocks = (ParamBlock("beta", 2, "coef", ("a", "b"), "identity"), ParamBlock("sigma", 1, None, None, "exp"))
    elif case == "ci_0.5":
        ci = 0.5
    ref = _reference(theta, blocks, ci)
    result = Result(theta, [f"x{j}" for j in range(theta.shape[2])], {}, layout=blocks or ())
    table = summary_table(theta, result.param_blocks, ci)
    assert list(table.columns) == [str(c) for c in ref.columns]
    assert list(table.labels) == [str(i) for i in ref.index]
    np.testing.assert_allclose(table.values, ref.to_numpy(dtype=float), rtol=1e-9, atol=1e-12, equal_nan=True)


def _table(v: float = 1.0) -> SummaryTable:
    return SummaryTable(("a",), ("mean",), np.array([[v]]))


def test_concurrent_requests_for_one_key_compute_once(tmp_path):
    cache, calls = SummaryCache(), []

    def compute() -> SummaryTable:
        calls.append(1)
        time.sleep(0.3)
        return _table()

    out: list[SummaryTable] = []
    threads = [
        threading.Thread(target=lambda: out.append(cache.get("t", "r", 10, 0.94, tmp_path, True, compute)))
        for _ in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and cache.computed == 1 and len(out) == 6 and all(o is out[0] for o in out)
    # another key (more draws stored, another ci_prob) is another computation
    cache.get("t", "r", 11, 0.94, tmp_path, True, compute)
    cache.get("t", "r", 10, 0.5, tmp_path, True, compute)
    assert len(calls) == 3


def test_finished_tables_are_stored_next_to_the_draws_and_dropped_on_invalidate(tmp_path):
    cache = SummaryCache()
    cache.get("t", "r", 10, 0.94, tmp_path, True, lambda: _table(2.0))
    cache.get("t", "r", 12, 0.94, tmp_path, False, lambda: _table(3.0))  # a running run: memory only
    assert [p.name for p in tmp_path.glob(f"{SUMMARY_FILE_PREFIX}*")] == [f"{SUMMARY_FILE_PREFIX}10-0.94.json"]
    fresh = SummaryCache()  # a restarted service reads the stored table instead of computing
    got = fresh.get("t", "r", 10, 0.94, tmp_path, True, lambda: pytest.fail("computed again"))
    assert got.values.tolist() == [[2.0]] and fresh.computed == 0
    fresh.invalidate("t", "r", tmp_path)
    assert not list(tmp_path.glob(f"{SUMMARY_FILE_PREFIX}*"))
    assert fresh.get("t", "r", 10, 0.94, tmp_path, True, lambda: _table(4.0)).values.tolist() == [[4.0]]


def test_memory_is_bounded(tmp_path):
    cache, nowhere = SummaryCache(max_entries=2), tmp_path / "absent"  # no run directory: memory only
    for n in range(5):
        cache.get("t", "r", n, 0.94, nowhere, True, _table)
    assert cache.computed == 5
    cache.get("t", "r", 4, 0.94, nowhere, True, lambda: pytest.fail("the newest entry was evicted"))
    cache.get("t", "r", 0, 0.94, nowhere, True, _table)
    assert cache.computed == 6


def _costly(cpu_s: float, calls: list[int]):
    def compute() -> SummaryTable:
        calls.append(1)
        return SummaryTable(("a",), ("mean",), np.array([[float(len(calls))]]), cpu_s=cpu_s)

    return compute


def test_a_running_run_is_served_its_latest_table_until_a_newer_one_is_due(tmp_path):
    calls: list[int] = []
    cache = SummaryCache(cpu_share=0.05)
    first = cache.get("t", "r", 10, 0.94, tmp_path, False, _costly(0.1, calls))  # none yet: computed at once
    assert first.draws == 10 and calls == [1] and first.cpu_s >= 0.1
    # more draws within cpu_s / share = 2 s of it: the latest table, saying which draws it summarises
    for n in (11, 12, 13):
        got = cache.get("t", "r", n, 0.94, tmp_path, False, _costly(0.1, calls))
        assert got is first and got.draws == 10
    assert calls == [1] and cache.computed == 1
    assert cache.cpu_seconds >= 0.1


def test_a_due_table_is_computed_in_the_background_and_served_when_ready(tmp_path):
    calls: list[int] = []
    started, release = threading.Event(), threading.Event()

    def slow() -> SummaryTable:
        started.set()
        release.wait(10)
        return _costly(0.0, calls)()

    seen: list[float] = []
    now = [0.0]
    cache = SummaryCache(on_computed=seen.append, cpu_share=0.05, clock=lambda: now[0])
    first = cache.get("t", "r", 10, 0.94, tmp_path, False, _costly(0.1, calls))
    assert first.draws == 10
    now[0] += first.cpu_s * 2 / 0.05 - 1e-3  # twice the draws: not due until twice the first's cost / share
    assert cache.get("t", "r", 20, 0.94, tmp_path, False, lambda: pytest.fail("computed early")) is first
    now[0] += 1e-3  # due: the request is answered from the latest while the next is computed
    assert cache.get("t", "r", 20, 0.94, tmp_path, False, slow) is first
    assert started.wait(10)
    assert cache.get("t", "r", 30, 0.94, tmp_path, False, lambda: pytest.fail("a second refresh")) is first
    release.set()
    deadline = time.monotonic() + 10
    while cache.computed < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    newer = cache.get("t", "r", 20, 0.94, tmp_path, False, lambda: pytest.fail("computed again"))
    assert newer.draws == 20 and newer.values.tolist() == [[2.0]] and len(seen) == 2
    # fewer draws than the latest (a resume cut them back) and a finished run: their own exact tables
    assert cache.get("t", "r", 5, 0.94, tmp_path, False, _costly(0.0, calls)).draws == 5
    assert cache.get("t", "r", 25, 0.94, tmp_path, True, _costly(0.0, calls)).draws == 25


def test_summary_table_counts_its_threads_cpu_time():
    theta = np.random.default_rng(1).normal(size=(4, 2000, 6))
    table = summary_table(theta, Result(theta, [f"x{j}" for j in range(6)], {}).param_blocks, 0.94)
    assert table.draws == 2000 and table.cpu_s > 0
