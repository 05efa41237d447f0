"""What each part of raysampler needs beyond `pip install raysampler`, and the error that says which extra brings it.

    pip install raysampler                # the SDK (raysampler.sdk, raysampler.client) and the CLI's client commands
    pip install "raysampler[engine]"      # rs.sample, rs.models, rs.evaluate ...: Ray, scipy, ArviZ, pyarrow, ...
    pip install "raysampler[service]"     # `raysampler serve` and the app (raysampler.api): the engine and FastAPI
    pip install "raysampler[privacy]"     # secure sums and the DP mode: the engine, cryptography and dp-accounting
    pip install "raysampler[all]"         # all three: what the README's first command installs

The engine's packages (`models`, `algorithms`, `runtime`, `tuning`, `evaluation`) start with
`from ..extras import engine`, the service's (`service`, `api`) with `from ..extras import service`: importing that
module is the check, and it raises `MissingExtraError` naming the extra to install where a module of it is missing.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Iterable, Sequence

#: extra → the modules it brings, by import name (tests/test_packaging.py checks them against pyproject.toml's extras)
EXTRAS: dict[str, tuple[str, ...]] = {
    "engine": (
        "ray",
        "scipy",
        "sklearn",
        "threadpoolctl",
        "pydantic",
        "pydantic_settings",
        "arviz_base",
        "arviz_stats",
        "xarray_einstats",
        "xarray",
        "h5netcdf",
        "h5py",
        "pyarrow",
        "formulae",
    ),
    "service": ("fastapi", "uvicorn", "python_multipart", "prometheus_client"),
    "privacy": ("cryptography", "dp_accounting"),
}
#: extra → the extras it includes (`raysampler[service]` brings the engine too)
INCLUDES: dict[str, tuple[str, ...]] = {"engine": (), "service": ("engine",), "privacy": ("engine",)}


class MissingExtraError(ModuleNotFoundError):
    """A part of raysampler used where its extra is not installed: the message names `pip install "raysampler[X]"`.
    `extra` is that extra, `name` (as ModuleNotFoundError's) the first missing module."""

    def __init__(self, extra: str, what: str, missing: Sequence[str]) -> None:
        absent = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        super().__init__(
            f'{what} needs the "{extra}" extra, which this install does not have (no {absent}): '
            f'pip install "raysampler[{extra}]"',
            name=missing[0],
        )
        self.extra = extra
        self.what = what


@functools.cache
def missing(extra: str) -> tuple[str, ...]:
    """The modules of `extra` (and the extras it includes) that cannot be imported here; () when it is installed."""
    return _absent(m for e in (*INCLUDES[extra], extra) for m in EXTRAS[e])


def _absent(modules: Iterable[str]) -> tuple[str, ...]:
    """Those of `modules` not installed. A folder of that name on sys.path (Ray's temp dir `ray` in the working
    directory) is a namespace package to Python, never the distribution: it counts as absent."""
    specs = {m: importlib.util.find_spec(m) for m in modules}
    return tuple(m for m, spec in specs.items() if spec is None or spec.origin is None)


def require(extra: str, what: str, modules: Sequence[str] | None = None) -> None:
    """Raise MissingExtraError unless `extra` is installed (or only `modules` of it, where `what` needs no more)."""
    absent = missing(extra) if modules is None else _absent(modules)
    if absent:
        raise MissingExtraError(extra, what, absent)


def extra_of(module: str | None) -> str | None:
    """The extra that brings `module` (a dotted name: its top-level package counts), or None."""
    top = (module or "").partition(".")[0]
    return next((e for e, names in EXTRAS.items() if top in names), None)


def explain(exc: ModuleNotFoundError, what: str) -> ModuleNotFoundError:
    """`exc` as a MissingExtraError saying that `what` needs the extra of the missing module; `exc` itself when that
    module belongs to no extra (a real bug, or an optional package such as jax with its own message)."""
    extra = exc.extra if isinstance(exc, MissingExtraError) else extra_of(exc.name)
    if extra is None:
        return exc
    absent = missing(extra) or ((exc.name,) if exc.name else ())
    return MissingExtraError(extra, what, absent) if absent else exc
