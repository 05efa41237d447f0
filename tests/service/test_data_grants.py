"""`raysampler serve` and its settings: malformed grants refuse to start naming the entry; the grants it loaded are
printed (tenant, site, prefix); with none, it says that no tenant may use site shards. A malformed or unreachable
database or storage refuses to start naming its setting, never a password."""

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
                lines = [proc.stdout.readline() for _ in range(4)]
                assert lines[0].startswith("records: SQLite in the data dir; draws and uploads: "), lines
                assert lines[1].startswith("data grants: 2"), lines
                assert "tenant 'alice' on site 'a': /srv/data/alice" in lines[2], lines
        finally:
            proc.kill()
            proc.communicate(timeout=60)
    proc = _serve(tmp_path, {}, "table")
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        proc.stdout.readline()
        assert "no tenant may use site shards" in proc.stdout.readline()
    finally:
        proc.kill()
        proc.communicate(timeout=60)


def test_a_database_or_storage_it_cannot_use_refuses_to_start_naming_the_setting(tmp_path):
    from servers import free_port

    closed = free_port()  # nothing listens there
    cases = [
        ({"RAYSAMPLER_DATABASE_URL": "mysql://svc:hunter2@db:3306/runs"}, "RAYSAMPLER_DATABASE_URL: the scheme"),
        (
            {"RAYSAMPLER_DATABASE_URL": f"postgresql://svc:hunter2@127.0.0.1:{closed}/runs"},
            f"RAYSAMPLER_DATABASE_URL: cannot open postgresql://svc@127.0.0.1:{closed}/runs",
        ),
        ({"RAYSAMPLER_STORAGE_URL": "s3://Runs_Bucket/x/"}, "RAYSAMPLER_STORAGE_URL: the URI needs a valid bucket"),
        (
            {
                "RAYSAMPLER_STORAGE_URL": "s3://runs-bucket/raysampler/",
                "AWS_ENDPOINT_URL": f"http://127.0.0.1:{closed}",
                "AWS_ACCESS_KEY_ID": "id",
                "AWS_SECRET_ACCESS_KEY": "hunter2",
                "AWS_REGION": "us-east-1",
            },
            "RAYSAMPLER_STORAGE_URL: cannot use s3://runs-bucket/raysampler/",
        ),
    ]
    for env, text in cases:
        proc = _serve(tmp_path, env)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 2, (env, out, err)
        assert text in err and "hunter2" not in err + out and "Traceback" not in err, err
