"""Argument checks shared by the algorithms' constructors: each raises `ArgumentError` with path ("algorithm", name)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import topology as topo
from ..errors import ArgumentError


def _bad(name: str, message: str) -> ArgumentError:
    """The error for the algorithm parameter `name`."""
    return ArgumentError(("algorithm", name), message)


def is_real(value: Any) -> bool:
    """A finite real number (not a bool)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def check_positive(name: str, value: Any, allow_none: bool = True) -> None:
    """A finite positive real (or None if allowed)."""
    if value is None and allow_none:
        return
    if not (is_real(value) and value > 0):
        raise _bad(name, f"{name} must be a positive number, got {value!r}")


def check_bool(name: str, value: Any) -> None:
    """True or False."""
    if not isinstance(value, bool):
        raise _bad(name, f"{name} must be True or False, got {value!r}")


def check_nonnegative(name: str, value: Any) -> None:
    if not (is_real(value) and value >= 0):
        raise _bad(name, f"{name} must be a non-negative number, got {value!r}")


def check_unit(name: str, value: Any, closed: bool = False) -> None:
    """A real number in (0, 1) (or (0, 1] if `closed`)."""
    if not (is_real(value) and value > 0 and (value < 1 or (closed and value == 1))):
        raise _bad(name, f"{name} must be a number in (0, {'1]' if closed else '1)'}, got {value!r}")


def check_int(name: str, value: Any, minimum: int, allow_none: bool = False) -> None:
    """An integer ≥ `minimum` (or None if allowed)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer ≥ {minimum}"
        raise _bad(name, f"{name} must be {what}{' or None' if allow_none else ''}, got {value!r}")


def check_choice(name: str, value: Any, choices: Sequence[Any]) -> None:
    if value not in choices or (isinstance(value, bool) and not any(c is value for c in choices)):
        raise _bad(name, f"{name} must be one of {tuple(choices)}, got {value!r}")


def check_init(init: Any) -> None:
    """ "map", "zeros" or something array-like (its shape is checked against the run by `check_shapes`)."""
    if isinstance(init, str):
        if init not in ("map", "zeros"):
            raise _bad("init", f"init must be 'map', 'zeros' or an array, got {init!r}")
        return
    try:
        np.asarray(init, dtype=float)
    except (TypeError, ValueError):
        raise _bad("init", f"init must be 'map', 'zeros' or an array, got {init!r}") from None


def check_topology(spec: Any) -> None:
    """A graph name of `topology.TOPOLOGIES`, a `Topology`, or an iterable of edges (checked fully when built)."""
    if isinstance(spec, (str, topo.Topology)):
        if isinstance(spec, str) and spec not in topo.TOPOLOGIES:
            raise _bad("topology", f"topology must be one of {topo.TOPOLOGIES} or a list of edges (i, j), got {spec!r}")
        return
    try:
        iter(spec)
    except TypeError:
        raise _bad(
            "topology", f"topology must be one of {topo.TOPOLOGIES} or a list of edges (i, j), got {spec!r}"
        ) from None


def check_per_shard(name: str, value: Any, integer: bool = False) -> None:
    """None, a positive number, or a 1-D sequence of positive numbers (one per shard; integers if `integer`)."""
    if value is None:
        return
    bad = _bad(name, f"{name} must be a positive {'integer' if integer else 'number'} or one per shard, got {value!r}")
    if isinstance(value, bool) or np.asarray(value).dtype == bool:
        raise bad
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise bad from None
    if arr.ndim > 1 or arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise bad
    if integer and np.any(arr != np.round(arr)):
        raise bad


def per_shard(value: Any, b: int, name: str) -> np.ndarray:
    """A scalar or per-shard parameter as b floats; ArgumentError naming it if its length is not b."""
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        return np.full(b, float(arr))
    if arr.shape != (b,):
        raise _bad(name, f"{name} must be a scalar or have one value per shard ({b}), got {arr.shape[0]} values")
    return arr.copy()
