"""Models that do not subclass `Model`: an object with the members of `MODEL_METHODS` is used as one through
`ForeignModel` (`as_model` wraps it), which calls the object's own optional methods where it has them and the
contract's defaults where not; `defines` tells whether a model has its own optional method."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..priors import GaussianPrior, Prior
from .contract import MODEL_METHODS, DataSpec, LocalCurvature, Model, ParamBlock


@dataclass(frozen=True, repr=False)
class ForeignModel(Model):
    """An object with the methods of `MODEL_METHODS` that does not subclass `Model`, seen as a `Model`: every call
    goes to the object; the optional parts it lacks are `Model`'s defaults (its θ is one block `theta` labelled by
    its `param_names`). Its repr is the object's, so run fingerprints do not change."""

    model: Any

    def __post_init__(self) -> None:
        object.__setattr__(self, "target_kind", str(getattr(self.model, "target_kind", "real")))

    def __repr__(self) -> str:
        return repr(self.model)

    def _own(self, method: str) -> Any:
        """The object's own `method`, or None where it has none (then `Model`'s default applies)."""
        own = getattr(self.model, method, None)
        return own if callable(own) else None

    def bind(self, spec: DataSpec) -> Model:
        own = self._own("bind")
        return as_model(own(spec)) if own is not None else self

    @property
    def dim(self) -> int:
        return int(self.model.dim)

    def param_blocks(self) -> tuple[ParamBlock, ...]:
        own = self._own("param_blocks")
        if own is not None:
            return tuple(own())
        names_of = self._own("param_names")
        if names_of is None:
            return super().param_blocks()
        names = [str(n) for n in names_of()]
        labels = tuple(names) if len(names) == self.dim and len(set(names)) == self.dim else None
        return (ParamBlock("theta", self.dim, "param", labels, "identity"),)

    def param_names(self) -> list[str]:
        own = self._own("param_names")
        return list(own()) if own is not None else super().param_names()

    def prior(self) -> GaussianPrior | Prior:
        return self.model.prior()

    def has_local_params(self) -> bool:
        own = self._own("has_local_params")
        return bool(own()) if own is not None else False

    def local_dim(self, X: np.ndarray, y: np.ndarray) -> int:
        own = self._own("local_dim")
        return int(own(X, y)) if own is not None else 0

    def local_blocks(self, X: np.ndarray, y: np.ndarray) -> tuple[ParamBlock, ...]:
        own = self._own("local_blocks")
        return tuple(own(X, y)) if own is not None else super().local_blocks(X, y)

    def local_natural(self, theta: np.ndarray, eta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        own = self._own("local_natural")
        return own(theta, eta, X, y) if own is not None else eta

    def local_curvature(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, parts: str = "all") -> LocalCurvature:
        own = self._own("local_curvature")
        return own(X, y, x, parts) if own is not None else super().local_curvature(X, y, x, parts)

    def block_potential(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        own = self._own("block_potential")
        return own(X, y, x) if own is not None else super().block_potential(X, y, x)

    def centring(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        own = self._own("centring")
        return np.asarray(own(X, y), dtype=bool) if own is not None else super().centring(X, y)

    def centred_move(
        self, X: np.ndarray, y: np.ndarray, x: np.ndarray, dtheta: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        own = self._own("centred_move")
        return own(X, y, x, dtheta) if own is not None else super().centred_move(X, y, x, dtheta)

    def shard_data(self, X: np.ndarray, y: np.ndarray, rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        own = self._own("shard_data")
        return own(X, y, rows) if own is not None else (X, y)

    def validate(self, X: np.ndarray, y: np.ndarray, argname: str = "data") -> None:
        own = self._own("validate")
        if own is not None:
            own(X, y, argname=argname)

    def gram(self, X: np.ndarray, y: np.ndarray) -> np.ndarray | None:
        own = self._own("gram")
        return own(X, y) if own is not None else None

    def check_proper(self, gram: np.ndarray | None, n_rows: int | None = None) -> None:
        own = self._own("check_proper")
        if own is not None:
            own(gram, n_rows=n_rows)

    def potential(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self.model.potential(X, y, x)

    def grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self.model.grad(X, y, x)

    def potential_and_grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        own = self._own("potential_and_grad")
        return own(X, y, x) if own is not None else super().potential_and_grad(X, y, x)

    def hvp(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        return self.model.hvp(X, y, x, v)

    def hessian(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        own = self._own("hessian")
        return own(X, y, x) if own is not None else super().hessian(X, y, x)

    def hessians(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        own = self._own("hessians")
        return own(X, y, x) if own is not None else super().hessians(X, y, x)

    def hessian_diag(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        own = self._own("hessian_diag")
        return own(X, y, x) if own is not None else super().hessian_diag(X, y, x)

    def smoothness(self, X: np.ndarray, y: np.ndarray) -> float:
        return self.model.smoothness(X, y)

    def log_likelihood(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        own = self._own("log_likelihood")
        return own(X, y, x) if own is not None else super().log_likelihood(X, y, x)

    def predict_mean(self, X: np.ndarray, x: np.ndarray) -> np.ndarray:
        own = self._own("predict_mean")
        return own(X, x) if own is not None else super().predict_mean(X, x)

    def linear_predictor(self, X: np.ndarray, x: np.ndarray) -> np.ndarray:
        own = self._own("linear_predictor")
        return own(X, x) if own is not None else super().linear_predictor(X, x)

    def predict_draw(self, X: np.ndarray, x: np.ndarray, u: np.ndarray) -> np.ndarray:
        own = self._own("predict_draw")
        return own(X, x, u) if own is not None else super().predict_draw(X, x, u)


def defines(model: Model, method: str) -> bool:
    """Whether `model` has its own `method` (one of the contract's optional checks of a fit) rather than the
    contract's default, which raises NotImplementedError."""
    if isinstance(model, ForeignModel):
        return model._own(method) is not None
    return getattr(type(model), method, None) is not getattr(Model, method)


def _has_member(model: Any, name: str) -> bool:
    """Whether `model` has the contract's member `name`: a method, or for `dim` a property or attribute (one that
    raises before the model is bound, as a `Model`'s may, counts as there)."""
    try:
        value = getattr(model, name)
    except AttributeError:
        return False
    except Exception:
        return name == "dim"
    return name == "dim" or callable(value)


def as_model(model: Any) -> Model:
    """`model` itself if it is a `Model`, a `ForeignModel` around it if it has the methods of `MODEL_METHODS`, else
    TypeError naming what it lacks."""
    if isinstance(model, Model):
        return model
    missing = [m for m in MODEL_METHODS if not _has_member(model, m)]
    if isinstance(model, type) or missing:
        raise TypeError(
            f"model must be a model instance (e.g. rs.models.LogisticRegression()) with methods "
            f"{list(MODEL_METHODS)}; missing {missing or 'an instance'}"
        )
    return ForeignModel(model)
