"""Every ```python block of README.md runs as written: in order, in one namespace (as a reader
following the README would), against a real Redis and a real worker of this test's own, with
``COMPACTOR_REDIS_URL`` pointing at that Redis."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import RedisProcess
from runtime.runtime_support import running_worker, runtime_settings

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def blocks() -> list[tuple[int, str]]:
    text = README.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in BLOCK.finditer(text)]


@pytest.fixture(scope="module")
def readme_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    server = RedisProcess(tmp_path_factory.mktemp("readme-redis"))
    server.start()
    patch = pytest.MonkeyPatch()
    patch.setenv("COMPACTOR_REDIS_URL", server.url)
    for name in ("COMPACTOR_BROKER_URL", "COMPACTOR_RESULT_BACKEND", "COMPACTOR_KEY_PREFIX"):
        patch.delenv(name, raising=False)
    patch.chdir(tmp_path_factory.mktemp("readme-cwd"))  # no .env of the developer's
    try:
        with running_worker(runtime_settings(server.url, job_deadline_s=50.0)):
            yield {"__name__": "readme"}
    finally:
        patch.undo()
        server.stop()


def test_readme_has_python_blocks() -> None:
    assert len(blocks()) >= 8


@pytest.mark.integration  # readme_env starts a Redis and a worker
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("line", "code"), blocks(), ids=[f"line{n}" for n, _ in blocks()])
def test_block_runs(readme_env: dict[str, Any], line: int, code: str) -> None:
    exec(compile(code, f"README.md:{line}", "exec"), readme_env)
