"""deploy/k8s: every kustomization renders, its objects validate offline against the Kubernetes
schemas (kubernetes-validate, strict), KEDA objects pass our own check of the fields we use, and
the objects agree with each other and with the worker's settings. Secure defaults: Redis wants
the password of a Secret (every Compactor container's URL carries it, KEDA's triggers too), the
image is versioned, only the overlays need KEDA, and a worker without COMPACTOR_MODELS refuses to
start."""

from __future__ import annotations

import bisect
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from api_client.contract.errors import ConfigurationError
from api_client.contract.job_enums import CompactReason, JobKind
from api_client.contract.routing import QUEUES, redis_transport_options, route_for
from api_client.contract.settings import ClientSettings
from worker.settings import SETTING_NAMES, WorkerSettings, check_startup

REPO = Path(__file__).resolve().parents[1]
K8S = REPO / "deploy" / "k8s"
KUBERNETES_VERSION = "1.30.0"  # the oldest release the manifests promise to work on
KUSTOMIZATIONS = sorted(p.parent for p in K8S.rglob("kustomization.yaml"))
OVERLAYS = [p for p in KUSTOMIZATIONS if p.parent.name == "overlays"]
Obj = dict[str, Any]


def _kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("kubectl is required in CI to render deploy/k8s (kubectl kustomize)")
        pytest.skip("kubectl is not installed: cannot render the kustomizations")
    return path


_rendered: dict[Path, list[Obj]] = {}


def render(directory: Path) -> list[Obj]:
    if directory not in _rendered:
        out = subprocess.run([_kubectl(), "kustomize", str(directory)], capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        _rendered[directory] = [d for d in yaml.safe_load_all(out.stdout) if d]
    return _rendered[directory]


def named(objs: list[Obj], kind: str, name: str) -> Obj:
    [obj] = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def config(objs: list[Obj]) -> dict[str, str]:
    [cm] = [o for o in objs if o["kind"] == "ConfigMap"
            and o["metadata"]["name"].startswith("compactor-config")]
    return dict(cm["data"])


def container(objs: list[Obj], deployment: str) -> Obj:
    [found] = named(objs, "Deployment", deployment)["spec"]["template"]["spec"]["containers"]
    return found


def env_of(found: Obj) -> dict[str, Obj]:
    return {e["name"]: e for e in found.get("env", [])}


COMPACTOR_DEPLOYMENTS = ("compactor-worker", "compactor-flower", "compactor-api")
REDIS_SECRET = {"name": "compactor-redis", "key": "password"}


def containers(objs: list[Obj]) -> Iterator[tuple[Obj, Obj]]:
    for obj in objs:
        if obj["kind"] in ("Deployment", "StatefulSet"):
            for container in obj["spec"]["template"]["spec"]["containers"]:
                yield obj, container


def test_there_are_a_base_and_both_broker_overlays() -> None:
    assert {p.relative_to(K8S).as_posix() for p in KUSTOMIZATIONS} == {
        "base", "overlays/redis-broker", "overlays/rabbitmq-broker"}


# -- schemas --------------------------------------------------------------------------------
@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda p: p.name)
def test_every_object_validates_offline(directory: Path) -> None:
    import kubernetes_validate
    from kubernetes_validate.utils import SchemaNotFoundError

    checked = 0
    for obj in render(directory):
        if obj["apiVersion"].startswith("keda.sh/"):
            continue  # a CRD: test_keda_scaled_object checks the fields we use
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except SchemaNotFoundError:
            pytest.fail(f"no schema for {obj['apiVersion']} {obj['kind']}: not a core object")
        checked += 1
    assert checked >= 10


def test_the_validator_is_strict_and_offline() -> None:
    """A misspelled field fails (so a green run means something), with no network here."""
    import kubernetes_validate
    from kubernetes_validate.utils import ValidationError

    base = render(K8S / "base")
    worker = dict(named(base, "Deployment", "compactor-worker"))
    worker["spec"] = {**worker["spec"], "terminationGracePeriod": 330}
    with pytest.raises(ValidationError):
        kubernetes_validate.validate(worker, KUBERNETES_VERSION, strict=True)


# -- the worker -----------------------------------------------------------------------------
@pytest.mark.parametrize("directory", OVERLAYS, ids=lambda p: p.name)
def test_worker_outlives_its_job_deadline(directory: Path) -> None:
    objs = render(directory)
    settings = config(objs)
    deadline = float(settings["COMPACTOR_JOB_DEADLINE_S"])
    pod = named(objs, "Deployment", "compactor-worker")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > deadline
    assert float(settings["COMPACTOR_VISIBILITY_TIMEOUT_S"]) > deadline


