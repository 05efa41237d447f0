"""How a model's parameter vector is laid out and reported: `ParamBlock` (a named run of θ's coordinates, its dims,
labels and the transform to the reported scale), the correlation-matrix parametrisation its "cholesky_corr" blocks use,
and the joining of the shards' local blocks (group effects) into the run's."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: How a parameter block is reported: as sampled, exp of the sampled value (positive parameters, sampled on the
#: log scale), the logistic function (probabilities), or "cholesky_corr": the block holds the partial correlations
#: of a correlation matrix's Cholesky factor, unconstrained (`cholesky_factor`), and reports the correlations (the
#: whole block maps together, not coordinate by coordinate), or "group_scale": a group factor's non-centred
#: effects z (levels × effects, `dim` the factor), reported as r = diag(sd) L z per level from the blocks
#: `sd_<dim>` (log sd, sampled) and, for correlated effects, `cor_<dim>` (L's partial correlations) of the same θ.
TRANSFORMS = ("identity", "exp", "sigmoid", "cholesky_corr", "group_scale")


def correlation_pairs(q: int) -> list[tuple[int, int]]:
    """The pairs (a, b), a < b, of a q × q correlation matrix in brms' order: (0, 1), (0, 2), …, (1, 2), …"""
    return [(a, b) for a in range(q) for b in range(a + 1, q)]


def correlation_size(c: int) -> int:
    """q from the number c = q(q − 1)/2 of a q × q correlation matrix's pairs."""
    q = int(round((1.0 + np.sqrt(1.0 + 8.0 * c)) / 2.0))
    if q * (q - 1) // 2 != c:
        raise ValueError(f"{c} is not the number of pairs of a correlation matrix")
    return q


def cholesky_factor(y: np.ndarray, q: int) -> np.ndarray:
    """The Cholesky factors L (..., q, q) of correlation matrices from unconstrained coordinates y (..., q(q−1)/2),
    one per pair (a, b) of `correlation_pairs`: z = tanh(y) is the canonical partial correlation at L[b, a], and
    L[b, j] = z_bj Π_{k<j} √(1 − z_bk²), L[b, b] = Π_{k<b} √(1 − z_bk²) (each row has unit length)."""
    y = np.asarray(y, dtype=np.float64)
    L = np.zeros(y.shape[:-1] + (q, q))
    L[..., 0, 0] = 1.0
    z = np.tanh(y)
    c = np.sqrt(np.maximum(1.0 - z * z, 0.0))
    where = {pair: k for k, pair in enumerate(correlation_pairs(q))}
    for b in range(1, q):
        prod = np.ones(y.shape[:-1])
        for j in range(b):
            k = where[(j, b)]
            L[..., b, j] = z[..., k] * prod
            prod = prod * c[..., k]
        L[..., b, b] = prod
    return L


def correlations(y: np.ndarray) -> np.ndarray:
    """The correlations (..., c) in `correlation_pairs` order of the matrices whose Cholesky factors `y` describes."""
    q = correlation_size(np.shape(y)[-1])
    L = cholesky_factor(y, q)
    omega = L @ np.swapaxes(L, -1, -2)
    return np.stack([omega[..., a, b] for a, b in correlation_pairs(q)], axis=-1)


