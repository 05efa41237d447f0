"""Draws as the SDK reads them off the NDJSON stream: `DrawBatch` (the lines one chunk of text completed),
`DrawStream` (where a stream stands, so that a dropped one resumes at its offset) and `assemble` (the whole array)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..wire import DrawLine, DrawsHeader, LineSplitter, parse_draw_stream_line


@dataclass
class DrawBatch:
    """Consecutive draw lines of a stream: offset of the first, and per line its chain, index and values (n, d)."""

    offset: int
    chain: np.ndarray
    index: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.chain)

    @classmethod
    def of(cls, lines: list[DrawLine]) -> DrawBatch:
        return cls(
            offset=lines[0].offset,
            chain=np.array([line.chain for line in lines]),
            index=np.array([line.index for line in lines]),
            values=np.array([line.values for line in lines], dtype=float),
        )


@dataclass
class DrawStream:
    """Where a draw stream stands: the header, the offset to resume from, and the unfinished tail of the text."""

    offset: int
    header: DrawsHeader | None = None
    splitter: LineSplitter = field(default_factory=LineSplitter)

    def feed(self, text: str) -> DrawBatch | None:
        """The draw lines `text` completes, as a batch (None if it completes none)."""
        lines: list[DrawLine] = []
        for raw in self.splitter.feed(text):
            parsed = parse_draw_stream_line(raw)
            if isinstance(parsed, DrawsHeader):
                self.header = parsed
            else:
                lines.append(parsed)
        if not lines:
            return None
        self.offset = lines[-1].offset + 1
        return DrawBatch.of(lines)

    def reopen(self) -> None:
        """A new connection starts at a line boundary: drop the tail the dropped one left."""
        self.splitter = LineSplitter()


def assemble(header: DrawsHeader | None, batches: list[DrawBatch]) -> np.ndarray:
    """(chains, draws, d) from complete lines (a trailing partial index is dropped)."""
    if header is None:
        raise RuntimeError("the draw stream ended before its header line")
    chains, d = header.chains, header.dim or 0
    if not batches:
        return np.empty((chains, 0, d))
    values = np.concatenate([b.values for b in batches])
    n = len(values) // chains
    return np.ascontiguousarray(values[: n * chains].reshape(n, chains, d).transpose(1, 0, 2))
