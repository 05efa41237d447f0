"""The model-family registry: built-ins through raysampler's own entry points, a third-party family registered by an
installed distribution (a temporary dist-info on sys.path, in a subprocess), broken entry points skipped with a warning,
and each family's declared parameters."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from raysampler.models import FAMILIES, FAMILY_INFO, LinearRegression, family_params, load_families
from raysampler.models.registry import BUILTIN

PLUGIN = '''
from dataclasses import dataclass, field

import numpy as np

import raysampler as rs
from raysampler.priors import GaussianPrior


@dataclass(frozen=True)
class Shifted(rs.Model):
    """A Gaussian mean with a known shift: y_j ~ N(θ + shift, 1).

    A test family registered by a fake third-party distribution.
    """

    shift: float = field(default=0.0, metadata={"description": "the known shift"})
    n_features: int | None = None

    @property
    def dim(self) -> int:
        return 1

    def prior(self):
        return GaussianPrior(np.zeros(1), np.ones(1))

    def potential(self, X, y, x):
        return 0.5 * ((y[:, None] - self.shift - x[:, 0]) ** 2).sum(axis=0)

    def grad(self, X, y, x):
        return -((y[:, None] - self.shift - x[:, 0]).sum(axis=0))[:, None]

    def hvp(self, X, y, x, v):
        return len(y) * v

    def smoothness(self, X, y):
        return float(len(y))


class NotADataclass(rs.Model):
    """Parameters not declared."""
'''

CHECK = """
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import raysampler.models as m
    families = list(m.FAMILIES)  # the registry loads on first use
from raysampler.service.schemas import model_families
fam = {f.name: f.model_dump() for f in model_families().families}
print(json.dumps({
    "families": families,
    "errors": m.REGISTRY_ERRORS,
    "warnings": [str(w.message) for w in caught],
    "shifted": fam.get("shifted"),
    "model": m.get_model("shifted", shift=2.0).shift,
}))
"""


def _fake_distribution(root: Path) -> None:
    """A package `fake_family` and its installed metadata (`fake_family-1.0.dist-info`) with three entry points."""
    (root / "fake_family.py").write_text(PLUGIN)
    info = root / "fake_family-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-family\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        textwrap.dedent(
            """\
            [raysampler.models]
            shifted = fake_family:Shifted
            undeclared = fake_family:NotADataclass
            missing = fake_family:NoSuchThing
            """
        )
    )


def test_a_third_party_family_is_registered_and_broken_ones_are_skipped(tmp_path):
    _fake_distribution(tmp_path)
    code = f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n" + CHECK
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=Path(__file__).parents[2]
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["families"][: len(BUILTIN)] == list(BUILTIN) and "shifted" in got["families"]
    assert set(got["errors"]) == {"undeclared", "missing"}
    assert any("'undeclared'" in w and "dataclass" in w for w in got["warnings"])
    assert any("'missing'" in w and "fake-family" in w for w in got["warnings"])
    shifted = got["shifted"]
    assert shifted["builtin"] is False and shifted["distribution"] == "fake-family"
    assert shifted["description"] == "A Gaussian mean with a known shift: y_j ~ N(θ + shift, 1)."
    assert shifted["parameters"]["properties"] == {
        "shift": {"type": "number", "default": 0.0, "description": "the known shift"}
    }
    assert got["model"] == 2.0


def test_builtins_are_registered_even_without_entry_points():
    families, errors = load_families(eps=[])
    assert {n: f.cls for n, f in families.items()} == BUILTIN and errors == {}
    assert FAMILIES == BUILTIN and all(f.builtin for f in FAMILY_INFO.values())


def test_a_third_party_entry_point_may_not_take_a_builtin_name():
    ep = EntryPoint("linear_regression", "collections:OrderedDict", "raysampler.models")
    with pytest.warns(RuntimeWarning, match="'linear_regression'.*already registered"):
        families, errors = load_families(eps=[ep])
    assert families["linear_regression"].cls is LinearRegression and "linear_regression" in errors


def test_family_params_are_the_declared_fields():
    params = {p.name: p for p in family_params(LinearRegression)}
    assert list(params) == [
        "prior_scale",
        "coef_prior",
        "group_effects",
        "noise_sd",
        "sigma_prior",
        "smoothness_safety",
    ]
    assert params["smoothness_safety"].default == 2.0 and "column" in (params["noise_sd"].description or "")
    with pytest.raises(TypeError, match="not a subclass"):
        family_params(dict)
