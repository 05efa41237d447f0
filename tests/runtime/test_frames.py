"""Fixed-layout binary frames (runtime/frames.py): values of a layout cross exactly, the layout travels once per
channel, anything without a layout travels pickled, and a decoded value owns its memory."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from raysampler.algorithms.dglmc import Message, Reply, RoundMessage
from raysampler.runtime.frames import DEFINE, FRAME, HEADER, PICKLED, FrameReader, FrameWriter


class Mixed(NamedTuple):
    a: np.ndarray
    n: int
    x: float
    flag: bool
    none: Any
    nested: tuple[Any, ...]


def _send(writer: FrameWriter, reader: FrameReader, channel: Any, value: Any) -> tuple[int, Any]:
    layout, payload = writer.encode(value)
    head = writer.head(channel, layout, len(payload))
    kind, ident, def_len, size = HEADER.unpack_from(head)
    assert size == len(payload) and len(head) == HEADER.size + def_len
    return kind, reader.value(kind, ident, head[HEADER.size :], bytearray(payload))


def test_values_cross_exactly_and_the_layout_travels_once_per_channel():
    rng = np.random.default_rng(0)
    writer, readers = FrameWriter(), {"a": FrameReader(), "b": FrameReader()}
    values = [
        RoundMessage(rng.standard_normal((4, 31)), np.array([1, 3, 2], dtype=np.int64), True),
        Reply(rng.standard_normal((3, 4, 31)), rng.random((3, 4))),
        [Message(rng.standard_normal((2, 5)), 2, False), Message(rng.standard_normal((2, 5)), 1, True)],
        (True, (Reply(rng.standard_normal((2, 2, 3)), None), np.array([0.5, 0.25]))),
        Mixed(np.zeros((0, 3)), -(2**62), 1.5, False, None, (np.bool_(True), np.float64(2.0), np.int32(7))),
        Mixed(rng.integers(0, 9, (2, 2)).astype(np.int8), 3, -0.0, True, None, ()),
    ]
    for value in values:
        for channel in ("a", "b"):
            kinds = []
            for _ in range(2):
                kind, back = _send(writer, readers[channel], channel, value)
                kinds.append(kind)
                _assert_same(back, value)
            assert kinds == [DEFINE, FRAME]  # a channel is told a layout once


def test_a_value_without_a_layout_is_pickled_and_a_decoded_array_is_its_own():
    writer, reader = FrameWriter(), FrameReader()
    kind, back = _send(writer, reader, 0, ("a string", {"dict": 1}))
    assert kind == PICKLED and back == ("a string", {"dict": 1})
    first = Reply(np.ones((2, 2, 2)), np.ones((2, 2)))
    _, got = _send(writer, reader, 0, first)
    _, _ = _send(writer, reader, 0, Reply(np.zeros((2, 2, 2)), np.zeros((2, 2))))  # the writer's buffer reused
    np.testing.assert_array_equal(got.z, 1.0)  # the first decoded value is untouched
    got.z[:] = 5.0  # and writable
    assert np.all(got.z == 5.0)


def _assert_same(got: Any, want: Any) -> None:
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray) and got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            _assert_same(g, w)
    else:
        assert got == want and (want is None or isinstance(got, (bool, int, float)))
        if isinstance(want, float):
            assert np.signbit(got) == np.signbit(want)
