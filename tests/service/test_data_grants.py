"""`raysampler serve` and its settings: malformed grants refuse to start naming the entry; the grants it loaded are
printed (tenant, site, prefix); with none, it says that no tenant may use site shards. A malformed or unreachable
database or storage refuses to start naming its setting, never a password.

A refusal happens before anything is served, so one refusal runs as a real process (its exit status is the
process's) and the others call the same `raysampler serve` entry point (`raysampler.cli.main`) in this process, with
the same environment, instead of paying a Python start-up and the service's imports for each."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.service_helpers import SERVICE_KEYS

from raysampler import cli
from raysampler.service.local import free_port

pytestmark = [pytest.mark.service, pytest.mark.slow]  # starts `raysampler serve` processes


def _env(env_extra: dict[str, str]) -> dict[str, str]:
    keys = ",".join(f"{t}:{k}" for t, k in SERVICE_KEYS.items())
    return {"RAYSAMPLER_API_KEYS": keys, "RAY_AUTH_MODE": "disabled"} | env_extra


def _argv(tmp_path, fmt: str) -> list[str]:
    args = ["serve", "--data-dir", str(tmp_path / "data"), "--port", str(free_port())]
    return args + ["--executor", "local", "--format", fmt]


def _serve(tmp_path, env_extra, fmt="json"):
    cmd = [sys.executable, "-m", "raysampler.cli", *_argv(tmp_path, fmt)]
    env = os.environ | _env(env_extra)
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _serve_here(tmp_path, env_extra, monkeypatch, capsys, fmt="json") -> tuple[int, str, str, list[dict]]:
    """`raysampler serve` with these settings run in this process (`cli.main`, the command's entry point) up to
    where it would start serving: uvicorn's `Server.run` is replaced by a recorder of its server's config and the
    socket serve bound for it (these tests read what serve prints or refuses before it serves). Returns (exit
    status, stdout, stderr, the recorded calls)."""
    import uvicorn

    served: list[dict] = []

    def record(server: uvicorn.Server, sockets: list | None = None) -> None:
        served.append({"config": server.config, "sockets": sockets})
        server.started = True

    with monkeypatch.context() as m:
        for name, value in _env(env_extra).items():
            m.setenv(name, value)
        m.setattr(uvicorn.Server, "run", record)
        # uvicorn's Config sets up logging with dictConfig, which closes every handler it finds, the test
        # runner's capture among them: every later test of this process would fail; serve's logging is not read here
        m.setattr(uvicorn.Config, "configure_logging", lambda self: None)
        code = cli.main(_argv(tmp_path, fmt))
    out, err = capsys.readouterr()
    return code, out, err, served


def test_malformed_grants_refuse_to_start_naming_the_entry(tmp_path, monkeypatch, capsys):
    grants = tmp_path / "grants.txt"
    grants.write_text("# the operator's grants\nalice@a:/srv/data/alice\nbob@b:data/bob  # relative\n")
    proc = _serve(tmp_path, {"RAYSAMPLER_DATA_GRANTS_FILE": str(grants)})  # a real process: its exit status
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, (out, err)
    assert f"{grants}:3" in err and "'bob@b:data/bob'" in err and "absolute" in err, err
    code, out, err, served = _serve_here(
        tmp_path, {"RAYSAMPLER_DATA_GRANTS": "alice@a:/srv/data,alice"}, monkeypatch, capsys
    )
    assert code == 2 and not served and "RAYSAMPLER_DATA_GRANTS" in err and "'alice'" in err, err


def test_serve_prints_the_grants_it_loaded(tmp_path, monkeypatch, capsys):
    """The JSON banner from a real `serve` process (it goes on to serve: killed once read); the table banner, with
    grants and with none, from the same command in this process up to where it serves."""
    grants = tmp_path / "grants.txt"
    grants.write_text("bob@a:/srv/data/bob\n\n# a comment\n")
    env = {"RAYSAMPLER_DATA_GRANTS_FILE": str(grants), "RAYSAMPLER_DATA_GRANTS": "alice@a:/srv/data/alice/"}
    proc = _serve(tmp_path, env, "json")
    try:
        assert proc.stdout is not None
        loaded = json.loads(proc.stdout.readline())["data_grants"]
        assert loaded == [
            {"tenant": "alice", "site": "a", "prefix": "/srv/data/alice"},
            {"tenant": "bob", "site": "a", "prefix": "/srv/data/bob"},
        ]
    finally:
        proc.kill()
        proc.communicate(timeout=60)
    code, out, err, served = _serve_here(tmp_path, env, monkeypatch, capsys, "table")
    assert code == 0 and len(served) == 1, (out, err)
    lines = out.splitlines()[1:5]
    assert lines[0].startswith("records: SQLite in the data dir; draws and uploads: "), lines
    assert lines[1].startswith("data grants: 2"), lines
    assert "tenant 'alice' on site 'a': /srv/data/alice" in lines[2], lines
    code, out, err, served = _serve_here(tmp_path, {}, monkeypatch, capsys, "table")
    assert code == 0 and len(served) == 1, (out, err)
    assert "no tenant may use site shards" in out.splitlines()[2], out


def test_a_database_or_storage_it_cannot_use_refuses_to_start_naming_the_setting(tmp_path, monkeypatch, capsys):
    from support.servers import free_port

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
        code, out, err, served = _serve_here(tmp_path, env, monkeypatch, capsys)  # an exception would fail here
        assert code == 2 and not served, (env, out, err)
        assert text in err and "hunter2" not in err + out and "Traceback" not in err, err
