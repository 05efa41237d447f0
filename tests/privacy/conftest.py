"""The privacy tests' shared fixtures: breast_cancer on 4 sites, and a test's own site-key folder (`site_keys`: the
site secrets that seal states and key the streams made fresh in a temporary folder, not in ~/.raysampler). In-process
runs only: a Ray worker started before the test reads the folder its own environment names."""

from __future__ import annotations

import pytest

import raysampler as rs


@pytest.fixture(scope="module")
def data():
    X, y = rs.datasets.load("breast_cancer")
    return rs.shard(X, y, num_shards=4)


@pytest.fixture
def site_keys(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYSAMPLER_SITE_KEYS", str(tmp_path / "site-keys"))
