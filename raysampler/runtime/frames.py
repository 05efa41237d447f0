"""Fixed-layout binary frames: how a round's messages and replies cross a channel without pickling each one.

A round's message has the same structure every round (a named tuple of arrays and scalars, or a list of them: the
same fields, dtypes and shapes), only its numbers change. A `Layout` is that structure, found once from a first
value: every leaf (array, int, float, bool, None) gets a fixed offset in a flat payload. A value that fits the layout
is encoded by copying each leaf's bytes to its offset in a preallocated buffer; the receiver rebuilds it as views on
one copy of the payload (one allocation per message, whatever its size). The layout itself travels once per channel,
pickled, before the first frame that uses it; anything that fits no layout (a `Failure`, a string) travels pickled.

A frame is a header (kind, layout id, definition length, payload length), the layout's definition if this channel has
not had it, then the payload; the receiver copies the payload once into a buffer of its own, aligned for the arrays.
"""

from __future__ import annotations

import itertools
import pickle
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: frame kinds: a payload in a layout the receiver knows, the same preceded by the layout's definition, a pickle
FRAME, DEFINE, PICKLED = 0, 1, 2
#: kind, layout id, definition bytes, payload bytes
HEADER = struct.Struct("<BIIQ")
_SCALARS = {"i": struct.Struct("<q"), "f": struct.Struct("<d"), "b": struct.Struct("<?")}
_ids = itertools.count(1)


class Unencodable(TypeError):
    """A value with a part no layout describes (an object, a string, an integer beyond 64 bits)."""


def _signature(obj: Any, leaves: list[Any], sig: list[Any]) -> None:
    """Append obj's leaves to `leaves` and its structure (types, dtypes, shapes) to `sig`, depth first."""
    t = type(obj)
    if t is np.ndarray:
        if obj.dtype.hasobject:
            raise Unencodable("object array")
        leaves.append(obj)
        sig.append((obj.dtype.str, obj.shape))
    elif t is float or t is np.float64:
        leaves.append(obj)
        sig.append("f")
    elif t is bool or t is np.bool_:
        leaves.append(obj)
        sig.append("b")
    elif t is int or isinstance(obj, np.integer):
        if not -(2**63) <= obj < 2**63:
            raise Unencodable("integer beyond 64 bits")
        leaves.append(obj)
        sig.append("i")
    elif obj is None:
        sig.append(None)
    elif isinstance(obj, (tuple, list)):
        sig.append((t, len(obj)))
        for item in obj:
            _signature(item, leaves, sig)
    else:
        raise Unencodable(t.__name__)


