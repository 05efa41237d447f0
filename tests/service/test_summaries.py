"""Posterior summaries that scale (issue 24): the fast table equals arviz-stats' own `summary`; the cache computes a
key once (concurrent requests wait for it), keeps a finished run's table next to its draws, and forgets a run on
resume and delete."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from raysampler.models.base import ParamBlock
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
    cache = SummaryCache(max_entries=2)
    for n in range(5):
        cache.get("t", "r", n, 0.94, tmp_path, False, _table)
    assert cache.computed == 5
    cache.get("t", "r", 4, 0.94, tmp_path, False, lambda: pytest.fail("the newest entry was evicted"))
    cache.get("t", "r", 0, 0.94, tmp_path, False, _table)
    assert cache.computed == 6
