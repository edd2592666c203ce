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