@pytest.mark.parametrize("directory", OVERLAYS, ids=lambda p: p.name)
def test_worker_probes_and_metrics_use_the_metrics_endpoint(directory: Path) -> None:
    objs = render(directory)
    settings = config(objs)
    worker = named(objs, "Deployment", "compactor-worker")
    [container] = worker["spec"]["template"]["spec"]["containers"]
    port = int(settings["COMPACTOR_METRICS_PORT"])
    assert settings["COMPACTOR_METRICS_ADDRESS"] == "0.0.0.0"  # loopback could not be scraped
    [declared] = [p for p in container["ports"] if p["name"] == "metrics"]
    assert declared["containerPort"] == port
    paths = {kind: container[kind]["httpGet"]["path"]
             for kind in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert paths == {"startupProbe": "/livez", "livenessProbe": "/livez",
                     "readinessProbe": "/readyz"}
    assert all(container[k]["httpGet"]["port"] == "metrics" for k in paths)
    notes = worker["spec"]["template"]["metadata"]["annotations"]
    assert notes == {"prometheus.io/scrape": "true", "prometheus.io/port": str(port),
                     "prometheus.io/path": "/metrics"}


@pytest.mark.parametrize("directory", OVERLAYS, ids=lambda p: p.name)
def test_every_setting_is_real_and_keys_come_from_secrets(directory: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    objs = render(directory)
    known = {f"COMPACTOR_{name.upper()}" for name in SETTING_NAMES}
    assert set(config(objs)) <= known
    monkeypatch.chdir(tmp_path)
    for name, value in config(objs).items():
        monkeypatch.setenv(name, value)
    settings = WorkerSettings()  # the container's environment is valid
    assert settings.metrics_enabled and settings.job_deadline_s < settings.visibility_timeout_s
    worker = container(objs, "compactor-worker")
    secrets = [s["secretRef"] for s in worker["envFrom"] if "secretRef" in s]
    assert secrets == [{"name": "compactor-api-keys"}]  # required: no optional
    flower = (named(objs, "Deployment", "compactor-flower")
              ["spec"]["template"]["spec"]["containers"][0])
    [auth] = [e for e in flower["env"] if e["name"] == "FLOWER_BASIC_AUTH"]
    assert auth["valueFrom"]["secretKeyRef"] == {"name": "compactor-flower-auth",
                                                 "key": "basic-auth"}
    assert "optional" not in auth["valueFrom"]["secretKeyRef"]  # no auth: no Flower


@pytest.mark.parametrize("directory", OVERLAYS, ids=lambda p: p.name)
def test_every_container_has_requests_and_limits(directory: Path) -> None:
    for owner, container in containers(render(directory)):
        resources = container.get("resources", {})
        assert {"cpu", "memory"} <= set(resources.get("requests", {})), owner["metadata"]["name"]
        assert "memory" in resources.get("limits", {}), owner["metadata"]["name"]
        assert container["securityContext"]["allowPrivilegeEscalation"] is False


def _bytes(quantity: str) -> int:
    """``1536mb`` (redis.conf) or ``2Gi`` (Kubernetes) in bytes."""
    units = {"gb": 2**30, "mb": 2**20, "kb": 2**10, "gi": 2**30, "mi": 2**20, "ki": 2**10}
    number, unit = quantity[:-2], quantity[-2:].lower()
    return int(number) * units[unit]


def test_redis_is_durable_and_never_evicts() -> None:
    objs = render(K8S / "base")
    redis = named(objs, "StatefulSet", "compactor-redis")
    found = redis["spec"]["template"]["spec"]["containers"][0]
    args = " ".join(found["args"])
    assert "--appendonly yes" in args and "--maxmemory-policy noeviction" in args
    # Full at maxmemory (writes refused, typed), never killed at the container's limit.
    maxmemory = found["args"][found["args"].index("--maxmemory") + 1]
    limit = _bytes(found["resources"]["limits"]["memory"])
    assert 0.5 * limit <= _bytes(maxmemory) <= 0.8 * limit
    [claim] = redis["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"]


# -- Redis's password -------------------------------------------------------------------------
def test_redis_wants_the_password_of_its_secret_and_its_probes_give_it() -> None:
    """The Secret's password reaches redis-server on stdin through the same script compose runs
    (tests/test_deploy.py runs that one against a real redis-server), never its arguments; the
    probes' redis-cli authenticates with REDISCLI_AUTH and looks for PONG (NOAUTH exits 0)."""
    from test_deploy import redis_command

    found = named(render(K8S / "base"), "StatefulSet", "compactor-redis")[
        "spec"]["template"]["spec"]["containers"][0]
    compose_command, compose_check = redis_command()
    script_end = compose_command.index("redis-server")
    assert found["command"] == compose_command[:script_end + 1]
    def options(args: list[str]) -> dict[str, str]:
        return dict(zip(args[::2], args[1::2], strict=True))

    assert options(found["args"]) == options(compose_command[script_end + 1:]) | {"--dir": "/data"}
    assert not any("requirepass" in arg or "$" in arg for arg in found["args"])
    auth = env_of(found)["REDISCLI_AUTH"]
    assert auth["valueFrom"]["secretKeyRef"] == REDIS_SECRET  # required: no optional
    for probe in ("readinessProbe", "livenessProbe"):
        assert found[probe]["exec"]["command"] == ["sh", "-c", compose_check]


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda p: p.name)
def test_every_compactor_container_reaches_redis_with_the_password(directory: Path) -> None:
    """Worker, Flower and the API: COMPACTOR_REDIS_URL takes $(REDIS_PASSWORD), a variable from
    the Secret defined before it (Kubernetes expands only those); no ConfigMap holds a URL."""
    objs = render(directory)
    assert "COMPACTOR_REDIS_URL" not in config(objs)
    service = named(objs, "Service", "compactor-redis")
    for deployment in COMPACTOR_DEPLOYMENTS:
        env = container(objs, deployment)["env"]
        names = [e["name"] for e in env]
        assert names.index("REDIS_PASSWORD") < names.index("COMPACTOR_REDIS_URL"), deployment
        assert env_of({"env": env})["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == REDIS_SECRET
        url = env_of({"env": env})["COMPACTOR_REDIS_URL"]["value"]
        host = f"{service['metadata']['name']}:{service['spec']['ports'][0]['port']}"
        assert url == f"redis://:$(REDIS_PASSWORD)@{host}/0", deployment
        # the URL as the container gets it is one the client takes
        from api_client.contract.settings import ClientSettings

        expanded = url.replace("$(REDIS_PASSWORD)", "Secret-0123456789abcdef")
        assert ClientSettings(redis_url=expanded).redis_url == expanded


# -- the image and KEDA -----------------------------------------------------------------------
def _version() -> str:
    import tomllib

    version: str = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    return version


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda p: p.name)
def test_every_compactor_container_runs_the_versioned_image(directory: Path) -> None:
    objs = render(directory)
    for deployment in COMPACTOR_DEPLOYMENTS:
        assert container(objs, deployment)["image"] == f"compactor:{_version()}", deployment
    assert not any(c["image"].endswith(":latest") or ":" not in c["image"]
                   for _, c in containers(objs))


def test_only_the_overlays_need_keda_and_they_say_so() -> None:
    assert not any(o["apiVersion"].startswith("keda.sh/") for o in render(K8S / "base"))
    for overlay in OVERLAYS:
        assert [o["kind"] for o in render(overlay) if o["apiVersion"].startswith("keda.sh/")] == [
            "ScaledObject"]
        assert "Needs KEDA in the cluster" in (overlay / "kustomization.yaml").read_text()
    assert "needs no KEDA" in (K8S / "base" / "kustomization.yaml").read_text()


# -- models ---------------------------------------------------------------------------------
@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda p: p.name)
def test_a_worker_without_models_refuses_to_start(directory: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    """The base requires COMPACTOR_MODELS (it used to ship COMPACTOR_MODELS=[] and an optional
    keys Secret: the no-LLM summarizer in silence); [{"provider": "extractive"}] chooses it."""
    settings = config(render(directory))
    assert settings["COMPACTOR_REQUIRE_MODELS"] == "true" and "COMPACTOR_MODELS" not in settings
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.startswith("COMPACTOR_")]:
        monkeypatch.delenv(name)
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError, match="COMPACTOR_REQUIRE_MODELS"):
        check_startup(WorkerSettings(metrics_port=0), {})
    monkeypatch.setenv("COMPACTOR_MODELS", '[{"provider": "extractive"}]')
    check_startup(WorkerSettings(metrics_port=0), {})


