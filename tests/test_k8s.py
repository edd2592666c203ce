"""deploy/k8s: every kustomization renders, its objects validate offline against the Kubernetes
schemas (kubernetes-validate, strict), KEDA objects pass our own check of the fields we use, and
the objects agree with each other and with the worker's settings."""

from __future__ import annotations

import bisect
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from api_client.contract.wire import (
    QUEUES,
    CompactReason,
    JobKind,
    redis_transport_options,
    route_for,
)
from worker.settings import WorkerSettings

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
    known = {f"COMPACTOR_{name.upper()}" for name in WorkerSettings.model_fields}
    assert set(config(objs)) <= known
    monkeypatch.chdir(tmp_path)
    for name, value in config(objs).items():
        monkeypatch.setenv(name, value)
    settings = WorkerSettings()  # the container's environment is valid
    assert settings.metrics_enabled and settings.job_deadline_s < settings.visibility_timeout_s
    [container] = (named(objs, "Deployment", "compactor-worker")
                   ["spec"]["template"]["spec"]["containers"])
    secrets = [s["secretRef"]["name"] for s in container["envFrom"] if "secretRef" in s]
    assert secrets == ["compactor-api-keys"]
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
    container = redis["spec"]["template"]["spec"]["containers"][0]
    args = " ".join(container["args"])
    assert "--appendonly yes" in args and "--maxmemory-policy noeviction" in args
    # Full at maxmemory (writes refused, typed), never killed at the container's limit.
    maxmemory = container["args"][container["args"].index("--maxmemory") + 1]
    limit = _bytes(container["resources"]["limits"]["memory"])
    assert 0.5 * limit <= _bytes(maxmemory) <= 0.8 * limit
    [claim] = redis["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"]
    assert config(objs)["COMPACTOR_REDIS_URL"] == "redis://compactor-redis:6379/0"


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
    options = redis_transport_options(WorkerSettings.model_fields["key_prefix"].default)
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
    for trigger in triggers:
        host, port = trigger["metadata"]["address"].split(":")
        assert host == service["metadata"]["name"]
        assert int(port) in {p["port"] for p in service["spec"]["ports"]}
        url = config(objs)["COMPACTOR_REDIS_URL"]
        assert url.endswith(f"/{trigger['metadata']['databaseIndex']}")  # the broker's db


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
