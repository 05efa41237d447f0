"""The privacy tests' shared fixtures: breast_cancer on 4 sites, and each test's own site-key folder (so that the
site secrets that seal states and key the streams are made fresh in a temporary folder, never in ~/.raysampler)."""

from __future__ import annotations

import pytest

import raysampler as rs


@pytest.fixture(scope="module")
def data():
    X, y = rs.datasets.load("breast_cancer")
    return rs.shard(X, y, num_shards=4)


@pytest.fixture(autouse=True)
def site_keys(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYSAMPLER_SITE_KEYS", str(tmp_path / "site-keys"))