def _readme_overlay() -> str:
    """The overlay docs/deploying.md shows (the README's Deploying section moved there)."""
    readme = (REPO / "docs" / "deploying.md").read_text()
    blocks = [b for b in re.findall(r"^```yaml\n(.*?)^```$", readme, re.S | re.M)
              if "behavior: merge" in b and "COMPACTOR_MODELS" in b]
    assert len(blocks) == 1, "deploying.md: one yaml block of an overlay setting COMPACTOR_MODELS"
    return blocks[0]


def test_the_readmes_overlay_sets_the_models_and_the_image(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The overlay of one's own the README shows renders on ours, and its workers start."""
    text = _readme_overlay()
    [ours] = re.findall(r"^  - \.\./(redis-broker)\b.*$", text, re.M)
    mine = tmp_path / "mine"
    mine.mkdir()
    relative = os.path.relpath(K8S / "overlays" / ours, mine)
    (mine / "kustomization.yaml").write_text(text.replace(f"../{ours}", relative, 1))
    objs = render(mine)
    settings = config(objs)
    worker = container(objs, "compactor-worker")
    assert [e["configMapRef"]["name"] for e in worker["envFrom"] if "configMapRef" in e] == [
        next(o["metadata"]["name"] for o in objs if o["kind"] == "ConfigMap")]
    assert settings["COMPACTOR_REQUIRE_MODELS"] == "true"
    images = {container(objs, d)["image"] for d in COMPACTOR_DEPLOYMENTS}
    assert len(images) == 1 and not images.pop().startswith("compactor:")  # your registry's
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.startswith("COMPACTOR_")]:
        monkeypatch.delenv(name)
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    chosen = WorkerSettings(metrics_port=0)
    keys = {c.api_key_env: "sk-from-the-secret" for c in chosen.models if c.api_key_env}
    assert chosen.models and keys  # a model that needs the keys Secret (not optional)
    check_startup(chosen, keys)
    with pytest.raises(ConfigurationError, match="not set"):
        check_startup(chosen, {})


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("directory", OVERLAYS, ids=lambda p: p.name)
def test_selectors_select_pods(directory: Path) -> None:
    objs = render(directory)
    pods = [o["spec"]["template"]["metadata"]["labels"] for o in objs
            if o["kind"] in ("Deployment", "StatefulSet")]
    for obj in objs:
        if obj["kind"] == "Service":
            selector = obj["spec"]["selector"]
        elif obj["kind"] in ("PodDisruptionBudget", "NetworkPolicy"):
            selector = obj["spec"].get("selector", obj["spec"].get("podSelector"))["matchLabels"]
        else:
            continue
        assert sum(_matches(selector, labels) for labels in pods) == 1, obj["metadata"]["name"]


