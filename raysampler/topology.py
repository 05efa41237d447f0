"""Communication graphs for the decentralised samplers (docs/algorithms.md).

Agent i is worker i. A `Topology` is an undirected simple graph on b agents; `metropolis_weights` gives the
symmetric doubly-stochastic mixing matrix W_ij = 1/(1 + max(n_i, n_j)) for j ∈ N_i, W_ii = 1 − Σ_j W_ij.
`route` builds, for each agent, the values it may receive: its neighbours' and nobody else's.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

TOPOLOGIES = ("complete", "ring", "star", "edgeless")


@dataclass(frozen=True)
class Topology:
    """An undirected simple graph on agents 0..b−1: `neighbours[i]` sorted, `edges` sorted pairs (i < j)."""

    b: int
    neighbours: tuple[tuple[int, ...], ...]
    edges: tuple[tuple[int, int], ...]

    @property
    def degrees(self) -> np.ndarray:
        return np.array([len(n) for n in self.neighbours], dtype=int)

    @property
    def max_degree(self) -> int:
        return int(self.degrees.max()) if self.b else 0

    def laplacian(self) -> np.ndarray:
        """Graph Laplacian L = D − A (b, b)."""
        L = np.diag(self.degrees.astype(float))
        for i, j in self.edges:
            L[i, j] = L[j, i] = -1.0
        return L


def make_topology(spec: Any, b: int) -> Topology:
    """A graph on b agents: "complete", "ring", "star" (hub 0), "edgeless", or an explicit list of edges (i, j).

    Explicit edges are undirected (duplicates and (j, i) repeats merged); indices must lie in [0, b) and
    self loops are refused: ValueError naming `topology`.
    """
    if isinstance(b, bool) or not isinstance(b, numbers.Integral) or b < 1:
        raise ValueError(f"topology: the number of agents must be a positive integer, got {b!r}")
    b = int(b)
    if isinstance(spec, Topology):
        if spec.b != b:
            raise ValueError(f"topology has {spec.b} agents but there are {b} shards")
        return spec
    pairs: set[tuple[int, int]] = set()
    if isinstance(spec, str):
        if spec == "complete":
            pairs = {(i, j) for i in range(b) for j in range(i + 1, b)}
        elif spec == "ring":
            pairs = {tuple(sorted((i, (i + 1) % b))) for i in range(b)} if b > 1 else set()
            pairs = {p for p in pairs if p[0] != p[1]}
        elif spec == "star":
            pairs = {(0, j) for j in range(1, b)}
        elif spec == "edgeless":
            pairs = set()
        else:
            raise ValueError(f"topology must be one of {TOPOLOGIES} or a list of edges (i, j), got {spec!r}")
    else:
        try:
            raw = [tuple(e) for e in spec]
        except TypeError:
            raise ValueError(f"topology must be one of {TOPOLOGIES} or a list of edges (i, j), got {spec!r}") from None
        for e in raw:
            if len(e) != 2 or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in e):
                raise ValueError(f"topology: each edge must be a pair of agent indices, got {e!r}")
            i, j = int(e[0]), int(e[1])
            if not (0 <= i < b and 0 <= j < b):
                raise ValueError(f"topology: edge {e!r} names an agent outside 0..{b - 1}")
            if i == j:
                raise ValueError(f"topology: self loop {e!r} is not allowed")
            pairs.add((min(i, j), max(i, j)))
    edges = tuple(sorted(pairs))
    nbrs: list[list[int]] = [[] for _ in range(b)]
    for i, j in edges:
        nbrs[i].append(j)
        nbrs[j].append(i)
    return Topology(b, tuple(tuple(sorted(n)) for n in nbrs), edges)


def metropolis_weights(top: Topology) -> np.ndarray:
    """W (b, b): W_ij = 1/(1 + max(n_i, n_j)) on edges, 0 off the graph, W_ii = 1 − Σ_{j≠i} W_ij.

    Symmetric and doubly stochastic (rows and columns sum to one) for any graph.
    """
    deg = top.degrees
    W = np.zeros((top.b, top.b))
    for i, j in top.edges:
        W[i, j] = W[j, i] = 1.0 / (1.0 + max(deg[i], deg[j]))
    W[np.diag_indices(top.b)] = 1.0 - W.sum(axis=1)
    return W


def neighbour_values(top: Topology, i: int, values: Sequence[Any]) -> tuple[tuple[int, ...], tuple[Any, ...]]:
    """What agent i may receive: (its neighbours' indices, their values), in neighbour order. Nothing else."""
    ids = top.neighbours[i]
    return ids, tuple(values[j] for j in ids)


def route(top: Topology, values: Sequence[Any]) -> list[tuple[tuple[int, ...], tuple[Any, ...]]]:
    """For every agent i, `neighbour_values(top, i, values)`: the only channel the coordinator uses."""
    if len(values) != top.b:
        raise ValueError(f"route: got {len(values)} values for {top.b} agents")
    return [neighbour_values(top, i, values) for i in range(top.b)]
