"""Every ```bash block of README "From any language" runs as written: in order, in one bash
(``set -euo pipefail``), with curl and jq, against ``compactor serve`` (a process of its own,
started by the CLI), a real Redis and a real worker of this module's own. Each block's
``# <output>`` comment lines are checked against what the block printed (ids, which differ
from run to run, aside)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import RedisProcess, free_port
from runtime.runtime_support import running_worker, runtime_settings

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TOKEN = "readme-token-0123456789abcdef"
BLOCK = re.compile(r"^```bash\n(.*?)^```$", re.S | re.M)
# Values that differ per run: generated entry ids, stream ids, job ids.
VOLATILE = re.compile(r'"[0-9a-f]{8}"|\d{13}-\d+|[\w.-]+:[0-9a-f]{16}')


def section() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index("\n## From any language\n")
    return text[start:text.index("\n## ", start + 1)]


def blocks() -> list[str]:
    return BLOCK.findall(section())


def expected_lines(block: str) -> list[str]:
    """The output a block shows: its comment lines that are not notes (a note starts with a
    capital or the variables line), each cut before a two-space gap (a note after it)."""
    lines = []
    for line in block.splitlines():
        if line.startswith("# ") and not line.startswith("# COMPACTOR_URL"):
            lines.append(re.split(r"\s{2,}", line[2:])[0].strip())
    return lines


def test_the_section_has_runnable_blocks() -> None:
    assert len(blocks()) >= 5
    assert all("$COMPACTOR_URL" in b for b in blocks())


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    if not (shutil.which("curl") and shutil.which("jq")):
        if os.environ.get("CI"):
            pytest.fail("curl and jq are required in CI (.ci/run installs jq)")
        pytest.skip("curl or jq missing")
    redis = RedisProcess(tmp_path_factory.mktemp("readme-api-redis"))
    redis.start()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACTOR_")}
    env.update({"COMPACTOR_REDIS_URL": redis.url,
                "COMPACTOR_API_TOKENS": f'{{"{TOKEN}": "default"}}'})
    server = subprocess.Popen([sys.executable, "-m", "worker", "serve", "--port", str(port),
                               "--log-level", "warning"], cwd=tmp_path_factory.mktemp("cwd"),
                              env=env, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        with running_worker(runtime_settings(redis.url, job_deadline_s=50.0)):
            deadline = time.monotonic() + 30
            while not _ready(url):
                assert server.poll() is None, server.stderr.read() if server.stderr else ""
                assert time.monotonic() < deadline, "compactor serve did not start"
                time.sleep(0.1)
            yield {"COMPACTOR_URL": url, "COMPACTOR_TOKEN": TOKEN}
    finally:
        server.terminate()
        server.wait(15)
        redis.stop()


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _shape(text: str) -> str:
    return VOLATILE.sub("<id>", text)


@pytest.mark.timeout(300)
def test_the_curl_examples_run_and_print_what_they_show(served: dict[str, str]) -> None:
    script = ["set -euo pipefail"]
    for number, block in enumerate(blocks()):
        script += [f"echo '@@block {number}'", block]
    done = subprocess.run(["bash", "-c", "\n".join(script)], cwd=REPO, capture_output=True,
                          text=True, timeout=240, env={**os.environ, **served})
    printed = done.stdout.split("@@block ")[1:]
    failed = len(printed) - 1
    assert done.returncode == 0, (f"block {failed} failed:\n{blocks()[failed]}\n"
                                  f"stdout: {printed[-1] if printed else ''}\n"
                                  f"stderr: {done.stderr}")
    for number, block in enumerate(blocks()):
        out = [line.strip() for line in printed[number].splitlines()[1:] if line.strip()]
        assert [_shape(x) for x in out] == [_shape(x) for x in expected_lines(block)], (
            f"block {number} printed {out}")