@dataclass(frozen=True)
class ParamBlock:
    """A named run of consecutive coordinates of θ: one model parameter as reported (an ArviZ variable).

    `dim` names the block's dimension (None: a scalar, size 1) and `labels` its coordinates (None: 0..size−1); a
    scalar may keep one label for its flat name (`sd_hospital[(Intercept)]`: shape (), no ArviZ dim);
    `transform` says how a sampled value maps to the reported one ("exp": sampled as log σ, reported as σ).
    E.g. linear regression: ParamBlock("beta", p, "coef", ("(Intercept)", "age", …), "identity"),
    ParamBlock("sigma", 1, None, None, "exp"). Frozen and picklable; `as_dict`/`from_dict` for JSON stores.
    """

    name: str
    size: int
    dim: str | None = None
    labels: tuple[str, ...] | None = None
    transform: str = "identity"
    #: a second dimension (a matrix parameter such as group effects `r_hospital[H12,(Intercept)]`): its name and
    #: labels; the block's `size` coordinates are then row-major over (labels, inner_labels)
    inner_dim: str | None = None
    inner_labels: tuple[str, ...] | None = None
    #: the first dim's labels are numbers (group labels of a numeric column, written as `groups.group_label` writes
    #: them): exports and tables give them back as numbers, so `.sel(county=7)` finds county 7
    numeric: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"ParamBlock: name must be a non-empty string, got {self.name!r}")
        if isinstance(self.size, bool) or not isinstance(self.size, (int, np.integer)) or self.size < 1:
            raise ValueError(f"ParamBlock {self.name!r}: size must be an integer >= 1, got {self.size!r}")
        object.__setattr__(self, "size", int(self.size))
        if self.dim is None and self.size != 1:
            raise ValueError(f"ParamBlock {self.name!r}: a block of size {self.size} needs a dim name")
        if self.inner_dim is not None:
            if self.dim is None or self.labels is None or not self.inner_labels:
                raise ValueError(f"ParamBlock {self.name!r}: a second dim needs dim, labels and inner_labels")
            inner = tuple(str(v) for v in self.inner_labels)
            if len(self.labels) * len(inner) != self.size:
                raise ValueError(
                    f"ParamBlock {self.name!r}: {len(self.labels)} × {len(inner)} labels for size {self.size}"
                )
            object.__setattr__(self, "labels", tuple(str(v) for v in self.labels))
            object.__setattr__(self, "inner_labels", inner)
        elif self.labels is not None:
            labels = tuple(str(v) for v in self.labels)
            if len(labels) != self.size:
                raise ValueError(f"ParamBlock {self.name!r}: {len(labels)} labels for size {self.size}")
            object.__setattr__(self, "labels", labels)
        if self.transform not in TRANSFORMS:
            raise ValueError(f"ParamBlock {self.name!r}: transform must be one of {TRANSFORMS}, got {self.transform!r}")
        if self.transform == "group_scale" and self.inner_labels is None:
            raise ValueError(f"ParamBlock {self.name!r}: a group_scale block needs dim, labels and inner_labels")

    def coords(self) -> list[str]:
        """The labels of the block's (first) dimension (0..size−1 as strings when it has none)."""
        return list(self.labels) if self.labels is not None else [str(j) for j in range(self.size)]

    def coord_values(self) -> list[Any]:
        """The first dimension's labels as exports give them: numbers for a `numeric` block (ints where integral),
        else `coords()`."""
        if not self.numeric:
            return self.coords()
        return [int(c) if c.lstrip("-").isdigit() else float(c) for c in self.coords()]

    @property
    def shape(self) -> tuple[int, ...]:
        """The parameter's shape per draw: () for a scalar, (size,), or (rows, columns) with a second dim."""
        if self.dim is None:
            return ()
        if self.inner_labels is not None:
            return (self.size // len(self.inner_labels), len(self.inner_labels))
        return (self.size,)

    def dims(self) -> list[str]:
        """The parameter's dimension names (ArviZ dims): [], [dim] or [dim, inner_dim]."""
        return [d for d in (self.dim, self.inner_dim) if d is not None]

    def names(self) -> list[str]:
        """Flat names of the block's coordinates: `name` for a scalar (`name[label]` with its one label),
        `name[label]`, or `name[label,inner]`."""
        if self.dim is None:
            return [self.name] if self.labels is None else [f"{self.name}[{self.labels[0]}]"]
        if self.inner_labels is not None:
            return [f"{self.name}[{c},{e}]" for c in self.coords() for e in self.inner_labels]
        return [f"{self.name}[{c}]" for c in self.coords()]

    @property
    def elementwise(self) -> bool:
        """Whether each coordinate's reported value depends on that coordinate alone (not for "cholesky_corr" with
        more than one pair, nor for "group_scale", which reads its factor's scale blocks)."""
        if self.transform == "group_scale":
            return False
        return self.transform != "cholesky_corr" or self.size == 1

    def natural(self, values: np.ndarray) -> np.ndarray:
        """Sampled values → reported values (exp for a log-scale block, the logistic function for a logit-scale one,
        correlations for a Cholesky factor's partial correlations: then `values` is the whole block, (..., size),
        unless the block is `elementwise`). A "group_scale" block needs its factor's scales: `natural_values`."""
        if self.transform == "group_scale":
            raise ValueError(
                f"ParamBlock {self.name!r}: its reported values need the scale blocks of {self.dim!r} "
                "(natural_values or natural_coordinate)"
            )
        if self.transform == "exp":
            return np.exp(values)
        if self.transform == "sigmoid":
            return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(values)))  # expit, without overflow warnings
        if self.transform == "cholesky_corr":
            return np.tanh(values) if self.size == 1 else correlations(values)
        return values

    def as_dict(self) -> dict:
        """The block as JSON-ready values (the service's stores)."""
        return {
            "name": self.name,
            "size": self.size,
            "dim": self.dim,
            "labels": None if self.labels is None else list(self.labels),
            "transform": self.transform,
            "inner_dim": self.inner_dim,
            "inner_labels": None if self.inner_labels is None else list(self.inner_labels),
            "numeric": self.numeric,
        }

    @classmethod
    def from_dict(cls, d: Any) -> ParamBlock:
        """The block `as_dict` wrote."""
        return cls(
            d["name"],
            d["size"],
            d.get("dim"),
            None if d.get("labels") is None else tuple(d["labels"]),
            d.get("transform", "identity"),
            d.get("inner_dim"),
            None if d.get("inner_labels") is None else tuple(d["inner_labels"]),
            bool(d.get("numeric", False)),
        )


