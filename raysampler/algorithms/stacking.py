"""Worker states of several shards as one batch, for any algorithm: a state is a named tuple (or tuple) whose arrays
carry a leading shard axis, one shard's state being a batch of one.

Stacking concatenates every array along that axis; unstacking slices it back, one shard at a time. Everything else
in a state (None, numbers, strings, flags) is static: it must be equal across the shards of a batch, so it is part of
`stack_key`, with the arrays' shapes past the shard axis and their dtypes. The runtime stacks states only for an
algorithm whose `round_message` sends one message for all shards (`runtime.batches`); its `step_stacked` then steps
a stack exactly as it steps each shard alone.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, TypeVar

import numpy as np

S = TypeVar("S")


def stack(states: Sequence[S]) -> S:
    """One batch state from several (each a batch itself, usually of one shard): arrays joined along the shard
    axis, static parts taken from the first (they are equal: `stack_key`)."""
    return _stack(list(states))


def _stack(states: list[Any]) -> Any:
    first = states[0]
    if len(states) == 1:
        return first
    if isinstance(first, np.ndarray):
        return np.concatenate(states)
    if isinstance(first, tuple):
        parts = [_stack(list(p)) for p in zip(*states)]
        return type(first)(*parts) if hasattr(first, "_fields") else type(first)(parts)
    return first


def unstack(state: S) -> list[S]:
    """A batch state as one batch state per shard (views on its arrays), in shard order."""
    return [take(state, j) for j in range(shards(state))]


def take(state: S, j: int) -> S:
    """Shard j of a batch state, as a batch of one (views)."""
    return _take(state, j)


def _take(value: Any, j: int) -> Any:
    if isinstance(value, np.ndarray):
        return value[j : j + 1]
    if isinstance(value, tuple):
        parts = [_take(v, j) for v in value]
        return type(value)(*parts) if hasattr(value, "_fields") else type(value)(parts)
    return value


def shards(state: Any) -> int:
    """How many shards a batch state holds: its first array's leading axis (1 for a state without arrays)."""
    found = _first_array(state)
    return 1 if found is None else int(found.shape[0])


def _first_array(state: Any) -> np.ndarray | None:
    if isinstance(state, np.ndarray):
        return state
    if isinstance(state, tuple):
        for value in state:
            found = _first_array(value)
            if found is not None:
                return found
    return None


def stack_key(state: Any) -> Hashable:
    """What states must share to be stacked: their structure, static parts, and arrays' shapes past the shard axis
    and dtypes."""
    if isinstance(state, np.ndarray):
        return ("array", state.shape[1:], state.dtype.str)
    if isinstance(state, tuple):
        return (type(state).__qualname__, tuple(stack_key(v) for v in state))
    if isinstance(state, Hashable):
        return ("static", state)
    return ("static", id(state))  # an unhashable static part: shards never share it
