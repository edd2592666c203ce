"""docker-compose.yml and the env example: valid, and every COMPACTOR_* name is a real setting."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from api_client.server.settings import ServerSettings
from worker.settings import WorkerSettings

REPO = Path(__file__).resolve().parents[1]
COMPOSE = REPO / "docker-compose.yml"


def _setting_names() -> set[str]:
    fields = set(WorkerSettings.model_fields) | set(ServerSettings.model_fields)
    return {f"COMPACTOR_{name.upper()}" for name in fields}


def test_compose_services_and_redis_durability() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    assert {"redis", "worker", "flower"} <= set(services)
    redis_command = " ".join(services["redis"]["command"])
    assert "noeviction" in redis_command and "--appendonly yes" in redis_command
    # Full at maxmemory (writes refused, typed), never killed at the container's limit.
    args = services["redis"]["command"]
    maxmemory_mb = int(args[args.index("--maxmemory") + 1].removesuffix("mb"))
    limit_mb = int(services["redis"]["mem_limit"].removesuffix("g")) * 1024
    assert 0.5 * limit_mb <= maxmemory_mb <= 0.8 * limit_mb
    assert services["redis"]["healthcheck"]["test"]
    assert "FLOWER_BASIC_AUTH" in services["flower"]["environment"]
    assert services["worker"]["build"]["dockerfile"] == "deploy/Dockerfile"
    assert (REPO / "deploy" / "Dockerfile").is_file()


@pytest.mark.parametrize("path", [COMPOSE, REPO / "deploy" / "compactor.env.example"])
def test_every_compactor_variable_names_a_setting(path: Path) -> None:
    used = set(re.findall(r"\bCOMPACTOR_[A-Z0-9_]+", path.read_text()))
    unknown = {name for name in used
               if name not in _setting_names() and not name.startswith("COMPACTOR_HOOKS_")}
    assert unknown == set()
    assert used  # the file does configure Compactor


def _compose_cli() -> list[str]:
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"],
                                                 capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.skip("no docker compose CLI on this machine")


def _compose_config(tmp_path: Path, dotenv: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``docker compose config`` of a copy of the project whose .env is ``dotenv``."""
    shutil.copy(COMPOSE, tmp_path / "docker-compose.yml")
    (tmp_path / "deploy").mkdir()
    shutil.copy(REPO / "deploy" / "Dockerfile", tmp_path / "deploy" / "Dockerfile")
    (tmp_path / ".env").write_text(dotenv)
    return subprocess.run([*_compose_cli(), "config"], capture_output=True, text=True, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin:/usr/local/bin", **env}, timeout=60)


EXAMPLE = (REPO / "deploy" / "compactor.env.example").read_text()


TOKENS = '{"0123456789abcdef-token":"default"}'


def test_compose_config_when_a_compose_cli_is_installed(tmp_path: Path) -> None:
    result = _compose_config(tmp_path, EXAMPLE, FLOWER_BASIC_AUTH="a:b",
                             COMPACTOR_API_TOKENS=TOKENS)
    assert result.returncode == 0, result.stderr


def test_compose_refuses_without_flower_auth(tmp_path: Path) -> None:
    result = _compose_config(tmp_path, EXAMPLE, COMPACTOR_API_TOKENS=TOKENS)
    assert result.returncode != 0
    assert "set FLOWER_BASIC_AUTH=user:password in .env or the shell" in result.stderr


def test_compose_refuses_an_api_without_tokens(tmp_path: Path) -> None:
    result = _compose_config(tmp_path, EXAMPLE, FLOWER_BASIC_AUTH="a:b")
    assert result.returncode != 0
    assert "set COMPACTOR_API_TOKENS (JSON, token to \"default\") in .env" in result.stderr


def test_every_variable_of_the_env_file_reaches_the_containers(tmp_path: Path) -> None:
    dotenv = ("COMPACTOR_REDIS_URL=redis://localhost:6379/0\nCOMPACTOR_LLM_ATTEMPT_BUDGET=7\n"
              "COMPACTOR_MODELS=[]\nANTHROPIC_API_KEY=sk-test\nCOMPACTOR_HOOKS_TIMEOUT_S=3\n"
              "FLOWER_BASIC_AUTH=ops:secret\n" f"COMPACTOR_API_TOKENS={TOKENS}\n")
    result = _compose_config(tmp_path, dotenv)
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    for name in ("worker", "flower"):
        env = services[name]["environment"]
        assert env["COMPACTOR_LLM_ATTEMPT_BUDGET"] == "7" and env["ANTHROPIC_API_KEY"] == "sk-test"
        assert env["COMPACTOR_HOOKS_TIMEOUT_S"] == "3"
        assert env["COMPACTOR_REDIS_URL"] == "redis://redis:6379/0"  # the compose network's
    worker = services["worker"]
    assert worker["environment"]["COMPACTOR_METRICS_PORT"] == "9808"
    assert worker["environment"]["COMPACTOR_METRICS_ADDRESS"] == "0.0.0.0"
    assert services["flower"]["environment"]["FLOWER_BASIC_AUTH"] == "ops:secret"
    api = services["api"]["environment"]
    assert api["COMPACTOR_API_TOKENS"] == TOKENS and api["COMPACTOR_LLM_ATTEMPT_BUDGET"] == "7"
    assert api["COMPACTOR_REDIS_URL"] == "redis://redis:6379/0"


def _seconds(duration: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    return sum(float(n) * units[u] for n, u in re.findall(r"([0-9.]+)([smh])", duration))


def test_compose_worker_stops_gracefully_and_serves_metrics() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    worker = services["worker"]
    deadline = float(re.search(r"^COMPACTOR_JOB_DEADLINE_S=(\S+)", EXAMPLE, re.M).group(1))
    assert _seconds(worker["stop_grace_period"]) > deadline
    assert worker["env_file"] == services["flower"]["env_file"] == ".env"
    assert worker["environment"]["COMPACTOR_METRICS_PORT"] == "9808"
    assert worker["ports"] == ["127.0.0.1::9808"]  # loopback only on the host, one per replica
    assert "/readyz" in " ".join(worker["healthcheck"]["test"])
    assert services["flower"]["restart"].startswith("on-failure:")
    assert "EXPOSE 5555 8080 9808" in (REPO / "deploy" / "Dockerfile").read_text()


def test_the_image_has_what_every_service_runs_and_compose_serves_the_api() -> None:
    """The worker and Flower need the worker extra, ``compactor serve`` the server extra."""
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text()
    [extras] = re.findall(r"pip install '\.\[([a-z,]+)\]'", dockerfile)
    assert {"worker", "server"} <= set(extras.split(","))
    api = yaml.safe_load(COMPOSE.read_text())["services"]["api"]
    assert api["command"][:2] == ["compactor", "serve"]
    assert "--insecure-no-auth" not in api["command"]
    assert api["environment"]["COMPACTOR_API_TOKENS"].startswith("${COMPACTOR_API_TOKENS:?")
    assert api["ports"] == ["127.0.0.1:8080:8080"]  # the host's loopback: TLS goes in front
    assert "/readyz" in " ".join(api["healthcheck"]["test"])


def test_the_env_example_lists_every_setting() -> None:
    from worker.hooks.settings import HookSettings

    listed = set(re.findall(r"\bCOMPACTOR_[A-Z0-9_]+", EXAMPLE))
    hooks = {f"COMPACTOR_HOOKS_{name.upper()}" for name in HookSettings.model_fields}
    missing = (_setting_names() - {"COMPACTOR_HOOKS"}) | hooks
    missing -= listed
    assert missing == set(), f"add these to deploy/compactor.env.example: {sorted(missing)}"


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
    assert grouped | matched <= labels, (
        f"labels {sorted((grouped | matched) - labels)} not on {names}")


def test_the_dashboard_covers_what_on_call_needs() -> None:
    import json

    dashboard = json.loads(DASHBOARD.read_text())
    queried = {_metric(n) for e in _dashboard_exprs()
               for n in re.findall(r"\bcompactor_[a-z_]+", e)}
    from worker.metrics import METRIC_NAMES

    assert queried == set(METRIC_NAMES)  # every metric has a panel
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert {p["datasource"]["uid"] for p in dashboard["panels"]} == {"${datasource}"}


def test_the_readme_documents_every_metric_and_the_port() -> None:
    from worker.metrics import DEFAULT_ADDRESS, DEFAULT_PORT, METRIC_LABELS

    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Metrics"):readme.index("## Deploying")]
    rows = dict(re.findall(r"^\| `(compactor_[a-z_]+)` \| [a-z]+ \| ([^|]*) \|", section, re.M))
    assert set(rows) == set(METRIC_LABELS)
    for name, labels in METRIC_LABELS.items():
        assert set(re.findall(r"`([a-z_]+)`", rows[name])) == set(labels), name
    assert "COMPACTOR_METRICS_PORT" in section and str(DEFAULT_PORT) in section
    assert f"`{DEFAULT_ADDRESS}`" in section
