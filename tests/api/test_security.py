"""Hardened defaults against a real `raysampler serve` (uvicorn on 127.0.0.1 speaking HTTPS, executor "local"):
security headers on every response, private API key files, HTTPS with a self-signed certificate through the SDK, and
the audit log (what it records, that it never holds a key, and `raysampler audit`'s filters)."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import re
import secrets
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from support.service_helpers import ALICE, BOB, SERVICE_KEYS, hdr, service_env, spec, wait_until

from raysampler.api.security import COMMON_HEADERS, STRICT_CSP
from raysampler.service.audit import AuditLog, AuditRecord, key_id, read_records
from raysampler.service.local import LocalService, free_port

pytestmark = [pytest.mark.service, pytest.mark.slow]  # starts servers of its own (LocalService)

SMALL = {"num_rounds": 40, "burn_in": 10, "chains": 2}
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (cert, key), for the module's HTTPS server."""
    return self_signed_certificate(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def server(tmp_path_factory, certificate) -> Iterator[LocalService]:
    """A real service on its own data directory (its own audit log), sampling in-process (no Ray), speaking HTTPS
    with the self-signed certificate: one server for the headers, the audit log and the HTTPS test."""
    root = tmp_path_factory.mktemp("hardening")
    env = service_env(tempfile.mkdtemp(prefix="rs-hard-"))
    cert, key = certificate
    args = ["--executor", "local", "--ssl-certfile", str(cert), "--ssl-keyfile", str(key)]
    svc = LocalService(root / "data", keys=SERVICE_KEYS, env=env, log=root / "server.log", args=args, ca_file=cert)
    svc.start()
    yield svc
    svc.stop()


@pytest.fixture(scope="module")
def http(server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30, verify=server.verify) as client:
        yield client


def audit_records(server: LocalService) -> list[AuditRecord]:
    return list(read_records(server.data_dir / "audit.log"))


def status_of(http: httpx.Client, run_id: str) -> str:
    return http.get(f"/v1/runs/{run_id}", headers=hdr(ALICE)).json()["status"]


# --- security headers -----------------------------------------------------------------------------------------------


def assert_common_headers(r: httpx.Response) -> None:
    for name, value in COMMON_HEADERS.items():
        assert r.headers.get(name) == value, (r.url, name, r.headers.get(name))
    csp = r.headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in csp and "default-src 'self'" in csp, (r.url, csp)


def test_every_response_carries_the_strict_policy(http):
    for method, path, headers, status in [
        ("GET", "/ui/", {}, 200),
        ("GET", "/ui/app.js", {}, 200),
        ("GET", "/ui/js/api.js", {}, 200),
        ("GET", "/ui/vendor/uPlot.min.css", {}, 200),
        ("GET", "/", {}, 307),
        ("GET", "/v1/health", {}, 200),
        ("GET", "/openapi.json", {}, 200),
        ("GET", "/v1/runs", hdr(ALICE), 200),
        ("GET", "/v1/runs", {}, 401),
        ("GET", "/v1/runs/no-such-run", hdr(ALICE), 404),
        ("POST", "/v1/runs", hdr(ALICE) | {"Content-Type": "application/json"}, 422),
        ("GET", "/no/such/path", {}, 404),
    ]:
        r = http.request(method, path, headers=headers, follow_redirects=False)
        assert r.status_code == status, (path, r.status_code)
        assert_common_headers(r)
        assert r.headers["Content-Security-Policy"] == STRICT_CSP, path
        if path.endswith(".js"):  # the dashboard's ES modules run only when served as JavaScript (and nosniff)
            assert r.headers["content-type"].split(";")[0] == "text/javascript", (path, r.headers["content-type"])
    assert "unsafe-inline" not in STRICT_CSP and "unsafe-eval" not in STRICT_CSP
    assert "script-src" not in STRICT_CSP and "style-src" not in STRICT_CSP  # both fall back to default-src 'self'


def test_the_dashboard_has_no_inline_script_or_style():
    html = (Path(__file__).resolve().parents[2] / "api" / "ui" / "index.html").read_text()
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), "inline <script> in index.html"
    assert "<style" not in html and not re.search(r"\sstyle=", html), "inline style in index.html"
    assert not re.search(r"\son[a-z]+=", html), "inline event handler in index.html"


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
def test_the_docs_pages_allow_only_their_own_inline_scripts(http, path):
    """Swagger UI and Redoc load from the CDN; the inline script that starts Swagger UI is allowed by its hash."""
    import base64
    import hashlib

    r = http.get(path)
    assert r.status_code == 200
    assert_common_headers(r)
    csp = r.headers["Content-Security-Policy"]
    (script_src,) = [d.strip() for d in csp.split(";") if d.strip().startswith("script-src ")]
    assert "unsafe-inline" not in script_src and "unsafe-eval" not in script_src
    inline = re.findall(r"<script>(.*?)</script>", r.text, re.DOTALL)
    hashes = {f"'sha256-{base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()}'" for s in inline}
    assert set(re.findall(r"'sha256-[^']+'", script_src)) == hashes
    assert "https://cdn.jsdelivr.net" in script_src


