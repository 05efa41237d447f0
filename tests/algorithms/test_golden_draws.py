"""Golden draws: short seeded runs of every algorithm, every DG-LMC local kernel and group-effects models draw bit for
bit what the code drew when the golden file was recorded (tests/data/golden_draws.npz), in process and, for DG-LMC's
batched kernels, on Ray with several shards per worker process (the shards stepped as one batch).

A refactoring may not change a single bit of a same-seed run; a deliberate change of the numbers re-records the file
(`python tests/algorithms/test_golden_draws.py --record`) and says so in its commit. Bit identity holds on a machine
like the one that recorded the file (its CPU and the SIMD kernels numpy and its BLAS pick there, kept in the file as
`MACHINE_KEY`); elsewhere the same code rounds differently in the last bits, which MH steps amplify to about 1e-8
over these runs, so there the draws must agree to `OTHER_MACHINE_ATOL`, still far below what any change of the
numbers does (a different draw moves them by O(0.1)).
"""

from __future__ import annotations

import os
import pathlib
import sys
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import raysampler as rs

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden_draws.npz"
MACHINE_KEY = "machine"
OTHER_MACHINE_ATOL = 1e-7
RUN = dict(chains=2, num_rounds=12, burn_in=8, seed=11, progress=False)


def _plain() -> list[rs.Shard]:
    X, y = rs.datasets.load("breast_cancer")
    return rs.shard(X[:240, :8], y[:240], num_shards=4)


def _grouped() -> list[rs.Shard]:
    rng = np.random.default_rng(0)
    n = 120
    X = np.column_stack([np.ones(n), rng.normal(size=n), rng.integers(0, 6, n) + 100.0])
    y = (rng.normal(size=n) + 0.5 * X[:, 1] > 0).astype(float)
    return rs.shard(X, y, num_shards=2, columns=["(Intercept)", "age", "hospital"], by="hospital")


def _group_model() -> Any:
    return rs.models.LogisticRegression(group_effects=rs.GroupEffects("hospital", slopes=("age",)))


#: name → (model, shards, algorithm, its parameters); every algorithm, every DG-LMC kernel and its options' branches
CASES: dict[str, tuple[Callable[[], Any], Callable[[], list[rs.Shard]], str, dict[str, Any]]] = {
    **{
        f"{alg}": (rs.models.LogisticRegression, _plain, alg, {})
        for alg in ("ula", "mala", "dsgld", "dsghmc", "dula", "dadmms", "admm", "dmala", "fald", "qlsd")
    },
    "dglmc-laplace_mh": (rs.models.LogisticRegression, _plain, "dglmc", {}),
    "dglmc-laplace_mh-recentre": (
        rs.models.LogisticRegression,
        _plain,
        "dglmc",
        {"recentre": True, "n_local": [(0, [1, 2, 1, 2]), (10, [2, 1, 1, 3])]},
    ),
    "dglmc-laplace_mh-recentre-auto": (rs.models.LogisticRegression, _plain, "dglmc", {"recentre": "auto"}),
    "dglmc-laplace_mh-plain": (rs.models.LogisticRegression, _plain, "dglmc", {"overrelax": 0.0, "n_local": 2}),
    "dglmc-lmc": (rs.models.LogisticRegression, _plain, "dglmc", {"local_kernel": "lmc"}),
    "dglmc-lmc-paper": (rs.models.LogisticRegression, _plain, "dglmc", {"preconditioner": None}),
    "dglmc-mala": (rs.models.LogisticRegression, _plain, "dglmc", {"local_kernel": "mala", "n_local": 3}),
    "dglmc-mala-overrelax": (rs.models.LogisticRegression, _plain, "dglmc", {"local_kernel": "mala", "overrelax": 0.5}),
    "dglmc-diag": (rs.models.LogisticRegression, _plain, "dglmc", {"preconditioner": "diag", "local_kernel": "lmc"}),
    "groups-dglmc-newton_mh": (_group_model, _grouped, "dglmc", {}),
    "groups-dglmc-newton_mh-2": (_group_model, _grouped, "dglmc", {"n_local": 2, "overrelax": 0.0}),
    "groups-dglmc-mala": (_group_model, _grouped, "dglmc", {"local_kernel": "mala"}),
    "groups-dglmc-lmc": (_group_model, _grouped, "dglmc", {"local_kernel": "lmc", "n_local": 2}),
    "groups-mala": (_group_model, _grouped, "mala", {}),
}
#: run as two halves per round (`RunOptions.pipeline`): DG-LMC's batched kernels only
PIPELINED = ("dglmc-laplace_mh", "dglmc-lmc")
#: on Ray, two worker processes for four shards: each process steps its two shards as one batch
ON_RAY = ("dglmc-laplace_mh-recentre", "dglmc-lmc-paper", "groups-dglmc-newton_mh")