# -- KEDA -----------------------------------------------------------------------------------
# The ScaledObject fields we use and what KEDA accepts for them (keda.sh/v1alpha1).
SCALED_OBJECT_SPEC = {"scaleTargetRef", "minReplicaCount", "maxReplicaCount", "pollingInterval",
                      "cooldownPeriod", "advanced", "triggers"}
TRIGGER_METADATA = {
    "redis": ({"address", "listName", "listLength"},
              {"address", "listName", "listLength", "databaseIndex", "activationListLength",
               "enableTLS", "usernameFromEnv", "passwordFromEnv"}),
    "rabbitmq": ({"queueName", "mode", "value", "protocol"},
                 {"queueName", "mode", "value", "protocol", "hostFromEnv", "vhostName",
                  "activationValue", "excludeUnacknowledged"}),
}
BROKER = {"redis-broker": "redis", "rabbitmq-broker": "rabbitmq"}


def _redis_lists() -> set[str]:
    """Every Redis list a job can land in: kombu's ``<prefix><queue><sep><step>`` per route."""
    options = redis_transport_options(ClientSettings.model_fields["key_prefix"].default)
    steps, sep, prefix = options["priority_steps"], options["sep"], options["global_keyprefix"]
    routes = {route_for(JobKind.COMPACT, reason) for reason in CompactReason}
    routes |= {route_for(kind) for kind in JobKind if kind is not JobKind.COMPACT}
    lists = set()
    for route in routes:
        step = steps[bisect.bisect(steps, route.priority) - 1]  # kombu's priority()
        lists.add(prefix + (f"{route.queue}{sep}{step}" if step else route.queue))
    return lists


def _positive_int_string(value: object) -> bool:
    return isinstance(value, str) and value.isdigit() and int(value) > 0


