"""What every resource's schema shares: the names the engine knows (model families, algorithms, built-in data sets),
the limits on ids, tags and seeds, small field types, and the error body."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from ... import datasets as rs_datasets
from ...algorithms import ALGORITHMS
from ...models import FAMILIES
from ...names import ID_PATTERN
from ...options import RunOptions

TAG_KEY_PATTERN = ID_PATTERN  # a run tag's key (its value is free text)


MAX_TAGS = 32


SEED_MAX = 2**63 - 1  # a run's seed is stored as a signed 64-bit integer


BUILTIN_PREFIX = "builtin:"


MODEL_FAMILIES: tuple[str, ...] = tuple(sorted(FAMILIES))


ALGORITHM_NAMES: tuple[str, ...] = tuple(sorted(ALGORITHMS))


BUILTIN_DATASETS: tuple[str, ...] = tuple(BUILTIN_PREFIX + name for name in rs_datasets.available())


RUN = RunOptions()  # the engine's defaults for a run's length and bookkeeping


def one_of(value: str, valid: tuple[str, ...], what: str) -> str:
    if value not in valid:
        raise ValueError(f"unknown {what} {value!r}; valid: {', '.join(valid)}")
    return value


PositiveFloat = Annotated[float, Field(gt=0)]


#: A column of the data set, by name (per-row inputs that are not features).
ColumnName = Annotated[str, Field(min_length=1, max_length=256)]


class ErrorMessage(BaseModel):
    """The body of an error response other than 422."""

    detail: str


#: Most rows a predict request may carry inline (larger sets: upload them and give dataset_id).
MAX_INLINE_ROWS = 10_000


#: How many posterior draws a check uses: at most this many (thinned evenly within each chain), or "all".
DrawsChoice = Annotated[int, Field(ge=1, le=1_000_000)] | Literal["all"]


DRAWS_DOC = 'posterior draws used: at most this many, thinned evenly within each chain, or "all" (every stored draw)'
