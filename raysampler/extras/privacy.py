"""Imported first by the privacy modes' modules (secure sums, the DP mode): raises MissingExtraError
(`pip install "raysampler[privacy]"`) where cryptography or dp-accounting is not installed."""

from . import require

require("privacy", "raysampler's privacy modes (secure_sums, privacy=DP(...))")
