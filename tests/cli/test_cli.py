"""The `raysampler` CLI against the real service (fixture `service`), and the demo end to end."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile

import pytest
from support.service_helpers import SERVICE_KEYS, service_env

pytestmark = pytest.mark.service  # every test talks to a server: the `service` fixture's, or the demo's own


def cli(service, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`raysampler ARGS --url URL --api-key KEY` through the CLI's `main` in this process: the code `python -m
    raysampler.cli` runs, without an interpreter start-up per call (the module's run is submitted, a closed pipe met
    and a wrong key refused by the real command in a subprocess). Returns its exit status (as Python's exit gives it
    for a SystemExit), stdout and stderr."""
    from raysampler.cli import main

    argv = [*args[:1], "--url", service.url, "--api-key", SERVICE_KEYS["alice"], *args[1:]]
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            code = main(argv)
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:  # SystemExit("error: ..."): Python prints the message to stderr and exits with 1
                print(exc.code, file=sys.stderr)
                code = 1
    out = subprocess.CompletedProcess(argv, code, stdout.getvalue(), stderr.getvalue())
    if check:
        assert out.returncode == 0, out.stderr
    return out


def cli_process(service, *args: str) -> subprocess.CompletedProcess:
    """The real command, `python -m raysampler.cli ARGS --url URL --api-key KEY`, in a subprocess."""
    out = subprocess.run(_cli_cmd(service, *args) + list(args[1:]), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out


@pytest.fixture(scope="module")
def submitted(service, tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "spec.yaml"
    path.write_text(
        "model:\n  family: logistic_regression\n  prior_scale: 1.0\n"
        "data:\n  dataset: builtin:breast_cancer\nnum_shards: 2\nchains: 3\nnum_rounds: 120\n"
        "burn_in: 20\nseed: 5\n"
    )
    out = cli_process(service, "submit", str(path), "--wait", "--format", "json")
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_submit_yaml_waits_and_reports(submitted):
    assert submitted["status"] == "SUCCEEDED" and submitted["progress"]["draws_stored"] == 120


def test_status_latest_and_list(service, submitted):
    latest = json.loads(cli(service, "status", "latest", "--format", "json").stdout)
    assert latest["id"] == submitted["id"]
    listed = json.loads(cli(service, "status", "--format", "json").stdout)
    assert submitted["id"] in {r["id"] for r in listed}
    table = cli(service, "status", submitted["id"]).stdout
    assert submitted["id"] in table and "SUCCEEDED" in table and "stopped: num_rounds" in table
    trips = latest["network"]["trips"]
    assert f"round trips {trips['total']} (set-up {trips['setup']}, warm-up {trips['warmup']}" in table


def test_draws_and_summary(service, submitted):
    lines = cli(service, "draws", submitted["id"], "--format", "json").stdout.splitlines()
    assert len(lines) == 3 * 120
    first = json.loads(lines[0])
    assert (first["offset"], first["chain"], first["index"], len(first["values"])) == (0, 0, 0, 31)
    tail = cli(service, "draws", submitted["id"], "--start", "357").stdout.splitlines()
    assert len(tail) == 4 and tail[1].split()[:2] == ["119", "0"]
    assert tail[0].split()[:2] == ["draw", "chain"] and submitted["param_names"][0] in tail[0]
    rows = json.loads(cli(service, "summary", submitted["id"], "--format", "json").stdout)
    assert len(rows) == 31 and {"mean", "sd", "ess_bulk", "r_hat"} <= set(rows[0])
    # "latest" is a run id wherever one is taken (here the module's own run is the newest of the tenant's runs)
    newest = json.loads(cli(service, "status", "latest", "--format", "json").stdout)["id"]
    assert json.loads(cli(service, "summary", "latest", "--format", "json").stdout) == json.loads(
        cli(service, "summary", newest, "--format", "json").stdout
    )
    assert len(cli(service, "draws", "latest", "--format", "json").stdout.splitlines()) == len(
        cli(service, "draws", newest, "--format", "json").stdout.splitlines()
    )


def test_errors_exit_nonzero_with_the_servers_message(service, submitted, tmp_path):
    out = cli(service, "cancel", submitted["id"], check=False)
    assert out.returncode == 2 and "409" in out.stderr and "already SUCCEEDED" in out.stderr
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(
            {"model": {"family": "logistic_regression"}, "data": {"dataset": "builtin:breast_cancer"}, "chains": 0}
        )
    )
    out = cli(service, "submit", str(bad), check=False)
    assert out.returncode == 2 and "chains" in out.stderr and "422" in out.stderr
    out = subprocess.run(
        [sys.executable, "-m", "raysampler.cli", "status", "--url", service.url, "--api-key", "wrong-key-123456"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "401" in out.stderr


def test_demo_end_to_end(tmp_path):
    """The README's main command, shortened: a local service, a DG-LMC run through the SDK, streamed draws, summary.
    Ray's auth mode is left unset, as on a fresh machine: the private Ray keeps Ray's own choice (token auth) and
    its notice is not printed."""
    env = os.environ | service_env(tempfile.mkdtemp(prefix="rs-demo-"), own_ray=True)
    env.pop("RAY_AUTH_MODE")
    out = subprocess.run(
        [sys.executable, "-m", "raysampler.demo", "--chains", "4", "--rounds", "60", "--burn-in", "20"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    text = out.stdout
    assert "service up at http://127.0.0.1:" in text and "API key (tenant 'demo')" in text
    assert text.count("streamed draw") == 3 and "SUCCEEDED" in text
    assert "ess_bulk" in text and "beta[worst fractal dimension]" in text and "ESS/s" in text
    assert "Token authentication is enabled" not in out.stdout + out.stderr


def _cli_cmd(service, *args: str) -> list[str]:
    return [sys.executable, "-m", "raysampler.cli", *args[:1], "--url", service.url, "--api-key", SERVICE_KEYS["alice"]]


def test_ppc_prints_the_check_and_draws_it(service, submitted, tmp_path):
    """`raysampler ppc`: a statistic as JSON (with its p-value), histograms as a table and drawn into a PNG."""
    import numpy as np

    import raysampler as rs

    args = ("--kind", "stat", "--stat", "mean", "--draws", "30", "--format", "json")
    out = json.loads(cli(service, "ppc", submitted["id"], *args).stdout)
    _, y = rs.datasets.load("breast_cancer")
    assert out["kind"] == "stat" and out["n"] == len(y) and len(out["replicated"]) == 30
    assert out["observed"] == pytest.approx(float(np.mean(y)), rel=1e-12) and 0.0 <= out["p_value"] <= 1.0
    png = tmp_path / "hist.png"
    table = cli(service, "ppc", submitted["id"], "--kind", "hist", "--plot", str(png)).stdout
    assert "y_rep median [5%, 95%]" in table and "[-0.5, 0.5)" in table
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_draws_into_a_closed_pipe_exits_quietly(service, submitted):
    cmd = _cli_cmd(service, "draws") + [submitted["id"]]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # 360 lines: more than a pipe holds
    assert proc.stdout is not None and proc.stderr is not None
    first = [proc.stdout.readline(), proc.stdout.readline()]  # what `| head -2` reads, then it goes away
    proc.stdout.close()
    code = proc.wait(timeout=120)
    err = proc.stderr.read().decode()
    assert first[0].split()[:2] == [b"draw", b"chain"]
    assert err == "" and code in (0, 141), (code, err)


LIGHT_CLI = """
import contextlib, io, json, sys
from raysampler.extras import EXTRAS
for names in EXTRAS.values():  # as in `pip install raysampler` alone: no engine, no server code
    for m in names:
        sys.modules[m] = None
from raysampler.cli import main
runs = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
        except BaseException as exc:
            code, err = repr(exc), io.StringIO(repr(exc))
    runs.append([argv[0], code, out.getvalue(), err.getvalue()])
print(json.dumps(runs))
"""


def test_client_commands_work_without_the_engine_and_the_service(service, submitted, tmp_path):
    """The CLI's remote commands as `pip install raysampler` alone runs them: with every module of the extras
    unimportable, submit (YAML, --wait), status, draws, summary, compare, loo and ppc answer as on the full install."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "model:\n  family: logistic_regression\n  prior_scale: 1.0\ndata:\n  dataset: builtin:breast_cancer\n"
        "num_shards: 2\nchains: 2\nnum_rounds: 30\nseed: 3\n"
    )
    remote = ["--url", service.url, "--api-key", SERVICE_KEYS["alice"]]
    rid = submitted["id"]
    commands = [
        ["submit", str(spec), "--wait", *remote],
        ["status", rid, *remote],
        ["draws", rid, "--start", "355", *remote],
        ["summary", rid, *remote],
        ["compare", rid, "latest", "--draws", "50", "--format", "json", *remote],  # latest: the run just submitted
        ["loo", rid, "--draws", "50", *remote],
        ["ppc", rid, "--kind", "stat", "--draws", "20", *remote],
    ]
    proc = subprocess.run(
        [sys.executable, "-c", LIGHT_CLI, json.dumps(commands)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = {name: (code, out, err) for name, code, out, err in json.loads(proc.stdout)}
    assert all(code == 0 for code, _, _ in runs.values()), {k: v for k, v in runs.items() if v[0] != 0}
    assert "SUCCEEDED" in runs["submit"][1] and rid in runs["status"][1]
    assert runs["draws"][1].split()[:2] == ["draw", "chain"] and len(runs["draws"][1].splitlines()) == 6
    assert "Population-Level Effects" in runs["summary"][1] and "Rhat" in runs["summary"][1]
    assert "elpd_loo" in runs["loo"][1] and "T = mean" in runs["ppc"][1]
    assert rid in {r["run_id"] for r in json.loads(runs["compare"][1])}


def test_help_does_not_import_the_engine():
    code = (
        "import sys, contextlib, io\n"
        "from raysampler import cli\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    cli.main(['--help'])\n"
        "print(sorted(m for m in ('numpy', 'scipy', 'httpx', 'pydantic', 'raysampler.sampling') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_resume_and_delete(service):
    from support.service_helpers import wait_until

    from raysampler.client import Client

    with Client(service.url, SERVICE_KEYS["alice"]) as c:
        run = c.submit(
            {
                "model": {"family": "logistic_regression"},
                "data": {"dataset": "builtin:breast_cancer"},
                "num_shards": 2,
                "chains": 2,
                "num_rounds": 10**6,
                "burn_in": 0,
            }
        )
        next(run.stream_draws(follow=True))  # sampling, with a checkpoint
        run.cancel()
        run.wait(timeout=120)
        resumed = json.loads(cli(service, "resume", run.id, "--format", "json").stdout)
        assert resumed["status"] in ("PENDING", "RUNNING") and resumed["stop_reason"] is None
        run.cancel()
        info = wait_until(lambda: (i := run.info())["status"] == "CANCELLED" and i, what="CANCELLED")
        assert info["stop_reason"] == "cancelled"
    assert cli(service, "delete", run.id).stdout.strip() == f"{run.id}  deleted"
    out = cli(service, "status", run.id, check=False)
    assert out.returncode == 2 and "404" in out.stderr


def test_status_of_an_auto_run_shows_convergence_progress(service, tmp_path):
    path = tmp_path / "auto.yaml"
    path.write_text(
        "model:\n  family: logistic_regression\ndata:\n  dataset: builtin:breast_cancer\nnum_shards: 2\nchains: 3\n"
        "num_rounds: auto\nmax_rounds: 3000\ntarget_ess: 40\nburn_in: 50\nseed: 2\n"
    )
    info = json.loads(cli(service, "submit", str(path), "--wait", "--format", "json").stdout.strip().splitlines()[-1])
    assert info["progress"]["basis"] == "convergence"
    table = cli(service, "status", info["id"]).stdout
    assert "converged 100%" in table and "max R-hat" in table and f"stopped: {info['stop_reason']}" in table


def test_submit_with_name_and_tags_then_find_them(service, tmp_path):
    from raysampler.client import Client

    path = tmp_path / "named.yaml"
    path.write_text(
        "model:\n  family: logistic_regression\ndata:\n  dataset: builtin:breast_cancer\nnum_shards: 2\nchains: 2\n"
        "num_rounds: 20\nburn_in: 5\nseed: 11\n"
    )
    flags = ["--name", "cli-sweep", "--tag", "lr=0.5", "--tag", "who=cli", "--format", "json"]
    info = json.loads(cli(service, "submit", str(path), *flags).stdout)
    assert (info["name"], info["tags"]) == ("cli-sweep", {"lr": "0.5", "who": "cli"})
    found = json.loads(cli(service, "status", "--tag", "who=cli", "--tag", "lr=0.5", "--format", "json").stdout)
    assert [r["id"] for r in found] == [info["id"]]
    assert json.loads(cli(service, "status", "--name", "no-such-name", "--format", "json").stdout) == []
    assert f"{info['id']} 'cli-sweep'" in cli(service, "status", "--name", "cli-sweep").stdout
    bad = cli(service, "submit", str(path), "--tag", "novalue", check=False)
    assert bad.returncode != 0 and "key=value" in bad.stderr
    with Client(service.url, SERVICE_KEYS["alice"]) as c:
        body = {k: v for k, v in info["spec"].items() if k not in ("name", "tags", "run_id")} | {"seed": 12}
        run = c.submit(body, name="sdk-run", tags={"who": "sdk"})
        assert run.info()["tags"] == {"who": "sdk"}
        assert [r["id"] for r in c.runs(tags={"who": "sdk"}, name="sdk-run")] == [run.id]
        run.wait(timeout=120)


def test_models_lists_the_families_and_their_parameters(service):
    out = cli(service, "models").stdout
    assert "logistic_regression  (built-in)" in out and "linear_regression  (built-in)" in out
    linear = out.split("linear_regression  (built-in)")[1].split("\n")[1]
    assert "noise_sd" in linear and "group_effects" in linear, linear
    families = json.loads(cli(service, "models", "--format", "json").stdout)
    assert {f["name"] for f in families} >= {"logistic_regression", "poisson_regression"}


def test_loo_compare_evaluate_and_predict(service, tmp_path):
    """Two linear-regression runs on diabetes: `loo` and `compare` give the service's numbers, `evaluate` reports
    the regression metrics, `predict` one line per row."""
    ids = []
    for seed in (1, 2):
        path = tmp_path / f"spec{seed}.yaml"
        path.write_text(
            "model:\n  family: linear_regression\ndata:\n  dataset: builtin:diabetes\nnum_shards: 2\nchains: 2\n"
            f"num_rounds: 200\nburn_in: 50\nseed: {seed}\n"
        )
        ids.append(
            json.loads(cli(service, "submit", str(path), "--wait", "--format", "json").stdout.splitlines()[-1])["id"]
        )
    lo = json.loads(cli(service, "loo", ids[0], "--format", "json").stdout)
    assert lo["n_data_points"] == 442 and lo["elpd"] < 0 and lo["k_flat"] + lo["k_ok"] + lo["k_high"] == 442
    table = cli(service, "loo", ids[0]).stdout
    assert f"elpd_loo {lo['elpd']:.2f}" in table and "Pareto k < 0.7" in table
    rows = json.loads(cli(service, "compare", ids[0], ids[1], "--format", "json").stdout)
    assert {r["run_id"] for r in rows} == set(ids) and rows[0]["rank"] == 0 and rows[1]["dse"] > 0
    assert ids[0] in cli(service, "compare", *ids).stdout
    ev = json.loads(
        cli(service, "evaluate", ids[0], "--data", '{"dataset": "builtin:diabetes"}', "--format", "json").stdout
    )
    assert ev["kind"] == "regression" and ev["n"] == 442 and 0 < ev["coverage_90"] <= 1
    assert "rmse" in cli(service, "evaluate", ids[0], "--data", '{"dataset": "builtin:diabetes"}').stdout
    import pandas as pd

    import raysampler as rs

    X, y = rs.datasets.load("diabetes")
    csv = tmp_path / "new.csv"
    pd.DataFrame(X[:5], columns=rs.datasets.columns("diabetes")).assign(y=y[:5]).to_csv(csv, index=False)
    ds = json.loads(cli(service, "upload", str(csv), "--format", "json").stdout)["id"]
    lines = [
        json.loads(s)
        for s in cli(service, "predict", ids[0], "--dataset-id", ds, "--format", "json").stdout.splitlines()
    ]
    assert [ln["row"] for ln in lines] == list(range(5)) and all(isinstance(ln["value"], float) for ln in lines)
    bad = cli(service, "loo", ids[0], "--draws", "0", check=False)
    assert bad.returncode == 2 and "--draws" in bad.stderr


def test_serve_on_a_taken_port_exits_3_naming_it_before_anything_starts(tmp_path):
    """`serve` binds its port before the app's start-up (which starts Ray): a taken port is refused at once, with
    uvicorn's exit status 3 and the address and its settings named; a port found free cannot be taken meanwhile. In a
    process of its own: uvicorn configures logging (`logging.config.dictConfig` closes the handlers it finds), which
    in this process would close the test runner's own."""
    import socket

    env = os.environ | {"RAYSAMPLER_API_KEYS": f"alice:{SERVICE_KEYS['alice']}"}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = ["serve", "--data-dir", str(tmp_path / "data"), "--executor", "local", "--port", str(port)]
        proc = subprocess.run(
            [sys.executable, "-m", "raysampler.cli", *args], env=env, capture_output=True, text=True, timeout=120
        )
    assert proc.returncode == 3, proc.stderr
    assert f"127.0.0.1:{port}" in proc.stderr and "RAYSAMPLER_PORT" in proc.stderr


def test_submit_with_secure_sums_then_read_one_sites_ledger(service, tmp_path):
    """`submit --secure-sums` sets the spec's field; `ledger ID --site` prints that site's shards only (a table, or
    the REST answer as JSON), and a site the run has no shard on fails naming it."""
    path = tmp_path / "secure.yaml"
    path.write_text(
        "model:\n  family: logistic_regression\ndata:\n  dataset: builtin:breast_cancer\nnum_shards: 2\nchains: 2\n"
        "num_rounds: 30\nburn_in: 10\nseed: 3\n"
    )
    out = cli(service, "submit", str(path), "--secure-sums", "--wait", "--format", "json").stdout
    info = json.loads(out.strip().splitlines()[-1])
    assert info["status"] == "SUCCEEDED" and info["spec"]["secure_sums"] is True
    table = cli(service, "ledger", info["id"], "--site", "shard-1").stdout
    assert table.startswith("shard 1 ") and "shard 0 " not in table
    assert any(line.split()[0] == "z/rho" and line.split()[-1] == "masked" for line in table.splitlines()[2:])
    body = json.loads(cli(service, "ledger", info["id"], "--format", "json").stdout)
    assert [s["shard"] for s in body["shards"]] == [0, 1]
    z = next(r for r in body["shards"][0]["releases"] if r["quantity"] == "z/rho")
    assert (z["messages"], z["shape"], z["mode"]) == (40, [2, 31], "masked")
    bad = cli(service, "ledger", info["id"], "--site", "nowhere", check=False)
    assert bad.returncode != 0 and "no shard on site 'nowhere'" in bad.stderr


def test_a_survival_family_from_a_spec_file(service, tmp_path):
    """The CLI spec takes the families brms users fit as REST does: an upload (its header names the columns), a YAML
    spec with a Weibull formula and its censoring (`y | cens(censored) ~ x1 + x2`) and a gamma prior on the shape;
    `summary` prints brms' fit with the family, its links and the shape among the distributional parameters."""
    from support.reference_problems import FAMILY_PROBLEMS

    up = json.loads(cli(service, "upload", str(FAMILY_PROBLEMS["family_weibull"].data_path), "--format", "json").stdout)
    path = tmp_path / "weibull.yaml"
    path.write_text(
        "model:\n  formula: y | cens(censored) ~ x1 + x2\n  family: weibull\n"
        "  shape_prior:\n    gamma: {shape: 1.0, rate: 1.0}\n"
        f"data:\n  dataset_id: {up['id']}\nnum_shards: 2\nchains: 2\nnum_rounds: 60\nburn_in: 20\nseed: 3\n"
    )
    info = json.loads(cli(service, "submit", str(path), "--wait", "--format", "json").stdout.strip().splitlines()[-1])
    assert info["status"] == "SUCCEEDED", info
    assert info["param_names"] == ["beta[(Intercept)]", "beta[x1]", "beta[x2]", "shape"]
    text = cli(service, "summary", info["id"]).stdout
    assert " Family: weibull" in text and "Links: mu = log; shape = identity" in text, text
    assert "Distributional Parameters:" in text and "\nshape " in text, text