# --- API keys -------------------------------------------------------------------------------------------------------


def test_the_generated_key_file_is_created_private(tmp_path, monkeypatch):
    """0600 even under umask 0 (so from creation, not by a later chmod), and kept on the next start."""
    from raysampler.cli import KEYS_FILE, ensure_keys
    from raysampler.service.settings import Settings

    def no_chmod(*args: object, **kwargs: object) -> None:
        raise AssertionError("the key file must be created private, not chmod-ed afterwards")

    monkeypatch.setattr(os, "chmod", no_chmod)
    monkeypatch.setattr(Path, "chmod", no_chmod)
    old = os.umask(0)
    try:
        settings = Settings(data_dir=tmp_path / "data", api_keys="", api_keys_file=None)
        (tmp_path / "data").mkdir()
        (tmp_path / "data" / KEYS_FILE).touch(0o666)  # an empty file left by an interrupted start is replaced
        first, generated = ensure_keys(settings)
    finally:
        os.umask(old)
    path = tmp_path / "data" / KEYS_FILE
    assert generated and first.api_keys_file == path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert first.keys() == {generated: "default"}
    again, regenerated = ensure_keys(settings)
    assert regenerated is None and again.keys() == {generated: "default"}


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o602])
def test_a_keys_file_others_may_read_or_write_is_refused_at_start(tmp_path, monkeypatch, capsys, mode):
    """`raysampler serve` refuses to start (exit status 2, the file, its mode and the fix on stderr). Run through the
    CLI's main in this process: the same code a `python -m raysampler.cli serve` runs (whose exit status for a
    refused start test_https_needs_both_the_certificate_and_its_key checks in a subprocess), without a 3-second
    interpreter start-up per mode."""
    from raysampler.cli import main

    keys = tmp_path / "keys"
    keys.write_text(f"alice:{ALICE}\n")
    keys.chmod(mode)
    monkeypatch.delenv("RAYSAMPLER_API_KEYS", raising=False)
    monkeypatch.setenv("RAYSAMPLER_API_KEYS_FILE", str(keys))
    argv = ["serve", "--data-dir", str(tmp_path / "data"), "--executor", "local", "--port", str(free_port())]
    code = main(argv)
    out = capsys.readouterr()
    assert code == 2, out.out + out.err
    assert str(keys) in out.err and f"{mode:04o}" in out.err and f"chmod 600 {keys}" in out.err


def test_private_key_files_pass_the_check(tmp_path, monkeypatch):
    from raysampler.service.settings import check_private

    keys = tmp_path / "keys"
    keys.write_text("x")
    for mode in (0o600, 0o400, 0o700):
        keys.chmod(mode)
        check_private(keys)
    if os.geteuid() == 0 and keys.stat().st_uid == 0:  # a root-owned Kubernetes Secret read by a non-root server
        monkeypatch.setattr(os, "geteuid", lambda: 1000)
        keys.chmod(0o440)
        check_private(keys)
        keys.chmod(0o460)
        with pytest.raises(ValueError, match="chmod 600"):
            check_private(keys)


