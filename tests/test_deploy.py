"""docker-compose.yml and the env example: valid, and every COMPACTOR_* name is a real setting."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from worker.settings import WorkerSettings

REPO = Path(__file__).resolve().parents[1]
COMPOSE = REPO / "docker-compose.yml"


def _setting_names() -> set[str]:
    fields = set(WorkerSettings.model_fields)
    return {f"COMPACTOR_{name.upper()}" for name in fields}


def test_compose_services_and_redis_durability() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    assert {"redis", "worker", "flower"} <= set(services)
    redis_command = " ".join(services["redis"]["command"])
    assert "noeviction" in redis_command and "--appendonly yes" in redis_command
    assert services["redis"]["healthcheck"]["test"]
    assert "FLOWER_BASIC_AUTH" in services["flower"]["environment"]
    assert services["worker"]["build"]["dockerfile"] == "deploy/Dockerfile"
    assert (REPO / "deploy" / "Dockerfile").is_file()


@pytest.mark.parametrize("path", [COMPOSE, REPO / "deploy" / "compactor.env.example"])
def test_every_compactor_variable_names_a_setting(path: Path) -> None:
    used = set(re.findall(r"\bCOMPACTOR_[A-Z0-9_]+", path.read_text()))
    unknown = {name for name in used if name not in _setting_names() and not name.startswith("COMPACTOR_HOOKS_")}
    assert unknown == set()
    assert used  # the file does configure Compactor


def test_compose_config_when_a_compose_cli_is_installed() -> None:
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        command = ["docker", "compose"]
    elif shutil.which("docker-compose"):
        command = ["docker-compose"]
    else:
        pytest.skip("no docker compose CLI on this machine")
    result = subprocess.run([*command, "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True,
                            env={"PATH": "/usr/bin:/bin", "FLOWER_BASIC_AUTH": "a:b"}, timeout=60)
    assert result.returncode == 0, result.stderr


# -- the Grafana dashboard ----------------------------------------------------------------------
DASHBOARD = REPO / "deploy" / "grafana-dashboard.json"
_SUFFIXES = ("_bucket", "_count", "_sum")


def _dashboard_exprs() -> list[str]:
    import json

    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel["targets"]]


def _metric(name: str) -> str:
    from worker.metrics import METRIC_LABELS

    if name in METRIC_LABELS:
        return name
    for suffix in _SUFFIXES:
        if name.endswith(suffix) and name.removesuffix(suffix) in METRIC_LABELS:
            return name.removesuffix(suffix)
    raise AssertionError(f"the dashboard queries {name}, which worker/metrics.py does not export")


@pytest.mark.parametrize("expr", _dashboard_exprs())
def test_every_dashboard_query_uses_exported_metrics_and_labels(expr: str) -> None:
    from worker.metrics import METRIC_LABELS

    names = re.findall(r"\bcompactor_[a-z_]+", expr)
    assert names, "a panel that queries no Compactor metric"
    labels: set[str] = set()
    for name in names:
        metric = _metric(name)
        labels |= set(METRIC_LABELS[metric]) | ({"le"} if name.endswith("_bucket") else set())
    used = set(re.findall(r"by \(([^)]*)\)", expr))
    grouped = {label.strip() for group in used for label in group.split(",")}
    matched = set(re.findall(r"([a-z_]+)=~?\"", expr))
    assert grouped | matched <= labels, f"labels {sorted((grouped | matched) - labels)} not on {names}"


def test_the_dashboard_covers_what_on_call_needs() -> None:
    import json

    dashboard = json.loads(DASHBOARD.read_text())
    queried = {_metric(n) for e in _dashboard_exprs() for n in re.findall(r"\bcompactor_[a-z_]+", e)}
    from worker.metrics import METRIC_NAMES

    assert queried == set(METRIC_NAMES)  # every metric has a panel
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert {p["datasource"]["uid"] for p in dashboard["panels"]} == {"${datasource}"}
