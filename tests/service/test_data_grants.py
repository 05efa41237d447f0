"""`raysampler serve` and data grants: malformed grants refuse to start naming the entry; the grants it loaded are
printed (tenant, site, prefix); with none, it says that no tenant may use site shards."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import SERVICE_KEYS

from raysampler.service.local import free_port

pytestmark = [pytest.mark.service, pytest.mark.slow]  # starts `raysampler serve` processes


def _serve(tmp_path, env_extra, fmt="json"):
    keys = ",".join(f"{t}:{k}" for t, k in SERVICE_KEYS.items())
    env = os.environ | {"RAYSAMPLER_API_KEYS": keys, "RAY_AUTH_MODE": "disabled"} | env_extra
    cmd = [sys.executable, "-m", "raysampler.cli", "serve", "--data-dir", str(tmp_path / "data")]
    cmd += ["--port", str(free_port()), "--executor", "local", "--format", fmt]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_malformed_grants_refuse_to_start_naming_the_entry(tmp_path):
    grants = tmp_path / "grants.txt"
    grants.write_text("# the operator's grants\nalice@a:/srv/data/alice\nbob@b:data/bob  # relative\n")
    proc = _serve(tmp_path, {"RAYSAMPLER_DATA_GRANTS_FILE": str(grants)})
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, (out, err)
    assert f"{grants}:3" in err and "'bob@b:data/bob'" in err and "absolute" in err, err
    proc = _serve(tmp_path, {"RAYSAMPLER_DATA_GRANTS": "alice@a:/srv/data,alice"})
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 2 and "RAYSAMPLER_DATA_GRANTS" in err and "'alice'" in err, err


def test_serve_prints_the_grants_it_loaded(tmp_path):
    grants = tmp_path / "grants.txt"
    grants.write_text("bob@a:/srv/data/bob\n\n# a comment\n")
    env = {"RAYSAMPLER_DATA_GRANTS_FILE": str(grants), "RAYSAMPLER_DATA_GRANTS": "alice@a:/srv/data/alice/"}
    for fmt in ("json", "table"):
        proc = _serve(tmp_path, env, fmt)
        try:
            assert proc.stdout is not None
            first = proc.stdout.readline()
            if fmt == "json":
                loaded = json.loads(first)["data_grants"]
                assert loaded == [
                    {"tenant": "alice", "site": "a", "prefix": "/srv/data/alice"},
                    {"tenant": "bob", "site": "a", "prefix": "/srv/data/bob"},
                ]
            else:
                lines = [proc.stdout.readline() for _ in range(3)]
                assert lines[0].startswith("data grants: 2"), lines
                assert "tenant 'alice' on site 'a': /srv/data/alice" in lines[1], lines
        finally:
            proc.kill()
            proc.communicate(timeout=60)
    proc = _serve(tmp_path, {}, "table")
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        assert "no tenant may use site shards" in proc.stdout.readline()
    finally:
        proc.kill()
        proc.communicate(timeout=60)