def _draw(name: str, executor: str = "local", pipeline: bool = False) -> dict[str, np.ndarray]:
    model, shards, algorithm, params = CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = rs.sample(model(), shards(), algorithm, executor=executor, pipeline=pipeline, **RUN, **params)
    out = {"draws": res.draws}
    for key, value in sorted(res.sample_stats.items()):
        out[f"stats.{key}"] = np.asarray(value)
    return out


def _keys() -> list[tuple[str, str, bool]]:
    return (
        [(name, "local", False) for name in CASES]
        + [(name, "local", True) for name in PIPELINED]
        + [(name, "ray", False) for name in ON_RAY]
    )


def _label(name: str, executor: str, pipeline: bool) -> str:
    return f"{name}@{executor}" + ("+pipeline" if pipeline else "")


def _machine() -> str:
    """This machine as far as floating-point rounding goes: the CPU model and the SIMD extensions numpy dispatches
    to (its BLAS picks its kernels from the same CPU)."""
    from numpy._core._multiarray_umath import __cpu_features__

    model = next(
        (line.split(":", 1)[1].strip() for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        "unknown",
    ) if pathlib.Path("/proc/cpuinfo").exists() else "unknown"  # fmt: skip
    simd = ",".join(sorted(k for k, on in __cpu_features__.items() if on))
    return f"{model} | {simd}"


def _check(name: str, executor: str, pipeline: bool) -> None:
    golden = np.load(GOLDEN)
    label = _label(name, executor, pipeline)
    got = _draw(name, executor, pipeline)
    want = {k.split("|", 1)[1]: golden[k] for k in golden.files if k.split("|", 1)[0] == label}
    assert set(got) == set(want), (label, sorted(got), sorted(want))
    same = MACHINE_KEY in golden.files and str(golden[MACHINE_KEY]) == _machine()
    for key, value in got.items():
        if same:
            assert np.array_equal(value, want[key]), f"{label} {key}: not bit-identical to the golden draws"
        else:
            np.testing.assert_allclose(
                value, want[key], rtol=0, atol=OTHER_MACHINE_ATOL,
                err_msg=f"{label} {key}: recorded on another machine; not within {OTHER_MACHINE_ATOL} of its draws",
            )  # fmt: skip


@pytest.mark.parametrize(("name", "pipeline"), [(n, False) for n in CASES] + [(n, True) for n in PIPELINED])
def test_same_seed_draws_are_the_golden_ones(name: str, pipeline: bool) -> None:
    _check(name, "local", pipeline)


@pytest.mark.parametrize("name", ON_RAY)
def test_same_seed_draws_on_ray_with_batched_shards_are_the_golden_ones(ray_session, monkeypatch, name: str) -> None:
    monkeypatch.setenv("RAYSAMPLER_WORKER_PROCESSES", "2")
    _check(name, "ray", False)


def _record() -> None:
    """Run every case (Ray ones in a private local Ray) and write the golden file."""
    os.environ["RAYSAMPLER_WORKER_PROCESSES"] = "2"
    arrays: dict[str, np.ndarray] = {}
    for name, executor, pipeline in _keys():
        for key, value in _draw(name, executor, pipeline).items():
            arrays[f"{_label(name, executor, pipeline)}|{key}"] = value
        print(_label(name, executor, pipeline), flush=True)
    np.savez_compressed(GOLDEN, **arrays, **{MACHINE_KEY: np.array(_machine())})
    print(f"wrote {len(arrays)} arrays to {GOLDEN}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: python tests/algorithms/test_golden_draws.py --record")
    _record()