def test_every_key_is_compared_in_constant_time_whichever_matches(monkeypatch):
    """The tenant dependency runs hmac.compare_digest against every configured key, with no early exit, whether
    the presented key is the first, the last or none of them."""
    from fastapi import HTTPException
    from fastapi.security import HTTPAuthorizationCredentials
    from starlette.requests import Request

    from raysampler.api import deps

    calls: list[tuple[bytes, bytes]] = []
    real = deps.hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(deps.hmac, "compare_digest", counting)
    keys = {f"key-{i}-0123456789": f"t{i}" for i in range(5)}
    svc = SimpleNamespace(keys=keys)
    for given in [*keys, "not-a-key-0123456789"]:
        calls.clear()
        request = Request({"type": "http", "headers": []})
        creds = HTTPAuthorizationCredentials(scheme="Bearer", credentials=given)
        try:
            assert asyncio.run(deps.tenant(request, creds, svc)) == keys[given]  # type: ignore[arg-type]
            assert request.state.tenant == keys[given]
        except HTTPException as exc:
            assert exc.status_code == 401 and given not in keys
        assert len(calls) == len(keys) and {b for _, b in calls} == {k.encode() for k in keys}
        assert request.state.key_id == key_id(given)


# --- HTTPS ----------------------------------------------------------------------------------------------------------


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost (it is its own CA), and its key: (cert, key) PEM."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "raysampler test")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
    return cert_path, key_path


def test_https_with_a_self_signed_certificate_and_the_sdk_verifying_it(server, certificate):
    from raysampler.client import AsyncClient, Client

    svc, (cert, _) = server, certificate
    assert svc.url.startswith("https://127.0.0.1:")
    with Client(svc.url, ALICE, verify=cert) as client:
        run = client.submit(spec(**SMALL, seed=4))
        assert run.wait(timeout=300)["status"] == "SUCCEEDED"
        assert run.draws().shape == (2, 40, 31)

    async def via_async() -> list[str]:
        async with AsyncClient(svc.url, ALICE, verify=str(cert)) as client:
            return [r["id"] async for r in client.runs()]

    assert run.id in asyncio.run(via_async())
    with Client(svc.url, ALICE, retries=0) as unverified, pytest.raises(httpx.ConnectError, match="CERTIFICATE"):
        unverified.version()  # the system's CAs do not know this certificate
    with pytest.raises(httpx.HTTPError):  # plain HTTP on the HTTPS port gets no answer
        httpx.get(svc.url.replace("https://", "http://") + "/v1/health", timeout=5)
    r = httpx.get(svc.url + "/ui/", verify=svc.verify)
    assert r.status_code == 200 and r.headers["Content-Security-Policy"] == STRICT_CSP


