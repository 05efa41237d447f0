"""Engine settings (RAYSAMPLER_* read once by the driver into `EngineSettings`), the choices' enums, and the one rule
by which the SDK and the CLI find the service."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import raysampler as rs
from raysampler.algorithms import DGLMC
from raysampler.enums import Balance, Executor, StopReason, TransportKind, parse
from raysampler.events import EventKind
from raysampler.options import ExecutionOptions, RunOptions
from raysampler.sampling import Run
from raysampler.settings import EngineSettings

FIELDS = [f"RAYSAMPLER_{f.upper()}" for f in EngineSettings.model_fields]


@pytest.fixture
def clean_env(monkeypatch):
    for name in FIELDS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_defaults_and_environment(clean_env):
    assert EngineSettings.from_env() == EngineSettings(
        max_restarts=10,
        object_store_bytes=1 << 30,
        site_wait_s=60,
        coordinator_shards=True,
        worker_processes=0,
        warm_hosts=1,
        shm_spin_us=1000,
        startup_timeout_s=300,
        link_deadline_s=45,
    )
    env = {
        "RAYSAMPLER_MAX_RESTARTS": "0",
        "RAYSAMPLER_OBJECT_STORE_BYTES": str(100 * 2**20),
        "RAYSAMPLER_SITE_WAIT_S": "2.5",
        "RAYSAMPLER_COORDINATOR_SHARDS": "0",
        "RAYSAMPLER_WORKER_PROCESSES": "3",
        "RAYSAMPLER_WARM_HOSTS": "0",
        "RAYSAMPLER_SHM_SPIN_US": "250",
        "RAYSAMPLER_STARTUP_TIMEOUT_S": "30",
        "RAYSAMPLER_LINK_DEADLINE_S": "45",
    }
    assert set(env) == set(FIELDS)
    for k, v in env.items():
        clean_env.setenv(k, v)
    s = EngineSettings.from_env()
    assert (s.max_restarts, s.object_store_bytes, s.site_wait_s, s.coordinator_shards) == (0, 100 * 2**20, 2.5, False)
    assert s.shm_spin_s == pytest.approx(250e-6) and s.startup_timeout_s == 30 and s.worker_processes == 3
    assert s.link_deadline_s == 45 and s.warm_hosts == 0


@pytest.mark.parametrize(
    "name, value",
    [
        ("RAYSAMPLER_MAX_RESTARTS", "-1"),
        ("RAYSAMPLER_MAX_RESTARTS", "many"),
        ("RAYSAMPLER_OBJECT_STORE_BYTES", "1000"),
        ("RAYSAMPLER_SITE_WAIT_S", "nan"),
        ("RAYSAMPLER_COORDINATOR_SHARDS", "sometimes"),
        ("RAYSAMPLER_WORKER_PROCESSES", "-1"),
        ("RAYSAMPLER_WARM_HOSTS", "-1"),
        ("RAYSAMPLER_SHM_SPIN_US", "-5"),
        ("RAYSAMPLER_STARTUP_TIMEOUT_S", "0"),
        ("RAYSAMPLER_LINK_DEADLINE_S", "0"),
    ],
)
def test_a_bad_value_names_its_variable(clean_env, name, value):
    clean_env.setenv(name, value)
    with pytest.raises(ValueError, match=name) as err:
        EngineSettings.from_env()
    assert repr(value) in str(err.value)


def test_service_settings_extend_the_engine_settings(clean_env):
    from raysampler.service.settings import Settings

    clean_env.setenv("RAYSAMPLER_SITE_WAIT_S", "3")
    s = Settings(executor="local")
    assert set(EngineSettings.model_fields) <= set(Settings.model_fields) and s.site_wait_s == 3
    engine = s.engine()
    assert type(engine) is EngineSettings and engine == EngineSettings.from_env()


@pytest.mark.parametrize(
    "name,value,why",
    [
        ("RAYSAMPLER_DATABASE_URL", "mysql://svc:hunter2@db:3306/runs", "scheme is 'mysql'"),
        ("RAYSAMPLER_DATABASE_URL", "postgresql://svc:hunter2@db:port/runs", "port must be a number"),
        ("RAYSAMPLER_DATABASE_URL", "postgresql://svc:hunter2@db:5432/runs?sslmode=strict", "sslmode is 'strict'"),
        ("RAYSAMPLER_STORAGE_URL", "s3://Runs_Bucket/raysampler/", "valid bucket"),
        ("RAYSAMPLER_STORAGE_URL", "s3://key:hunter2@runs/raysampler/", "credentials"),
        ("RAYSAMPLER_STORAGE_URL", "runs/relative", "absolute path"),
        ("RAYSAMPLER_LEASE_S", "0.1", "greater than or equal to 1"),
        ("RAYSAMPLER_REPLICA_ID", "a replica", "letters, digits"),
    ],
)
def test_a_bad_database_or_storage_setting_names_its_variable_and_never_a_password(clean_env, name, value, why):
    from pydantic import ValidationError

    from raysampler.service.settings import Settings
    from raysampler.settings import describe

    clean_env.setenv(name, value)
    with pytest.raises(ValidationError) as err:
        Settings()
    text = describe(err.value)
    assert text.startswith(f"{name}: ") and why in text and "Value error" not in text, text
    assert "hunter2" not in text, text


def test_replicas_are_named_after_their_host_and_data_dir(clean_env, tmp_path):
    from raysampler.service.settings import Settings

    a, b = Settings(data_dir=tmp_path / "a"), Settings(data_dir=tmp_path / "b")
    assert a.replica != b.replica and a.replica == Settings(data_dir=tmp_path / "a").replica  # stable per data dir
    assert Settings(data_dir=tmp_path / "a", replica_id="api-0").replica == "api-0"
    assert Settings(database_url=" ").database_url is None


def test_enums_take_users_strings_and_serialise_as_them():
    assert parse(Executor, "local", "executor") is Executor.LOCAL and parse(TransportKind, "actor", "t") == "actor"
    assert [Balance.of(v) for v in ("auto", True, False)] == [Balance.AUTO, Balance.ALWAYS, Balance.NEVER]
    with pytest.raises(ValueError, match="executor must be one of 'local', 'ray', got 'gpu'"):
        parse(Executor, "gpu", "executor")
    with pytest.raises(ValueError, match="balance must be 'auto', True or False"):
        Balance.of("yes")
    values = [StopReason.CONVERGED, EventKind.WORKER_LOST, Executor.RAY]
    assert json.dumps(values) == '["converged", "worker_lost", "ray"]'


@pytest.mark.parametrize("arg, value", [("executor", "gpu"), ("transport", "smoke"), ("balance", "sometimes")])
def test_run_refuses_a_bad_choice_naming_the_argument(arg, value):
    X, y = rs.datasets.load("breast_cancer")
    with pytest.raises(ValueError, match=f"^{arg} must be"):
        ExecutionOptions(**{arg: value})
    with pytest.raises(ValueError, match=f"^{arg} must be"):
        rs.sample(rs.models.LogisticRegression(), rs.shard(X, y, num_shards=2), num_rounds=5, **{arg: value})


def test_actors_use_the_drivers_settings(ray_session, monkeypatch):
    """Settings set in the driver after Ray started (so no Ray process has them in its environment) reach the
    coordinator actor and its pool through RunConfig; the run still draws what the local executor draws."""
    import ray

    monkeypatch.setenv("RAYSAMPLER_STARTUP_TIMEOUT_S", "123")
    monkeypatch.setenv("RAYSAMPLER_SHM_SPIN_US", "250")
    monkeypatch.setenv("RAYSAMPLER_COORDINATOR_SHARDS", "0")
    X, y = rs.datasets.load("breast_cancer")
    shards = rs.shard(X, y, num_shards=2)
    opts = RunOptions(chains=2, num_rounds=10, burn_in=5, seed=2)
    on_ray, local = ExecutionOptions(executor="ray", balance=False), ExecutionOptions(executor="local", balance=False)
    with Run(rs.models.LogisticRegression(), shards, DGLMC(), opts, on_ray) as run:
        seen = ray.get(
            run._handle.actor.__ray_call__.remote(
                lambda host: (host.config.engine, host.pool.engine, os.environ.get("RAYSAMPLER_STARTUP_TIMEOUT_S"))
            )
        )
        for _ in run.chunks():
            pass
        draws = run.result().draws
    assert seen[0] == seen[1] == run.engine == EngineSettings.from_env()
    assert seen[0].startup_timeout_s == 123 and seen[0].shm_spin_us == 250 and not seen[0].coordinator_shards
    assert seen[2] != "123"  # the coordinator's own environment does not have it
    with Run(rs.models.LogisticRegression(), shards, DGLMC(), opts, local) as run:
        for _ in run.chunks():
            pass
        np.testing.assert_array_equal(run.result().draws, draws)


def test_sdk_and_cli_find_the_service_by_one_rule(clean_env, tmp_path):
    from raysampler.client import DEFAULT_URL, service_address

    for name in ("RAYSAMPLER_URL", "RAYSAMPLER_API_KEY", "RAYSAMPLER_API_KEYS", "RAYSAMPLER_API_KEYS_FILE"):
        clean_env.delenv(name, raising=False)
    clean_env.setenv("RAYSAMPLER_DATA_DIR", str(tmp_path))
    assert service_address() == (DEFAULT_URL, None)
    assert service_address("http://h:1/", "k" * 8) == ("http://h:1", "k" * 8)
    clean_env.setenv("RAYSAMPLER_URL", "https://svc:9/")
    clean_env.setenv("RAYSAMPLER_API_KEY", "from-env-key")
    assert service_address() == ("https://svc:9", "from-env-key")
    clean_env.delenv("RAYSAMPLER_API_KEY")
    keys = tmp_path / "api_keys"
    keys.write_text("default:generated-key-123\n")
    keys.chmod(0o600)
    assert service_address() == ("https://svc:9", None)  # only with key_file is the server's key file read
    assert service_address(key_file=True) == ("https://svc:9", "generated-key-123")  # the CLI falls back to it
    from raysampler.client import Client

    with Client() as client:  # and so does the SDK: Client() finds the URL and the key `serve` saved
        assert client.url == "https://svc:9"
        assert client._http.headers["Authorization"] == "Bearer generated-key-123"
    keys.unlink()
    with pytest.raises(ValueError, match="api_key is required"):
        Client()
