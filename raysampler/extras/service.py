"""Imported first by the service's packages (raysampler.service, raysampler.api): raises MissingExtraError
(`pip install "raysampler[service]"`) where the service's dependencies (the engine's among them) are not installed."""

from . import require

require("service", "raysampler's REST service (raysampler.service, raysampler.api)")