def test_https_needs_both_the_certificate_and_its_key(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "raysampler.cli", "serve", "--data-dir", str(tmp_path), "--ssl-certfile", "c.pem"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "--ssl-keyfile" in out.stderr


# --- the audit log --------------------------------------------------------------------------------------------------


def test_actions_are_audited_with_who_what_and_how_it_ended(server, http):
    started = datetime.now(UTC) - timedelta(seconds=1)
    expected: list[tuple[str, str, str | None, str | None, int]] = []  # action, method, run id, data set id, status

    def call(action: str, method: str, path: str, key: str = ALICE, **kwargs: object) -> httpx.Response:
        r = http.request(method, path, headers=hdr(key), **kwargs)  # type: ignore[arg-type]
        run_id = r.json()["id"] if action == "submit" and r.status_code == 202 else None
        ds_id = r.json()["id"] if action == "upload_dataset" and r.status_code == 201 else None
        m = re.match(r"/v1/runs/([^/]+)", path)
        d = re.match(r"/v1/datasets/([^/]+)", path)
        expected.append((action, method, run_id or (m and m.group(1)), ds_id or (d and d.group(1)), r.status_code))
        return r

    a = call("submit", "POST", "/v1/runs", json=spec(**SMALL, seed=1)).json()["id"]
    wait_until(lambda: status_of(http, a) in TERMINAL, what="run a to end")
    assert call("cancel", "POST", f"/v1/runs/{a}/cancel").status_code == 409  # already ended: logged as an error
    b = call("submit", "POST", "/v1/runs", json=spec(num_rounds=400000, burn_in=10, chains=2, seed=2)).json()["id"]
    assert call("cancel", "POST", f"/v1/runs/{b}/cancel").status_code == 202
    wait_until(lambda: status_of(http, b) == "CANCELLED", what="run b cancelled")
    if call("resume", "POST", f"/v1/runs/{b}/resume").status_code == 202:
        call("cancel", "POST", f"/v1/runs/{b}/cancel")
    wait_until(lambda: status_of(http, b) in TERMINAL, what="run b to end")
    for run_id in (a, b):
        assert call("delete_run", "DELETE", f"/v1/runs/{run_id}").status_code == 204
    upload = call("upload_dataset", "POST", "/v1/datasets", key=BOB, files={"file": ("d.csv", b"y,x\n1,2\n0,3\n")})
    assert upload.status_code == 201
    assert call("delete_dataset", "DELETE", f"/v1/datasets/{upload.json()['id']}", key=BOB).status_code == 204
    assert http.get("/v1/runs", headers=hdr(ALICE)).status_code == 200  # reads are not audited

    def mine() -> list[AuditRecord]:
        return [r for r in audit_records(server) if r.when >= started and r.outcome != "refused"]

    wait_until(lambda: len(mine()) >= len(expected), 300, "the audit records")
    records = mine()
    assert sorted((r.action, r.method, r.run_id, r.dataset_id, r.status) for r in records) == sorted(expected)
    for r in records:
        tenant = "bob" if "dataset" in r.action else "alice"
        assert (r.tenant, r.key_id) == (tenant, key_id(SERVICE_KEYS[tenant]))
        assert r.outcome == ("ok" if r.status < 400 else "error") and r.client == "127.0.0.1"
        assert r.path.startswith("/v1/") and datetime.fromisoformat(r.time).utcoffset() == timedelta(0)
        assert started <= r.when <= datetime.now(UTC)
    line = (server.data_dir / "audit.log").read_text().splitlines()[0]
    assert set(json.loads(line)) == set(AuditRecord.__dataclass_fields__)
    assert (server.data_dir / "audit.log").stat().st_mode & 0o777 == 0o600  # tenants, key ids, addresses: private


def test_refused_requests_are_audited_without_the_key(server, http):
    started = datetime.now(UTC) - timedelta(seconds=1)
    wrong = f"wrong-{secrets.token_hex(16)}"
    refused = [
        http.get("/v1/runs", headers=hdr(wrong)),
        http.post("/v1/runs", json=spec(**SMALL), headers=hdr(wrong)),
        http.get("/v1/datasets"),
        http.delete("/v1/runs/run-x", headers={"Authorization": f"Basic {wrong}"}),
    ]
    assert [r.status_code for r in refused] == [401] * 4

    def mine() -> list[AuditRecord]:
        return [r for r in audit_records(server) if r.when >= started and r.outcome == "refused"]

    records = wait_until(lambda: len(m := mine()) >= 4 and m, 300, "the refusals")
    got = sorted((r.method, r.path, r.action, r.key_id, r.tenant, r.status) for r in records)
    assert got == sorted(
        [
            ("GET", "/v1/runs", "request", key_id(wrong), None, 401),
            ("POST", "/v1/runs", "submit", key_id(wrong), None, 401),
            ("GET", "/v1/datasets", "request", None, None, 401),
            ("DELETE", "/v1/runs/run-x", "delete_run", None, None, 401),
        ]
    )
    text = "".join(p.read_text() for p in server.data_dir.glob("audit.log*"))
    for secret in (wrong, ALICE, BOB):
        assert secret not in text


def test_any_403_is_audited_whatever_raised_it(tmp_path):
    """The middleware goes by status: a 403 from a route it knows nothing about is recorded as refused."""
    import warnings

    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.routing import Route

    from raysampler.api.audit import AuditMiddleware

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
        from starlette.testclient import TestClient

    async def forbidden(request: object) -> None:
        raise HTTPException(403, "no")

    log = AuditLog(tmp_path / "audit.log", 10_000, 2)
    app = Starlette(routes=[Route("/v1/secret/{run_id}", forbidden)])
    app.add_middleware(AuditMiddleware, log=log)
    assert TestClient(app).get("/v1/secret/r1").status_code == 403
    log.close()
    (record,) = read_records(tmp_path / "audit.log")
    assert (record.action, record.status, record.outcome, record.path) == ("request", 403, "refused", "/v1/secret/r1")


def write_log(path: Path, records: list[AuditRecord], max_bytes: int) -> None:
    log = AuditLog(path, max_bytes, 20)
    for r in records:
        log.write(r)
    log.close()


def record(t: datetime, tenant: str | None, action: str, run_id: str | None = None) -> AuditRecord:
    return AuditRecord(
        time=t.isoformat(timespec="milliseconds"),
        tenant=tenant,
        key_id=None if tenant is None else key_id(f"{tenant}-key"),
        action=action,
        run_id=run_id,
        dataset_id=None,
        status=401 if tenant is None else 202,
        outcome="refused" if tenant is None else "ok",
        method="POST",
        path="/v1/runs",
        client="10.0.0.7",
    )


def audit_cli(capsys, data_dir: Path, *args: str) -> list[dict[str, object]]:
    from raysampler.cli import main

    assert main(["audit", "--data-dir", str(data_dir), "--format", "json", *args]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_the_audit_command_filters_by_tenant_action_and_time_across_rotated_files(tmp_path, capsys):
    now = datetime.now(UTC)
    ages = [timedelta(days=3), timedelta(hours=5), timedelta(hours=2), timedelta(minutes=40), timedelta(minutes=5)]
    records = [
        record(now - age, tenant, action, f"run-{i}-{tenant}")
        for i, age in enumerate(ages)
        for tenant, action in (("t1", "submit"), ("t2", "cancel"), (None, "request"))
    ]
    write_log(tmp_path / "audit.log", records, max_bytes=1024)  # a few records per file: several rotations
    assert len(list(tmp_path.glob("audit.log.*"))) >= 3
    assert [r.run_id for r in read_records(tmp_path / "audit.log")] == [r.run_id for r in records]  # oldest first

    everything = audit_cli(capsys, tmp_path)
    assert [r["run_id"] for r in everything] == [r.run_id for r in records]
    t1 = audit_cli(capsys, tmp_path, "--tenant", "t1")
    assert [r["run_id"] for r in t1] == [f"run-{i}-t1" for i in range(5)]
    recent = audit_cli(capsys, tmp_path, "--since", "1h")
    assert [r["run_id"] for r in recent] == [f"run-{i}-{t}" for i in (3, 4) for t in ("t1", "t2", None)]
    assert len(audit_cli(capsys, tmp_path, "--since", "30m")) == 3
    assert len(audit_cli(capsys, tmp_path, "--since", "2d")) == 12
    iso = (now - timedelta(hours=3)).replace(tzinfo=None).isoformat()  # naive: read as UTC
    assert len(audit_cli(capsys, tmp_path, "--since", iso)) == 9
    both = audit_cli(capsys, tmp_path, "--tenant", "t2", "--since", "3h", "--action", "cancel")
    assert [r["run_id"] for r in both] == [f"run-{i}-t2" for i in (2, 3, 4)]
    assert audit_cli(capsys, tmp_path, "--tenant", "t1", "--action", "cancel") == []

    from raysampler.cli import main

    assert main(["audit", "--data-dir", str(tmp_path), "--tenant", "t2"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["time", "tenant", "key"] and len(table) == 6
    assert all(" t2 " in line and "cancel" in line and "10.0.0.7" in line for line in table[1:])
    with pytest.raises(SystemExit, match="--since"):
        main(["audit", "--data-dir", str(tmp_path), "--since", "yesterday"])


def test_the_audit_command_reads_the_live_service_log(server, http, capsys):
    """`raysampler audit` as a subprocess against the real service's data directory."""
    r = http.post("/v1/datasets", headers=hdr(BOB), files={"file": ("e.csv", b"y,x\n1,2\n0,3\n")})
    assert r.status_code == 201
    ds = r.json()["id"]
    out = wait_until(
        lambda: (
            ds
            in (
                p := subprocess.run(
                    [sys.executable, "-m", "raysampler.cli", "audit", "--data-dir", str(server.data_dir)]
                    + ["--tenant", "bob", "--action", "upload_dataset", "--since", "10m", "--format", "json"],
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
            ).stdout
            and p
        ),
        30,
        "the upload in `raysampler audit`",
    )
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert rows and all(r["tenant"] == "bob" and r["action"] == "upload_dataset" for r in rows)
    assert ds in {r["dataset_id"] for r in rows}
