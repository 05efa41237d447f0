"""Generic stacking of worker states (`raysampler.algorithms.stacking`): batches of one joined along the shard axis
and split back unchanged, static parts in the key; and the batching hooks it replaced are refused by name."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytest

from raysampler.algorithms import Algorithm, stacking


class Inner(NamedTuple):
    a: np.ndarray
    pending: tuple[np.ndarray, np.ndarray | None] | None


class State(NamedTuple):
    kind: str
    plain: bool
    inner: Inner
    z: np.ndarray
    report: None = None


def _one(seed: int, plain: bool = True) -> State:
    rng = np.random.default_rng(seed)
    pending = (rng.normal(size=(1, 2, 3)), None)
    return State("k", plain, Inner(rng.normal(size=(1, 4)), pending), rng.normal(size=(1, 3, 2)))


def test_states_stack_along_the_shard_axis_and_split_back_bit_for_bit() -> None:
    states = [_one(s) for s in range(3)]
    batch = stacking.stack(states)
    assert batch.z.shape == (3, 3, 2) and batch.inner.a.shape == (3, 4) and batch.inner.pending[1] is None
    assert stacking.shards(batch) == 3 and batch.kind == "k" and batch.report is None
    for alone, back in zip(states, stacking.unstack(batch)):
        assert type(back) is State and back.kind == alone.kind
        np.testing.assert_array_equal(back.z, alone.z)
        np.testing.assert_array_equal(back.inner.a, alone.inner.a)
        np.testing.assert_array_equal(back.inner.pending[0], alone.inner.pending[0])


def test_the_key_holds_static_parts_and_shapes_past_the_shard_axis() -> None:
    assert stacking.stack_key(_one(0)) == stacking.stack_key(_one(1))
    assert stacking.stack_key(_one(0)) != stacking.stack_key(_one(0, plain=False))
    wider = _one(0)._replace(z=np.zeros((1, 3, 5)))
    assert stacking.stack_key(wider) != stacking.stack_key(_one(0))


@pytest.mark.parametrize("hook", ["stack_key", "batch_keys", "stack_states", "unstack_states", "split_stacked"])
def test_an_algorithm_defining_a_replaced_batching_hook_is_told_what_replaced_it(hook: str) -> None:
    with pytest.raises(TypeError, match=rf"no longer has {hook}\(\).*(stacking|batch_keys)"):
        type("Custom", (Algorithm,), {hook: lambda self, *a: None})
