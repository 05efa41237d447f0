"""The release ledger: every message each shard's site sends in a run, by kind — what quantity, its shape, how many
times it was sent, how many bytes, and whether it went masked (a secure sum's term: only the sum over sites is
readable), sealed (encrypted under the site's own key: its captured state) or plain.

The coordinator records what reaches it (`LedgerBook`, at the seam where replies, set-up answers and captures come
back), so the ledger is what the site released, counted where it was received. `Ledger` is the immutable view the
run's stats, REST and the CLI show; docs/privacy.md lists what each algorithm sends.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

#: how a message went: a masked secure-sum term, a state sealed under the site's key, or in the clear
MODES = ("masked", "sealed", "plain")


class Release(NamedTuple):
    """One kind of message of one site: `quantity` (e.g. "z/rho", "local_accept", "step_time", "setup:laplace"),
    the shape of one message, how many were sent (`messages`: one per round, or half-round in a pipelined run, for a
    round's reply), their bytes in all, and `mode` (one of `MODES`)."""

    quantity: str
    shape: tuple[int, ...]
    messages: int
    bytes: int
    mode: str


class SiteLedger(NamedTuple):
    """What shard `shard` (on site `site`, None without one) sent in the run, one `Release` per kind."""

    shard: int
    site: str | None
    releases: tuple[Release, ...]

    def bytes_by_mode(self) -> dict[str, int]:
        """Bytes sent per mode (every mode of `MODES`, 0 where none)."""
        out = dict.fromkeys(MODES, 0)
        for r in self.releases:
            out[r.mode] += r.bytes
        return out

    @property
    def total_bytes(self) -> int:
        return sum(r.bytes for r in self.releases)

    @property
    def messages(self) -> int:
        return sum(r.messages for r in self.releases)


class Ledger(NamedTuple):
    """Every shard's `SiteLedger`, in shard order."""

    shards: tuple[SiteLedger, ...]

    def of_site(self, site: str) -> tuple[SiteLedger, ...]:
        """The shards of site `site` (a site label, or "shard-<i>" for shard i); ValueError naming `site` and the
        sites there are if none matches."""
        found = tuple(s for s in self.shards if s.site == site or f"shard-{s.shard}" == site)
        if not found:
            there = sorted({s.site for s in self.shards if s.site is not None})
            names = ", ".join(repr(s) for s in there) if there else "none (shards are named shard-0, shard-1, ...)"
            raise ValueError(f"site: no shard of this run is on site {site!r}; its sites: {names}")
        return found


class LedgerBook:
    """The coordinator's running ledger (mutable, like its other counters); `snapshot` gives the immutable view."""

    def __init__(self, num_shards: int, start: Ledger | None = None) -> None:
        self._rows: list[dict[tuple[str, tuple[int, ...], str], list[int]]] = [{} for _ in range(num_shards)]
        #: messages every shard sent alike (a round's block of replies, its step times): counted once for all
        self._all: dict[tuple[str, tuple[int, ...], str], list[int]] = {}
        self._layouts: dict[Any, list[tuple[tuple[str, tuple[int, ...], str], int]]] = {}
        self._list_layouts: dict[Any, list[tuple[int, tuple[str, tuple[int, ...], str], int]]] = {}
        if start is not None:
            for s in start.shards:
                if s.shard < len(self._rows):
                    for r in s.releases:
                        self._rows[s.shard][(r.quantity, r.shape, r.mode)] = [r.messages, r.bytes]

    def record(self, shard: int, quantity: str, shape: tuple[int, ...], nbytes: int, mode: str = "plain") -> None:
        """Shard `shard` sent one message of `quantity` (`shape`, `nbytes` bytes) in `mode`."""
        row = self._rows[shard].setdefault((quantity, tuple(int(v) for v in shape), mode), [0, 0])
        row[0] += 1
        row[1] += int(nbytes)

    def record_all(self, quantity: str, shape: tuple[int, ...], nbytes: int, mode: str = "plain") -> None:
        """Every shard sent one message of `quantity` (`shape`, `nbytes` bytes each) in `mode`."""
        row = self._all.setdefault((quantity, shape, mode), [0, 0])
        row[0] += 1
        row[1] += nbytes

    def record_each(self, quantity: str, values: Sequence[Any], mode: str = "plain") -> None:
        """One message of `quantity` from every shard, `values[i]` shard i's (any picklable value: its size is its
        array bytes, or its pickle's length)."""
        for i, v in enumerate(values):
            self.record(i, quantity, shape_of(v), size_of(v), mode)

    def record_replies(
        self, replies: Any, names: Mapping[str, str], masked: Sequence[str] = (), secure: bool = False
    ) -> None:
        """A round's replies (one named tuple per shard, or one block over all shards): one message per shard per
        field that is not None, named by `names` (else the field's own name); the `masked` fields count as masked
        in a secure-sums run, else plain."""
        if isinstance(replies, list):
            self._record_each_reply(replies, names, masked, secure)
            return
        signature = (type(replies), secure) + tuple(None if v is None else (v.shape, v.dtype.str) for v in replies)
        layout = self._layouts.get(signature)
        if layout is None:  # the same fields, shapes and dtypes every round: worked out once
            layout = []
            for f, value in zip(replies._fields, replies):
                if value is not None:
                    arr = np.asarray(value)
                    mode = "masked" if secure and f in masked else "plain"
                    shape = tuple(int(v) for v in arr.shape[1:])
                    layout.append(((names.get(f, f), shape, mode), arr.nbytes // max(arr.shape[0], 1)))
            self._layouts[signature] = layout
        for key, per in layout:
            row = self._all.setdefault(key, [0, 0])
            row[0] += 1
            row[1] += per

    def _record_each_reply(
        self, replies: list[Any], names: Mapping[str, str], masked: Sequence[str], secure: bool
    ) -> None:
        """One reply per shard: each reply's fields counted for its shard. Where every field is an array (or None),
        the counts depend on the fields' shapes and sizes only, which stay the same from round to round: they are
        worked out once per layout, as a block's are (the round loop pays a dictionary look-up, not a pass over every
        field of every reply)."""
        parts: list[Any] = [secure]
        for r in replies:
            parts.append(type(r))
            for v in r:
                if v is None:
                    parts.append(None)
                elif isinstance(v, np.ndarray):
                    parts.append((v.shape, v.nbytes))
                else:  # a value whose size may change: counted field by field
                    parts = []
                    break
            if not parts:
                break
        signature = tuple(parts) if parts else None
        if signature is not None:
            layout = self._list_layouts.get(signature)
            if layout is not None:
                for i, key, nbytes in layout:
                    row = self._rows[i].setdefault(key, [0, 0])
                    row[0] += 1
                    row[1] += nbytes
                return
        found: list[tuple[int, tuple[str, tuple[int, ...], str], int]] = []
        for i, reply in enumerate(replies):
            for f, value in zip(reply._fields, reply):
                if value is not None:
                    mode = "masked" if secure and f in masked else "plain"
                    key = (names.get(f, f), tuple(int(v) for v in shape_of(value)), mode)
                    found.append((i, key, size_of(value)))
        for i, key, nbytes in found:
            row = self._rows[i].setdefault(key, [0, 0])
            row[0] += 1
            row[1] += nbytes
        if signature is not None:
            self._list_layouts[signature] = found

    def snapshot(self, sites: Sequence[str | None]) -> Ledger:
        """The ledger so far, shard i on site `sites[i]`."""
        out = []
        for i, (site, rows) in enumerate(zip(sites, self._rows)):
            merged = {k: list(v) for k, v in rows.items()}
            for k, (n, b) in self._all.items():
                row = merged.setdefault(k, [0, 0])
                row[0] += n
                row[1] += b
            out.append(SiteLedger(i, site, tuple(Release(q, s, n, b, m) for (q, s, m), (n, b) in merged.items())))
        return Ledger(tuple(out))


def shape_of(value: Any) -> tuple[int, ...]:
    """An array's shape; () for anything else."""
    return tuple(value.shape) if isinstance(value, np.ndarray) else ()


def size_of(value: Any) -> int:
    """An array's bytes, a number's 8, bytes' length; anything else its pickle's length (what a trip carries)."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, (float, int, np.floating, np.integer)):
        return 8
    if isinstance(value, bytes):
        return len(value)
    return len(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


def ledger_dict(ledger: Ledger) -> list[dict[str, Any]]:
    """The ledger as plain data (`RunStats.as_dict`, JSON): per shard its site, totals and releases."""
    return [
        {
            "shard": s.shard,
            "site": s.site,
            "messages": s.messages,
            "bytes": s.total_bytes,
            "bytes_by_mode": s.bytes_by_mode(),
            "releases": [r._asdict() | {"shape": list(r.shape)} for r in s.releases],
        }
        for s in ledger.shards
    ]
