"""Imported first by the engine's packages: raises MissingExtraError (`pip install "raysampler[engine]"`) where the
engine's dependencies are not installed, instead of the ImportError of whichever of them is imported first."""

from . import require

require("engine", "raysampler's engine (rs.sample, rs.models, ...)")