@dataclass
class Layout:
    """A value's structure with a fixed offset for each leaf; `id` names it on every channel of this process."""

    signature: tuple[Any, ...]
    size: int = 0
    id: int = field(default_factory=lambda: next(_ids))
    #: per leaf: (offset, kind "a"/"i"/"f"/"b", dtype, shape, bytes)
    slots: list[tuple[int, str, Any, tuple[int, ...], int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._build = _builder(self.signature, [0])
        offset = 0
        for entry in self.signature:
            if entry is None or (isinstance(entry, tuple) and isinstance(entry[0], type)):
                continue
            if isinstance(entry, str):
                nbytes = _SCALARS[entry].size
                self.slots.append((offset, entry, None, (), nbytes))
            else:
                dtype, shape = np.dtype(entry[0]), entry[1]
                nbytes = int(dtype.itemsize * int(np.prod(shape, dtype=np.int64)))
                self.slots.append((offset, "a", dtype, shape, nbytes))
            offset += -(-nbytes // 8) * 8  # keep every array 8-byte aligned
        self.size = offset

    def definition(self) -> bytes:
        """What the receiver needs to read frames of this layout (pickled once per channel)."""
        return pickle.dumps((self.id, self.signature), protocol=5)

    @classmethod
    def from_definition(cls, data: bytes | bytearray) -> Layout:
        ident, signature = pickle.loads(data)
        return cls(signature, id=ident)

    def buffer(self) -> tuple[bytearray, list[Any]]:
        """A payload buffer of this layout, with a writable array view on each array slot (encode's targets)."""
        buf = bytearray(self.size)
        views = [
            np.ndarray(shape, dtype, buf, offset) if kind == "a" else None
            for offset, kind, dtype, shape, _ in self.slots
        ]
        return buf, views

    def encode_into(self, leaves: list[Any], buf: bytearray, views: list[Any]) -> None:
        """Copy each leaf to its slot of `buf` (`views`: `buffer`'s array views on it)."""
        for (offset, kind, _, _, _), view, leaf in zip(self.slots, views, leaves):
            if view is not None:
                view[...] = leaf
            else:
                _SCALARS[kind].pack_into(buf, offset, leaf)

    def decode(self, payload: bytearray) -> Any:
        """The value, its arrays views on `payload` (which the caller hands over: nothing else may reuse it)."""
        leaves = [
            np.ndarray(shape, dtype, payload, offset) if kind == "a" else _SCALARS[kind].unpack_from(payload, offset)[0]
            for offset, kind, dtype, shape, _ in self.slots
        ]
        return self._build(iter(leaves))


def _builder(signature: tuple[Any, ...], pos: list[int]) -> Callable[[Iterator[Any]], Any]:
    """A function rebuilding the value at `signature[pos[0]]` from an iterator over the leaves (made once per layout,
    so decoding walks no signature)."""
    entry = signature[pos[0]]
    pos[0] += 1
    if entry is None:
        return lambda leaves: None
    if isinstance(entry, tuple) and isinstance(entry[0], type):
        cls, n = entry
        parts = [_builder(signature, pos) for _ in range(n)]
        if cls is tuple:
            return lambda leaves: tuple([part(leaves) for part in parts])
        if cls is list:
            return lambda leaves: [part(leaves) for part in parts]
        return lambda leaves: cls(*[part(leaves) for part in parts])  # a named tuple
    return next


class FrameWriter:
    """Encodes values into frames, reusing one layout and one buffer per structure seen; remembers which layouts each
    channel (any hashable key) has been told about."""

    def __init__(self) -> None:
        self._layouts: dict[tuple[Any, ...], Layout] = {}
        self._buffers: dict[int, tuple[bytearray, list[Any]]] = {}
        self._told: set[tuple[Any, int]] = set()

    def encode(self, value: Any) -> tuple[Layout | None, bytes | bytearray]:
        """(layout, payload) — the payload a buffer reused by the next value of the same layout — or (None, pickle)."""
        leaves: list[Any] = []
        sig: list[Any] = []
        try:
            _signature(value, leaves, sig)
        except Unencodable:
            return None, pickle.dumps(value, protocol=5)
        key = tuple(sig)
        layout = self._layouts.get(key)
        if layout is None:
            layout = self._layouts[key] = Layout(key)
            self._buffers[layout.id] = layout.buffer()
        buf, views = self._buffers[layout.id]
        layout.encode_into(leaves, buf, views)
        return layout, buf

    def head(self, channel: Any, layout: Layout | None, payload_bytes: int) -> bytes:
        """What goes before the payload on `channel`: the header, and the layout's definition the first time this
        channel meets it."""
        if layout is None:
            return HEADER.pack(PICKLED, 0, 0, payload_bytes)
        if (channel, layout.id) in self._told:
            return HEADER.pack(FRAME, layout.id, 0, payload_bytes)
        self._told.add((channel, layout.id))
        definition = layout.definition()
        return HEADER.pack(DEFINE, layout.id, len(definition), payload_bytes) + definition

    def forget(self, channel: Any) -> None:
        """A channel closed: its receiver's layouts went with it."""
        self._told = {(c, i) for c, i in self._told if c != channel}


class FrameReader:
    """Reads the frames of one channel (it keeps the layouts that channel's writer defined)."""

    def __init__(self) -> None:
        self._layouts: dict[int, Layout] = {}

    def value(self, kind: int, ident: int, definition: bytes | bytearray, payload: bytearray) -> Any:
        """The value of a frame whose header said (kind, ident), from its definition (empty unless kind is DEFINE)
        and its payload, which the reader owns from now on (the value's arrays are views on it)."""
        if kind == PICKLED:
            return pickle.loads(payload)
        if kind == DEFINE:
            self._layouts[ident] = Layout.from_definition(definition)
        return self._layouts[ident].decode(payload)