@pytest.mark.parametrize("directory", OVERLAYS, ids=lambda p: p.name)
def test_keda_scaled_object(directory: Path) -> None:
    objs = render(directory)
    [scaled] = [o for o in objs if o["kind"] == "ScaledObject"]
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    spec = scaled["spec"]
    assert set(spec) <= SCALED_OBJECT_SPEC and {"scaleTargetRef", "triggers"} <= set(spec)
    target = named(objs, "Deployment", spec["scaleTargetRef"]["name"])
    assert target["metadata"]["namespace"] == scaled["metadata"]["namespace"]
    assert 0 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
    assert spec["cooldownPeriod"] >= float(config(objs)["COMPACTOR_JOB_DEADLINE_S"])
    kind = BROKER[directory.name]
    required, allowed = TRIGGER_METADATA[kind]
    for trigger in spec["triggers"]:
        assert trigger["type"] == kind
        meta = trigger["metadata"]
        assert required <= set(meta) <= allowed, set(meta) ^ allowed
        assert all(isinstance(v, str) for v in meta.values())  # KEDA metadata is strings only
        assert _positive_int_string(meta.get("listLength", meta.get("value")))
    if kind == "redis":
        _check_redis_triggers(objs, spec["triggers"])
    else:
        _check_rabbitmq_triggers(target, spec["triggers"])


def _check_redis_triggers(objs: list[Obj], triggers: list[Obj]) -> None:
    assert {t["metadata"]["listName"] for t in triggers} == _redis_lists()
    service = named(objs, "Service", "compactor-redis")
    worker = env_of(container(objs, "compactor-worker"))
    for trigger in triggers:
        host, port = trigger["metadata"]["address"].split(":")
        assert host == service["metadata"]["name"]
        assert int(port) in {p["port"] for p in service["spec"]["ports"]}
        url = worker["COMPACTOR_REDIS_URL"]["value"]
        assert url.endswith(f"/{trigger['metadata']['databaseIndex']}")  # the broker's db
        # KEDA reads the password from the worker container's env (its Secret): Redis wants it
        password = worker[trigger["metadata"]["passwordFromEnv"]]
        assert password["valueFrom"]["secretKeyRef"] == REDIS_SECRET


def _check_rabbitmq_triggers(target: Obj, triggers: list[Obj]) -> None:
    assert {t["metadata"]["queueName"] for t in triggers} == set(QUEUES)
    [container] = target["spec"]["template"]["spec"]["containers"]
    env = {e["name"] for e in container.get("env", [])}
    for trigger in triggers:
        assert trigger["metadata"]["mode"] == "QueueLength"
        assert trigger["metadata"]["hostFromEnv"] in env  # KEDA reads it from the container
    assert "COMPACTOR_BROKER_URL" in env


# -- the HTTP API ---------------------------------------------------------------------------
@pytest.mark.parametrize("directory", OVERLAYS, ids=lambda p: p.name)
def test_the_api_serves_with_tokens_from_a_secret_and_probes(directory: Path) -> None:
    objs = render(directory)
    api = named(objs, "Deployment", "compactor-api")
    [container] = api["spec"]["template"]["spec"]["containers"]
    assert container["command"][:2] == ["compactor", "serve"]
    assert "--insecure-no-auth" not in container["command"]
    [tokens] = [e for e in container["env"] if e["name"] == "COMPACTOR_API_TOKENS"]
    assert tokens["valueFrom"]["secretKeyRef"] == {"name": "compactor-api-tokens",
                                                   "key": "tokens"}  # required: no optional
    paths = {kind: container[kind]["httpGet"]["path"]
             for kind in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert paths == {"startupProbe": "/livez", "livenessProbe": "/livez",
                     "readinessProbe": "/readyz"}
    [port] = container["ports"]
    assert container["command"][-2:] == ["--port", str(port["containerPort"])]
    service = named(objs, "Service", "compactor-api")
    assert service["spec"]["ports"][0]["targetPort"] == port["name"]
    policy = named(objs, "NetworkPolicy", "compactor-api")
    assert policy["spec"]["ingress"] == [{"ports": [{"port": "http", "protocol": "TCP"}]}]
    if directory.name == "rabbitmq-broker":  # a client: the task goes to RabbitMQ
        env = {e["name"] for e in container["env"]}
        assert "COMPACTOR_BROKER_URL" in env
        egress = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
        assert {5671, 5672} <= egress