def join_local_blocks(per_shard: Sequence[Sequence[ParamBlock]]) -> tuple[tuple[ParamBlock, ...], tuple[int, ...]]:
    """The shards' local blocks (`Model.local_blocks`, shard order) → one block per name (in order of first
    appearance), joined along the first dim with its labels sorted (numbers numerically), and the order taking the
    shards' concatenated local coordinates to the joined blocks' coordinates. Unlabelled rows get "<shard>.<j>"."""
    parts: dict[str, list[tuple[int, ParamBlock, int]]] = {}
    offset = 0
    for i, blocks in enumerate(per_shard):
        for b in blocks:
            parts.setdefault(b.name, []).append((i, b, offset))
            offset += b.size
    joined: list[ParamBlock] = []
    order: list[int] = []
    for name, items in parts.items():
        first = items[0][1]
        shape = (first.dim, first.transform, first.inner_dim, first.inner_labels)
        if any((b.dim, b.transform, b.inner_dim, b.inner_labels) != shape for _, b, _ in items):
            raise ValueError(f"local parameter block {name!r} differs between shards (dims, transform or labels)")
        rows: list[tuple[str, list[int]]] = []  # (label, its coordinates in the shards' concatenation)
        for i, b, off in items:
            width = len(b.inner_labels) if b.inner_labels is not None else 1
            labels = b.coords() if b.labels is not None else [f"{i}.{j}" for j in range(len(b.coords()))]
            rows += [(lab, list(range(off + k * width, off + (k + 1) * width))) for k, lab in enumerate(labels)]
        rows.sort(key=lambda row: _label_key(row[0]))
        size = sum(b.size for _, b, _ in items)
        numeric = all(b.numeric for _, b, _ in items)
        joined.append(
            ParamBlock(name, size, first.dim or "local", tuple(r[0] for r in rows), first.transform,
                       first.inner_dim, first.inner_labels, numeric)
        )  # fmt: skip
        for _, coords in rows:
            order.extend(coords)
    return tuple(joined), tuple(order)


