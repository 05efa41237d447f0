"""The model of docs/models.md's "Write your own model", run from the doc itself so that the two cannot drift: it
implements the contract (finite differences), samples alike on both executors, and finds the posterior mean."""

from __future__ import annotations

import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from scipy.special import ndtr

import raysampler as rs
from raysampler.models import DataSpec
from raysampler.priors import GaussianPrior

DOC = Path(__file__).resolve().parents[2] / "docs" / "models.md"
MODULE = "own_model_from_docs"


def load_doc_model() -> types.ModuleType:
    """The first Python block under "## Write your own model" of docs/models.md, run as a module of its own (so that
    Ray ships its classes by value, as it would a user's file)."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Write your own model") :]
    match = re.search(r"```python\n(.*?)```", section, flags=re.S)
    assert match is not None, "docs/models.md: no python block under 'Write your own model'"
    module = types.ModuleType(MODULE)
    module.__file__ = str(DOC)
    sys.modules[MODULE] = module
    exec(compile(match.group(1), f"{DOC}:Write your own model", "exec"), module.__dict__)
    return module


@pytest.fixture(scope="module")
def probit() -> type:
    return load_doc_model().ProbitRegression


def _data(n: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(n), rng.standard_normal(n)])
    y = (rng.random(n) < ndtr(X @ np.array([-0.3, 1.0]))).astype(float)
    return X, y


def test_the_doc_model_is_a_model_with_its_layout(probit):
    model = probit().bind(DataSpec(n_features=2, columns=("(Intercept)", "x")))
    assert isinstance(model, rs.Model) and model.dim == 2
    assert model.param_names() == ["beta[(Intercept)]", "beta[x]"]
    with pytest.raises(ValueError, match="shards"):
        model.validate(np.ones((3, 2)), np.array([0.0, 2.0, 1.0]), argname="shards[0]")


def test_gradient_and_hvp_match_finite_differences(probit):
    X, y = _data(200, seed=1)
    model = probit().bind(DataSpec(n_features=2))
    rng = np.random.default_rng(2)
    x, v = rng.standard_normal((3, 2)), rng.standard_normal((3, 2))
    h = 1e-6
    for j in range(2):
        e = np.zeros(2)
        e[j] = h
        fd = (model.potential(X, y, x + e) - model.potential(X, y, x - e)) / (2 * h)
        np.testing.assert_allclose(model.grad(X, y, x)[:, j], fd, rtol=1e-6, atol=1e-6)
    fd_hvp = (model.grad(X, y, x + h * v) - model.grad(X, y, x - h * v)) / (2 * h)
    np.testing.assert_allclose(model.hvp(X, y, x, v), fd_hvp, rtol=1e-5, atol=1e-5)
    pot, grad = model.potential_and_grad(X, y, x)
    np.testing.assert_array_equal(pot, model.potential(X, y, x))
    np.testing.assert_array_equal(grad, model.grad(X, y, x))
    H = model.hessian(X, y, x[0])
    assert np.linalg.eigvalsh(H)[-1] <= model.smoothness(X, y) + 1e-9  # the bound holds where we look


def _posterior_by_quadrature(model, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The exact posterior mean and sd of a 2-parameter model, on a fine grid around the mode."""
    b0, b1 = np.meshgrid(np.linspace(-1.5, 0.9, 241), np.linspace(0.3, 2.1, 241), indexing="ij")
    grid = np.column_stack([b0.ravel(), b1.ravel()])
    u = model.potential(X, y, grid) + model.prior().potential(grid)
    w = np.exp(-(u - u.min()))
    w /= w.sum()
    mean = w @ grid
    return mean, np.sqrt(w @ (grid - mean) ** 2)


@pytest.mark.filterwarnings("ignore:max R-hat:UserWarning", "ignore:min bulk ESS:UserWarning")  # 20 rounds
def test_samples_the_same_on_both_executors_and_finds_the_posterior(probit, ray_session):
    X, y = _data()
    shards = rs.shard(X, y, num_shards=3, columns=["(Intercept)", "x"])
    kw = dict(chains=2, num_rounds=20, burn_in=10, seed=3, progress=False)
    local = rs.sample(probit(), shards, executor="local", **kw)
    on_ray = rs.sample(probit(), shards, executor="ray", **kw)
    np.testing.assert_array_equal(local.draws, on_ray.draws)
    assert list(local.summary().index) == ["beta[(Intercept)]", "beta[x]"]

    long = rs.sample(probit(), shards, chains=4, num_rounds=2000, burn_in=200, seed=4, executor="local", progress=False)
    mean, sd = _posterior_by_quadrature(probit().bind(DataSpec(n_features=2)), X, y)
    np.testing.assert_array_less(np.abs(long.draws.reshape(-1, 2).mean(axis=0) - mean), 0.25 * sd)
    np.testing.assert_allclose(long.draws.reshape(-1, 2).std(axis=0), sd, rtol=0.2)


@dataclass(frozen=True)
class _BuggyLinear(rs.Model):
    """A user's linear model whose gradient fails on shards of fewer than 35 rows (a bug in user code)."""

    n_features: int | None = None

    def bind(self, spec: DataSpec) -> _BuggyLinear:
        return _BuggyLinear(spec.n_features)

    @property
    def dim(self) -> int:
        assert self.n_features is not None
        return self.n_features

    def prior(self) -> GaussianPrior:
        return GaussianPrior(np.zeros(self.dim), np.ones(self.dim))

    def potential(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        r = y[None, :] - x @ X.T
        return 0.5 * (r * r).sum(axis=1)

    def grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        if X.shape[0] < 35:
            return self._scaled(X, y, x)
        return -((y[None, :] - x @ X.T) @ X)

    def _scaled(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        scale = 1 / (int(X.shape[0]) - len(y))  # the bug: 1 / 0
        return -((y[None, :] - x @ X.T) @ X) * scale

    def hvp(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        return v @ (X.T @ X)

    def smoothness(self, X: np.ndarray, y: np.ndarray) -> float:
        return float(np.linalg.eigvalsh(X.T @ X)[-1])


@pytest.mark.parametrize("executor", ["local", "ray"])
def test_an_error_in_user_code_names_the_shard_the_method_and_the_users_traceback(executor, request):
    """The run stops with SamplingError naming the worker (shard 1, the one with 30 rows), the model method raysampler
    called (grad) and the user's traceback: their frames only, down to the raising line."""
    if executor == "ray":
        request.getfixturevalue("ray_session")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 2))
    y = X @ [1.0, 2.0] + rng.normal(size=100)
    shards = rs.shard([(X[:40], y[:40]), (X[40:70], y[40:70]), (X[70:], y[70:])])
    with pytest.raises(rs.SamplingError) as e:
        rs.sample(_BuggyLinear(), shards, num_rounds=20, executor=executor, progress=False)
    failure = e.value.failure
    assert failure.shard == 1 and "the model's grad() raised" in failure.message, failure
    tb = failure.traceback or ""
    assert "in grad" in tb and "in _scaled" in tb and "the bug: 1 / 0" in tb and "ZeroDivisionError" in tb, tb
    assert "raysampler/" not in tb.replace("tests/models", ""), tb  # the user's frames only