def _label_key(label: str) -> tuple[int, float, str]:
    """Sort key of a label: numbers in numeric order first, then other labels in string order."""
    try:
        return (0, float(label), label)
    except ValueError:
        return (1, 0.0, label)


def natural_values(blocks: Sequence[ParamBlock], theta: np.ndarray) -> np.ndarray:
    """θ values (..., d) → the same array with every block on its natural scale (σ = exp(log σ)); θ itself when
    no block is transformed. A "group_scale" block reads its factor's scale blocks from θ as sampled."""
    if all(b.transform == "identity" for b in blocks):
        return theta
    raw = np.asarray(theta, dtype=np.float64)
    out = np.array(raw, copy=True)
    starts = _starts(blocks)
    for b in blocks:
        start = starts[b.name]
        if b.transform == "group_scale":
            out[..., start : start + b.size] = _scaled_effects(blocks, starts, b, lambda j: raw[..., j])
        else:
            out[..., start : start + b.size] = b.natural(out[..., start : start + b.size])
    return out


def natural_coordinate(blocks: Sequence[ParamBlock], coordinate: int, read: Callable[[int], np.ndarray]) -> np.ndarray:
    """θ's `coordinate` on its natural scale from `read(j)`, which gives coordinate j's sampled values (any shape,
    the same for every j): one column of stored draws without reading the others, except the coordinates a
    non-elementwise block's value depends on (a correlation block; a factor's scales for its effects)."""
    starts = _starts(blocks)
    for b in blocks:
        start = starts[b.name]
        if not start <= coordinate < start + b.size:
            continue
        k = coordinate - start
        if b.transform == "group_scale":
            assert b.inner_labels is not None
            q = len(b.inner_labels)
            level = k // q
            sub = dataclasses.replace(b, size=q, labels=(b.coords()[level],))
            values = _scaled_effects(blocks, starts, sub, read, first=start + level * q)
            return values[..., k % q]
        if b.elementwise:
            return b.natural(read(coordinate))
        whole = np.stack([read(start + j) for j in range(b.size)], axis=-1)
        return b.natural(whole)[..., k]
    return read(coordinate)


def _starts(blocks: Sequence[ParamBlock]) -> dict[str, int]:
    """Each block's first coordinate in θ, by name."""
    out, start = {}, 0
    for b in blocks:
        out[b.name] = start
        start += b.size
    return out


def _scaled_effects(
    blocks: Sequence[ParamBlock],
    starts: dict[str, int],
    block: ParamBlock,
    read: Callable[[int], np.ndarray],
    first: int | None = None,
) -> np.ndarray:
    """A "group_scale" block's r = diag(sd) L z per level (..., size), z read from `first` (the block's start by
    default), sd = exp of block `sd_<dim>` and L from block `cor_<dim>` (the identity without one)."""
    assert block.inner_labels is not None and block.dim is not None
    q = len(block.inner_labels)
    by_name = {b.name: b for b in blocks}
    sd_block = by_name.get(f"sd_{block.dim}")
    if sd_block is None or sd_block.size != q:
        raise ValueError(f"ParamBlock {block.name!r}: the layout has no block sd_{block.dim} of size {q}")
    at = starts[block.name] if first is None else first
    z = np.stack([read(at + j) for j in range(block.size)], axis=-1)
    lead = z.shape[:-1]
    z = z.reshape(lead + (block.size // q, q))
    sd = np.exp(np.stack([read(starts[sd_block.name] + j) for j in range(q)], axis=-1))
    cor = by_name.get(f"cor_{block.dim}")
    if cor is not None:
        y = np.stack([read(starts[cor.name] + j) for j in range(cor.size)], axis=-1)
        z = (cholesky_factor(y, q)[..., None, :, :] @ z[..., None])[..., 0]
    return (sd[..., None, :] * z).reshape(lead + (block.size,))


def block_names(blocks: Sequence[ParamBlock]) -> list[str]:
    """Flat parameter names of a layout, in θ order."""
    return [n for b in blocks for n in b.names()]
